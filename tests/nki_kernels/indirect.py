"""Kernels that read and write rows of HBM tensors named by a tile of indices (indirect
DMA), for trngen's tests."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np


@nki.jit
def gather(table, idx):
    """``table[idx]``: ``idx`` one-dimensional in HBM, loaded as a [P, 1] tile by a
    two-dimensional index expression, then the rows it names loaded by an indirect DMA."""
    n = idx.shape[0]
    out = nl.ndarray((n, table.shape[1]), dtype=table.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(n)[:, None]
    i_f = nl.arange(table.shape[1])[None, :]
    rows = nl.load(idx[i_p])
    nl.store(out, nl.load(table[rows[i_p, 0], i_f]))
    return out


@nki.jit
def strided_rows(table, step, skip):
    """Rows ``0, step, 2 step, ...`` (one a partition, 64 of them, made by iota on GpSimd)
    copied from ``table``, rows past its end left as the tile's -1 (``skip``) or an error;
    and the same rows written back at the same places of a tensor of ones, added to."""
    n, m = table.shape
    got = nl.ndarray((64, m), dtype=table.dtype, buffer=nl.shared_hbm)
    back = nl.ndarray((n, m), dtype=table.dtype, buffer=nl.shared_hbm)
    mode = nisa.oob_mode.skip if skip else nisa.oob_mode.error
    idx = nisa.iota(step * nl.arange(64)[:, None], dtype=np.int32)
    tile = nisa.memset(shape=(64, m), value=-1, dtype=table.dtype)
    nisa.dma_copy(dst=tile, src=table[idx, 0:m], oob_mode=mode)
    nl.store(got, tile)
    nl.store(back, nl.full((n, m), 1.0, dtype=table.dtype))
    nisa.dma_copy(dst=back[idx, 0:m], src=tile, oob_mode=mode, dst_rmw_op=np.add)
    return got, back


@nki.jit
def scatter_add(table, idx, updates):
    """``table`` with each row of ``updates`` added into the row ``idx`` names (a row named
    twice takes both), by ``nl.atomic_rmw``."""
    out = nl.ndarray(table.shape, dtype=table.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(table))
    rows = nl.load(idx)
    i_f = nl.arange(table.shape[1])[None, :]
    nl.atomic_rmw(out[rows, i_f], value=nl.load(updates), op=np.add)
    return out


@nki.jit
def batched_rows(table, idx, n):
    """``table[b, idx]`` for every batch ``b`` (an integer subscript before the tile of
    indices), only the first ``n`` of the 128 rows, by a mask on the partition axis that
    cuts the indices too (the rest of ``idx`` may name no row)."""
    batches, _, cols = table.shape
    out = nl.ndarray((batches, 128, cols), dtype=table.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(cols)[None, :]
    rows = nl.load(idx)
    for b in nl.affine_range(batches):
        t = nl.load(table[b, rows, i_f], mask=(i_p < n))
        nl.store(out[b, i_p, i_f], t, mask=(i_p < n))
    return out
