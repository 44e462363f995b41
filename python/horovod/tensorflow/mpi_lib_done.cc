// The one piece of mpi_lib in C++: keeping an asynchronous kernel's done callback.
//
// TensorFlow's C kernel API gives TF_NewAsyncKernelBuilder's compute function its done
// callback as a pointer to the by-value std::function<void()> parameter of the kernel's
// ComputeAsync (tensorflow/c/kernels.cc), which is destroyed when ComputeAsync returns: the
// pointer may only be run before the compute function returns, which would make every
// collective block a TensorFlow thread until all ranks got there. Moving the callback out
// of that parameter into a heap object, while the parameter is alive, keeps it for as long
// as the operation takes; the moved-from parameter is left empty and destroyed as usual.
#include <functional>
#include <new>
#include <utility>

extern "C" void *hvd_tf_keep_done(void *done) {
    auto *f = static_cast<std::function<void()> *>(done);
    return new (std::nothrow) std::function<void()>(std::move(*f));
}

extern "C" void hvd_tf_run_kept_done(void *kept) {
    auto *f = static_cast<std::function<void()> *>(kept);
    (*f)();
    delete f;
}
