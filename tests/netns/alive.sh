# pid_alive PID...: 0 when any of these processes still runs. A zombie waiting for its reaper
# is not running, nor is one reaped while we look: stat is read once (testing /proc/PID and
# then reading it counted a zombie reaped in between as running). Sourced by netbed.sh,
# lib.sh and tests/slurm/cluster.sh.
pid_alive() {
  local p st
  for p in "$@"; do
    st=$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null) || continue
    st=${st%% *}
    [[ -n "$st" && "$st" != Z && "$st" != X ]] && return 0
  done
  return 1
}
