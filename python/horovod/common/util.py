"""Helpers Horovod's users and tests import from horovod.common.util."""
import contextlib
import os

from horovod import _hvd


def check_extension(ext_name, ext_env_var, pkg_path, *args):
    """Horovod checks that its framework extension was built; hvd's one extension always is."""


def split_list(items, n):
    """Split `items` into n lists of (nearly) equal length, the first ones longer."""
    q, r = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        end = start + q + (1 if i < r else 0)
        out.append(items[start:end])
        start = end
    return out


def num_rank_is_power_2(num_rank):
    """True when num_rank is a power of two (Adasum's requirement in Horovod)."""
    return num_rank > 0 and (num_rank & (num_rank - 1)) == 0


def is_iterable(x):
    try:
        iter(x)
    except TypeError:
        return False
    return True


@contextlib.contextmanager
def env(**kwargs):
    """Set environment variables for the duration of a with block. As in Horovod, a None
    value leaves its variable as it is."""
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    saved = {k: os.environ.get(k) for k in kwargs}
    try:
        for k, v in kwargs.items():
            os.environ[k] = str(v)
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def env_flag(name):
    """A boolean HOROVOD_* setting read as libhvd reads it: true/yes/on or a positive
    integer (any case); unset, empty, false/no/off or anything else is False."""
    value = os.environ.get(name, "").strip().lower()
    if value in ("true", "yes", "on"):
        return True
    try:
        return int(value) > 0
    except ValueError:
        return False


def gloo_built(verbose=False):
    return True


def mpi_built(verbose=False):
    return False


def nccl_built(verbose=False):
    return 0


def ddl_built(verbose=False):
    return False


def ccl_built(verbose=False):
    return False


def cuda_built(verbose=False):
    return False


def rocm_built(verbose=False):
    return False


def extension_version():
    """libhvd's version."""
    return _hvd.version()


def is_version_greater_equal_than(ver, target):
    """Whether version string `ver` is at least `target` (Horovod's helper)."""
    from packaging import version
    if not isinstance(ver, str) or not isinstance(target, str):
        raise ValueError(f"is_version_greater_equal_than takes version strings, got "
                         f"{type(ver).__name__} and {type(target).__name__}")
    return version.parse(ver) >= version.parse(target)
