#!/usr/bin/env bash
# Allreduce latency of hvd, Open MPI over TCP (mpi) and with its defaults (mpishm), MPICH
# (mpich) and PyTorch gloo, side by side on this host. Each peer sums float32 buffers of the same
# sizes and reports, per size, the median per-iteration time (the largest of the ranks' medians)
# and how many result elements were wrong. A benchmark, not a test: a missing peer is skipped.
#
# Usage: tools/compare_allreduce.sh [--build DIR] [--np "2 4" | --hosts "h1:2,h2:2 ..."]
#          [--only hvd,hvdflat,hvdhier,hvdrepro,hvdadasum,mpi,mpishm,mpich,gloo]
#          [-b MIN -e MAX -f FACTOR | --sizes "8 1M 64M"] [-n ITERS] [-w WARMUP]
#          [--out DIR] [--timeout SECS] [--inplace]
# Needs: hvd built in DIR (horovodrun, tools/hvd_allreduce_perf); Open MPI (openmpi-bin
# libopenmpi-dev), MPICH (mpich libmpich-dev), torch for /usr/bin/python3 (python3-torch).
# --hosts runs each job across the hosts given (-H syntax; one job per list entry, run from a
# host that reaches them all by ssh: tools/compare_hosts.sh builds such hosts on this machine):
# hvd as it chooses, hvdflat and hvdhier with HOROVOD_HIERARCHICAL_ALLREDUCE=0 and 1, hvdrepro
# with HVD_REPRODUCIBLE=1 (every element summed in rank order, on one host too), hvdadasum
# with op Adasum instead of the sum (tools/compare_adasum.sh: the two side by side), and Open
# MPI (mpi over TCP on eth0, mpishm with its defaults); MPICH and gloo run on one host only.
# --inplace runs every peer in place (hvd_allreduce_perf -I, MPI_IN_PLACE; gloo's stays out of
# place). Exit status: 0, or 1 when a peer failed or any result was wrong (after the table).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
peers=(hvd hvdflat hvdhier hvdrepro hvdadasum mpi mpishm mpich gloo) # the order they run in and their columns
build=${here%/tools}/build nps="2 4" hosts="" only="" out="" timeout_s=600
iters=200 warmup=10 inplace=""
# The anchors people quote (8 B latency, 1 MiB, 64 MiB bandwidth) must be in the default list,
# and no single factor from 8 B reaches both 1 MiB and 64 MiB, so the default is a list.
size_list="8 64 512 4K 32K 256K 1M 4M 16M 64M"
gb="" ge="" gf=""
python=${GLOO_PYTHON:-/usr/bin/python3} # Debian's, where python3-torch lives

die() { echo "compare_allreduce: $*" >&2; exit 2; }
usage() { sed -n '7,18s/^# \{0,1\}//p' "$0"; }

while (($#)); do
  case $1 in
    --build) build=${2:?}; shift ;;
    --np) nps=${2:?}; shift ;;
    --hosts) hosts=${2:?}; shift ;;
    --only) only=${2:?}; shift ;;
    --inplace) inplace=1 ;;
    --sizes) size_list=${2:?}; shift ;;
    --out) out=${2:?}; shift ;;
    --timeout) timeout_s=${2:?}; shift ;;
    -b) gb=${2:?}; shift ;;
    -e) ge=${2:?}; shift ;;
    -f) gf=${2:?}; shift ;;
    -n) iters=${2:?}; shift ;;
    -w) warmup=${2:?}; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
  shift
done

bytes() { # 4K -> 4096 (K/M/G are powers of 1024)
  local v=$1 m=1
  case $v in
    *[kK]) m=1024 v=${v%?} ;;
    *[mM]) m=1048576 v=${v%?} ;;
    *[gG]) m=1073741824 v=${v%?} ;;
  esac
  if [[ ! $v =~ ^[0-9]+$ ]] || ((10#$v == 0)); then die "bad size: $1"; fi
  echo $((10#$v * m))
}
human() { # 4096 -> 4K, for the table
  local b=$1
  if ((b >= 1048576 && b % 1048576 == 0)); then echo "$((b / 1048576))M"
  elif ((b >= 1024 && b % 1024 == 0)); then echo "$((b / 1024))K"
  else echo "$b"; fi
}

[[ $iters =~ ^[1-9][0-9]*$ && $warmup =~ ^[0-9]+$ ]] || die "-n must be >= 1 and -w >= 0"
[[ $timeout_s =~ ^[1-9][0-9]*$ ]] || die "bad --timeout: $timeout_s"
for n in $nps; do [[ $n =~ ^[1-9][0-9]*$ ]] || die "bad --np entry: $n"; done
# The jobs ("shapes"): a rank count on this host, or a host list. A shape's label names it in
# the table (np, or HOSTSxSLOTS when every host has the same number of slots).
shapes=()
declare -A shape_np=() shape_hosts=()
if [[ -n $hosts ]]; then
  for spec in $hosts; do
    [[ $spec =~ ^[A-Za-z0-9._-]+:[1-9][0-9]*(,[A-Za-z0-9._-]+:[1-9][0-9]*)*$ ]] ||
      die "bad --hosts entry: $spec (host:slots,host:slots,...)"
    IFS=, read -ra hs <<<"$spec"
    total=0 slots=""
    for h in "${hs[@]}"; do
      total=$((total + ${h##*:}))
      if [[ -z $slots || $slots == "${h##*:}" ]]; then slots=${h##*:}; else slots=mixed; fi
    done
    label=$spec
    [[ $slots == mixed ]] || label="${#hs[@]}x$slots"
    shapes+=("$label") shape_np[$label]=$total shape_hosts[$label]=$spec
  done
  [[ -n $only ]] || only=hvd,hvdflat,hvdhier,mpi,mpishm
else
  for n in $nps; do shapes+=("$n") shape_np[$n]=$n shape_hosts[$n]=""; done
  [[ -n $only ]] || only=hvd,mpi,mpishm,mpich,gloo
fi
IFS=, read -ra picked <<<"$only"
for p in "${picked[@]}"; do [[ " ${peers[*]} " == *" $p "* ]] || die "unknown peer in --only: $p (peers: ${peers[*]})"; done
sizes=()
if [[ -n $gb$ge$gf ]]; then # a geometric series, as the nccl-tests style tools take it
  b=$(bytes "${gb:-8}") e=$(bytes "${ge:-64M}") f=${gf:-8}
  if [[ ! $f =~ ^[0-9]+$ ]] || ((10#$f < 2 || e < b)); then die "need -f >= 2 and -b <= -e"; fi
  for ((s = b; s <= e; s *= f)); do sizes+=("$s"); done
else
  for s in $size_list; do sizes+=("$(bytes "$s")"); done
fi
((${#sizes[@]})) || die "no sizes"

# Big buffers take long per call: keep -n/-w for sizes up to 256 KiB and scale them down with
# the size beyond (to at least 5 iterations and 1 warm-up), so the default run takes minutes.
scaled() { # count floor size -> count for this size, never above count
  local n=$(($1 * 262144 / $3))
  if ((n < $2)); then n=$2; fi
  if ((n > $1)); then n=$1; fi
  echo "$n"
}
iters_for() { scaled "$iters" 5 "$1"; }
warmup_for() { scaled "$warmup" 1 "$1"; }

# One launch per run of sizes that share counts and form a geometric series, since every
# peer takes -b/-e/-f; launches cost seconds (torch import), so fewer is better.
plan=()
for ((i = 0; i < ${#sizes[@]};)); do
  s=${sizes[i]} n=$(iters_for "${sizes[i]}") w=$(warmup_for "${sizes[i]}")
  e=$s f=2 j=$((i + 1))
  if ((j < ${#sizes[@]})) && [[ $(iters_for "${sizes[j]}") == "$n" && $(warmup_for "${sizes[j]}") == "$w" ]] &&
    ((sizes[j] > s && sizes[j] % s == 0)); then
    f=$((sizes[j] / s))
    while ((j < ${#sizes[@]} && sizes[j] == e * f)) &&
      [[ $(iters_for "${sizes[j]}") == "$n" && $(warmup_for "${sizes[j]}") == "$w" ]]; do
      e=${sizes[j]} j=$((j + 1))
    done
  fi
  plan+=("$s $e $f $n $w")
  i=$j
done

if [[ -z $out ]]; then out=$(mktemp -d /tmp/compare_allreduce.XXXXXX); else mkdir -p "$out"; fi
tmp=$(mktemp -d) # the mpicc build; results go to $out, which stays
trap 'rm -rf "$tmp"' EXIT

# ---- which peers can run, and why not ----
declare -A why=() # peer -> reason it is skipped
for p in "${peers[@]}"; do [[ ,$only, == *,$p,* ]] || why[$p]="not selected (--only $only)"; done
hvd_why=""
if [[ ! -x $build/horovodrun ]]; then hvd_why="skipped: $build/horovodrun not found (cmake -S . -B $build && cmake --build $build, or --build DIR)"
elif [[ ! -x $build/tools/hvd_allreduce_perf ]]; then hvd_why="skipped: $build/tools/hvd_allreduce_perf not built yet"
fi
for p in hvd hvdflat hvdhier hvdrepro hvdadasum; do [[ -n ${why[$p]:-} || -z $hvd_why ]] || why[$p]=$hvd_why; done
if [[ -n $hosts ]]; then
  for p in mpich gloo; do [[ -n ${why[$p]:-} ]] || why[$p]="n/a with --hosts (run on one host only)"; done
fi
# Open MPI by its Debian names where they exist, so that plain mpirun/mpicc pointed at MPICH
# by update-alternatives cannot stand in for it; mpi and mpishm share one binary.
ompi_run=mpirun ompi_cc=mpicc
if command -v mpirun.openmpi >/dev/null; then ompi_run=mpirun.openmpi; fi
if command -v mpicc.openmpi >/dev/null; then ompi_cc=mpicc.openmpi; fi
if [[ -z ${why[mpi]:-} || -z ${why[mpishm]:-} ]]; then
  ompi_why=""
  if ! command -v "$ompi_run" >/dev/null || ! command -v "$ompi_cc" >/dev/null; then
    ompi_why="n/a (mpirun or mpicc not found; install openmpi-bin libopenmpi-dev)"
  elif [[ ! $("$ompi_run" --version 2>&1) =~ Open\ MPI|OpenRTE ]]; then # (grep -q can fail the pipe)
    ompi_why="n/a ($ompi_run is not Open MPI; see update-alternatives --display mpirun)"
  elif ! "$ompi_cc" -O2 -o "$tmp/mpi_allreduce_bench" "$here/bench/mpi_allreduce_bench.c" 2>"$out/mpicc.err"; then
    ompi_why="n/a ($ompi_cc failed, see $out/mpicc.err; install libopenmpi-dev)"
  fi
  if [[ -n $ompi_why ]]; then
    for p in mpi mpishm; do [[ -n ${why[$p]:-} ]] || why[$p]=$ompi_why; done
  fi
fi
if [[ -z ${why[mpich]:-} ]]; then
  if ! command -v mpirun.mpich >/dev/null || ! command -v mpicc.mpich >/dev/null; then
    why[mpich]="n/a (mpirun.mpich or mpicc.mpich not found; install mpich libmpich-dev)"
  elif ! mpicc.mpich -O2 -o "$tmp/mpich_allreduce_bench" "$here/bench/mpi_allreduce_bench.c" 2>"$out/mpicc.mpich.err"; then
    why[mpich]="n/a (mpicc.mpich failed, see $out/mpicc.mpich.err; install libmpich-dev)"
  fi
fi
if [[ -z ${why[gloo]:-} ]]; then
  if ! command -v "$python" >/dev/null; then why[gloo]="n/a ($python not found; install python3-torch)"
  elif ! "$python" -c 'import torch.distributed as d; assert d.is_available() and d.is_gloo_available()' 2>/dev/null; then
    why[gloo]="n/a (torch with gloo not importable by $python; install python3-torch)"
  fi
fi

# ---- run ----
peer_cmd() { # peer shape b e f n w -> the command line, one word per line
  local p=$1 np=${shape_np[$2]} hs=${shape_hosts[$2]} b=$3 e=$4 f=$5 n=$6 w=$7
  local H=() if=lo hier=() op=sum
  # Hosts simulated on this machine share its cores, which Open MPI cannot see (each host
  # looks like a whole machine to it, so it would spin while waiting); hvd notices the shared
  # machine itself. Tell Open MPI, as a user of such a machine would.
  if [[ -n $hs ]]; then H=(-H "$hs" --mca mpi_yield_when_idle 1) if=eth0; fi
  case $p in
    hvdflat) hier=(env HOROVOD_HIERARCHICAL_ALLREDUCE=0) ;;
    hvdhier) hier=(env HOROVOD_HIERARCHICAL_ALLREDUCE=1) ;;
    hvdrepro) hier=(env HVD_REPRODUCIBLE=1) ;;
    hvdadasum) op=adasum ;;
  esac
  case $p in
    hvd*) printf '%s\n' "${hier[@]}" "$build/horovodrun" -np "$np" "${H[@]:0:2}" \
      "$build/tools/hvd_allreduce_perf" -b "$b" -e "$e" -f "$f" -w "$w" -n "$n" -d float32 \
      -o "$op" -c 1 ${inplace:+-I} ;;
    # pml ob1 + btl tcp,self: Open MPI's shared-memory path (vader) is off, so this is MPI
    # over loopback TCP, the same wire hvd's tcp transport uses; without --mca pml ob1 a
    # build with UCX would pick UCX and skip the BTLs altogether.
    mpi) printf '%s\n' "$ompi_run" --allow-run-as-root --oversubscribe --mca pml ob1 \
      --mca btl tcp,self --mca btl_tcp_if_include "$if" --mca oob_tcp_if_include "$if" \
      -np "$np" "${H[@]}" "$tmp/mpi_allreduce_bench" -b "$b" -e "$e" -f "$f" -w "$w" -n "$n" \
      ${inplace:+-i} ;;
    # Open MPI as it comes. Checked with --mca pml_base_verbose 10 --mca btl_base_verbose 100
    # (Debian 12, Open MPI 4.1.4): pml ob1, and "Using vader btl" between ranks, i.e. shared
    # memory (tcp opens too but carries nothing on one host). UCX is installed, but Debian's
    # /etc/openmpi/openmpi-mca-params.conf has pml = ^ucx, so its pml is never tried; where a
    # build does pick UCX, that is its default too (UCX then uses shared memory on one host).
    # Across hosts: vader inside each host, tcp between them.
    mpishm) printf '%s\n' "$ompi_run" --allow-run-as-root --oversubscribe -np "$np" "${H[@]}" \
      "$tmp/mpi_allreduce_bench" -b "$b" -e "$e" -f "$f" -w "$w" -n "$n" ${inplace:+-i} ;;
    # MPICH as it comes, by its own names (never through the mpirun alternative). Debian 12's
    # MPICH 4.0.2 is ch4:ucx (mpichversion); on one host strace and UCX_LOG_LEVEL=info show
    # the ranks' data going through shared memory (a /dev/shm region of MPICH's own, UCX's
    # sysv/cma transports, process_vm_readv for large buffers). Hydra needs no root flag and
    # oversubscribes without asking.
    mpich) printf '%s\n' mpirun.mpich -np "$np" \
      "$tmp/mpich_allreduce_bench" -b "$b" -e "$e" -f "$f" -w "$w" -n "$n" ${inplace:+-i} ;;
    gloo) printf '%s\n' "$python" "$here/bench/gloo_allreduce_bench.py" -np "$np" \
      -b "$b" -e "$e" -f "$f" -w "$w" -n "$n" ;;
  esac
}

# Rows of every peer's output as "size time wrong". horovodrun tags rank output
# "[r]<stdout>:"; only rank 0 reports, and other ranks' lines must not be parsed as rows.
parse() { # time_col wrong_col < raw
  awk -v tc="$1" -v wc="$2" '{
    line = $0
    if (match(line, /^\[[0-9]+\]<std(out|err)>:/)) {
      if (substr(line, 1, RLENGTH) != "[0]<stdout>:") next
      line = substr(line, RLENGTH + 1)
    }
    n = split(line, a, " ")
    if (n < tc || n < wc || a[1] !~ /^[0-9]+$/ || a[tc] !~ /^[0-9.]+$/ || a[wc] !~ /^[0-9]+$/) next
    print a[1], a[tc], a[wc]
  }'
}

declare -A res=() bad=() # "peer shape size" -> "time wrong"; "peer shape" -> why the run failed
status=0
# The machine's state decides how far these numbers can be trusted: keep it with them.
{
  echo "date: $(date -u +%FT%TZ)  host: $(uname -n) $(uname -r)  cores: $(nproc)"
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  if [[ -z ${why[mpi]:-} || -z ${why[mpishm]:-} ]]; then echo "Open MPI: $("$ompi_run" --version 2>&1 | head -1)"; fi
  if [[ -z ${why[mpich]:-} ]]; then
    { mpichversion 2>/dev/null || mpirun.mpich --version 2>&1; } | grep -E 'MPICH (Version|Device)|^ *Version:' | tr -s ' \t' ' ' || true
  fi
  if [[ -z ${why[gloo]:-} ]]; then "$python" -c 'import torch; print("torch", torch.__version__)' 2>&1; fi
} >"$out/info.txt"
echo "raw outputs: $out"
echo "cores: $(nproc), load average: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the host skews small sizes)"
tag() { # shape -> its part of the raw output files' names
  if [[ -z ${shape_hosts[$1]} ]]; then echo "np$1"; else echo "${1//[^A-Za-z0-9]/_}"; fi
}
for shape in "${shapes[@]}"; do
  for p in "${peers[@]}"; do
    [[ -z ${why[$p]:-} ]] || continue
    raw=$out/${p}_$(tag "$shape").txt
    : >"$raw"
    for step in "${plan[@]}"; do
      read -r b e f n w <<<"$step"
      mapfile -t cmd < <(peer_cmd "$p" "$shape" "$b" "$e" "$f" "$n" "$w")
      echo "# ${cmd[*]}" >>"$raw"
      printf '  %-7s %-5s %6s..%-6s n=%-4s ' "$p" "$shape" "$(human "$b")" "$(human "$e")" "$n" >&2
      start=$SECONDS
      # timeout signals the whole process group, so ranks a launcher leaves behind go too.
      if timeout -k 10 "$timeout_s" "${cmd[@]}" >>"$raw" 2>>"$out/${p}_$(tag "$shape").err"; then
        echo "$((SECONDS - start))s" >&2
      else
        rc=$?
        if ((rc == 124 || rc == 137)); then rc="timeout ${timeout_s}s"; else rc="exit $rc"; fi
        echo "FAILED ($rc)" >&2
        bad["$p $shape"]+="$rc on $(human "$b")..$(human "$e"); "
        status=1
      fi
    done
    case $p in hvd*) cols="6 9" ;; *) cols="2 3" ;; esac
    # shellcheck disable=SC2086 # cols is two words on purpose
    while read -r s t wr; do res["$p $shape $s"]="$t $wr"; done < <(parse $cols <"$raw")
  done
done

# ---- one table ----
cell() { # peer np size -> time, "-", "skipped", "n/a", "FAIL" or the time marked WRONG
  local r=${res["$1 $2 $3"]:-}
  if [[ -n ${why[$1]:-} ]]; then
    case ${why[$1]} in "not selected"*) echo "-" ;; skipped*) echo "skipped" ;; *) echo "n/a" ;; esac
  elif [[ -z $r ]]; then echo "FAIL"
  elif [[ ${r#* } != 0 ]]; then echo "${r% *}!WRONG"
  else echo "${r% *}"; fi
}
ratio() { # a b -> a/b when both are plain numbers
  if [[ $1 =~ ^[0-9.]+$ && $2 =~ ^[0-9.]+$ ]]; then awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'
  else echo "-"; fi
}
# Columns: the peers picked; ratios: the first of them (hvd) to each other one.
shown=()
for p in "${peers[@]}"; do [[ ${why[$p]:-} == "not selected"* ]] || shown+=("$p"); done
((${#shown[@]})) || die "no peer selected"
others=("${shown[@]:1}")
row() { printf '%-5s %6s' "$1" "$2"; shift 2; printf ' %12s' "${@:1:${#shown[@]}}"; shift "${#shown[@]}"; printf ' %12s' "$@"; echo; }
echo
if [[ -n $hosts ]]; then first=hosts; else first=np; fi
row "$first" size "${shown[@]/%/_us}" "${others[@]/#/${shown[0]}/}"
wrong_list=()
for shape in "${shapes[@]}"; do
  for s in "${sizes[@]}"; do
    cells=() ratios=()
    for p in "${shown[@]}"; do cells+=("$(cell "$p" "$shape" "$s")"); done
    for ((i = 1; i < ${#shown[@]}; i++)); do ratios+=("$(ratio "${cells[0]}" "${cells[i]}")"); done
    row "$shape" "$(human "$s")" "${cells[@]}" "${ratios[@]}"
    for p in "${shown[@]}"; do
      r=${res["$p $shape $s"]:-}
      if [[ -n $r && ${r#* } != 0 ]]; then wrong_list+=("$p $shape size=$s: ${r#* } wrong elements"); fi
    done
  done
done
echo "(median us per call, slowest rank; ratios > 1: ${shown[0]} slower)"
for p in "${shown[@]}"; do [[ -z ${why[$p]:-} ]] || echo "$p: ${why[$p]}"; done
for k in "${!bad[@]}"; do echo "${k%% *} ${k#* }: FAILED, ${bad[$k]}see $out/${k%% *}_$(tag "${k#* }").{txt,err}"; done
if ((${#wrong_list[@]})); then
  status=1
  echo "!!! WRONG RESULTS !!!"
  printf '!!! %s\n' "${wrong_list[@]}"
fi
echo "raw outputs: $out"
exit "$status"
