"""Amaranth-simulator tests of the engines' small blocks, parameter checks, and the golden
vector model against independent numpy references."""

import ml_dtypes
import numpy as np
import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from hdl.numerics.cast import seed_value
from hdl.numerics.dtypes import ML_DTYPES
from hdl.vector.activation import ActivationLane, ActivationParams
from hdl.vector.fpcmp import f_eq, f_lt, f_max, f_min
from hdl.vector.functions import FunctionSpec
from hdl.vector.ops import LANE_OPS, Reduce, VectorOp
from hdl.vector.vector import VectorLane, VectorParams
from sim.golden import activation as golden_act
from sim.golden import vector as golden

CASES = np.array([
    0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001, 0x00000001,
    0x807FFFFF, 0x7F7FFFFF, 0x3F800000, 0xBF800000, 0x3F800001, 0x40490FDB, 0xC0000000,
    0x0000001F, 0x00000020,  # shift counts: the last that shifts, the first that clears
], dtype=np.uint32)


def _pairs():
    a, b = np.meshgrid(CASES, CASES, indexing="ij")
    return a.ravel(), b.ravel()


def test_fp_compare_helpers_match_ieee():
    a_sig, b_sig = Signal(32), Signal(32)
    outs = {name: Signal(32 if name in ("max", "min") else 1) for name in
            ("lt", "eq", "max", "min")}
    m = Module()
    m.d.comb += [outs["lt"].eq(f_lt(a_sig, b_sig)), outs["eq"].eq(f_eq(a_sig, b_sig)),
                 outs["max"].eq(f_max(a_sig, b_sig)), outs["min"].eq(f_min(a_sig, b_sig))]
    a, b = _pairs()
    got = {k: [] for k in outs}

    async def bench(ctx):
        for x, y in zip(a, b, strict=True):
            ctx.set(a_sig, int(x))
            ctx.set(b_sig, int(y))
            for k, s in outs.items():
                got[k].append(ctx.get(s))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    fa, fb = a.view(np.float32), b.view(np.float32)
    with np.errstate(invalid="ignore"):
        assert got["lt"] == list((fa < fb).astype(int))
        assert got["eq"] == list((fa == fb).astype(int))
    nan = np.isnan(fa) | np.isnan(fb)
    # max/min: NaN canonical, else numpy's choice except that ties keep a
    want_max = np.where(nan, 0x7FC00000, np.where(fb > fa, b, a))
    want_min = np.where(nan, 0x7FC00000, np.where(fb < fa, b, a))
    assert got["max"] == [int(v) for v in want_max]
    assert got["min"] == [int(v) for v in want_min]
    both = ~nan & (fa != fb)
    assert np.array_equal(np.array(got["max"], np.uint32)[both].view(np.float32),
                          np.maximum(fa, fb)[both])


def _run_lane(op, reduce, a, b, first, last, out_format="fp32", stochastic=False, seed=0,
              in_format="fp32", b_format="fp32", scalar=None, op1=VectorOp.COPY, scalar1=0):
    """The lane's outputs for one stream of elements (a simulation of its own)."""
    return _run_lane_cases([dict(op=op, reduce=reduce, a=a, b=b, first=first, last=last,
                                 out_format=out_format, stochastic=stochastic, seed=seed,
                                 in_format=in_format, b_format=b_format, scalar=scalar,
                                 op1=op1, scalar1=scalar1)])[0]


def _run_lane_cases(cases: list[dict]) -> list[np.ndarray]:
    """The lane's outputs for each case (the keyword arguments of :func:`_run_lane`), one
    after another in one simulation, the pipeline drained between them: one elaboration
    for all. Cases with stochastic rounding run alone (the generator starts at reset)."""
    dut = VectorLane()
    params = VectorParams(lanes=1)
    outs = []
    defaults = dict(out_format="fp32", stochastic=False, seed=0, in_format="fp32",
                    b_format="fp32", scalar=None, op1=VectorOp.COPY, scalar1=0, scan=False,
                    reverse0=False, reverse1=False)
    cases = [defaults | case for case in cases]
    if len(cases) > 1 and any(c["stochastic"] for c in cases):
        raise ValueError("a stochastic case runs alone")

    async def bench(ctx):
        ctx.set(dut.en, 1)
        for c in cases:
            ctx.set(dut.op, c["op"])
            ctx.set(dut.reduce, c["reduce"])
            ctx.set(dut.in_format, params.format_index(c["in_format"]))
            ctx.set(dut.b_format, params.format_index(c["b_format"]))
            ctx.set(dut.out_format, params.format_index(c["out_format"]))
            ctx.set(dut.stochastic, int(c["stochastic"]))
            ctx.set(dut.seed, seed_value("xorwow", c["seed"], 0))
            ctx.set(dut.use_scalar, int(c["scalar"] is not None))
            ctx.set(dut.scalar, 0 if c["scalar"] is None else int(c["scalar"]))
            ctx.set(dut.op1, c["op1"])
            ctx.set(dut.scalar1, int(c["scalar1"]))
            for flag in ("scan", "reverse0", "reverse1"):
                ctx.set(getattr(dut, flag), int(c[flag]))
            a, b, first, last = c["a"], c["b"], c["first"], c["last"]
            n = len(a)
            out = []
            for k in range(n + 2):
                ctx.set(dut.take, int(k < n))
                ctx.set(dut.start, int(k == 0))
                if k < n:
                    ctx.set(dut.a, int(a[k]))
                    ctx.set(dut.b, int(b[k]))
                if 1 <= k <= n:  # stage 1 holds element k-1
                    ctx.set(dut.step, 1)
                    ctx.set(dut.first, int(first[k - 1]))
                    ctx.set(dut.last, int(last[k - 1]))
                else:
                    ctx.set(dut.step, 0)
                await ctx.tick()
                if k >= 1:
                    out.append(ctx.get(dut.y))
            outs.append(np.array(out[:n], dtype=np.uint32))  # out[k]: y once element k left

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return outs


def test_vector_lane_elementwise_matches_golden():
    """Every operation on every pair of the special and edge values, in one simulation."""
    a, b = _pairs()
    none = np.zeros(len(a), bool)
    ops = list(LANE_OPS)
    gots = _run_lane_cases([dict(op=op, reduce=Reduce.NONE, a=a, b=b, first=none, last=none)
                            for op in ops])
    for op, got in zip(ops, gots, strict=True):
        assert [hex(v) for v in got] == [hex(v) for v in golden.elementwise(op, a, b)], op


def test_vector_lane_reductions_restart_each_row():
    rng = np.random.default_rng(5)
    a = rng.standard_normal(9).astype(np.float32).view(np.uint32)
    last = np.array([0, 0, 1, 1, 0, 0, 0, 0, 1], bool)
    first = np.concatenate([[True], last[:-1]])
    reduces = (Reduce.SUM, Reduce.MAX)
    gots = _run_lane_cases([dict(op=VectorOp.COPY, reduce=r, a=a, b=a, first=first, last=last)
                            for r in reduces])
    for reduce, got in zip(reduces, gots, strict=True):
        got = got[last]
        rows = np.split(a.view(np.float32), np.flatnonzero(last)[:-1] + 1)
        if reduce == Reduce.SUM:
            want = []
            for row in rows:  # sequential float32 sum from +0.0
                acc = np.float32(0.0)
                for v in row:
                    acc = np.float32(acc + v)
                want.append(acc)
        else:
            want = [row.max() for row in rows]
        assert np.array_equal(got.view(np.float32), np.array(want, np.float32))


def test_vector_lane_writes_the_instruction_format():
    rng = np.random.default_rng(8)
    fa = (rng.standard_normal(24) * 3).astype(np.float32)
    fb = (rng.standard_normal(24) * 3).astype(np.float32)
    a, b = fa.view(np.uint32), fb.view(np.uint32)
    none = np.zeros(24, bool)
    got = _run_lane(VectorOp.MULTIPLY, Reduce.NONE, a, b, none, none, "bf16")
    want = (fa * fb).astype(ml_dtypes.bfloat16).view(np.uint16)  # RNE, as ml_dtypes rounds
    assert np.array_equal(got, want)
    last = np.array([0, 0, 1, 0, 1] + [0] * 18 + [1], bool)
    first = np.concatenate([[True], last[:-1]])
    got = _run_lane(VectorOp.COPY, Reduce.SUM, a, a, first, last, "fp16")[last]
    sums = [np.float32(0.0)] * 3
    for row, v in zip(np.cumsum(np.concatenate([[0], last[:-1]])), fa, strict=True):
        sums[row] = np.float32(sums[row] + v)  # sequential float32 sum from +0.0
    assert np.array_equal(got, np.array(sums, np.float32).astype(np.float16).view(np.uint16))
    # stochastic rounding: the lane's generator, one word per output beat, as the golden model
    got = _run_lane(VectorOp.ADD, Reduce.NONE, a, b, none, none, "bf16", True, seed=3)
    want = golden.run(VectorParams(lanes=1, seed=3), VectorOp.ADD, a[:, None], b[:, None],
                      out_format="bf16", rounding="stochastic")
    assert np.array_equal(got, want.ravel())


def test_vector_lane_reads_a_and_b_in_their_own_formats():
    """``a`` in one format and ``b`` in another (bf16 and fp8_e5m2, fp16 and fp32), each
    widened exactly: the products against ml_dtypes, and the golden model agrees."""
    rng = np.random.default_rng(4)
    fa = rng.standard_normal(16).astype(np.float32)
    fb = rng.standard_normal(16).astype(np.float32)
    none = np.zeros(16, bool)
    types = (("bf16", "fp8_e5m2"), ("fp16", "fp32"))
    words = {}
    for a_type, b_type in types:
        xa = fa.astype(ML_DTYPES[a_type])
        xb = fb.astype(ML_DTYPES[b_type])
        words[a_type, b_type] = (xa, xb, xa.view(f"u{xa.itemsize}").astype(np.uint32),
                                 xb.view(f"u{xb.itemsize}").astype(np.uint32))
    gots = _run_lane_cases([dict(op=VectorOp.MULTIPLY, reduce=Reduce.NONE, a=words[t][2],
                                 b=words[t][3], first=none, last=none, in_format=t[0],
                                 b_format=t[1]) for t in types])
    for (a_type, b_type), got in zip(types, gots, strict=True):
        xa, xb, a, b = words[a_type, b_type]
        want = (xa.astype(np.float32) * xb.astype(np.float32)).view(np.uint32)
        assert np.array_equal(got, want), (a_type, b_type)
        assert np.array_equal(golden.run(VectorParams(lanes=1), VectorOp.MULTIPLY, a[:, None],
                                         b[:, None], in_format=a_type,
                                         b_format=b_type).ravel(), want)


def test_vector_lane_runs_a_second_operation_on_the_fp32_result():
    """``op1(op0(a, scalar), scalar1)``: the fp32 intermediate unrounded, against numpy
    float32 arithmetic; ``op1`` COPY leaves the first result as it is, a non-canonical NaN
    of a bitwise operation included; the golden model agrees."""
    rng = np.random.default_rng(6)
    fa = (rng.standard_normal(16) * 4).astype(np.float32)
    a = fa.view(np.uint32)
    none = np.zeros(16, bool)
    s0, s1 = np.float32(1.0 / 3.0), np.float32(-0.7)
    bits = {v: int(np.float32(v).view(np.uint32)) for v in (s0, s1)}
    cases = [(VectorOp.MULTIPLY, VectorOp.ADD, fa * s0 + s1),
             (VectorOp.SUBTRACT, VectorOp.MAX, np.maximum(fa - s0, s1)),
             (VectorOp.ADD, VectorOp.GREATER, ((fa + s0) > s1).astype(np.float32)),
             (VectorOp.MAX, VectorOp.MULTIPLY, np.maximum(fa, s0) * s1)]
    nan = 0xFFC00001  # OR with it gives a non-canonical NaN; COPY after keeps it, ADD not
    gots = _run_lane_cases(
        [dict(op=op0, reduce=Reduce.NONE, a=a, b=a, first=none, last=none, scalar=bits[s0],
              op1=op1, scalar1=bits[s1]) for op0, op1, _ in cases]
        + [dict(op=VectorOp.BITWISE_OR, reduce=Reduce.NONE, a=a, b=a, first=none, last=none,
                scalar=nan, op1=op1, scalar1=scalar1)
           for op1, scalar1 in ((VectorOp.COPY, 0), (VectorOp.ADD, bits[s1]))])
    for (op0, op1, want), got in zip(cases, gots[:-2], strict=True):
        assert np.array_equal(got, want.astype(np.float32).view(np.uint32)), (op0, op1)
        ref = golden.run(VectorParams(lanes=1), op0, a[:, None], scalar=[bits[s0]], op1=op1,
                         scalar1=[bits[s1]])
        assert np.array_equal(ref.ravel(), got), (op0, op1)
    assert np.all(gots[-2] == (a | nan))
    assert np.all(gots[-1] == 0x7FC00000)


def test_vector_lane_scans_a_running_value_in_fp32():
    """A scan ``r = op1(op0(a, r_prev), b)`` from the scalar, one element a cycle: a running
    sum, the recurrence ``r = a * r_prev + b``, both operations with their operands swapped,
    and COPY as either operation, against numpy float32 arithmetic step by step; the golden
    model agrees."""
    rng = np.random.default_rng(8)
    n = 24
    fa = (rng.standard_normal(n) * 2).astype(np.float32)
    fb = (rng.standard_normal(n) * 2).astype(np.float32)
    a, b = fa.view(np.uint32), fb.view(np.uint32)
    none = np.zeros(n, bool)
    init = np.float32(0.625)

    def steps(f):
        out, r = [], init
        for x, y in zip(fa, fb, strict=True):
            r = np.float32(f(x, r, y))
            out.append(r)
        return np.array(out, np.float32).view(np.uint32)

    cases = [(VectorOp.ADD, VectorOp.BITWISE_OR, False, False, steps(lambda x, r, y: x + r)),
             (VectorOp.MULTIPLY, VectorOp.ADD, False, False,
              steps(lambda x, r, y: np.float32(x * r) + y)),
             (VectorOp.SUBTRACT, VectorOp.SUBTRACT, True, True,
              steps(lambda x, r, y: y - np.float32(r - x))),
             (VectorOp.COPY, VectorOp.MAX, True, False,
              steps(lambda x, r, y: np.maximum(r, y))),
             (VectorOp.ADD, VectorOp.COPY, False, True, fb.view(np.uint32))]
    zero_b = [VectorOp.BITWISE_OR]  # a running sum: b is zero, the OR passes r as it is
    gots = _run_lane_cases(
        [dict(op=op0, reduce=Reduce.NONE, a=a, b=np.zeros(n, np.uint32) if op1 in zero_b
              else b, first=none, last=none, scalar=int(init.view(np.uint32)), op1=op1,
              scan=True, reverse0=r0, reverse1=r1) for op0, op1, r0, r1, _ in cases])
    for (op0, op1, r0, r1, want), got in zip(cases, gots, strict=True):
        assert np.array_equal(got, want), (op0, op1, r0, r1)
        ref = golden.run(VectorParams(lanes=1), op0, a[:, None],
                         np.zeros((n, 1), np.uint32) if op1 in zero_b else b[:, None],
                         scalar=[init.view(np.uint32)], op1=op1, scanning=True,
                         reverse0=r0, reverse1=r1)
        assert np.array_equal(ref.ravel(), got), (op0, op1, r0, r1)


def test_golden_vector_ops_against_numpy():
    rng = np.random.default_rng(11)
    fa = (rng.standard_normal(500) * 8).astype(np.float32)
    fb = (rng.standard_normal(500) * 8).astype(np.float32)
    a, b = fa.view(np.uint32), fb.view(np.uint32)
    f = {op: golden.elementwise(op, a, b).view(np.float32) for op in VectorOp}
    assert np.array_equal(f[VectorOp.ADD], fa + fb)
    assert np.array_equal(f[VectorOp.SUBTRACT], fa - fb)
    assert np.array_equal(f[VectorOp.MULTIPLY], fa * fb)
    assert np.array_equal(f[VectorOp.MAX], np.maximum(fa, fb))
    assert np.array_equal(f[VectorOp.MIN], np.minimum(fa, fb))
    assert np.array_equal(f[VectorOp.GREATER], (fa > fb).astype(np.float32))
    assert np.array_equal(f[VectorOp.LESS_EQUAL], (fa <= fb).astype(np.float32))
    assert np.array_equal(f[VectorOp.ABS], np.abs(fa))
    assert np.array_equal(f[VectorOp.SQUARE], fa * fa)
    assert np.array_equal(golden.elementwise(VectorOp.BITWISE_XOR, a, b), a ^ b)
    assert np.array_equal(f[VectorOp.LOGICAL_AND], np.logical_and(fa, fb).astype(np.float32))
    assert np.array_equal(f[VectorOp.LOGICAL_OR], np.logical_or(fa, fb).astype(np.float32))
    assert np.array_equal(f[VectorOp.LOGICAL_XOR], np.logical_xor(fa, fb).astype(np.float32))
    assert np.array_equal(f[VectorOp.ABS_MAX], np.where(np.abs(fa) > np.abs(fb), fa, fb))
    assert np.array_equal(f[VectorOp.ABS_MIN], np.where(np.abs(fa) < np.abs(fb), fa, fb))
    # NKI's examples: abs_max(-5, 3) is -5, a tie gives y; abs_min(5, -3) is -3
    pair = np.array([-5, 1, 5, 1], np.float32).view(np.uint32), \
        np.array([3, -1, -3, -1], np.float32).view(np.uint32)
    assert golden.elementwise(VectorOp.ABS_MAX, *pair).view(np.float32).tolist()[:2] == \
        [-5.0, -1.0]
    assert golden.elementwise(VectorOp.ABS_MIN, *pair).view(np.float32).tolist()[2:] == \
        [-3.0, -1.0]
    # power (GpSimd's): numpy's float32 power within an ulp, exact where the result is
    # (NKI's example: 3 ** 2 == 9), IEEE's cases (a negative base's integer powers signed,
    # its fractional ones NaN; x ** 0 == 1, even for a NaN)
    base = np.abs(fa) + np.float32(0.5)
    got = golden.elementwise(VectorOp.POWER, base.view(np.uint32), b).view(np.float32)
    want = np.power(base, fb)
    assert np.all(np.abs(got.view(np.int32) - want.view(np.int32)) <= 1)
    cases = np.array([[3, 2, 9], [-2, 3, -8], [-2, 2, 4], [2, -1, 0.5], [-8, 1 / 3, np.nan],
                      [np.nan, 0, 1], [0, -1, np.inf], [1.5, 0.5, np.sqrt(1.5)]], np.float32)
    got = golden.elementwise(VectorOp.POWER, cases[:, 0].view(np.uint32),
                             cases[:, 1].view(np.uint32)).view(np.float32)
    assert np.array_equal(got, cases[:, 2], equal_nan=True)
    # reciprocal: IEEE's fp32 division; rsqrt: float64's rounded to fp32 (NaN below zero)
    with np.errstate(all="ignore"):
        assert np.array_equal(f[VectorOp.RECIPROCAL], np.float32(1) / fa)
        want = (1 / np.sqrt(fa.astype(np.float64))).astype(np.float32)
    assert np.array_equal(f[VectorOp.RSQRT], want, equal_nan=True)
    assert np.all(np.abs(f[VectorOp.RSQRT][fa > 0].view(np.int32)
                         - (1 / np.sqrt(fa[fa > 0])).view(np.int32)) <= 1)
    # truths: zeros of either sign are false, a NaN and a subnormal true
    t = np.array([0.0, -0.0, np.nan, 1e-45, 2.0], np.float32)
    got = golden.elementwise(VectorOp.LOGICAL_OR, t.view(np.uint32), np.uint32(0))
    assert got.view(np.float32).tolist() == [0.0, 0.0, 1.0, 1.0, 1.0]
    # shifts: words as numpy's uint32, counts of 32 on giving 0 (numpy's rule for them)
    ints = rng.integers(0, 2**32, 500, dtype=np.uint32)
    counts = rng.integers(0, 40, 500, dtype=np.uint32)
    assert np.array_equal(golden.elementwise(VectorOp.LEFT_SHIFT, ints, counts),
                          np.left_shift(ints, counts))
    assert np.array_equal(golden.elementwise(VectorOp.RIGHT_SHIFT, ints, counts),
                          np.right_shift(ints, counts))
    params = VectorParams(lanes=4)
    rows = fa[:12].reshape(3, 4)
    last = np.array([False, False, True])
    out = golden.run(params, VectorOp.COPY, rows.view(np.uint32), last=last,
                     reduce=Reduce.MAX)
    assert np.array_equal(out.view(np.float32)[0], rows.max(axis=0))


@pytest.mark.parametrize("kwargs, message", [
    ({"lanes": 0}, r"lanes must be a positive integer, not 0"),
    ({"lanes": 2, "formats": ("fp32", "fp64")}, r"formats must name 'fp32' or float formats"),
    ({"lanes": 2, "rng": "mt"}, r"rng must be one of 'xorwow', 'lfsr32' or None, not 'mt'"),
    ({"lanes": 2, "seed": -1}, r"seed must be an integer in \[0, 2\*\*32\), not -1"),
])
def test_vector_params_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        VectorParams(**kwargs)


@pytest.mark.parametrize("kwargs, message", [
    ({"name": "cosh"}, r"name must be one of identity, relu, .*, not 'cosh'"),
    ({"name": "exp", "lo": 1.0, "hi": 0.0}, r"hi must be greater than lo=1.0, not 0.0"),
    ({"name": "exp", "segments": 0}, r"segments must be a positive integer, not 0"),
    ({"name": "exp", "degree": 9}, r"degree must be an integer in 0..8, not 9"),
    ({"name": "exp", "below": "clamp"}, r"below must be one of zero, one, .*, not 'clamp'"),
    ({"name": "log", "mode": "log", "lo": 0.3, "hi": 4.0},
     r"mode, lo and hi must be 'log', 0.5, 2.0 for log \(fixed by its range reduction\), "
     r"not 'log', 0.3, 4.0"),
    ({"name": "log", "mode": "log", "lo": 0.5, "hi": 2.0, "segments": 3},
     r"segments must be a power of two up to 65536 in log mode, not 3"),
    ({"name": "sigmoid", "mode": "log", "lo": 0.5, "hi": 2.0},
     r"mode must be 'uniform' for sigmoid \(log mode serves the range-reduced log, "
     r"sqrt, rsqrt, reciprocal\), not 'log'"),
    ({"name": "sin", "lo": 0.0, "hi": 0.5, "post_mul_x": True},
     r"post_mul_x must be False for sin \(its reduction fixes what multiplies the "
     r"polynomial\), not True"),
    ({"name": "exp", "above": "exp"}, r"above must be one of zero, one, .*, x, not 'exp'"),
    ({"name": "exp", "anchor": 2.0}, r"anchor must be None or a number in \[lo, hi\], not 2.0"),
    ({"name": "exp", "mode": "exact"}, r"mode must be 'uniform' or 'log' for exp"),
])
def test_function_spec_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        FunctionSpec(**kwargs)


def test_function_names_and_reductions_follow_the_spec_language():
    from hdl.vector.functions import FUNCTION_NAMES, REDUCED
    from specs.model import ACTIVATIONS, RANGE_REDUCED

    assert FUNCTION_NAMES == ACTIVATIONS
    assert set(REDUCED) == set(RANGE_REDUCED)


def test_activation_params_errors():
    with pytest.raises(ValueError, match=r"lanes must be a positive integer, not -2"):
        ActivationParams(lanes=-2)
    with pytest.raises(ValueError, match=r"functions must be a non-empty tuple"):
        ActivationParams(lanes=1, functions=())
    with pytest.raises(ValueError, match=r"name must be one of .*, not 'cosh'"):
        ActivationParams(lanes=1).index("cosh")


# A small set with every path of the lane: the exact functions, the exp reduction, the exp
# tail with and without post-multiplication and with gelu_tanh's cubic exponent, constant
# and ``x`` rules, and the four log-domain reductions.
LANE_FUNCTIONS = (
    FunctionSpec("relu", mode="exact"),
    FunctionSpec("exp", lo=-0.5, hi=0.5, segments=2, degree=2, anchor=0.0),
    FunctionSpec("silu", lo=-8.0, hi=8.0, segments=8, degree=2, post_mul_x=True,
                 below="exp", above="x"),
    FunctionSpec("tanh", lo=-4.0, hi=4.0, segments=4, degree=1, post_mul_x=True,
                 below="minus_one", above="one"),
    FunctionSpec("reciprocal", mode="log", lo=1.0, hi=2.0, segments=2, degree=2),
    FunctionSpec("rsqrt", mode="log", lo=1.0, hi=4.0, segments=1, degree=2),
    FunctionSpec("sqrt", mode="log", lo=1.0, hi=4.0, segments=1, degree=2, anchor=1.0),
    FunctionSpec("log", mode="log", lo=0.5, hi=2.0, segments=2, degree=2, anchor=1.0),
    FunctionSpec("square", mode="exact"),
    FunctionSpec("abs", mode="exact"),
    FunctionSpec("gelu_tanh", lo=-4.0, hi=8.0, segments=3, degree=1, post_mul_x=True,
                 below="exp", above="x"),
    FunctionSpec("sin", lo=0.0, hi=0.5, segments=2, degree=2, anchor=0.0),
    FunctionSpec("cos", lo=0.0, hi=0.5, segments=2, degree=2, anchor=0.0),  # sin's rows
    FunctionSpec("arctan", lo=0.0, hi=1.0, segments=2, degree=1),
)


def lane_inputs(rng: np.random.Generator, per_binade_step: int = 24) -> np.ndarray:
    """Specials, a value from every ``per_binade_step``-th binade of both signs, subnormals
    of several binades and values around the reduction's thresholds (fp32 bit patterns)."""
    fields = np.arange(1, 255, per_binade_step, dtype=np.uint32)
    normal = (fields << 23) | rng.integers(0, 1 << 23, fields.size, dtype=np.uint32)
    sub = np.array([1, 0x35, 0x4000, 0x7FFFFF], dtype=np.uint32)
    near = np.float32([1.0, 1.4142135, 1.4142137, 2.0, 0.75, -10.0, -87.5, -100.0, 88.7, 89.0,
                       3.0, 4.0, 0.5, 0.49999997, 3.1415927, 1.5707964, 16367173 * 2.0**72,
                       1e30, 2.0**126, 1.5 * 2.0**126]).view(np.uint32)
    mags = np.concatenate([normal, sub, near])
    return np.concatenate([CASES, mags, mags | np.uint32(0x80000000)]).astype(np.uint32)


def test_activation_lane_matches_golden(seed):
    functions = LANE_FUNCTIONS
    params = ActivationParams(lanes=1, functions=functions)
    dut = ActivationLane(params)
    xs = lane_inputs(np.random.default_rng(seed))
    one = 0x3F800000
    latency = params.latency
    results = {}

    async def bench(ctx):
        ctx.set(dut.en, 1)
        ctx.set(dut.scale, one)
        ctx.set(dut.bias, 0x80000000)  # x * 1 + (-0) is x, -0 included
        for func in range(len(functions)):
            ctx.set(dut.func, func)
            out = []
            for k in range(len(xs) + latency):
                ctx.set(dut.data, int(xs[k]) if k < len(xs) else 0)
                await ctx.tick()
                if k >= latency - 1 and len(out) < len(xs):
                    out.append(ctx.get(dut.y))
            results[func] = out

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    for func in range(len(functions)):
        want = golden_act.evaluate(functions, func, xs)
        got = np.array(results[func], dtype=np.uint32)
        bad = np.flatnonzero(got != want)
        assert bad.size == 0, (f"{functions[func].name}: x={xs[bad[:4]].view(np.float32)} "
                               f"rtl={got[bad[:4]]} golden={want[bad[:4]]}")
