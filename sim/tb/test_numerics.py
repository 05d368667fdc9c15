"""Cocotb testbenches of the numerics units on their emitted Verilog, and pytest entry points.

Units: ``FpMul32`` and ``FpAdd32`` (combinational; ``lanes`` copies side by side in a wrapper so
that one simulator step checks many vectors), ``Widen`` (every bit pattern of the formats up to
16 bits), ``Cast`` (streamed, with random idle cycles on the input and random backpressure on
the output; several casts side by side in one bench, so that one build covers every target
format; the stream driver and monitor of :mod:`sim.tb.streams`). Every result is compared
bit for bit with :mod:`sim.golden.numerics`; random tests log their seed and take it back
through ``--seed``.

:func:`simulate` runs a testbench for ``"fp32"``, Widen parameters or Cast parameters.
"""

import random
from dataclasses import dataclass

import numpy as np
import pytest
from amaranth.hdl import Module
from amaranth.lib import data, stream, wiring
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
from sim.tb.runner import RunResult, emit_verilog, run_verilog, stored_verilog, tb_params

FP32_UNITS = {"mul": golden.mul32, "add": golden.add32}


# -- the bench: units side by side, so that one build (per simulator) covers them all ------
@dataclass(frozen=True, kw_only=True)
class BenchParams:
    """What a :class:`NumericsBench` holds.

    fp32_lanes : copies of FpMul32 and of FpAdd32 (0: none), on ports ``a``, ``b``,
        ``mul``, ``add``.
    widen : Widen parameters; ``widen_lanes`` copies each, on ports ``x<k>``, ``y<k>``.
    casts : Cast parameters, each Cast on its own streams ``i<k>``, ``o<k>``.
    """

    fp32_lanes: int = 0
    widen: tuple[WidenParams, ...] = ()
    widen_lanes: int = 1
    casts: tuple[CastParams, ...] = ()

    def __post_init__(self):
        for field in ("fp32_lanes", "widen_lanes"):
            value = getattr(self, field)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"{field} must be a non-negative integer, not {value!r}")
        if not all(isinstance(p, WidenParams) for p in self.widen):
            raise ValueError(f"widen must be a tuple of WidenParams, not {self.widen!r}")
        if not all(isinstance(p, CastParams) for p in self.casts):
            raise ValueError(f"casts must be a tuple of CastParams, not {self.casts!r}")

    @property
    def testcases(self) -> list[str]:
        return [name for name, used in (("fp32_arith", self.fp32_lanes),
                                        ("widen_patterns", self.widen and self.widen_lanes),
                                        ("cast_stream", self.casts)) if used]


class NumericsBench(wiring.Component):
    """The units of a :class:`BenchParams` side by side (see there for the ports)."""

    def __init__(self, params: BenchParams):
        self.params = params
        lanes = params.fp32_lanes
        ports = {}
        if lanes:
            ports.update(a=In(32 * lanes), b=In(32 * lanes), mul=Out(32 * lanes),
                         add=Out(32 * lanes))
        for k, p in enumerate(params.widen):
            ports[f"x{k}"] = In(p.fmt.bits * params.widen_lanes)
            ports[f"y{k}"] = Out(32 * params.widen_lanes)
        for k, p in enumerate(params.casts):
            ports[f"i{k}"] = In(stream.Signature(data.ArrayLayout(32, p.lanes)))
            ports[f"o{k}"] = Out(stream.Signature(data.ArrayLayout(p.fmt.bits, p.lanes)))
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        params = self.params
        for n in range(params.fp32_lanes):
            word = slice(32 * n, 32 * n + 32)
            for name, unit in (("mul", FpMul32), ("add", FpAdd32)):
                m.submodules[f"{name}{n}"] = u = unit()
                m.d.comb += [u.a.eq(self.a[word]), u.b.eq(self.b[word]),
                             getattr(self, name)[word].eq(u.y)]
        for k, p in enumerate(params.widen):
            x, y, w = getattr(self, f"x{k}"), getattr(self, f"y{k}"), p.fmt.bits
            for n in range(params.widen_lanes):
                m.submodules[f"widen{k}_{n}"] = u = Widen(p)
                m.d.comb += [u.x.eq(x[w * n:w * n + w]), y[32 * n:32 * n + 32].eq(u.y)]
        for k, p in enumerate(params.casts):
            m.submodules[f"cast{k}"] = cast = Cast(p)
            wiring.connect(m, wiring.flipped(getattr(self, f"i{k}")), cast.i)
            wiring.connect(m, cast.o, wiring.flipped(getattr(self, f"o{k}")))
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
    from cocotb.triggers import ClockCycles, RisingEdge, Timer

    from sim.tb.streams import (
        StreamBus,
        StreamSink,
        StreamSource,
        nothing_left_over,
        random_pause,
    )
except ImportError:  # pytest collection without cocotb is not a supported setup
    cocotb = None


if cocotb is not None:

    @cocotb.test()
    async def fp32_arith(dut):
        """Edge-biased random operand pairs through FpMul32 and FpAdd32, bit exact."""
        p = tb_params()
        lanes, count = p["lanes"], p["fp32_vectors"]
        dut._log.info("fp32 mul and add: %d vectors, seed=%d", count, p["seed"])
        rng = np.random.default_rng(p["seed"])
        a, b = golden.edge_fp32_pairs(rng, count)
        a, b = _pad(a, lanes), _pad(b, lanes)
        got = {unit: np.empty(len(a), dtype=np.int64) for unit in FP32_UNITS}
        for start in range(0, len(a), lanes):
            dut.a.value = pack(a[start:start + lanes], 32)
            dut.b.value = pack(b[start:start + lanes], 32)
            await Timer(1, "ns")
            for unit, out in got.items():
                out[start:start + lanes] = unpack(getattr(dut, unit).value.to_unsigned(), 32,
                                                  lanes)
        bad = sum(_mismatches(unit, (a, b), got[unit], model(a, b), dut._log)
                  for unit, model in FP32_UNITS.items())
        assert bad == 0, f"{bad} of {2 * len(a)} results differ"

    @cocotb.test()
    async def widen_patterns(dut):
        """Every bit pattern of each format (random ones above 16 bits) through Widen."""
        p = tb_params()
        lanes = p["widen_lanes"]
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

    @cocotb.test()
    async def cast_stream(dut):
        """Edge-biased fp32 values (and, for 8-bit targets, every target value and every
        midpoint between neighbours) through each Cast of the bench, with random idle
        cycles on the inputs and random backpressure on the outputs."""
        p = tb_params()
        rng = np.random.default_rng(p["seed"])
        casts = []
        for k, spec in enumerate(p["casts"]):
            params = CastParams(fmt=format_by_name(spec["fmt"]), rounding=spec["rounding"],
                                rng=spec["rng"], seed=spec["seed"], lanes=spec["lanes"])
            x = golden.edge_fp32_for_format(params.fmt, rng, p["vectors"])
            x = _pad(x.view(np.uint32), params.lanes).reshape(-1, params.lanes)
            pause = random.Random(f"{p['seed']}-{k}")
            source = StreamSource(StreamBus.from_prefix(dut, f"i{k}"), dut.clk, dut.rst,
                                  random_pause(pause, p["idle"]))
            sink = StreamSink(StreamBus.from_prefix(dut, f"o{k}"), dut.clk, dut.rst,
                              random_pause(pause, p["stall"]))
            source.send(pack(row, 32) for row in x)
            casts.append((params, x, source, sink))
            dut._log.info("cast %d: %s, %d values", k, params, x.size)
        dut._log.info("seed=%d", p["seed"])
        cocotb.start_soon(Clock(dut.clk, 10, "ns").start())
        dut.rst.value = 1
        await ClockCycles(dut.clk, 2)
        dut.rst.value = 0
        cycles, limit = 0, 20 * max(len(x) for _, x, _, _ in casts) + 100
        while not all(sink.count >= len(x) for _, x, _, sink in casts):
            await RisingEdge(dut.clk)
            cycles += 1
            assert cycles < limit, "stalled: " + ", ".join(
                f"{sink.count} of {len(x)}" for _, x, _, sink in casts)
        await ClockCycles(dut.clk, 8)    # a beat too many would arrive now
        dut._log.info("%d cycles", cycles)
        bad = 0
        for params, x, _, sink in casts:
            got = np.array([unpack(b, params.fmt.bits, params.lanes)
                            for b in sink.take(len(x))])
            want = golden.cast_bits(x.view(np.float32), **golden.cast_params(params))
            bad += _mismatches(f"cast[{params.fmt.name},{params.rounding},{params.rng}]",
                               (x.reshape(-1),), got.reshape(-1), want.reshape(-1), dut._log)
        nothing_left_over(*(end for c in casts for end in c[2:]))
        assert bad == 0, f"{bad} results differ"


# -- entry points -----------------------------------------------------------------------------
def _bench_params(params) -> BenchParams:
    if isinstance(params, BenchParams):
        return params
    if params == "fp32":
        return BenchParams(fp32_lanes=1)
    single = params if isinstance(params, tuple) else (params,)
    if single and all(isinstance(p, WidenParams) for p in single):
        return BenchParams(widen=single)
    if single and all(isinstance(p, CastParams) for p in single):
        return BenchParams(casts=single)
    raise ValueError(f"params must be a BenchParams, 'fp32', a WidenParams, a CastParams or "
                     f"a tuple of either, not {params!r}")


def simulate(params, sim: str, seed: int | None = None, vectors: int = 20_000,
             fp32_vectors: int | None = None, idle: float = 0.2,
             stall: float = 0.2) -> RunResult:
    """Run the cocotb testbenches of numerics units on one build; returns a RunResult
    (one cocotb test per kind of unit in the bench).

    ``params`` is a :class:`BenchParams`, or for one kind of unit: ``"fp32"`` (FpMul32 and
    FpAdd32), a :class:`WidenParams`, a :class:`CastParams`, or a tuple of either.
    FpMul32/FpAdd32 get ``fp32_vectors`` (default ``vectors``) edge-biased operand pairs;
    Widen gets every bit pattern of formats up to 16 bits and 65,536 random ones above; each
    Cast gets ``vectors`` values, with an idle input cycle with probability ``idle`` and a
    stalled output cycle with probability ``stall``.
    """
    bench = _bench_params(params)
    seed = random.SystemRandom().randrange(2**31) if seed is None else seed
    specs = [{"fmt": p.fmt.name, "rounding": p.rounding, "rng": p.rng, "seed": p.seed,
              "lanes": p.lanes} for p in bench.casts]
    tb = {"lanes": bench.fp32_lanes, "formats": [p.fmt.name for p in bench.widen],
          "widen_lanes": bench.widen_lanes, "casts": specs, "vectors": vectors,
          "fp32_vectors": vectors if fp32_vectors is None else fp32_vectors, "seed": seed,
          "idle": idle, "stall": stall}
    return run_verilog(stored_verilog(bench_verilog, bench), "numerics",
                       "sim.tb.test_numerics", sim, tb, testcase=bench.testcases, seed=seed)


def bench_verilog(bench) -> str:
    """The numerics bench's Verilog."""
    return emit_verilog(NumericsBench(bench), "numerics")


CAST_CASES = (
    CastParams(fmt=FP8_E4M3, lanes=1),
    CastParams(fmt=FP8_E4M3FN, rounding="stochastic", rng="lfsr32", seed=7, lanes=2),
    CastParams(fmt=FP8_E5M2, rounding="stochastic", lanes=3),
    CastParams(fmt=BF16, lanes=1),
    CastParams(fmt=FP16, rounding="stochastic", rng="lfsr32", lanes=2),
    CastParams(fmt=TF32, rounding="stochastic", seed=12345, lanes=1),
    CastParams(fmt=cfp8(11), lanes=1),
    CastParams(fmt=cfp8(-20, "e5m2"), rounding="stochastic", seed=3, lanes=2),
)
WIDEN_FORMATS = (FP8_E4M3, FP8_E4M3FN, FP8_E5M2, cfp8(3, "e5m2"), cfp8(140), BF16, FP16, TF32,
                 FP32, INT8)

# Verilator compiles slowly and runs fast, Icarus the reverse: Verilator gets every unit and
# 10**5 vectors per unit and target format, Icarus a subset and a few thousand; each builds
# one bench.
BENCHES = {
    "verilator": (BenchParams(fp32_lanes=1, widen=tuple(WidenParams(fmt=f)
                                                        for f in WIDEN_FORMATS),
                              widen_lanes=2, casts=CAST_CASES), 120_000, 100_000),
    "icarus": (BenchParams(fp32_lanes=4, widen=tuple(WidenParams(fmt=f)
                                                     for f in WIDEN_FORMATS[:5] + (INT8,)),
                           widen_lanes=8, casts=CAST_CASES[1:3] + CAST_CASES[7:]), 3_000, 1_500),
}


@pytest.mark.cocotb
def test_numerics_bench(sim, seed):
    """FpMul32, FpAdd32 (edge-biased pairs), Widen (every pattern up to 16 bits) and Cast
    (every target format, both roundings, both generators, lanes 1 to 4) on the emitted
    Verilog, bit exact against the golden model."""
    bench, fp32_vectors, cast_vectors = BENCHES[sim]
    result = simulate(bench, sim, seed, vectors=cast_vectors, fp32_vectors=fp32_vectors)
    assert result.ok and result.expected == 3, result
