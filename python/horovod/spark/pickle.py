"""The cloudpickle the function and the results travel with: pyspark's own copy where pyspark
is importable (the driver and every executor have the same one, as Spark itself needs), so
that a different cloudpickle installed beside an executor's Python cannot misread them; the
cloudpickle package otherwise.

    with cloudpickle_module() as cp:
        obj = cp.loads(data)

In a rank, importing pyspark would run its package's __init__ (py4j, numpy, the RDD API):
0.3 s of CPU in every rank, on the path to its first allreduce, for one module of plain
Python. So where pyspark is not loaded yet, the block runs with a bare stand-in for the
pyspark package (its path only), which lets `pyspark.cloudpickle` and the modules a pickle
names under it load alone, and the stand-in goes when the block ends: a later `import pyspark`
in the rank's own code runs the real package (and finds pyspark.cloudpickle loaded)."""
import contextlib
import importlib
import importlib.util
import sys
import types


@contextlib.contextmanager
def cloudpickle_module():
    if "pyspark" in sys.modules:
        from pyspark import cloudpickle
        yield cloudpickle
        return
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        import cloudpickle  # (a rank whose Python has no pyspark)
        yield cloudpickle
        return
    stub = types.ModuleType("pyspark")
    stub.__path__ = list(spec.submodule_search_locations)
    sys.modules["pyspark"] = stub
    try:
        yield importlib.import_module("pyspark.cloudpickle")
    finally:
        if sys.modules.get("pyspark") is stub:
            del sys.modules["pyspark"]
