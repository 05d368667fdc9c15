"""Launches of the test kernels at shapes of the core RTL's simulation scale (16 partitions,
an 8 x 8 array): `gen nki tests/nki_kernels/on_core_rtl.py --spec trn2 --rtl` runs each on
the core simulator and co-simulates it on the core RTL, every byte compared; among them one
kernel longer than a sequencer's ring of the simulated core (``steps``)."""

import ml_dtypes
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np
from dynamic_v2 import blocks_doubled
from elementwise import bias_activation, row_stats, transpose_tile
from indexing import swap_blocks, window_stats
from indirect import gather, scatter_add
from isa_more import (
    bounds,
    columns_at,
    draws,
    partition_broadcast,
    ranges,
    scan,
    scan_reversed,
    stats,
    stt,
    to_int8,
    top8,
    transposes,
)
from matmul_v1 import matmul_plain


@nki.jit
def largest(x):
    """Each partition's 8 largest elements, largest first (nisa.max8), from bf16."""
    out = nl.ndarray((x.shape[0], 8), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nisa.max8(src=nl.load(x, dtype=nl.bfloat16)))
    return out


@nki.jit
def steps(x):
    """x + 1 + 1 + ... in 300 vector instructions: more than a sequencer's ring of the
    simulated core holds (256), fed by the host as the kernel runs."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    for _ in range(300):
        t = nl.add(t, 1.0)
    nl.store(out, t)
    return out


if __name__ == "__main__":
    rng = np.random.default_rng(0)

    def normal(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    row_stats(normal(16, 24))
    bias_activation(normal(16, 24), normal(16, 1))
    transpose_tile(normal(8, 8))
    swap_blocks(normal(16, 12), 3, 4)
    window_stats(normal(16, 4, 6), 2)
    stt(normal(16, 12), normal(16, 1), normal(16, 12))
    scan(normal(16, 12), normal(16, 12), normal(16, 1))
    scan_reversed(normal(16, 12), normal(16, 12))
    partition_broadcast(normal(1, 12), normal(8, 12))
    stats(normal(16, 24))
    matmul_plain(normal(8, 8), normal(8, 16))
    to_int8(normal(16, 12) * 100)
    transposes(normal(8, 8))
    steps(normal(16, 8))
    columns_at(normal(16, 12), np.array([[3, 0, 11, 5]], dtype=np.int32))
    ranges(normal(16, 24), np.arange(-8.0, 8.0, dtype=np.float32).reshape(16, 1),
           np.arange(20.0, 4.0, -1.0, dtype=np.float32).reshape(16, 1), -3)
    largest(normal(16, 40))
    top8(normal(16, 24), -1.0)
    bounds(np.array([[3, 3, 0, 0, 5, 5, 5, 1, 0, 2, 2, 7]], dtype=np.float32))
    draws(normal(16, 12), np.linspace(-0.2, 1.2, 16, dtype=np.float32).reshape(16, 1))
    gather(normal(40, 16), np.array([7, 0, 39, 3, 3, 12, 25, 1, 9, 30, 2, 17, 8, 8, 21, 5],
                                    dtype=np.int32))
    rows = np.array([[3], [0], [3], [15], [7], [3], [1], [2], [9], [9], [4], [5], [6], [11],
                     [3], [12]], dtype=np.int32)
    scatter_add(normal(16, 8), rows, normal(16, 8))
    scatter_add(normal(16, 8).astype(ml_dtypes.bfloat16), rows,
                normal(16, 8).astype(ml_dtypes.bfloat16))
    blocks_doubled(normal(4 * 16, 8), np.array([[3]], dtype=np.int32), p=16)
