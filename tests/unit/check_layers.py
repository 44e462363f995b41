"""Within each folder of src/, no two files call each other in a circle (docs/ARCHITECTURE.md:
a file uses files below it, never one above; a lower layer calls up only through a function it
is handed). Read from the built objects' symbols (nm): a file "calls" another when it uses a
global symbol the other defines.

    check_layers.py BUILD_DIR SOURCE_DIR

Prints every circle (the files, and for each of their edges the symbols) and exits 1, or
prints how many files and folders it checked and exits 0."""
import collections
import glob
import os
import re
import subprocess
import sys

build, source = sys.argv[1], sys.argv[2]


def folder_order(section):
    """The folders of one of ARCHITECTURE.md's tables, bottom to top."""
    text = open(os.path.join(source, "docs", "ARCHITECTURE.md")).read()
    body = text.split(section, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([a-z_]+)/` \|", body, re.M)


lib = folder_order("## libhvd (`src/`, bottom to top)")
runner = folder_order("## horovodrun (`src/runner/`, bottom to top)")
if len(lib) < 5 or len(runner) < 5:
    sys.exit("check_layers: could not read the folder tables of docs/ARCHITECTURE.md")


def place(rel):
    """(0, index) for a libhvd folder, (1, index) for one of src/runner/, None if unlisted."""
    parts = rel.split("/")
    if parts[0] == "runner":
        return (1, runner.index(parts[1])) if len(parts) > 2 and parts[1] in runner else None
    return (0, lib.index(parts[0])) if len(parts) > 1 and parts[0] in lib else None


problems = []
for top in sorted(os.listdir(os.path.join(source, "src"))):
    subs = [f"runner/{d}" for d in sorted(os.listdir(os.path.join(source, "src", "runner")))
            if os.path.isdir(os.path.join(source, "src", "runner", d))] if top == "runner" else [top]
    for d in subs:
        if os.path.isdir(os.path.join(source, "src", d)) and place(d + "/x") is None:
            problems.append(f"src/{d}/ is in no table of docs/ARCHITECTURE.md")
nfiles = 0
for path in sorted(glob.glob(f"{source}/src/**/*.[ch]", recursive=True)):
    rel = os.path.relpath(path, f"{source}/src")
    me = place(rel)
    if me is None:
        continue
    nfiles += 1
    for n, line in enumerate(open(path), 1):
        m = re.match(r'#include "([a-z_]+/[^"]+)"', line)
        if not m:
            continue
        it = place(m.group(1))
        if it is None:
            problems.append(f"src/{rel}:{n}: includes {m.group(1)}, of no listed folder")
        elif me[0] == 0 and it[0] == 1:
            problems.append(f"src/{rel}:{n}: libhvd includes the launcher's {m.group(1)}")
        elif me[0] == it[0] and it[1] > me[1]:
            problems.append(f"src/{rel}:{n}: includes {m.group(1)}, of a folder above its own")
for p in problems:
    print(p)
objs = []
for target in ("hvd_objs", "hvd_runner", "horovodrun"):
    for o in glob.glob(f"{build}/CMakeFiles/{target}.dir/src/**/*.o", recursive=True):
        rel = o.split(f"{target}.dir/", 1)[1][:-2]  # src/core/init.c
        if os.path.exists(os.path.join(source, rel)):  # (not a moved file's stale object)
            objs.append((rel[len("src/"):-len(".c")], o))
if len(objs) < 50:
    sys.exit(f"check_layers: only {len(objs)} objects under {build}: is it built?")
defs, uses = {}, {}
for name, o in objs:
    out = subprocess.run(["nm", "-g", o], capture_output=True, text=True, check=True).stdout
    uses[name] = set()
    for line in out.splitlines():
        p = line.split()
        if len(p) == 3 and p[1] in "TDBR":
            defs[p[2]] = name
        elif len(p) == 2 and p[0] == "U":
            uses[name].add(p[1])
edges = collections.defaultdict(lambda: collections.defaultdict(set))
for f, used in uses.items():
    for s in used:
        d = defs.get(s)
        if d and d != f and os.path.dirname(d) == os.path.dirname(f):
            edges[f][d].add(s)

# strongly connected components (iterative Tarjan)
index, low, on, stack, sccs, counter = {}, {}, set(), [], [], [0]
for root in sorted(uses):
    if root in index:
        continue
    work = [(root, iter(sorted(edges[root])))]
    index[root] = low[root] = counter[0]
    counter[0] += 1
    stack.append(root)
    on.add(root)
    while work:
        v, it = work[-1]
        w = next(it, None)
        if w is not None:
            if w not in index:
                index[w] = low[w] = counter[0]
                counter[0] += 1
                stack.append(w)
                on.add(w)
                work.append((w, iter(sorted(edges[w]))))
            elif w in on:
                low[v] = min(low[v], index[w])
            continue
        work.pop()
        if work:
            low[work[-1][0]] = min(low[work[-1][0]], low[v])
        if low[v] == index[v]:
            c = []
            while True:
                w = stack.pop()
                on.discard(w)
                c.append(w)
                if w == v:
                    break
            sccs.append(sorted(c))
circles = [c for c in sccs if len(c) > 1]
for c in circles:
    print("circle: " + ", ".join(c))
    for a in c:
        for b in sorted(edges[a]):
            if b in c:
                print(f"  {a} -> {b}: {', '.join(sorted(edges[a][b]))}")
if circles or problems:
    sys.exit(1)
folders = {os.path.dirname(f) for f in uses}
print(f"check_layers: {nfiles} sources' includes follow the folders' order; "
      f"{len(uses)} files in {len(folders)} folders, no circle")
