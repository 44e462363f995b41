"""horovod.run: Horovod's function API. Runs a Python function on every rank of a job that
horovodrun starts, and returns what each rank's call returned, in rank order.

    import horovod
    def train(lr):
        import horovod.torch as hvd
        hvd.init()
        ...
        return hvd.rank()
    results = horovod.run(train, args=(0.1,), num_proc=2)   # [0, 1]

The function, its arguments and the results cross through a private temporary directory
(mode 0700, removed afterwards): the function is pickled there with cloudpickle, every rank
unpickles and calls it (horovod.runner.run_task), and writes its result back there. On one
host that is all; with remote hosts the directory must be on a filesystem every host shares
(point TMPDIR there), and a rank that cannot find it says so.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import warnings

_FUNC = "func.pkl"


def _result_name(rank):
    return f"result.{rank}"


def _horovodrun():
    """The horovodrun next to this package (the build tree's, or the installed prefix's
    bin/), else the first on PATH."""
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../horovod
    candidates = [
        os.path.join(pkg, "..", "..", "horovodrun"),  # build/python/horovod -> build/
        os.path.join(pkg, "..", "..", "..", "..", "bin", "horovodrun"),  # lib/python3*/...
    ]
    for c in candidates:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return os.path.normpath(c)
    found = shutil.which("horovodrun")
    if not found:
        raise RuntimeError("horovod.run needs hvd's horovodrun: it is neither next to the "
                           "horovod package nor on PATH")
    return found


def run(func, args=(), kwargs=None, num_proc=1, min_num_proc=None, max_num_proc=None,
        slots=None, reset_limit=None, cooldown_range=None, hosts=None, hostfile=None,
        host_discovery_script=None, start_timeout=None, ssh_port=None, ssh_identity_file=None,
        disable_cache=None, output_filename=None, verbose=None, use_gloo=None, use_mpi=None,
        mpi_args=None, network_interface=None, network_interfaces=None, executable=None,
        np=None, min_np=None, max_np=None):
    """Launch a job of num_proc ranks that each call func(*args, **kwargs); return the list of
    their return values, indexed by rank (only the first min_num_proc when it is set).
    Arguments as Horovod's horovod.run (np, min_np, max_np and network_interface are its
    deprecated spellings). Raises RuntimeError when the job fails, after horovodrun has
    printed which rank failed and how."""
    if network_interface:
        network_interfaces = network_interface.split(",")
        warnings.warn("network_interface is deprecated, use network_interfaces instead",
                      DeprecationWarning)
    if np is not None:
        num_proc = np
        warnings.warn("np is deprecated, use num_proc instead", DeprecationWarning)
    if min_np is not None:
        min_num_proc = min_np
        warnings.warn("min_np is deprecated, use min_num_proc instead", DeprecationWarning)
    if max_np is not None:
        max_num_proc = max_np
        warnings.warn("max_np is deprecated, use max_num_proc instead", DeprecationWarning)
    if kwargs is None:
        kwargs = {}
    if hosts is not None and hostfile is not None:
        raise ValueError("Argument hosts and hostfile only allow one provided.")
    if use_gloo and use_mpi:
        raise ValueError("Argument use_gloo and use_mpi only allow one set True.")
    if not callable(func):
        raise TypeError(f"func must be callable, not {type(func).__name__}")

    cmd = [_horovodrun()]
    if num_proc is not None:
        cmd += ["-np", str(int(num_proc))]
    flags = [("--min-np", min_num_proc), ("--max-np", max_num_proc),
             ("--slots-per-host", slots), ("--reset-limit", reset_limit),
             ("-H", hosts), ("--hostfile", hostfile),
             ("--host-discovery-script", host_discovery_script),
             ("--start-timeout", start_timeout), ("-p", ssh_port),
             ("-i", ssh_identity_file), ("--output-filename", output_filename)]
    for flag, value in flags:
        if value is not None:
            cmd += [flag, str(value)]
    if cooldown_range is not None:
        low, high = cooldown_range
        cmd += ["--blacklist-cooldown-range", str(int(low)), str(int(high))]
    if network_interfaces:
        cmd += ["--network-interfaces", ",".join(network_interfaces)]
    if disable_cache:
        cmd.append("--disable-cache")
    if verbose:
        cmd.append("--verbose")
    if use_gloo:
        cmd.append("--gloo")
    if use_mpi:
        cmd.append("--mpi")
        if mpi_args:
            cmd.append(f"--mpi-args={mpi_args}")

    import cloudpickle

    def wrapped_func():
        return func(*args, **kwargs)

    env = dict(os.environ)
    # the ranks import this same horovod package
    pkg_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = env.get("PYTHONPATH", "")
    if pkg_parent not in path.split(os.pathsep):
        env["PYTHONPATH"] = pkg_parent + (os.pathsep + path if path else "")
    with tempfile.TemporaryDirectory(prefix="horovod-run-") as work:
        with open(os.path.join(work, _FUNC), "wb") as f:
            cloudpickle.dump(wrapped_func, f)
        cmd += [executable or sys.executable, "-m", "horovod.runner.run_task", work]
        rc = subprocess.run(cmd, env=env).returncode
        if rc != 0:
            raise RuntimeError(f"horovod.run: the job failed (horovodrun exited with status "
                               f"{rc}; its report above names the rank)")
        results = []
        rank = 0
        while os.path.exists(os.path.join(work, _result_name(rank))):
            with open(os.path.join(work, _result_name(rank)), "rb") as f:
                results.append(cloudpickle.load(f))
            rank += 1
        if not results:
            raise RuntimeError("horovod.run: the job succeeded but no rank left a result")
    if min_num_proc is not None:
        results = results[:min_num_proc]
    return results
