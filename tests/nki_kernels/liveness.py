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


@nki.jit
def held_blocks(x):
    """``sum_j (j + 1) * x_j`` over 64 blocks ``x_j`` of 1024 columns, every block loaded
    first and all of them read after: 256 KiB a partition live at once, more than SBUF
    holds, so the later loads spill earlier blocks to HBM and back. Each block is scaled on
    the scalar engine and added on the vector engine."""
    out = nl.ndarray((x.shape[0], 1024), dtype=x.dtype, buffer=nl.shared_hbm)
    blocks = []
    for j in nl.sequential_range(x.shape[1] // 1024):
        blocks.append(nl.load(x[:, j * 1024:(j + 1) * 1024]))
    acc = nl.multiply(blocks[0], 1.0)
    for j in nl.sequential_range(1, len(blocks)):
        acc = nl.add(acc, nl.multiply(blocks[j], float(j + 1)))
    nl.store(out, acc)
    return out


@nki.jit
def held_halves(x):
    """``x_0 - x_j`` for 100 bf16 blocks ``x_j`` of 1023 columns (2,046 bytes a partition,
    not a multiple of four), ``x_0`` kept to the end: spills of two-byte words."""
    out = nl.ndarray((x.shape[0], 1023), dtype=x.dtype, buffer=nl.shared_hbm)
    blocks = []
    for j in nl.sequential_range(x.shape[1] // 1023):
        blocks.append(nl.load(x[:, j * 1023:(j + 1) * 1023]))
    acc = nl.copy(blocks[0])
    for j in nl.sequential_range(1, len(blocks)):
        acc = nl.subtract(acc, blocks[j])
    nl.store(out, nl.subtract(acc, blocks[0]))
    return out
