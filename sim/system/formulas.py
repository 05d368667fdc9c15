"""The per-level formulas of the system model, as small pure functions of plain numbers.

Every function takes numbers in SI base units (Hz, bytes, bytes/s, seconds) and works
element-wise on numpy arrays as well as on Python scalars, so that the exploration sweeps
evaluate millions of design points with the same arithmetic as the system model
(:mod:`sim.system.model`), which wraps the results in pint quantities.

Tensor-engine throughput counts a multiply-accumulate as two operations:
``peak = rows * cols * 2 * clock * rate`` per core, where ``rate`` is the multiply-accumulates
per processing element per cycle for the input format (2 for double-rate FP8, 0.25 for FP32).
A matmul's tensor-engine cycles are :func:`sim.golden.systolic_cycles.matmul_cycles`, the
closed form of the systolic array's RTL-checked cycle model, re-exported here as
:func:`matmul_cycles`.
"""

from __future__ import annotations

import numpy as np

from sim.golden.systolic_cycles import matmul_cycles

__all__ = [
    "buffer_bytes",
    "engine_flops",
    "engine_ops_per_cycle",
    "link_efficiency",
    "logical_cores",
    "matmul_cycles",
    "matmul_flops",
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
