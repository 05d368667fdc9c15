"""Cocotb testbenches of the numerics units on their emitted Verilog, and pytest entry points.

Units: ``FpMul32`` and ``FpAdd32`` (combinational; driven ``lanes`` copies at a time through a
wide wrapper so that one simulator step checks many vectors), ``Widen`` (every bit pattern of
the 8- and 16-bit formats), ``Cast`` (streamed, with random idle cycles on the input and random
backpressure on the output). Every result is compared bit for bit with
:mod:`sim.golden.numerics`. Random tests log their seed.

:func:`simulate` runs one unit's testbench; ``params`` is ``"fpmul32"``, ``"fpadd32"``, a
:class:`WidenParams`, a tuple of them (one bench, side by side), or a :class:`CastParams`.
"""

import random

import numpy as np
import pytest
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hdl.numerics.cast import Cast, CastParams
from hdl.numerics.formats import (
    BF16,
    FP8_E4M3,
    FP8_E4M3FN,
    FP8_E5M2,
    FP16,
    FP32,
    INT8,
    TF32,
    cfp8,
    format_by_name,
)
from hdl.numerics.fpu import FpAdd32, FpMul32, Widen, WidenParams
from sim.golden import numerics as golden
from sim.tb.runner import RunResult, run, tb_params

FP32_UNITS = {"fpmul32": (FpMul32, golden.mul32), "fpadd32": (FpAdd32, golden.add32)}


# -- wrappers that put many copies of a combinational unit side by side ----------------------
class Fp32Bench(wiring.Component):
    """``lanes`` copies of FpMul32 or FpAdd32 on packed ports ``a``, ``b``, ``y``."""

    def __init__(self, unit: str, lanes: int):
        self.unit, self.lanes = unit, lanes
        super().__init__({"a": In(32 * lanes), "b": In(32 * lanes), "y": Out(32 * lanes)})

    def elaborate(self, platform):
        m = Module()
        for n in range(self.lanes):
            m.submodules[f"u{n}"] = u = FP32_UNITS[self.unit][0]()
            m.d.comb += [u.a.eq(self.a[32 * n:32 * n + 32]), u.b.eq(self.b[32 * n:32 * n + 32]),
                         self.y[32 * n:32 * n + 32].eq(u.y)]
        return m


class WidenBench(wiring.Component):
    """``lanes`` Widen units per format on packed ports ``x<k>``, ``y<k>``."""

    def __init__(self, params: tuple[WidenParams, ...], lanes: int):
        self.params, self.lanes = params, lanes
        ports = {}
        for k, p in enumerate(params):
            ports[f"x{k}"] = In(p.fmt.bits * lanes)
            ports[f"y{k}"] = Out(32 * lanes)
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        for k, p in enumerate(self.params):
            x, y, w = getattr(self, f"x{k}"), getattr(self, f"y{k}"), p.fmt.bits
            for n in range(self.lanes):
                m.submodules[f"w{k}_{n}"] = u = Widen(p)
                m.d.comb += [u.x.eq(x[w * n:w * n + w]), y[32 * n:32 * n + 32].eq(u.y)]
        return m


# -- packing helpers --------------------------------------------------------------------------
def pack(values, width: int) -> int:
    word = 0
    for v in reversed([int(v) for v in values]):
        word = (word << width) | v
    return word


def unpack(word: int, width: int, count: int) -> np.ndarray:
    mask = (1 << width) - 1
    return np.array([(word >> (width * n)) & mask for n in range(count)], dtype=np.int64)


def _pad(x: np.ndarray, lanes: int) -> np.ndarray:
    """``x`` repeated at its start up to a multiple of ``lanes``."""
    return np.concatenate([x, x[:(-len(x)) % lanes]])


def _mismatches(name, inputs, got, want, log, limit=10):
    bad = np.flatnonzero(np.asarray(got, dtype=np.int64) != np.asarray(want, dtype=np.int64))
    for n in bad[:limit]:
        args = ", ".join(f"{int(v[n]):#x}" for v in inputs)
        log.error("%s(%s): got %#x, want %#x", name, args, int(got[n]), int(want[n]))
    return len(bad)


# -- cocotb tests -----------------------------------------------------------------------------
try:
    import cocotb
    from cocotb.clock import Clock
    from cocotb.triggers import FallingEdge, RisingEdge, Timer
except ImportError:  # pytest collection without cocotb is not a supported setup
    cocotb = None


if cocotb is not None:

    @cocotb.test()
    async def fp32_arith(dut):
        """Edge-biased random operand pairs through FpMul32 or FpAdd32, bit exact."""
        p = tb_params()
        unit, lanes, count = p["unit"], p["lanes"], p["vectors"]
        dut._log.info("%s: %d vectors, seed=%d", unit, count, p["seed"])
        rng = np.random.default_rng(p["seed"])
        a, b = golden.edge_fp32_pairs(rng, count)
        a, b = _pad(a, lanes), _pad(b, lanes)
        got = np.empty(len(a), dtype=np.int64)
        for start in range(0, len(a), lanes):
            dut.a.value = pack(a[start:start + lanes], 32)
            dut.b.value = pack(b[start:start + lanes], 32)
            await Timer(1, "ns")
            got[start:start + lanes] = unpack(dut.y.value.to_unsigned(), 32, lanes)
        want = FP32_UNITS[unit][1](a, b)
        bad = _mismatches(unit, (a, b), got, want, dut._log)
        assert bad == 0, f"{bad} of {len(a)} results differ"

    @cocotb.test()
    async def widen_patterns(dut):
        """Every bit pattern of each format (random ones above 16 bits) through Widen."""
        p = tb_params()
        lanes = p["lanes"]
        rng = np.random.default_rng(p["seed"])
        fmts = [format_by_name(name) for name in p["formats"]]
        total_bad = 0
        for k, fmt in enumerate(fmts):
            if fmt.bits <= 16:
                x = np.arange(1 << fmt.bits, dtype=np.int64)
            else:
                x = rng.integers(0, 1 << fmt.bits, 1 << 16)
            x = _pad(x, lanes)
            port_x, port_y = getattr(dut, f"x{k}"), getattr(dut, f"y{k}")
            got = np.empty(len(x), dtype=np.int64)
            for start in range(0, len(x), lanes):
                port_x.value = pack(x[start:start + lanes], fmt.bits)
                await Timer(1, "ns")
                got[start:start + lanes] = unpack(port_y.value.to_unsigned(), 32, lanes)
            want = golden.widen(x, fmt)
            total_bad += _mismatches(f"widen[{fmt.name}]", (x,), got, want, dut._log)
        assert total_bad == 0, f"{total_bad} results differ"

    class CastTB:
        """Driver (input stream with random idle cycles), monitor (output stream under random
        backpressure), golden model and checker of a Cast."""

        def __init__(self, dut, params: CastParams, x: np.ndarray, rng: random.Random,
                     idle: float, stall: float):
            self.dut, self.params, self.x = dut, params, x
            self.rng, self.idle, self.stall = rng, idle, stall
            self.got: list[np.ndarray] = []

        async def run(self):
            dut, lanes, bits = self.dut, self.params.lanes, self.params.fmt.bits
            beats = len(self.x)
            sent = 0
            dut.i__valid.value = 0
            dut.o__ready.value = 0
            dut.rst.value = 1
            await RisingEdge(dut.clk)
            await RisingEdge(dut.clk)
            dut.rst.value = 0
            cycles = 0
            while len(self.got) < beats:
                await RisingEdge(dut.clk)
                cycles += 1
                if sent < beats and self.rng.random() >= self.idle:
                    dut.i__valid.value = 1
                    dut.i__payload.value = pack(self.x[sent], 32)
                else:
                    dut.i__valid.value = 0
                dut.o__ready.value = int(self.rng.random() >= self.stall)
                await FallingEdge(dut.clk)
                if dut.i__valid.value == 1 and dut.i__ready.value == 1:
                    sent += 1
                if dut.o__valid.value == 1 and dut.o__ready.value == 1:
                    self.got.append(unpack(dut.o__payload.value.to_unsigned(), bits, lanes))
                if cycles > 20 * beats + 100:
                    raise AssertionError(f"stalled: {len(self.got)} of {beats} beats out")
            return cycles

        def check(self) -> int:
            p = self.params
            want = golden.cast_bits(self.x.view(np.float32), **golden.cast_params(p))
            got = np.array(self.got)
            flat_x = self.x.reshape(-1)
            return _mismatches(f"cast[{p.fmt.name},{p.rounding}]", (flat_x,),
                               got.reshape(-1), want.reshape(-1), self.dut._log)

    @cocotb.test()
    async def cast_stream(dut):
        """Edge-biased fp32 values (and, for 8-bit targets, every target value and every
        midpoint between neighbours) through Cast, with idle cycles and backpressure."""
        p = tb_params()
        params = CastParams(fmt=format_by_name(p["fmt"]), rounding=p["rounding"],
                            rng=p["rng"], seed=p["rng_seed"], lanes=p["lanes"])
        dut._log.info("cast %s: %d vectors, seed=%d", params, p["vectors"], p["seed"])
        rng = np.random.default_rng(p["seed"])
        x = golden.edge_fp32_for_format(params.fmt, rng, p["vectors"])
        x = _pad(x.view(np.uint32), params.lanes).reshape(-1, params.lanes)
        cocotb.start_soon(Clock(dut.clk, 10, "ns").start())
        tb = CastTB(dut, params, x, random.Random(p["seed"]), p["idle"], p["stall"])
        cycles = await tb.run()
        dut._log.info("%d beats in %d cycles", len(x), cycles)
        bad = tb.check()
        assert bad == 0, f"{bad} of {x.size} results differ"


# -- entry points -----------------------------------------------------------------------------
def simulate(params, sim: str, seed: int | None = None, vectors: int = 20_000,
             lanes: int = 16, idle: float = 0.2, stall: float = 0.2):
    """Run the cocotb testbench of one numerics unit; returns a :class:`RunResult`.

    ``params``: ``"fpmul32"`` or ``"fpadd32"`` (``vectors`` random operand pairs on
    ``lanes`` side-by-side copies), a :class:`WidenParams` or a tuple of them (all patterns
    of formats up to 16 bits, 65,536 random ones above), or a :class:`CastParams`
    (``vectors`` values, its own ``lanes``; ``idle`` and ``stall`` are the probabilities of an
    idle input cycle and of a stalled output cycle).
    """
    seed = random.SystemRandom().randrange(2**31) if seed is None else seed
    if isinstance(params, str):
        if params not in FP32_UNITS:
            raise ValueError(f"params must be one of {', '.join(FP32_UNITS)}, a WidenParams "
                             f"or a CastParams, not {params!r}")
        return run(lambda: Fp32Bench(params, lanes), params, "sim.tb.test_numerics", sim,
                   {"unit": params, "lanes": lanes, "vectors": vectors, "seed": seed},
                   testcase="fp32_arith", seed=seed)
    if isinstance(params, WidenParams):
        params = (params,)
    if isinstance(params, tuple) and all(isinstance(p, WidenParams) for p in params):
        return run(lambda: WidenBench(params, lanes), "widen", "sim.tb.test_numerics", sim,
                   {"formats": [p.fmt.name for p in params], "lanes": lanes, "seed": seed},
                   testcase="widen_patterns", seed=seed)
    if isinstance(params, CastParams):
        return run(lambda: Cast(params), "cast", "sim.tb.test_numerics", sim,
                   {"fmt": params.fmt.name, "rounding": params.rounding, "rng": params.rng,
                    "rng_seed": params.seed, "lanes": params.lanes, "vectors": vectors,
                    "seed": seed, "idle": idle, "stall": stall},
                   testcase="cast_stream", seed=seed)
    raise ValueError(f"params must be one of {', '.join(FP32_UNITS)}, a WidenParams "
                     f"or a CastParams, not {params!r}")


# Verilator compiles slowly and runs fast, Icarus the reverse: the large runs go to Verilator.
BIG = {"verilator": 1, "icarus": 0}


@pytest.mark.cocotb
@pytest.mark.parametrize("unit", list(FP32_UNITS))
def test_fp32_arith(unit, sim, seed):
    vectors = 120_000 if BIG[sim] else 12_000
    result = simulate(unit, sim, seed, vectors=vectors)
    assert result.ok, result


@pytest.mark.cocotb
def test_widen(sim, seed):
    fmts = (FP8_E4M3, FP8_E4M3FN, FP8_E5M2, cfp8(3, "e5m2"), cfp8(20), BF16, FP16, TF32,
            FP32, INT8)
    if not BIG[sim]:
        fmts = (FP8_E4M3, FP8_E4M3FN, FP8_E5M2, cfp8(140), INT8)
    result = simulate(tuple(WidenParams(fmt=f) for f in fmts), sim, seed)
    assert result.ok, result


CAST_CASES = [
    CastParams(fmt=FP8_E4M3, lanes=1),
    CastParams(fmt=FP8_E4M3FN, rounding="stochastic", rng="lfsr32", seed=7, lanes=4),
    CastParams(fmt=FP8_E5M2, rounding="stochastic", lanes=3),
    CastParams(fmt=BF16, lanes=3),
    CastParams(fmt=FP16, rounding="stochastic", rng="lfsr32", lanes=4),
    CastParams(fmt=TF32, rounding="stochastic", seed=12345, lanes=1),
    CastParams(fmt=cfp8(11), lanes=4),
    CastParams(fmt=cfp8(-20, "e5m2"), rounding="stochastic", seed=3, lanes=4),
]


@pytest.mark.cocotb
@pytest.mark.parametrize("params", CAST_CASES, ids=lambda p: f"{p.fmt.name}-{p.rounding}")
def test_cast(params, sim, seed):
    vectors = 100_000 if BIG[sim] else 4_000
    result = simulate(params, sim, seed, vectors=vectors)
    assert isinstance(result, RunResult) and result.ok, result
