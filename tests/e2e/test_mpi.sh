#!/usr/bin/env bash
# The MPI path on this host (tests/netns/test_multihost.sh runs it across hosts):
#   horovodrun --mpi runs mpirun; the ranks take their places from Open MPI's variables and
#   every blocking collective is checked; a plain `mpirun` (no horovodrun) meets through PMIx;
#   an mpirun that is not a known MPI is refused with its text; an MPICH-started rank without
#   a store is told to use horovodrun --mpi.
source "$(dirname "$0")/lib.sh"
CHECK="$HVD_BUILD_DIR/tests/mrank/collectives_check"
command -v mpirun >/dev/null || fail "mpirun not found (scripts/install-deps.sh installs openmpi-bin)"
# libpmix keeps allocations for the life of the process (see the file)
export LSAN_OPTIONS="suppressions=$HVD_SOURCE_DIR/tests/e2e/lsan-pmix.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"

run_hvd --mpi --verbose -np 2 "$CHECK" --quick
expect_eq "horovodrun --mpi exit" 0 "$RC"
expect_contains "--mpi: implementation" "$OUT" "MPI implementation: Open MPI"
expect_contains "--mpi: command" "$OUT" "mpirun --allow-run-as-root --tag-output -np 2 -H localhost:2 -bind-to none -map-by slot"
expect_contains "--mpi: secret by name" "$OUT" " -x _HOROVOD_SECRET_KEY "
expect_contains "--mpi: checks" "$OUT" "[1,0]<stdout>:collectives_check: np=2 quick:"
expect_contains "--mpi: none failed" "$OUT" " 0 failed on rank 0, 0 on all ranks"

set +e
timeout -k 5 120 mpirun --allow-run-as-root -np 2 "$CHECK" --quick >"$TMP/out" 2>"$TMP/err"
RC=$?
set -e
expect_eq "plain mpirun exit ($(tail -n 5 "$TMP/err"))" 0 "$RC"
expect_contains "plain mpirun: checks" "$(cat "$TMP/out")" " 0 failed on rank 0, 0 on all ranks"

mkdir -p "$TMP/fakebin"
printf '#!/bin/sh\necho "Unknown MPI v1.00"\n' >"$TMP/fakebin/mpirun"
chmod 755 "$TMP/fakebin/mpirun"
PATH="$TMP/fakebin:$PATH" run_hvd --mpi -np 2 true
expect_eq "unknown MPI exit" 1 "$RC"
expect_contains "unknown MPI message" "$ERR" "Unknown MPI v1.00"

set +e
out=$(env -u HOROVOD_RANK PMI_RANK=1 PMI_SIZE=2 MPI_LOCALRANKID=1 MPI_LOCALNRANKS=2 "$HELLO" 2>&1)
RC=$?
set -e
[[ $RC -ne 0 ]] || fail "an MPICH rank without a store must fail: $out"
expect_contains "MPICH rank without a store" "$out" "rank 1 of 2 was started by MPICH's launcher"
expect_contains "MPICH rank hint" "$out" "horovodrun --mpi"
pass
