# The core's tensor queue: names in flight, handles, waiting, threads.
hvd_unit_test(tensor_queue tests/unit/test_tensor_queue.c)
# The stall inspector's reports and shutdown decision.
hvd_unit_test(stall tests/unit/test_stall.c)
hvd_unit_test(straggler tests/unit/test_straggler.c)
# The coordinator's readiness table and response validation.
hvd_unit_test(coordinator tests/unit/test_coordinator.c)
# Tensor fusion planning.
hvd_unit_test(fusion tests/unit/test_fusion.c)
# The response cache: hits, invalid entries, bit assignment, LRU eviction, determinism.
hvd_unit_test(response_cache tests/unit/test_response_cache.c)
# Autotune's Bayesian optimiser: maxima of known score functions within the sample budget.
hvd_unit_test(bayes_opt tests/unit/test_bayes_opt.c)
# Autotune's parameter manager on a simulated job: the best configuration, pinned knobs, the log.
hvd_unit_test(autotune tests/unit/test_autotune.c)
