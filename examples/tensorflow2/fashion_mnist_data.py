"""Debian's Fashion-MNIST (package dataset-fashion-mnist: gzip'd IDX files) as numpy arrays,
for the TensorFlow examples: nothing is downloaded."""
import gzip
import os
import struct

import numpy as np

DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"


def _read_idx(path, magic):
    with gzip.open(path, "rb") as f:
        data = f.read()
    got, = struct.unpack(">I", data[:4])
    if got != magic:
        raise ValueError(f"{path}: not an IDX file of the expected kind")
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(data_dir=DEFAULT_DIR, split="train", limit=0):
    """(images float32 [n, 28, 28, 1] in [0, 1], labels int64 [n])."""
    prefix = "train" if split == "train" else "t10k"
    images = _read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"), 0x803)
    labels = _read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"), 0x801)
    if limit:
        images, labels = images[:limit], labels[:limit]
    return (images[..., np.newaxis].astype(np.float32) / 255.0, labels.astype(np.int64))
