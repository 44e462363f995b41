foreach(t env_contract dry_run cli failure signals output rendezvous install faults perf_tools
          train_example core_faults core_fault_messages core_timeline mpi)
  hvd_e2e_test(${t} tests/e2e/test_${t}.sh)
endforeach()
