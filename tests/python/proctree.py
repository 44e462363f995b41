"""Running a whole job from a test, bounded: the launcher and every process below it end by the
deadline, whatever they do (torchrun 2 starts each worker in a session of its own, out of reach
of a kill of the launcher's process group, and a SIGSTOPped rank keeps a launcher waiting for
ever). Shared by the job tests of tests/python."""
import os
import signal
import subprocess
import tempfile
import time


def descendants(pid):
    """The pids of every process below pid."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            found.append(c)
            todo.append(c)
    return found


def kill_tree(pid):
    for p in [pid] + descendants(pid):
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run_job(cmd, env, timeout, until=None):
    """Run cmd: (its exit status, its output), once it ends, or once until() holds, or at the
    deadline; in the last two cases it and every process below it are killed first. The output
    goes through a file, not a pipe: a job that writes much never blocks on a full pipe, and a
    worker left behind holds no pipe open."""
    with tempfile.TemporaryFile(mode="w+") as log:
        p = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
        deadline = time.monotonic() + timeout
        while p.poll() is None and time.monotonic() < deadline and not (until and until()):
            time.sleep(0.1)
        if p.poll() is None:
            kill_tree(p.pid)
        p.wait()
        log.seek(0)
        return p.returncode, log.read()
