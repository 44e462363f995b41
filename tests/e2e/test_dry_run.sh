#!/usr/bin/env bash
# --dry-run prints the slot plan exactly and starts nothing; bad host input is an error that
# names the offending item; too few slots says how many were found.
source "$(dirname "$0")/lib.sh"

run_hvd --dry-run -np 4 touch "$TMP/started"
expect_eq "exit" 0 "$RC"
expect_eq "plan -np 4" "rank=0 size=4 local_rank=0 local_size=4 cross_rank=0 cross_size=1 host=localhost
rank=1 size=4 local_rank=1 local_size=4 cross_rank=0 cross_size=1 host=localhost
rank=2 size=4 local_rank=2 local_size=4 cross_rank=0 cross_size=1 host=localhost
rank=3 size=4 local_rank=3 local_size=4 cross_rank=0 cross_size=1 host=localhost" "$OUT"
[[ ! -e "$TMP/started" ]] || fail "--dry-run started the command"

# heterogeneous hosts, fewer ranks than slots (exactly -np ranks: the quirk is fixed)
run_hvd --dry-run -np 5 -H a:2,b:4,c:1 true
expect_eq "exit" 0 "$RC"
expect_eq "plan a:2,b:4,c:1 np 5" "rank=0 size=5 local_rank=0 local_size=2 cross_rank=0 cross_size=2 host=a
rank=1 size=5 local_rank=1 local_size=2 cross_rank=0 cross_size=2 host=a
rank=2 size=5 local_rank=0 local_size=3 cross_rank=1 cross_size=2 host=b
rank=3 size=5 local_rank=1 local_size=3 cross_rank=1 cross_size=2 host=b
rank=4 size=5 local_rank=2 local_size=3 cross_rank=0 cross_size=1 host=b" "$OUT"

cat >"$TMP/hosts" <<'HOSTS'
# training hosts
h1 slots=2

h2 slots=1   # the small one
HOSTS
run_hvd --dry-run -np 3 --hostfile "$TMP/hosts" true
expect_eq "exit" 0 "$RC"
expect_eq "hostfile plan" "rank=0 size=3 local_rank=0 local_size=2 cross_rank=0 cross_size=2 host=h1
rank=1 size=3 local_rank=1 local_size=2 cross_rank=0 cross_size=1 host=h1
rank=2 size=3 local_rank=0 local_size=1 cross_rank=1 cross_size=2 host=h2" "$OUT"

# too few slots: how many requested, how many found
run_hvd --dry-run -np 5 -H a:2,b:2 true
expect_eq "too few slots exit" 2 "$RC"
expect_contains "too few slots" "$ERR" "5"
expect_contains "too few slots count" "$ERR" "4"

# bad host strings name the item
for bad in "a:2,b" "a:2," "a:x" "a:2,a:1" "a b:2"; do
  run_hvd --dry-run -np 1 -H "$bad" true
  expect_eq "exit for -H '$bad'" 2 "$RC"
  expect_contains "error for -H '$bad'" "$ERR" "horovodrun: error:"
done
run_hvd --dry-run -np 1 -H "a:2,b" true
expect_contains "names the bad item" "$ERR" "'b'"

# bad hostfile names file and line
printf 'h1 slots=2\nh2 slots=two\n' >"$TMP/bad_hosts"
run_hvd --dry-run -np 1 --hostfile "$TMP/bad_hosts" true
expect_eq "bad hostfile exit" 2 "$RC"
expect_contains "bad hostfile line" "$ERR" "bad_hosts:2"
run_hvd --dry-run -np 1 --hostfile "$TMP/missing" true
expect_eq "missing hostfile exit" 2 "$RC"
expect_contains "missing hostfile" "$ERR" "missing"

# Endless or oversized input is refused in bounded memory (issue 32; the bounds are in
# src/runner/hosts/hosts.h and config_file.h). rss_run CMD...: run CMD with stdin from $FEED
# (a pipe from an endless producer), set RC, ERR and MAXRSS_KB (the largest resident size
# of the command's processes).
cat >"$TMP/maxrss.py" <<'PY'
# maxrss.py RC_FILE CMD...: run CMD (its stdin is ours, stdout dropped, stderr kept); write its
# exit status to RC_FILE and print the largest resident size of its processes, in KiB
import resource, subprocess, sys
r = subprocess.run(sys.argv[2:], stdout=subprocess.DEVNULL, timeout=60)
open(sys.argv[1], "w").write(str(r.returncode))
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
PY
rss_run() {
  rm -f "$TMP/rc"
  # (the producer ends by SIGPIPE once horovodrun stops reading: the pipeline's status is not
  # the test's; a missing rc file is)
  MAXRSS_KB=$(bash -c "$FEED" 2>/dev/null | /usr/bin/python3 "$TMP/maxrss.py" "$TMP/rc" "$@" \
              2>"$TMP/err") || true
  RC=$(cat "$TMP/rc")
  ERR=$(cat "$TMP/err")
}
check_bounded() { # NAME NEEDLE
  expect_eq "$1: exit" 2 "$RC"
  expect_contains "$1: message" "$ERR" "$2"
  ((MAXRSS_KB < 300000)) || fail "$1: horovodrun grew to $MAXRSS_KB KiB"
}
# a FIFO nobody writes to reads as empty: no open() waiting for ever
mkfifo "$TMP/fifo"
run_hvd --dry-run -np 1 --hostfile "$TMP/fifo" true
expect_eq "unwritten FIFO exit" 2 "$RC"
expect_contains "unwritten FIFO" "$ERR" "hostfile $TMP/fifo lists no hosts"
FEED="cat /dev/zero"
rss_run "$HVDRUN" --dry-run -np 1 --hostfile /dev/stdin true
check_bounded "hostfile /dev/zero" "hostfile /dev/stdin: line 1 holds a NUL byte"
FEED="tr '\\0' x </dev/zero"
rss_run "$HVDRUN" --dry-run -np 1 --hostfile /dev/stdin true
check_bounded "endless line" "hostfile /dev/stdin: line 1 is longer than 4096 bytes"
FEED="seq 1 100000000 | sed 's/^/a-host-name-of-some-length-/'"
rss_run "$HVDRUN" --dry-run -np 1 --hostfile /dev/stdin true
check_bounded "endless hosts" "hostfile /dev/stdin is larger than 16777216 bytes"
FEED="yes '# a comment'"
rss_run "$HVDRUN" --dry-run -np 1 --config-file /dev/stdin true
check_bounded "endless config" "config file /dev/stdin is larger than 1048576 bytes"
pass
