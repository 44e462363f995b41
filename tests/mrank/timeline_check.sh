#!/usr/bin/env bash
# Check a timeline file (Chrome trace JSON written by libhvd's rank 0) with the plain json
# module of /usr/bin/python3.
#
#   timeline_check.sh FILE CHECKS...          check FILE
#   timeline_check.sh --run CHECKS... -- CMD  run CMD with HOROVOD_TIMELINE set to a file in a
#                                             fresh temporary directory, then check that file
#                                             (CMD's failure is the result when it fails)
# CHECKS (every file is also checked to be a JSON array of trace events whose B/E/X events
# belong to a tensor announced by a process_name event):
#   --tensor NAME        a tensor named NAME appears
#   --no-tensor NAME     no tensor named NAME appears
#   --activity NAME      an event (B, X or instant) named NAME appears
#   --no-activity NAME   no event named NAME appears
#   --fused PREFIX       MEMCPY_IN_FUSION_BUFFER happens to at least 2 tensors named PREFIX*
#   --ready-ranks N      some tensor has a "rank ready" mark for every rank 0..N-1
#   --balanced           every B has its E on the same tensor; timestamps never go back
#   --min-events N       at least N events
set -euo pipefail
trap 'echo "FAIL: ${BASH_SOURCE[0]}:$LINENO: \"$BASH_COMMAND\" exited $?" >&2' ERR # set -e would end silently

check() {
  /usr/bin/python3 -c '
import json, sys

path, args = sys.argv[1], sys.argv[2:]
def die(msg):
    sys.exit("timeline %s: %s" % (path, msg))
try:
    with open(path) as f:
        events = json.load(f)
except (OSError, ValueError) as e:
    die("not valid JSON: %s" % e)
if not isinstance(events, list):
    die("not a JSON array")
tensors = {}          # pid -> name
activities = {}       # event name -> set of tensor names (None: global)
ready = {}            # tensor -> set of ranks marked ready
stacks = {}           # pid -> open B events
unbalanced = []
last_ts = None
backwards = []
for i, e in enumerate(events):
    if not isinstance(e, dict) or "ph" not in e:
        die("event %d is not a trace event: %r" % (i, e))
    ph = e["ph"]
    if ph == "M":
        if e.get("name") == "process_name" and "name" in e.get("args", {}):
            tensors[e["pid"]] = e["args"]["name"]
        continue
    ts = e.get("ts")
    if not isinstance(ts, (int, float)):
        die("event %d has no timestamp: %r" % (i, e))
    if last_ts is not None and ts < last_ts:
        backwards.append(i)
    last_ts = ts
    if ph == "i":
        activities.setdefault(e.get("name"), set()).add(None)
        continue
    pid = e.get("pid")
    if pid not in tensors:
        die("event %d is on pid %r, which no process_name event announced" % (i, pid))
    t = tensors[pid]
    if ph == "B":
        activities.setdefault(e.get("name"), set()).add(t)
        stacks.setdefault(pid, []).append(e.get("name"))
    elif ph == "E":
        if not stacks.get(pid):
            unbalanced.append("E without B on %s (event %d)" % (t, i))
        else:
            stacks[pid].pop()
    elif ph == "X":
        activities.setdefault(e.get("name"), set()).add(t)
        if str(e.get("name", "")).isdigit():
            ready.setdefault(t, set()).add(int(e["name"]))
    else:
        die("event %d has an unknown phase %r" % (i, ph))
for pid, st in stacks.items():
    if st:
        unbalanced.append("%s: %s never ended" % (tensors[pid], ", ".join(st)))
names = set(tensors.values())
i = 0
while i < len(args):
    opt = args[i]
    val = args[i + 1] if i + 1 < len(args) else None
    i += 2
    if opt == "--tensor":
        if val not in names:
            die("no tensor %r among %d: %s" % (val, len(names), sorted(names)[:20]))
    elif opt == "--no-tensor":
        if val in names:
            die("tensor %r must not appear" % val)
    elif opt == "--activity":
        if val not in activities:
            die("no %s event; events: %s" % (val, sorted(k for k in activities if not str(k).isdigit())))
    elif opt == "--no-activity":
        if val in activities:
            die("%s events must not appear" % val)
    elif opt == "--fused":
        fused = [t for t in activities.get("MEMCPY_IN_FUSION_BUFFER", ()) if t and t.startswith(val)]
        if len(fused) < 2:
            die("MEMCPY_IN_FUSION_BUFFER on %d tensors named %s* (%s): nothing was fused" % (len(fused), val, fused))
    elif opt == "--ready-ranks":
        want = set(range(int(val)))
        if not any(want <= r for r in ready.values()):
            die("no tensor has ready marks for ranks %s: %s" % (sorted(want), {k: sorted(v) for k, v in list(ready.items())[:5]}))
    elif opt == "--balanced":
        i -= 1
        if unbalanced:
            die("unbalanced: %s" % "; ".join(unbalanced[:10]))
        if backwards:
            die("timestamps go back at events %s" % backwards[:10])
    elif opt == "--min-events":
        if len(events) < int(val):
            die("%d events, expected at least %s" % (len(events), val))
    else:
        die("unknown check %s" % opt)
fusion = activities.get("MEMCPY_IN_FUSION_BUFFER", ())
print("timeline %s: ok: %d events, %d tensors (%d fused), activities: %s" % (
    path, len(events), len(names), len(fusion),
    ", ".join(sorted(str(k) for k in activities if not str(k).isdigit()))))
' "$@"
}

if [[ ${1:-} != --run ]]; then
  check "$@"
  exit
fi
shift
checks=()
while (($#)) && [[ $1 != -- ]]; do
  checks+=("$1")
  shift
done
[[ ${1:-} == -- ]] || {
  echo "timeline_check.sh --run: no command after --" >&2
  exit 2
}
shift
dir=$(mktemp -d "${TMPDIR:-/tmp}/hvd-timeline.XXXXXX")
trap 'rm -rf "$dir"' EXIT
export HOROVOD_TIMELINE=$dir/timeline.json
set +e
"$@"
rc=$?
set -e
((rc == 0)) || exit $rc
[[ -f $HOROVOD_TIMELINE ]] || {
  echo "FAIL: HOROVOD_TIMELINE=$HOROVOD_TIMELINE was not written" >&2
  exit 1
}
check "$HOROVOD_TIMELINE" "${checks[@]}"
