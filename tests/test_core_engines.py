# amaranth: UnusedElaboratable=no
# (Amaranth's documented lint option: the elaboratables made here for their signatures are
# emitted apart, as modules of their own, and never elaborated where they are made.)
"""Parts of the core's engines (:mod:`hdl.core.engines`) against numpy."""

import numpy as np
import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from conftest import comb_outputs
from hdl.core.engines import (
    IOTA_BITS,
    OPERAND_DTYPES,
    EngineSlice,
    IotaLane,
    nearest_integer,
    saturated,
    widen_operand,
)
from hdl.core.isa import DTYPES
from hdl.core.tensor import TensorSlice
from hdl.numerics.dtypes import ML_DTYPES


def test_iota_values_convert_to_fp32_as_numpy_does():
    """GpSimd's Iota values (``IOTA_BITS`` signed bits) to fp32, round to nearest even:
    zero, exact small values, ties either way above 2**24, and the range's ends."""
    rng = np.random.default_rng(5)
    top = 2 ** (IOTA_BITS - 1)
    values = [0, 1, -1, 2**24 + 1, 2**24 + 3, -(2**24 + 1), 2**25 + 2, 2**25 + 6,
              top - 1, -top + 1, -(2**31), 2**31 - 1]
    values += [int(v) for v in rng.integers(-top + 1, top, 400)]
    values += [int(v) for v in rng.integers(-2**26, 2**26, 200)]
    dut = IotaLane()
    got = comb_outputs(dut, dut.value, dut.y, values)
    want = np.array(values, dtype=np.int64).astype(np.float32).view(np.uint32)
    assert got == [int(w) for w in want]



def _to_int(values: np.ndarray, width: int, is_signed: bool) -> list[int]:
    """The codes an integer destination of ``width`` bits takes for the fp32 ``values``
    (:func:`nearest_integer`, :func:`saturated`), simulated."""
    m = Module()
    x, y = Signal(32), Signal(width)
    m.d.comb += y.eq(saturated(nearest_integer(m, x), width, is_signed))
    got = []

    async def bench(ctx):
        for v in values.view(np.uint32):
            ctx.set(x, int(v))
            got.append(ctx.get(y))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    return got


@pytest.mark.parametrize(("width", "is_signed", "scale"), [(8, True, 60), (8, False, 150),
                                                          (32, True, 2e9), (32, False, 4e9)])
def test_integer_results_round_as_numpy_does(width, is_signed, scale):
    """fp32 results written to int8, uint8, int32 and uint32 (:func:`nearest_integer`,
    :func:`saturated`) against numpy's nearest integer, ties to even, saturated, NaN 0: ties
    either way, the saturation's edges, infinities, NaNs, subnormals, and random values and
    bit patterns."""
    rng = np.random.default_rng(3)
    special = np.array([0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 0.49999997, 0.50000006, 126.5,
                        127.4, 127.5, -128.5, -128.49, -129.0, 255.9, 256.0, -255.5, 1e30,
                        -1e30, np.inf, -np.inf, np.nan, -np.nan, 1e-40, -7.75, 2.0**23 + 0.5,
                        2.0**24 + 2, 2.0**31, -2.0**31, 2.0**31 - 128, 2.0**32, 2.0**32 - 256,
                        -1.0], np.float32)
    values = np.concatenate([special, (rng.standard_normal(1500) * scale).astype(np.float32),
                             rng.integers(0, 2**32, 1500, dtype=np.uint64)
                             .astype(np.uint32).view(np.float32)])
    info = np.iinfo(f"{'' if is_signed else 'u'}int{width}")
    with np.errstate(invalid="ignore"):
        near = np.nan_to_num(np.rint(values.astype(np.float64)))
    want = np.clip(near, info.min, info.max).astype(np.int64) & ((1 << width) - 1)
    assert _to_int(values, width, is_signed) == [int(w) for w in want]


def _operand_reference(words: np.ndarray, dtype: str) -> np.ndarray:
    """fp32 bits of scalar-operand words of ``dtype`` by numpy and ml_dtypes: the element in
    the low bits (tf32: the word with its low 13 bits cleared), every NaN 0x7FC00000, the
    integers by value, to nearest even."""
    if dtype == "fp32":
        return words
    if dtype in ("int32", "uint32"):
        return words.view(np.dtype(dtype)).astype(np.float32).view(np.uint32)
    if dtype == "uint8":
        return (words & 0xFF).astype(np.float32).view(np.uint32)
    if dtype == "int8":
        return (words & 0xFF).astype(np.uint8).view(np.int8).astype(np.float32).view(np.uint32)
    if dtype == "tf32":
        values = (words & np.uint32(0xFFFFE000)).view(np.float32)
    else:
        bits = np.dtype(ML_DTYPES[dtype]).itemsize * 8
        narrow = (words & np.uint32((1 << bits) - 1)).astype(f"<u{bits // 8}")
        values = narrow.view(ML_DTYPES[dtype]).astype(np.float32)
    return np.where(np.isnan(values), np.uint32(0x7FC00000), values.view(np.uint32))


def test_scalar_operands_widen_to_fp32_as_numpy_does():
    """A per-partition scalar operand of every type the engines read, widened to fp32:
    every pattern of the 8-bit types and random ones of the others, with random bits above
    the element (the next elements of its word) and, for tf32, below its code."""
    rng = np.random.default_rng(3)
    m = Module()
    word, dtype = Signal(32), Signal(4)
    y = Signal(32)
    m.d.comb += y.eq(widen_operand(m, word, dtype))
    noise = rng.integers(0, 2**32, 256, dtype=np.uint64).astype(np.uint32)
    cases = []
    for name in OPERAND_DTYPES:
        if name in ("int8", "uint8", "fp8_e4m3", "fp8_e5m2", "fp8_e4m3fn"):
            words = (noise & np.uint32(0xFFFFFF00)) | np.arange(256, dtype=np.uint32)
        else:
            words = rng.integers(0, 2**32, 200, dtype=np.uint64).astype(np.uint32)
            words[:4] = [0x7F800000, 0xFF801234, 0x7FC00000, 0x00000001]  # inf, NaNs, tiny
            if name in ("bf16", "fp16"):
                words[:4] = [0xABCD7F80, 0x1234FFC1, 0x00007C00, 0xFFFF7E01]
        cases += [(name, int(w)) for w in words]
    got = []

    async def bench(ctx):
        for name, w in cases:
            ctx.set(word, w)
            ctx.set(dtype, DTYPES[name][0])
            got.append(ctx.get(y))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    for name in OPERAND_DTYPES:
        words = np.array([w for n, w in cases if n == name], dtype=np.uint32)
        mine = [g for (n, _), g in zip(cases, got, strict=True) if n == name]
        assert mine == [int(v) for v in _operand_reference(words, name)], name


def _run_comb(dut, cases, outputs):
    """Each case (port -> value) set on the combinational ``dut``; the ``outputs`` read."""
    got = []

    async def bench(ctx):
        for case in cases:
            for port, value in case.items():
                ctx.set(getattr(dut, port), value)
            got.append({name: ctx.get(getattr(dut, name)) for name in outputs})

    sim = Simulator(dut)
    sim.add_testbench(bench)
    sim.run()
    return got


def test_partition_slices_take_their_partitions_words():
    """One partition's slice of the vector engine and of the tensor engine at full scale
    (128 partitions, tiles starting at a multiple of 32): the word of partition
    ``(index + first) % 128`` on the read side, of ``(index - first) % 128`` on the vector
    engine's write side (the tensor engine writes array column ``index`` into partition
    ``index``), shifted by its byte, and whether the partition is in the tile; a double-rate
    array's tensor slice also the byte of the second read's word of the same partition
    (a double row's pair 1), at its own byte; against the rotation written out on Python
    integers."""
    n, rng = 128, np.random.default_rng(7)
    vector, tensor = EngineSlice(n, "vector"), TensorSlice(n, pair=True)
    cases, want = [], []
    for _ in range(60):
        index, a_first, d_first = (int(v) for v in rng.integers(0, n, 3))
        a_first, d_first = a_first // 32 * 32, d_first // 32 * 32
        count = int(rng.integers(1, n + 1))
        shift, w_shift, s_shift = (int(s) for s in rng.integers(0, 4, 3))
        words = [int(w) for w in rng.integers(0, 2**32, n, dtype=np.uint64)]
        seconds = [int(w) for w in rng.integers(0, 2**32, n, dtype=np.uint64)]
        s_rows = sum(seconds[(index + k * 32) % n] << (32 * k) for k in range(n // 32))
        ys = [int(w) for w in rng.integers(0, 2**32, n, dtype=np.uint64)]
        rows = sum(words[(index + k * 32) % n] << (32 * k) for k in range(n // 32))
        y_rows = sum(ys[(index - k * 32) % n] << (32 * k) for k in range(n // 32))
        cases.append({"index": index, "a_rows": rows, "y_rows": y_rows,
                      "r_rows": rows, "a_first": a_first, "src_first": a_first,
                      "d_first": d_first, "d_count": count, "a_shift": shift,
                      "shift": shift, "w_shift": w_shift, "mask": 0xFFFF,
                      "s_rows": s_rows, "s_shift": s_shift})
        element = words[(index + a_first) % n] >> (8 * shift)
        result = ys[(index - d_first) % n]
        want.append({"a": element, "element": element & 0xFFFF,
                     "w_data": (result << (8 * w_shift)) & 0xFFFFFFFF,
                     "w_part": int(d_first <= index < d_first + count),
                     "pair1": (seconds[(index + a_first) % n] >> (8 * s_shift)) & 0xFF})

    def ports(dut, case):
        return {k: v for k, v in case.items() if k in dut.signature.members}

    got_v = _run_comb(vector, [ports(vector, c) for c in cases], ("a", "w_data", "w_part"))
    got_t = _run_comb(tensor, [ports(tensor, c) for c in cases],
                      ("element", "w_part", "pair1"))
    assert got_v == [{k: w[k] for k in ("a", "w_data", "w_part")} for w in want]
    assert got_t == [{k: w[k] for k in ("element", "w_part", "pair1")} for w in want]


def test_the_core_takes_the_modules_of_units_with_its_engines_parameters():
    """The core's engines take the chip's vector, scalar and tensor units' modules by name
    where the spec maps those units (:mod:`hdl.params`) onto their engines' parameters: all
    three at full scale on trn2; at simulation scale not the vector unit (4 lanes, against
    the core's 16 partitions); none whose parameters differ."""
    import dataclasses

    from hdl.core.core import NeuronCore
    from hdl.params import core_params, scalar_params, tensor_params, vector_params
    from specs.loader import load

    spec = load("trn2")
    for scale, taken in (("full", ("vector", "scalar", "tensor")), ("sim", ("scalar", "tensor"))):
        units = (("link", None), ("vector", vector_params(spec, scale)),
                 ("scalar", scalar_params(spec, scale)), ("tensor", tensor_params(spec, scale)))
        core = NeuronCore(core_params(spec, scale))
        assert core.taken_units(units) == taken
        other = [(name, dataclasses.replace(p, rng="xorwow") if name == "vector" else p)
                 for name, p in units if name != "tensor"]
        assert core.taken_units(tuple(other)) == tuple(n for n in taken if n == "scalar")
