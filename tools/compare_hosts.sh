#!/usr/bin/env bash
# Allreduce across several hosts, simulated on this machine: network namespaces with sshd each
# (tests/netns/netbed.sh), joined by a bridge, so that ranks of one "host" share memory and
# ranks of different ones talk TCP over veth pairs. Runs tools/compare_allreduce.sh --hosts
# from host h1 for each shape: hvd as it chooses, hvd flat and hvd hierarchical, Open MPI with
# its defaults (shared memory inside a host, TCP between hosts) and Open MPI on TCP only.
#
# Usage: tools/compare_hosts.sh [--shapes "2x2 3x2"] [any compare_allreduce.sh option but
#          --np/--hosts]
#        tools/compare_hosts.sh [--shapes ...] --exec COMMAND [ARG...]
# A shape HxS is H hosts with S ranks each. --exec runs COMMAND on h1 once per shape instead,
# with HVD_COMPARE_SHAPE (2x2) and HVD_COMPARE_HOSTS (h1:2,h2:2) set, horovodrun reaching the
# hosts as above. Needs root, iproute2, openssh-server/-client
# (scripts/install-deps.sh) and, for the MPI peers, scripts/install-deps.sh --bench. The hosts
# share this machine's cores: the numbers compare algorithms, not networks.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
netbed=${here%/tools}/tests/netns/netbed.sh
shapes="2x2 3x2" rest=() exec_cmd=()
while (($#)); do
  case $1 in
    --shapes) shapes=${2:?}; shift ;;
    --exec) shift; exec_cmd=("$@"); (($#)) || { echo "compare_hosts: --exec needs a command" >&2; exit 2; }; break ;;
    --np | --hosts) echo "compare_hosts: $1 is set from --shapes" >&2; exit 2 ;;
    -h | --help) sed -n '8,15s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) rest+=("$1") ;;
  esac
  shift
done

specs="" max=0
for shape in $shapes; do
  [[ $shape =~ ^([1-9][0-9]*)x([1-9][0-9]*)$ ]] || { echo "compare_hosts: bad shape $shape (HOSTSxSLOTS)" >&2; exit 2; }
  h=${BASH_REMATCH[1]} s=${BASH_REMATCH[2]} spec=""
  for ((i = 1; i <= h; i++)); do spec+="${spec:+,}h$i:$s"; done
  specs+="${specs:+ }$spec"
  if ((h > max)); then max=$h; fi
done
(($(id -u) == 0)) || { echo "compare_hosts: needs root (ip netns)" >&2; exit 2; }

export HVD_NETBED_PREFIX=hvdcmp$$
export HVD_NETBED_DIR=/tmp/hvd-netbed-$HVD_NETBED_PREFIX
trap 'timeout 60 bash "$netbed" down >/dev/null || echo "compare_hosts: netbed down failed" >&2' EXIT
trap 'exit 130' INT TERM HUP
# --hostnames: Open MPI takes ranks with the same host name for neighbours on one machine,
# so each host gets a name of its own, h<i>.
bash "$netbed" up "$max" --hostnames >/dev/null
# horovodrun and mpirun reach the other hosts through the bed's ssh wrapper; HOME holds
# horovodrun's start-up cache, kept out of the user's own.
home=$HVD_NETBED_DIR/home
mkdir -p "$home"
if ((${#exec_cmd[@]})); then
  set -- $shapes
  for spec in $specs; do
    bash "$netbed" exec h1 env PATH="$HVD_NETBED_DIR/bin:$PATH" HOME="$home" \
      HVD_COMPARE_SHAPE="$1" HVD_COMPARE_HOSTS="$spec" "${exec_cmd[@]}" </dev/null
    shift
  done
  exit 0
fi
bash "$netbed" exec h1 env PATH="$HVD_NETBED_DIR/bin:$PATH" HOME="$home" \
  bash "$here/compare_allreduce.sh" --hosts "$specs" "${rest[@]}" </dev/null
