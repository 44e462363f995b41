# horovod.tensorflow, horovod.tensorflow.keras and horovod.keras (label python), under the
# interpreter whose TensorFlow the kernels were built against (python/CMakeLists.txt: the venv
# with PyPI's tensorflow-cpu and tf-keras that scripts/install-deps.sh makes).
#
# tests/python/tf_ranks/ run by pytest on every rank of a horovodrun job: the ops at np 2 and
# 3; the Keras layer at np 2 twice, with Keras 3 (TensorFlow's default) and with tf-keras
# (TF_USE_LEGACY_KERAS=1, Keras 2). tests/python/test_tf_jobs.py drives whole jobs: the
# examples under horovodrun --gloo and plain horovodrun, a rank killed, a TensorFlow with one
# inter-op thread.
#
# The plain pass only (label plain_once): TensorFlow does not run under the sanitizer's
# preloaded runtime (its own allocator and C++ runtime); the C kernels' libhvd paths
# (hvd_on_done, allocated outputs) run under ASan and TSan in the unit and mrank tests.
if(NOT HVD_TF_PYTHON_EXECUTABLE OR HVD_SANITIZE)
  return()
endif()
set(tf_py ${HVD_TF_PYTHON_EXECUTABLE})
set(tf_env "PYTHONPATH=${PROJECT_BINARY_DIR}/python;PYTHONDONTWRITEBYTECODE=1;"
           "HVD_BUILD_DIR=${PROJECT_BINARY_DIR};TF_CPP_MIN_LOG_LEVEL=2;HVD_TF_PYTHON=${tf_py}")
string(REPLACE ";;" ";" tf_env "${tf_env}")
set(tf_pytest ${tf_py} -m pytest -q -p no:cacheprovider -x --capture=sys)
set(tf_tests)
foreach(np 2 3)
  add_test(NAME python_tf.ops_np${np}
           COMMAND timeout -k 10 580 $<TARGET_FILE:horovodrun> --gloo-timeout-seconds 60
                   -np ${np} ${tf_pytest} ${PROJECT_SOURCE_DIR}/tests/python/tf_ranks/test_tf_ops.py)
  list(APPEND tf_tests python_tf.ops_np${np})
endforeach()
add_test(NAME python_tf.keras_np2
         COMMAND timeout -k 10 580 $<TARGET_FILE:horovodrun> --gloo-timeout-seconds 60 -np 2
                 ${tf_pytest} ${PROJECT_SOURCE_DIR}/tests/python/tf_ranks/test_tf_keras.py)
add_test(NAME python_tf.keras2_np2
         COMMAND timeout -k 10 580 $<TARGET_FILE:horovodrun> --gloo-timeout-seconds 60 -np 2
                 env TF_USE_LEGACY_KERAS=1
                 ${tf_pytest} ${PROJECT_SOURCE_DIR}/tests/python/tf_ranks/test_tf_keras.py)
add_test(NAME python_tf.jobs
         COMMAND ${tf_py} -m pytest -q -p no:cacheprovider ${PROJECT_SOURCE_DIR}/tests/python/test_tf_jobs.py)
list(APPEND tf_tests python_tf.keras_np2 python_tf.keras2_np2 python_tf.jobs)
set_tests_properties(${tf_tests} PROPERTIES ENVIRONMENT "${tf_env}" LABELS "python;plain_once"
                     TIMEOUT 600)
# the costliest first (tests/netns/netns.cmake says why)
set_tests_properties(python_tf.jobs PROPERTIES COST 110)
set_tests_properties(python_tf.ops_np3 PROPERTIES COST 80)
