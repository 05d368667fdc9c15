"""Kernels whose tiles outlive their last use in Python, for trngen's allocation tests."""

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def held_tiles(x):
    """``2 * x + 1`` a block of 1024 columns at a time; every tile stays in a Python list
    (two 4 KiB tiles a partition per block, far more than SBUF holds for 48 blocks) but is
    dead after the block's store."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    kept = []
    for j in nl.affine_range(x.shape[1] // 1024):
        t = nl.load(x[:, j * 1024:(j + 1) * 1024])
        y = nl.add(nl.multiply(t, 2.0), 1.0)
        nl.store(out[:, j * 1024:(j + 1) * 1024], y)
        kept += [t, y]
    return out


@nki.jit
def hoisted_blocks(a, b):
    """``a + b`` through two tiles of 80 KiB a partition a block, each made before Python
    drops the previous block's (as the matmul tutorial's hoisted loads are made): two are
    live at a time, though Python holds three."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    width = 40960
    for j in nl.affine_range(a.shape[1] // width):
        ta = nl.ndarray((128, width), dtype=a.dtype, buffer=nl.sbuf)
        tb = nl.ndarray((128, width), dtype=a.dtype, buffer=nl.sbuf)
        ta[...] = nl.load(a[:, j * width:(j + 1) * width])
        tb[...] = nl.load(b[:, j * width:(j + 1) * width])
        ta[...] = nl.add(ta, tb)
        nl.store(out[:, j * width:(j + 1) * width], ta)
    return out
