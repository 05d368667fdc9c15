"""Amaranth-simulator unit tests of the numerics RTL against the golden model.

A few hundred vectors per unit (the cocotb benches in sim/tb/test_numerics.py run 10**5 on
the emitted Verilog). The binary32 results are also checked against float64 arithmetic.
"""

import os
import subprocess

import ml_dtypes
import numpy as np
import pytest
from amaranth.hdl import ClockDomain, Module
from amaranth.sim import Simulator

from generators.output import verilator_waivers
from generators.vector import VECTOR_WAIVERS
from hdl.numerics.cast import Cast, CastLane, CastParams, FormatCastLane, lane_seed, seed_value
from hdl.numerics.formats import (
    BF16,
    FP8_E4M3,
    FP8_E4M3FN,
    FP8_E5M2,
    FP16,
    FP32,
    INT8,
    MXFP4,
    MXFP8,
    TF32,
    cfp8,
)
from hdl.numerics.fpu import (
    FpAdd32,
    FpMul32,
    FpMulScaled32,
    MultiWiden,
    MultiWidenParams,
    Widen,
    WidenParams,
)
from hdl.tensor.params import SystolicParams
from hdl.tensor.pe import ProcessingElement, ctl_layout
from sim.golden import numerics as golden
from sim.golden.systolic import matmul, matmul_mx
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


def test_multi_widen_matches_each_format(seed):
    """One run-time-selected widen gives each format's Widen result (codes mixed per input)."""
    formats = (FP8_E4M3, None, FP8_E5M2, cfp8(147), BF16, FP16, TF32, FP32, FP8_E4M3FN)
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, len(formats), 600)
    x = rng.integers(0, 1 << 32, 600, dtype=np.int64)
    got = run_comb(MultiWiden(MultiWidenParams(formats=formats, width=32)),
                   {"x": x, "code": codes}, "y")
    for code, fmt in enumerate(formats):
        sel = codes == code
        want = 0 if fmt is None else golden.widen(x[sel] & ((1 << fmt.bits) - 1), fmt)
        assert np.array_equal(got[sel], np.broadcast_to(want, got[sel].shape)), fmt


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


RUN_TIME_FORMATS = (FP32, BF16, FP16, FP8_E4M3, FP8_E5M2)
ML_DTYPES = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16,
             "fp8_e4m3": ml_dtypes.float8_e4m3, "fp8_e5m2": ml_dtypes.float8_e5m2}


def run_format_cast(rng_name: str, x, fmt, stochastic) -> np.ndarray:
    """Lane 0 of a :class:`FormatCastLane` (seed 3) fed one beat per cycle, ``fmt`` (an
    index into :data:`RUN_TIME_FORMATS`) and ``stochastic`` chosen per beat."""
    dut = FormatCastLane(RUN_TIME_FORMATS, rng_name)
    m = Module()
    m.domains.sync = ClockDomain()
    m.submodules.dut = dut
    m.d.comb += [dut.seed.eq(seed_value(rng_name, 3, 0)), dut.en.eq(1)]
    got = np.empty(len(x), dtype=np.uint32)

    async def bench(ctx):
        for n in range(len(x)):
            ctx.set(dut.x, int(x[n]))
            ctx.set(dut.fmt, int(fmt[n]))
            ctx.set(dut.stochastic, int(stochastic[n]))
            got[n] = ctx.get(dut.y)
            await ctx.tick()

    sim = Simulator(m)
    sim.add_clock(1e-8, domain="sync")
    sim.add_testbench(bench)
    sim.run()
    return got


@pytest.mark.parametrize("rng_name", ["xorwow", "lfsr32"])
def test_format_cast_lane_against_ml_dtypes(rng_name, seed):
    """The run-time cast lane of both engines: round-to-nearest-even gives ml_dtypes' cast
    bit for bit in every format, beats of mixed formats and roundings interleaved; stochastic
    rounding gives one of the two neighbours, unbiased: the mean of many casts of one value
    is that value."""
    rng = np.random.default_rng(seed)
    n_rne = 80
    xs, fmts = [], []
    for index, f in enumerate(RUN_TIME_FORMATS):
        v = golden.edge_fp32_for_format(f, rng, n_rne) if f != FP32 else \
            rng.integers(0, 2**32, n_rne, dtype=np.uint32).view(np.float32)
        xs.append(np.asarray(v, np.float32).view(np.uint32))
        fmts.append(np.full(len(v), index))
    # stochastic: one value between two bf16 neighbours (3/8 of the way up), one between two
    # fp8_e5m2 neighbours (5/8 of the way up), each many times, interleaved with the rest
    bf16_x, e5_x = np.float32(1.0 + 3 / 8 * 2.0**-7), np.float32(1.0 + 5 / 8 * 2.0**-2)
    n_sto = 400
    xs += [np.full(n_sto, bf16_x).view(np.uint32), np.full(n_sto, e5_x).view(np.uint32)]
    fmts += [np.full(n_sto, 1), np.full(n_sto, 4)]
    x, fmt = np.concatenate(xs), np.concatenate(fmts)
    sto = np.concatenate([np.zeros(len(x) - 2 * n_sto, bool), np.ones(2 * n_sto, bool)])
    order = rng.permutation(len(x))
    x, fmt, sto = x[order], fmt[order], sto[order]
    got = run_format_cast(rng_name, x, fmt, sto)
    for index, f in enumerate(RUN_TIME_FORMATS):
        pick = (fmt == index) & ~sto
        xf = x[pick].view(np.float32)
        nan = np.isnan(xf)
        if f == FP32:
            want = x[pick]
            nan_bits = 0x7FC00000
        else:
            dtype = ML_DTYPES[f.name]
            # overflow, and NaN or inf into a format without them, are expected (NaNs are
            # compared apart below)
            with np.errstate(over="ignore", invalid="ignore"):
                want = xf.astype(dtype).view(np.uint8 if f.bits == 8 else np.uint16)
            want = want.astype(np.uint32)
            nan_bits = None
        g = got[pick]
        assert np.array_equal(g[~nan], want[~nan]), f.name
        if nan_bits is None:  # any NaN of the format
            assert np.all(np.isnan(g[nan].astype(
                {8: np.uint8, 16: np.uint16}[f.bits]).view(dtype).astype(np.float32))), f.name
        else:
            assert np.all(g[nan] == nan_bits)
    for value, index, frac in ((bf16_x, 1, 3 / 8), (e5_x, 4, 5 / 8)):
        f = RUN_TIME_FORMATS[index]
        dtype = ML_DTYPES[f.name]
        pick = sto & (fmt == index)
        y = got[pick].astype(np.uint8 if f.bits == 8 else np.uint16).view(dtype)
        y = y.astype(np.float64)
        near = np.asarray(np.float32(value).astype(dtype))
        if float(near) > float(value):
            near = np.nextafter(near, np.asarray(-np.inf, dtype))
        down = float(near)
        up = float(np.nextafter(near, np.asarray(np.inf, dtype)))
        assert set(np.unique(y)) <= {down, up}, f.name
        p_up = np.mean(y == up)
        sigma = np.sqrt(frac * (1 - frac) / pick.sum())
        assert abs(p_up - frac) < 4.5 * sigma, (f.name, p_up, frac)


# ---- block-scaled (MX) formats: element widening, the scaled product, one PE ---------------

MX_ML = {"mxfp8": ml_dtypes.float8_e4m3fn, "mxfp4": ml_dtypes.float4_e2m1fn}


def _fp32_bits(values) -> np.ndarray:
    """binary32 bits of float values, every NaN canonical."""
    values = np.asarray(values, dtype=np.float32)
    return np.where(np.isnan(values), np.uint32(0x7FC00000), values.view(np.uint32))


def test_multi_widen_mx_elements():
    """Every element code of mxfp8 and mxfp4, beside a plain format, widens to ml_dtypes'
    value (bits above the element, where the scale sits, are ignored)."""
    formats = (MXFP8, BF16, MXFP4)
    x, codes, want = [], [], []
    for code, fmt in enumerate(formats):
        if fmt is BF16:
            continue
        elements = np.arange(1 << fmt.bits)
        values = elements.astype(np.uint8).view(MX_ML[fmt.name])  # one code per byte
        x.append(elements | (np.arange(elements.size) * 37 % 256) << 8)
        codes.append(np.full(elements.size, code))
        want.append(_fp32_bits(values.astype(np.float32)))
    got = run_comb(MultiWiden(MultiWidenParams(formats=formats, width=16)),
                   {"x": np.concatenate(x), "code": np.concatenate(codes)}, "y")
    assert np.array_equal(got, np.concatenate(want))


def _scaled_reference(a, b, e) -> np.ndarray:
    """``a * b * 2**e`` of binary32 bit patterns, rounded once: exact in float64 (24-bit
    significands, exponents far inside its range), then numpy's cast to float32."""
    with np.errstate(all="ignore"):
        exact = np.ldexp(a.astype(np.uint32).view(np.float32).astype(np.float64)
                         * b.astype(np.uint32).view(np.float32).astype(np.float64), e)
        return _fp32_bits(exact.astype(np.float32))


def test_scaled_product(seed):
    """FpMulScaled32 against float64: MX elements with their E8M0 scales folded in (products
    that overflow, land among the subnormals or vanish), and binary32 edge pairs with any
    offset in [-511, 511]."""
    rng = np.random.default_rng(seed)
    a, b, e = [], [], []
    for fmt in (MXFP8, MXFP4):
        codes = rng.integers(0, 1 << fmt.bits, (2, 80))
        values = codes.astype(np.uint8).view(MX_ML[fmt.name]).astype(np.float32)
        a.append(values[0].view(np.uint32))
        b.append(values[1].view(np.uint32))
        e.append(rng.integers(0, 255, 80) + rng.integers(0, 255, 80) - 254)
    x, y = golden.edge_fp32_pairs(rng, 80)
    a.append(x)
    b.append(y)
    e.append(rng.integers(-511, 512, 80))
    directed = [  # a, b, e, a * b * 2**e
        (0x3FC00000, 0x3F800000, -149, 0x00000002),  # 1.5 * 2**-149 ties to even 2 * 2**-149
        (0x3F800000, 0x3F800000, -150, 0x00000000),  # 2**-150 ties to even 0
        (0x3F800000, 0xBF800000, -126, 0x80800000),  # -2**-126, the smallest normal
        (0x43E00000, 0x43E00000, 110, 0x7F440000),   # 448 * 448 * 2**110: no overflow
        (0x43E00000, 0x43E00000, 111, 0x7F800000),   # ... one more: infinity
        (0x00000001, 0x4B000000, 0, 0x00800000),     # subnormal in, normal out
    ]
    da, db, de, want = (np.array(c, dtype=np.int64) for c in zip(*directed, strict=True))
    a, b, e = (np.concatenate([*v, d]) for v, d in ((a, da), (b, db), (e, de)))
    got = run_comb(FpMulScaled32(), {"a": a, "b": b, "e": e}, "y")
    assert np.array_equal(got, _scaled_reference(a, b, e))
    assert np.array_equal(got[-len(directed):], want)


def test_pe_mx_products(seed):
    """One PE of an array with MX formats: stationary and moving words carrying a quad of
    elements (bytes or nibbles) and their E8M0 scale (bits 32-39), mxfp8 and mxfp4 mixed,
    scales across their whole range (255, NaN, included), four products a cycle, against
    the golden :func:`~sim.golden.systolic.matmul_mx` of 4 x 1 tiles; a bf16 pass on the
    same PE ignores the bits above its element."""
    params = SystolicParams(rows=1, cols=1, formats=("mxfp8", "bf16", "mxfp4"))
    assert params.mx_scale_lsb == 32 and params.lanes == 4
    pe = ProcessingElement(params)
    layout = ctl_layout(params)
    rng = np.random.default_rng(seed)
    count = 64
    wcode, xcode = (rng.choice([0, 2], count) for _ in range(2))
    wcode[:8] = xcode[:8] = 1  # bf16 first
    elements = rng.integers(0, 256, (2, count, 4))
    elements[0, wcode == 2] &= 0xF
    elements[1, xcode == 2] &= 0xF
    scales = rng.integers(0, 256, (2, count))
    scales[:, 8:20] = rng.integers(120, 135, (2, 12))  # products near 1 as well
    codes = (wcode, xcode)

    def word(j, i) -> int:
        bits = 4 if codes[j][i] == 2 else 8
        return (sum(int(e) << (bits * lane) for lane, e in enumerate(elements[j, i]))
                | int(scales[j, i]) << 32)

    want = []
    for i in range(count):
        w, x = word(0, i), word(1, i)
        if wcode[i] == 1:
            want.append(matmul([[w & 0xFFFF]], [[x & 0xFFFF]], "bf16")[0, 0])
            continue
        wf, xf = params.formats[wcode[i]], params.formats[xcode[i]]
        want.append(matmul_mx(elements[0, i][:, None], elements[1, i][:, None], wf,
                              [[scales[0, i]]], [[scales[1, i]]], moving_fmt=xf)[0, 0])

    def ctl(i) -> int:
        fields = {"bank": 0, "wfmt": int(wcode[i]), "xfmt": int(xcode[i]),
                  "mx": int(wcode[i] != 1)}
        return sum(fields.get(name, 0) << f.offset for name, f in layout)

    got = []

    async def bench(ctx):
        ctx.set(pe.en, 1)
        for i in range(count):
            w, x = word(0, i), word(1, i)
            ctx.set(pe.wv_in, 1)
            ctx.set(pe.w_in, w)
            await ctx.tick()
            ctx.set(pe.wv_in, 0)
            ctx.set(pe.x_in, x)
            ctx.set(pe.ctl_in, ctl(i))
            await ctx.tick()
            got.append(ctx.get(pe.psum_out))

    sim = Simulator(pe)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert got == [int(v) for v in want]
