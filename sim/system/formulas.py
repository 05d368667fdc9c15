"""The per-level formulas of the system model, as small pure functions of plain numbers.

Every function takes numbers in SI base units (Hz, bytes, bytes/s, seconds) and works
element-wise on numpy arrays as well as on Python scalars, so that the exploration sweeps
evaluate millions of design points with the same arithmetic as the system model
(:mod:`sim.system.model`), which wraps the results in pint quantities.

Tensor-engine throughput counts a multiply-accumulate as two operations:
``peak = rows * cols * 2 * clock * rate`` per core, where ``rate`` is the multiply-accumulates
per processing element per cycle for the input format (2 for double-rate FP8, 0.25 for FP32).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "buffer_bytes",
    "engine_flops",
    "engine_ops_per_cycle",
    "link_efficiency",
    "logical_cores",
    "matmul_cycles",
    "matmul_flops",
    "multiply_interval",
    "peak_flops",
    "scaled",
    "sparse_flops",
    "sustained_flops",
]


def peak_flops(rows, cols, clock_hz, rate=1.0, cores=1):
    """Peak tensor-engine operations per second: ``rows * cols * 2 * clock * rate * cores``."""
    return 2.0 * rows * cols * clock_hz * rate * cores


def sparse_flops(rows, cols, clock_hz, speedup, cores=1):
    """Peak structured-sparse throughput: ``speedup`` times the dense rate-1 (BF16) peak."""
    return peak_flops(rows, cols, clock_hz, speedup, cores)


def engine_ops_per_cycle(lanes, ops_per_lane_cycle, cores=1):
    """FP32 operations per cycle of a lane-parallel engine (vector, scalar)."""
    return lanes * ops_per_lane_cycle * cores


def engine_flops(lanes, clock_hz, ops_per_lane_cycle, cores=1):
    """FP32 operations per second of a lane-parallel engine (vector, scalar)."""
    return engine_ops_per_cycle(lanes, ops_per_lane_cycle, cores) * clock_hz


def buffer_bytes(partitions, partition_size, cores=1):
    """Capacity of a partitioned on-core buffer (SBUF, PSUM), times ``cores``."""
    return partitions * partition_size * cores


def scaled(per_member, count):
    """A figure of one member times the number of members (memory, bandwidth, compute)."""
    return per_member * count


def logical_cores(cores, lnc):
    """Logical NeuronCores when ``lnc`` physical cores are fused into one."""
    return np.floor_divide(cores, lnc)


def multiply_interval(n, interval_min):
    """Cycles between back-to-back MultiplyMoving issues of moving free size ``n``.

    The documented behaviour of the tensor engine: a multiply issues every
    ``max(n, interval_min)`` cycles, the LoadStationary of the next tile hidden behind it.
    """
    return np.maximum(n, interval_min)


def matmul_cycles(m, k, n, rows, cols, rate, moving_max, interval_min):
    """Tensor-engine cycles of an ``m x k`` by ``k x n`` matmul tiled onto one array.

    The contraction ``k`` is cut into passes of ``rows * max(rate, 1)`` (double-rate formats
    contract two indices per PE row), ``m`` into tiles of ``cols`` and ``n`` into moving tiles
    of at most ``moving_max``. Each multiply issues every :func:`multiply_interval` cycles,
    divided by ``rate`` where the format runs below one MAC per PE per cycle (FP32 at a
    quarter). The first LoadStationary (``rows`` cycles) has nothing to hide behind.
    """
    rate = np.asarray(rate, dtype=float)
    k_pass = rows * np.maximum(rate, 1.0)
    k_tiles = np.ceil(k / k_pass)
    m_tiles = np.ceil(m / cols)
    full, rest = np.divmod(n, moving_max)
    n_cycles = (full * multiply_interval(moving_max, interval_min)
                + np.where(rest > 0, multiply_interval(rest, interval_min), 0))
    return k_tiles * m_tiles * n_cycles / np.minimum(rate, 1.0) + rows


def matmul_flops(m, k, n):
    """Operations of an ``m x k`` by ``k x n`` matmul (a multiply-accumulate counts two)."""
    return 2.0 * m * k * n


def sustained_flops(m, k, n, cycles, clock_hz, cores=1):
    """Throughput of ``cores`` tensor engines each running the matmul in ``cycles`` cycles."""
    return matmul_flops(m, k, n) * clock_hz / cycles * cores


def link_efficiency(payload_bits, overhead_bits):
    """Fraction of a link's raw bandwidth carrying payload, for packets of ``payload_bits``
    framed with ``overhead_bits`` (header, CRC, padding to whole flits)."""
    return payload_bits / (payload_bits + overhead_bits)
