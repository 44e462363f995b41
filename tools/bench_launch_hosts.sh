#!/usr/bin/env bash
# Launch time across several hosts, simulated on this machine: network namespaces with sshd
# each (tests/netns/netbed.sh). From host h1, the median wall time of the same job started
# three ways, interleaved run by run so that drift of the machine hits them alike:
#   hvd cached    horovodrun (its ssh check and NIC discovery cached, as after a first run)
#   hvd uncached  horovodrun --disable-cache (ssh check of every host and NIC discovery)
#   mpirun        Open MPI's mpirun of the same job (one orted per host, over the same ssh)
# The job is `true` by default, or examples/hello (every rank through hvd_init) with --init,
# or tools/rank_phases with --allreduce (hvd_init, one allreduce, hvd_shutdown): then each row
# also says when the last rank's first allreduce returned, counted from the command.
# --baseline DIR adds the same two hvd rows for another build (e.g. an older commit's).
# --slurm runs a Slurm cluster on the hosts (tests/slurm/cluster.sh; implies --init) and adds
# two rows, each timed inside an allocation of the hosts (salloc -N HOSTS --ntasks-per-node
# SLOTS, the allocation itself not counted):
#   srun          srun --mpi=pmix of the job (no horovodrun: the ranks meet through PMIx)
#   hvd in salloc horovodrun -np N with the allocation's hosts, remote ranks through srun
#                 (cached, as the ssh rows; and uncached: NIC discovery through srun too)
#
# Usage: tools/bench_launch_hosts.sh [--build DIR] [--baseline DIR] [--hosts 4] [--slots 2]
#          [--runs 10] [--init | --allreduce] [--slurm]
# Needs root, iproute2, openssh (scripts/install-deps.sh) and, for the mpirun column, Open MPI
# (scripts/install-deps.sh --bench). A benchmark, not a test.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=${here%/tools}
build=$root/build base="" hosts=4 slots=2 runs=10 init=0 slurm=0 allreduce=0
while (($#)); do
  case $1 in
    --build) build=$(cd "${2:?}" && pwd); shift ;;
    --baseline) base=$(cd "${2:?}" && pwd); shift ;;
    --hosts) hosts=${2:?}; shift ;;
    --slots) slots=${2:?}; shift ;;
    --runs) runs=${2:?}; shift ;;
    --init) init=1 ;;
    --allreduce) init=1 allreduce=1 ;;
    --slurm) slurm=1 init=1 ;;
    -h | --help) sed -n '2,24s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "bench_launch_hosts: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[[ $hosts =~ ^[1-9][0-9]*$ && $slots =~ ^[1-9][0-9]*$ && $runs =~ ^[1-9][0-9]*$ ]] ||
  { echo "bench_launch_hosts: --hosts, --slots and --runs take positive counts" >&2; exit 2; }
(($(id -u) == 0)) || { echo "bench_launch_hosts: needs root (ip netns)" >&2; exit 2; }

export HVD_NETBED_PREFIX=hvdbl$$
export HVD_NETBED_DIR=/tmp/hvd-netbed-$HVD_NETBED_PREFIX
netbed=$root/tests/netns/netbed.sh
cluster=$root/tests/slurm/cluster.sh
if ((slurm)); then
  export HVD_SLURM_CPUS=$((slots > 2 ? slots : 2)) HVD_SLURM_DIR=/tmp/hvd-slurm-$HVD_NETBED_PREFIX
  trap 'timeout 60 bash "$cluster" down >/dev/null || echo "bench_launch_hosts: cluster down failed" >&2' EXIT
  trap 'exit 130' INT TERM HUP
  bash "$cluster" up "$hosts" >/dev/null
else
  trap 'timeout 60 bash "$netbed" down >/dev/null || echo "bench_launch_hosts: netbed down failed" >&2' EXIT
  trap 'exit 130' INT TERM HUP
  bash "$netbed" up "$hosts" --hostnames >/dev/null
fi

spec="" np=$((hosts * slots))
for ((i = 1; i <= hosts; i++)); do spec+="${spec:+,}h$i:$slots"; done
job=(true)
((init)) && job=("$build/examples/hello")
((allreduce)) && job=("$build/tools/rank_phases")
home=$HVD_NETBED_DIR/home
mkdir -p "$home"

# Runs one launch inside h1; prints its wall time in ms (with rank_phases as the job, then
# when the last rank's first allreduce returned, in ms, or fails when not every rank said),
# or fails with its output.
cat >"$HVD_NETBED_DIR/one.sh" <<EOF
#!/usr/bin/env bash
np=$np
EOF
cat >>"$HVD_NETBED_DIR/one.sh" <<'EOF'
s=$(date +%s%N)
export HVD_BENCH_T0=$(awk -v s="$s" 'BEGIN {printf "%.3f", s / 1e9}')
out=$("$@" 2>&1) || { echo "failed ($?): $*: $out" >&2; exit 1; }
wall=$((($(date +%s%N) - s) / 1000000))
case $* in
*rank_phases*)
  # "phases RANK STARTED INITIALISED REDUCED ENDED", behind whatever tag the launcher adds
  first=$(awk -v np="$np" '{for (i = 1; i < NF; i++) if ($i ~ /phases$/) {n++; if ($(i + 4) > m) m = $(i + 4)}}
    END {if (n == np) printf "%d", m * 1000}' <<<"$out")
  [[ -n $first ]] || { echo "not every rank reported its phases: $*: $out" >&2; exit 1; }
  echo "$wall:$first" ;;
*) echo "$wall" ;;
esac
EOF
on_h1() {
  bash "$netbed" exec h1 env PATH="$HVD_NETBED_DIR/bin:$PATH" HOME="$home" \
    bash "$HVD_NETBED_DIR/one.sh" "$@" </dev/null
}
# the same inside an allocation of every host (salloc's own time not counted)
on_h1_alloc() {
  bash "$netbed" exec h1 env SLURM_CONF="$HVD_SLURM_DIR/slurm.conf" HOME="$home" salloc -Q \
    -N "$hosts" --ntasks-per-node "$slots" bash "$HVD_NETBED_DIR/one.sh" "$@" </dev/null
}
hvd=("$build/horovodrun" -np "$np" -H "$spec")
mpi=()
if command -v mpirun.openmpi >/dev/null; then
  mpi=(mpirun.openmpi --allow-run-as-root --oversubscribe -np "$np" -H "$spec" -x HVD_BENCH_T0)
fi

old=()
[[ -n $base ]] && old=("$base/horovodrun" -np "$np" -H "$spec")
on_h1 "${hvd[@]}" "${job[@]}" >/dev/null # fills the cache, warms the page cache
declare -A t=()
for ((r = 0; r < runs; r++)); do
  t[cached]+=" $(on_h1 "${hvd[@]}" "${job[@]}")"
  t[uncached]+=" $(on_h1 "${hvd[@]:0:1}" --disable-cache "${hvd[@]:1}" "${job[@]}")"
  if ((${#old[@]})); then
    t[base_cached]+=" $(on_h1 "${old[@]}" "${job[@]}")"
    t[base_uncached]+=" $(on_h1 "${old[@]:0:1}" --disable-cache "${old[@]:1}" "${job[@]}")"
  fi
  ((${#mpi[@]})) && t[mpirun]+=" $(on_h1 "${mpi[@]}" "${job[@]}")"
  if ((slurm)); then
    t[srun]+=" $(on_h1_alloc srun --mpi=pmix -N "$hosts" --ntasks-per-node "$slots" "${job[@]}")"
    t[alloc]+=" $(on_h1_alloc "$build/horovodrun" -np "$np" "${job[@]}")"
    t[alloc_uncached]+=" $(on_h1_alloc "$build/horovodrun" --disable-cache -np "$np" "${job[@]}")"
  fi
done

stats() { # ms values (WALL or WALL:FIRST) -> "median (min-max)" in seconds, of the wall
  # times, and with FIRST of those too
  local col
  for col in 1 2; do
    ((col == 2)) && { [[ $1 == *:* ]] || return 0; printf ';  first allreduce '; }
    tr ' ' '\n' <<<"$1" | grep . | cut -d: -f$col | stat1
  done
}
stat1() {
  sort -n |
    awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2;
         printf "%.2f s (%.2f-%.2f)", m/1000, a[1]/1000, a[NR]/1000}'
}
printf 'launch of %d ranks on %d hosts (%s), job: %s, %d interleaved runs, median (min-max)\n' \
  "$np" "$hosts" "$spec" "${job[*]##*/}" "$runs"
printf '  %-14s %s\n' "hvd cached" "$(stats "${t[cached]}")"
printf '  %-14s %s\n' "hvd uncached" "$(stats "${t[uncached]}")"
if ((${#old[@]})); then
  printf '  %-14s %s\n' "base cached" "$(stats "${t[base_cached]}")"
  printf '  %-14s %s\n' "base uncached" "$(stats "${t[base_uncached]}")"
fi
if ((slurm)); then
  printf '  %-14s %s\n' "srun" "$(stats "${t[srun]}")"
  printf '  %-14s %s\n' "hvd in salloc" "$(stats "${t[alloc]}")"
  printf '  %-14s %s\n' "  uncached" "$(stats "${t[alloc_uncached]}")"
fi
if ((${#mpi[@]})); then
  printf '  %-14s %s\n' "mpirun" "$(stats "${t[mpirun]}")"
else
  echo "  mpirun         (Open MPI not installed: scripts/install-deps.sh --bench)"
fi
