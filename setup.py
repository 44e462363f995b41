"""`pip install .`: the horovod package with libhvd, built by CMake, as Horovod's setup.py builds
its extension.

    python3 -m venv --system-site-packages venv && . venv/bin/activate
    pip install .                      # or: pip wheel . ; pip install horovod-*.whl

What lands in the environment: the `horovod` package, its extension horovod/_hvd*.so, libhvd
in horovod/lib/ (the extension finds it through an RPATH relative to itself: no
LD_LIBRARY_PATH), and the commands `horovodrun` (the launcher, with libhvd linked in) and
`horovodrun-slurm-hosts`. The build needs what scripts/install-deps.sh installs (a C
compiler, CMake, libmicrohttpd, libyaml, OpenSSL, python3-dev); a wheel installs without
them, on a machine with the same runtime libraries (Debian 12: libmicrohttpd12, libyaml-0-2,
libssl3).

There is no pyproject.toml on purpose: with one, pip builds in an isolated environment whose
setuptools it downloads, which fails on a machine without an index; without one it uses the
environment's own setuptools (Debian's python3-setuptools, or the one every venv has).

Horovod's build variables are read as Horovod reads them. What hvd can honour it honours; a
request it cannot (GPU operations, MXNet, a build without its own transports)
fails the install at once, saying why, as Horovod's does for a framework it cannot find.
TensorFlow's kernels (horovod/tensorflow/mpi_lib) are built when this Python imports
tensorflow, against that TensorFlow; HOROVOD_WITH_TENSORFLOW=1 requires it,
HOROVOD_WITHOUT_TENSORFLOW=1 leaves them out."""
import os
import re
import shutil
import subprocess
import sys

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))


def _flag(name):
    """Horovod's reading of a build variable: set and not 0/false/no/off."""
    v = os.environ.get(name, "")
    return v != "" and v.strip().lower() not in ("0", "false", "no", "off")


def _refuse(why):
    sys.exit(f"error: hvd cannot be installed as asked: {why}")


def check_build_variables():
    """The build options the variables ask for: {'pytorch': bool, 'tensorflow': 'ON', 'OFF'
    or 'AUTO', 'debug': bool}."""
    if _flag("HOROVOD_WITH_MXNET"):
        _refuse("HOROVOD_WITH_MXNET=1: hvd supports PyTorch and TensorFlow, not MXNet (unset "
                "the variable, or use Horovod for that framework)")
    for name in ("HOROVOD_GPU_OPERATIONS", "HOROVOD_GPU_ALLREDUCE", "HOROVOD_GPU_ALLGATHER",
                 "HOROVOD_GPU_BROADCAST", "HOROVOD_GPU_ALLTOALL", "HOROVOD_GPU_REDUCESCATTER",
                 "HOROVOD_GPU"):
        v = os.environ.get(name, "")
        if v:
            _refuse(f"{name}={v}: hvd runs its collectives on the CPU (shared memory and TCP); "
                    "it has no GPU operations (NCCL, DDL, ROCm). Unset the variable.")
    cpu = os.environ.get("HOROVOD_CPU_OPERATIONS", "")
    if cpu and cpu.upper() != "GLOO":
        _refuse(f"HOROVOD_CPU_OPERATIONS={cpu}: hvd's CPU operations are its own, which Horovod "
                "calls GLOO; MPI and CCL operations are not available")
    if _flag("HOROVOD_WITHOUT_GLOO"):
        _refuse("HOROVOD_WITHOUT_GLOO=1: hvd's own controller and transports take Gloo's place "
                "and cannot be left out (horovodrun --mpi runs jobs under mpirun either way)")
    if _flag("HOROVOD_WITH_MPI") and not shutil.which("mpirun"):
        _refuse("HOROVOD_WITH_MPI=1 but no mpirun is on PATH: horovodrun --mpi hands jobs to "
                "the MPI installation's mpirun (install Open MPI or MPICH, or unset the variable)")
    if _flag("HOROVOD_WITH_PYTORCH") and _flag("HOROVOD_WITHOUT_PYTORCH"):
        _refuse("HOROVOD_WITH_PYTORCH and HOROVOD_WITHOUT_PYTORCH are both set")
    pytorch = not _flag("HOROVOD_WITHOUT_PYTORCH")
    if _flag("HOROVOD_WITH_PYTORCH"):
        try:
            import torch  # noqa: F401
        except ImportError as e:
            _refuse(f"HOROVOD_WITH_PYTORCH=1 but this Python cannot import torch ({e}); on "
                    "Debian, install python3-torch and make the venv with "
                    "--system-site-packages")
    if _flag("HOROVOD_WITH_TENSORFLOW") and _flag("HOROVOD_WITHOUT_TENSORFLOW"):
        _refuse("HOROVOD_WITH_TENSORFLOW and HOROVOD_WITHOUT_TENSORFLOW are both set")
    # TensorFlow's kernels are built when this Python imports tensorflow (AUTO), against it
    tensorflow = "OFF" if _flag("HOROVOD_WITHOUT_TENSORFLOW") else "AUTO"
    if _flag("HOROVOD_WITH_TENSORFLOW"):
        try:
            import tensorflow  # noqa: F401
        except ImportError as e:
            _refuse(f"HOROVOD_WITH_TENSORFLOW=1 but this Python cannot import tensorflow ({e}); "
                    "install it first (pip install tensorflow-cpu)")
        tensorflow = "ON"
    return {"pytorch": pytorch, "tensorflow": tensorflow, "debug": _flag("HOROVOD_DEBUG")}


OPTIONS = check_build_variables()


class CMakeBuild(build_ext):
    """Configure and build the project with CMake (tests left out), install it into a staging
    folder laid out as the package is, and take the package's compiled parts from there."""

    def run(self):
        build = os.path.abspath(os.path.join(self.build_temp, "cmake"))
        stage = os.path.abspath(os.path.join(self.build_temp, "stage"))
        shutil.rmtree(stage, ignore_errors=True)
        args = ["cmake", "-S", HERE, "-B", build,
                f"-DCMAKE_BUILD_TYPE={'Debug' if OPTIONS['debug'] else 'Release'}",
                "-DHVD_BUILD_TESTS=OFF", "-DHVD_BUILD_TOOLS=OFF", "-DHVD_BUILD_EXAMPLES=OFF",
                f"-DPython3_EXECUTABLE={sys.executable}",
                f"-DHVD_WITH_PYTORCH={'ON' if OPTIONS['pytorch'] else 'OFF'}",
                # TensorFlow: this Python's only (its kernels are tied to its release)
                f"-DHVD_WITH_TENSORFLOW={OPTIONS['tensorflow']}",
                f"-DHVD_TF_PYTHON={sys.executable}",
                f"-DCMAKE_INSTALL_PREFIX={stage}",
                # the package and its libraries side by side: the extension's RPATH is then
                # $ORIGIN/lib, and horovodrun links libhvd statically
                "-DHVD_PYTHON_INSTALL_DIR=pkg",
                "-DCMAKE_INSTALL_LIBDIR=pkg/horovod/lib",
                "-DCMAKE_INSTALL_BINDIR=bin"]
        arch = os.environ.get("HOROVOD_BUILD_ARCH_FLAGS")
        if arch:
            args.append(f"-DCMAKE_C_FLAGS={arch}")
        jobs = re.search(r"-j\s*(\d+)", os.environ.get("MAKEFLAGS", ""))
        jobs = jobs.group(1) if jobs else str(os.cpu_count() or 1)
        for cmd in (args, ["cmake", "--build", build, "-j", jobs],
                    ["cmake", "--install", build, "--prefix", stage]):
            subprocess.run(cmd, check=True)
        pkg = os.path.join(stage, "pkg", "horovod")
        ext = [f for f in os.listdir(pkg) if f.startswith("_hvd") and f.endswith(".so")]
        if len(ext) != 1:
            sys.exit(f"error: the CMake build made no horovod extension ({ext}): are this "
                     f"Python's headers installed (python3-dev for {sys.executable})?")
        target = self.get_ext_fullpath("horovod._hvd")
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(pkg, ext[0]), target)
        # libhvd under its soname only (a wheel holds no links: every name would be a copy)
        lib_out = os.path.join(os.path.dirname(target), "lib")
        os.makedirs(lib_out, exist_ok=True)
        soname = _soname(os.path.join(pkg, "lib", "libhvd.so"))
        shutil.copyfile(os.path.join(pkg, "lib", soname), os.path.join(lib_out, soname))
        # horovod.tensorflow's kernels, when TensorFlow was there to build them against
        tf_dir = os.path.join(pkg, "tensorflow")
        tf_libs = [f for f in os.listdir(tf_dir) if f.startswith("mpi_lib") and
                   f.endswith(".so")] if os.path.isdir(tf_dir) else []
        if OPTIONS["tensorflow"] == "ON" and not tf_libs:
            sys.exit("error: HOROVOD_WITH_TENSORFLOW=1 but the CMake build made no TensorFlow "
                     "kernels (see its output above)")
        for f in tf_libs:
            out = os.path.join(os.path.dirname(target), "tensorflow")
            os.makedirs(out, exist_ok=True)
            shutil.copyfile(os.path.join(tf_dir, f), os.path.join(out, f))
        os.makedirs(SCRIPTS, exist_ok=True)
        for name in ("horovodrun", "horovodrun-slurm-hosts"):
            shutil.copyfile(os.path.join(stage, "bin", name), os.path.join(SCRIPTS, name))
            os.chmod(os.path.join(SCRIPTS, name), 0o755)


def _soname(path):
    """The SONAME libhvd.so links to (libhvd.so -> libhvd.so.0 -> libhvd.so.0.1.0)."""
    return os.path.basename(os.readlink(path)) if os.path.islink(path) else os.path.basename(path)


# setuptools' own build folder: not build/, the CMake build tree the README's commands use
BUILD_BASE = "build-pip"
# horovodrun and the Slurm discovery script, put here by the CMake build (build_ext runs
# before install_data). They are data for the environment's bin/, not setuptools "scripts",
# which must be Python or shell text: horovodrun is a program (libhvd linked in).
COMMANDS_REL = [os.path.join(BUILD_BASE, "commands", n)
                for n in ("horovodrun", "horovodrun-slurm-hosts")]
SCRIPTS = os.path.join(HERE, BUILD_BASE, "commands")


def _version():
    with open(os.path.join(HERE, "python", "horovod", "__init__.py")) as f:
        for line in f:
            if line.startswith("__version__"):
                return line.split('"')[1]
    raise RuntimeError("no __version__ in python/horovod/__init__.py")


packages = find_packages(where="python",
                         exclude=[] if OPTIONS["pytorch"] else ["horovod.torch", "horovod.torch.*"])

setup(
    name="horovod",
    version=_version(),
    description="Horovod's API on hvd, a distributed-training runtime written in C",
    long_description=open(os.path.join(HERE, "README.md")).read().split("\n## ")[0],
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.9",
    # as Horovod's: broadcast_object and the elastic state pickle with cloudpickle. torch is
    # not required, as Horovod does not require it (pip would take a CUDA build of the newest
    # torch where none is installed): install the torch you train with first, or beside hvd
    # (pip install torch==2.13.0 .)
    install_requires=["cloudpickle"],
    package_dir={"": "python"},
    packages=packages,
    ext_modules=[Extension("horovod._hvd", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    data_files=[("bin", COMMANDS_REL)],
    options={"build": {"build_base": BUILD_BASE}},
    zip_safe=False,
)
