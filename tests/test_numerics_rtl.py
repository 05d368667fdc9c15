"""Amaranth-simulator unit tests of the numerics RTL against the golden model.

A few hundred vectors per unit (the cocotb benches in sim/tb/test_numerics.py run 10**5 on
the emitted Verilog). The binary32 results are also checked against float64 arithmetic.
"""

import os
import subprocess

import numpy as np
import pytest
from amaranth.hdl import ClockDomain, Module
from amaranth.sim import Simulator

from generators.output import verilator_waivers
from generators.vector import VECTOR_WAIVERS
from hdl.numerics.cast import Cast, CastLane, CastParams, lane_seed
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
)
from hdl.numerics.fpu import FpAdd32, FpMul32, Widen, WidenParams
from sim.golden import numerics as golden
from sim.tb.runner import emit_verilog, setup_verilator_env


def run_comb(dut, inputs: dict, output: str) -> np.ndarray:
    """Drive the combinational ``dut`` with each row of ``inputs``; collect ``output``."""
    count = len(next(iter(inputs.values())))
    got = np.empty(count, dtype=np.int64)

    async def bench(ctx):
        for n in range(count):
            for port, values in inputs.items():
                ctx.set(getattr(dut, port), int(values[n]))
            got[n] = ctx.get(getattr(dut, output))

    sim = Simulator(dut)
    sim.add_testbench(bench)
    sim.run()
    return got


@pytest.mark.parametrize("unit,op,gold", [(FpMul32, np.multiply, golden.mul32),
                                          (FpAdd32, np.add, golden.add32)])
def test_binary32_unit(unit, op, gold, seed):
    rng = np.random.default_rng(seed)
    a, b = golden.edge_fp32_pairs(rng, 400)
    got = run_comb(unit(), {"a": a, "b": b}, "y")
    assert np.array_equal(got, gold(a, b))
    with np.errstate(all="ignore"):
        want = op(a.view(np.float32).astype(np.float64),
                  b.view(np.float32).astype(np.float64)).astype(np.float32)
    nan = np.isnan(want)
    assert np.array_equal(got[~nan], want[~nan].view(np.uint32))
    assert np.all(got[nan] == 0x7FC00000)


def test_binary32_directed():
    cases = [  # a, b, a*b, a+b
        (0x3F800000, 0xBF800000, 0xBF800000, 0x00000000),  # 1 * -1; 1 + -1 = +0
        (0x80000000, 0x80000000, 0x00000000, 0x80000000),  # -0 * -0 = +0; -0 + -0 = -0
        (0x7F800000, 0x00000000, 0x7FC00000, 0x7F800000),  # inf * 0 = NaN
        (0x7F800000, 0xFF800000, 0xFF800000, 0x7FC00000),  # inf - inf = NaN
        (0x7F7FFFFF, 0x73000000, 0x7F800000, 0x7F800000),  # overflow; max + ulp/2 ties up
        (0x00000001, 0x3F000000, 0x00000000, 0x3F000000),  # 2**-149 / 2 ties to even 0
        (0x00000003, 0x3F000000, 0x00000002, 0x3F000000),  # 3 * 2**-150 ties to 4 * 2**-150
        (0x00800000, 0x80000001, 0x80000000, 0x007FFFFF),  # normal - subnormal = subnormal
        (0x3F800001, 0x3FC00000, 0x3FC00002, 0x40200000),  # product tie rounds to even
        (0x7FA00000, 0x3F800000, 0x7FC00000, 0x7FC00000),  # signalling NaN in
    ]
    a, b, prod, total = (np.array(col, dtype=np.uint32) for col in zip(*cases, strict=True))
    assert list(run_comb(FpMul32(), {"a": a, "b": b}, "y")) == list(prod)
    assert list(run_comb(FpAdd32(), {"a": a, "b": b}, "y")) == list(total)
    assert list(golden.mul32(a, b)) == list(prod)
    assert list(golden.add32(a, b)) == list(total)


@pytest.mark.parametrize("fmt", [FP8_E4M3, FP8_E4M3FN, FP8_E5M2, cfp8(147), cfp8(-60, "e5m2"),
                                 BF16, FP16, TF32, FP32, INT8], ids=lambda f: f.name)
def test_widen(fmt, seed):
    rng = np.random.default_rng(seed)
    x = (np.arange(256) if fmt.bits <= 8 else rng.integers(0, 1 << fmt.bits, 300))
    got = run_comb(Widen(WidenParams(fmt=fmt)), {"x": x}, "y")
    assert np.array_equal(got, golden.widen(x, fmt))
    if fmt is not INT8:
        values = golden.decode(x, fmt)
        finite = np.isfinite(values)
        assert np.array_equal(got[finite], values[finite].view(np.uint32))


def run_cast(params: CastParams, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Stream ``x`` (beats, lanes) through a Cast with idle cycles and backpressure."""
    dut = Cast(params)
    out = []

    async def bench(ctx):
        sent = 0
        while len(out) < len(x):
            valid = sent < len(x) and rng.random() < 0.7
            ctx.set(dut.i.valid, valid)
            if valid:
                ctx.set(dut.i.payload, [int(v) for v in x[sent]])
            ctx.set(dut.o.ready, rng.random() < 0.7)
            _, _, in_ready, o_valid, o_ready, payload = await ctx.tick().sample(
                dut.i.ready, dut.o.valid, dut.o.ready, dut.o.payload)
            if valid and in_ready:
                sent += 1
            if o_valid and o_ready:
                out.append([int(v) for v in payload])

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return np.array(out, dtype=np.int64)


@pytest.mark.parametrize("params", [
    CastParams(fmt=FP8_E4M3FN, lanes=2),
    CastParams(fmt=BF16, rounding="stochastic", lanes=3),
    CastParams(fmt=FP8_E5M2, rounding="stochastic", rng="lfsr32", seed=9, lanes=1),
    CastParams(fmt=cfp8(140), rounding="stochastic", lanes=2),
], ids=lambda p: f"{p.fmt.name}-{p.rounding}-{p.rng}")
def test_cast(params, seed):
    rng = np.random.default_rng(seed)
    x = golden.edge_fp32_for_format(params.fmt, rng, 300 * params.lanes)
    x = x.view(np.uint32).reshape(-1, params.lanes)
    got = run_cast(params, x, rng)
    want = golden.cast_bits(x.view(np.float32), **golden.cast_params(params))
    assert np.array_equal(got, want.astype(np.int64))


@pytest.mark.parametrize("params", [
    CastParams(fmt=BF16, rounding="stochastic", seed=5, lanes=128),
    CastParams(fmt=FP8_E4M3, rounding="stochastic", rng="lfsr32", seed=2**32 - 1, lanes=128),
], ids=lambda p: p.rng)
def test_cast_lane_seed_port_and_reset(params, seed):
    """One CastLane with lane 127's seed tied to its port gives that lane's golden sequence,
    and a reset mid-stream restarts the sequence from the seed."""
    rng = np.random.default_rng(seed)
    lane = params.lanes - 1
    # values between grid points, so that every result depends on the random word
    x = rng.uniform(-3.0, 3.0, 80).astype(np.float32).view(np.uint32)
    full = np.zeros((len(x), params.lanes), dtype=np.uint32)
    full[:, lane] = x
    want = golden.cast_bits(full.view(np.float32), **golden.cast_params(params))[:, lane]
    restart = 30
    dut = CastLane(params)
    m = Module()
    m.domains.sync = domain = ClockDomain()
    m.submodules.dut = dut
    m.d.comb += dut.seed.eq(lane_seed(params, lane))
    got = []

    async def bench(ctx):
        beats = [*x[:restart], None, *x]  # None: one reset cycle
        n = 0
        while n < len(beats):
            beat = beats[n]
            en = beat is not None and rng.random() < 0.7
            ctx.set(domain.rst, beat is None)
            ctx.set(dut.en, en)
            if beat is not None:
                ctx.set(dut.x, int(beat))
            await ctx.tick()
            if en:
                got.append(ctx.get(dut.y))
            if en or beat is None:
                n += 1

    sim = Simulator(m)
    sim.add_clock(1e-8, domain="sync")
    sim.add_testbench(bench)
    sim.run()
    assert np.array_equal(np.array(got), np.concatenate([want[:restart], want]).astype(np.int64))


@pytest.mark.parametrize("name,unit", [
    ("fpmul32", FpMul32), ("fpadd32", FpAdd32),
    ("widen", lambda: Widen(WidenParams(fmt=FP8_E4M3FN))),
    ("cast", lambda: Cast(CastParams(fmt=BF16, rounding="stochastic", rng="lfsr32", lanes=2))),
])
def test_emitted_verilog_is_clean(name, unit, sim, tmp_path):
    """The emitted Verilog compiles under Icarus and lints clean under ``verilator -Wall``
    with the waivers of the vector engine, whose generator emits these units inside its
    lanes."""
    path = tmp_path / f"{name}.v"
    path.write_text(emit_verilog(unit(), name))
    env = setup_verilator_env(dict(os.environ))
    if sim == "verilator":
        waivers = tmp_path / "vector.vlt"
        waivers.write_text(verilator_waivers(VECTOR_WAIVERS))
        cmd = ["verilator", "--lint-only", "-Wall", "--top-module", name, str(waivers),
               str(path)]
    else:
        cmd = ["iverilog", "-o", str(tmp_path / "out.vvp"), "-s", name, str(path)]
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr
