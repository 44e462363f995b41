"""The cloudpickle the function and the results travel with: pyspark's own copy where pyspark
is importable (the driver and every executor have the same one, as Spark itself needs), so
that a different cloudpickle installed beside an executor's Python cannot misread them;
the cloudpickle package otherwise."""
try:
    from pyspark import cloudpickle  # noqa: F401
except ImportError:  # pragma: no cover (a rank whose Python has no pyspark)
    import cloudpickle  # noqa: F401
