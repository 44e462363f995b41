"""One torch.distributed world on the "hvd" backend for the whole session of each rank."""
import datetime

import pytest
import torch.distributed as dist

import horovod.torch  # noqa: F401  (registers the backend)


@pytest.fixture(scope="session", autouse=True)
def world():
    dist.init_process_group("hvd", timeout=datetime.timedelta(seconds=60))
    assert dist.get_backend() == "hvd"  # the world every test of the session runs in
    yield
    dist.destroy_process_group()
