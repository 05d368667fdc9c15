"""tf32 and the block-scaled MX quad types in the core's instruction set and simulator,
against references built from numpy and ml_dtypes apart from the golden model."""

import ml_dtypes
import numpy as np
import pytest

from hdl.core.isa import (
    AP,
    Activation,
    DmaCopy,
    IsaError,
    LoadStationary,
    MultiplyMoving,
    SemSignal,
    SemWait,
    TensorCopy,
    TensorTensor,
    Transpose,
    decode,
    encode,
    format_instruction,
    mx_scale_partition,
    parse,
)
from sim.core import Core, Program, ProgramError
from sim.golden import systolic, systolic_cycles


def tile(space, dtype, p0, n, off, free):
    return AP(space, dtype, p0, n, off, ((free, 1),))


def run_with(core_params_, streams, tensors):
    """Run ``streams`` after DMAs of ``tensors`` ({name: (sbuf AP, raw array)}) into SBUF."""
    prog = Program()
    dma = []
    hbm_aps = {}
    for name, (ap, raw) in tensors.items():
        src = prog.tensor(name, raw.shape, ap.dtype).ap((0, raw.shape[0]))
        hbm_aps[name] = (src, raw)
        dma.append(DmaCopy(dst=ap, src=src))
    prog.streams = {"dma0": dma + [SemSignal(sem=0)]}
    for name, ins in streams.items():
        prog.streams[name] = [SemWait(sem=0, value=1)] + list(ins)
    hbm = np.zeros(prog.hbm_bytes, dtype=np.uint8)
    for src, raw in hbm_aps.values():
        data = np.ascontiguousarray(raw).view(np.uint8).reshape(-1)
        hbm[src.offset: src.offset + data.size] = data
    return Core(core_params_).run(prog, hbm=hbm)


# --- tf32 --------------------------------------------------------------------------------

def tf32_words(rng, shape):
    """Random tf32 values as their 32-bit words: fp32 with the low 13 bits clear."""
    x = rng.standard_normal(shape).astype(np.float32)
    return x.view(np.uint32) & np.uint32(0xFFFFE000)


def test_tf32_is_a_32_bit_type_that_round_trips():
    ap = tile("sbuf", "tf32", 0, 8, 64, 16)
    assert ap.itemsize == 4 and ap.nbytes == 8 * 16 * 4
    ins = LoadStationary(src=ap)
    assert decode(encode(ins)) == ins == parse(format_instruction(ins))


def test_tf32_matmul_sums_in_k_order(trn1, seed):
    """A tf32 matmul on trn1 (whose array lists tf32) equals numpy float32 products summed in
    k order: tf32's 11-bit significands multiply exactly in binary32."""
    rng = np.random.default_rng(seed)
    k, m, n = 24, 8, 12
    w, x = tf32_words(rng, (k, m)), tf32_words(rng, (k, n))
    st, mv = tile("sbuf", "tf32", 0, k, 0, m), tile("sbuf", "tf32", 0, k, 256, n)
    out = tile("psum", "fp32", 0, m, 0, n)
    r = run_with(trn1, {"tensor": [LoadStationary(src=st), MultiplyMoving(dst=out, src=mv)]},
                 {"w": (st, w), "x": (mv, x)})
    got = r.psum[:m, :4 * n].copy().view(np.float32)
    want = np.zeros((m, n), np.float32)
    for i in range(k):
        want = want + w[i].view(np.float32)[:, None] * x[i].view(np.float32)[None, :]
    assert np.array_equal(got, want)


def test_tf32_costs_bf16s_cycles_and_mixes_with_nothing(trn1):
    """tf32 runs at the spec's rate 1, bf16's cycles; "FP32/TF32 not mixed with others"
    [ISA]: a tf32 tile refuses a bf16 moving tile."""
    costs = {}
    for fmt in ("tf32", "bf16"):
        prog = Program()
        prog.streams = {"tensor": [LoadStationary(src=tile("sbuf", fmt, 0, 128, 0, 128)),
                                   MultiplyMoving(dst=tile("psum", "fp32", 0, 128, 0, 512),
                                                  src=tile("sbuf", fmt, 0, 128, 4096, 512))]}
        costs[fmt] = Core(trn1).run(prog, timing_only=True).time
    assert costs["tf32"] == costs["bf16"]
    prog = Program()
    prog.streams = {"tensor": [LoadStationary(src=tile("sbuf", "tf32", 0, 8, 0, 8)),
                               MultiplyMoving(dst=tile("psum", "fp32", 0, 8, 0, 8),
                                              src=tile("sbuf", "bf16", 0, 8, 512, 8))]}
    with pytest.raises(ProgramError, match=r"tensor\[1\].*8 x 8 tf32.*fp32, tf32 \(not mixed "
                                                 r"with others\)"):
        Core(trn1).run(prog, timing_only=True)


def test_tf32_casts_round_to_nearest_even_and_transposes_bit_for_bit(trn1):
    """The vector engine's fp32 -> tf32 copy keeps the top 19 bits rounded to nearest even
    (integer arithmetic on the words, ties included) with the low 13 bits zero; a transpose
    moves the words unchanged."""
    rng = np.random.default_rng(7)
    p, f = 8, 16
    x = rng.standard_normal((p, f)).astype(np.float32).view(np.uint32)
    x[0, :4] = [0x3F801000, 0x3F803000, 0x3F800FFF, 0xBF805001]  # ties to even, below, above
    src, dst = tile("sbuf", "fp32", 0, p, 0, f), tile("sbuf", "tf32", 0, p, 1024, f)
    r = run_with(trn1, {"vector": [TensorCopy(dst=dst, src=src)]}, {"x": (src, x)})
    got = r.sbuf[:p, 1024:1024 + 4 * f].copy().view(np.uint32)
    x64 = x.astype(np.int64)
    want = ((x64 + 0xFFF + ((x64 >> 13) & 1)) >> 13 << 13).astype(np.uint32)
    assert np.array_equal(got, want)
    t_dst = AP("psum", "tf32", 0, f, 0, ((p, 1),))
    r = run_with(trn1, {"tensor": [Transpose(dst=t_dst, src=dst)],
                        "vector": []}, {"x": (dst, want)})
    assert np.array_equal(r.psum[:f, :4 * p].copy().view(np.uint32), want.T)


# --- MX ----------------------------------------------------------------------------------

def pack(codes, dtype):
    """(4P, F) element codes -> (P, F) quad words, code i of partition p from row 4p + i."""
    bits = 8 if dtype == "mxfp8_x4" else 4
    quad = codes.reshape(-1, 4, codes.shape[1]).astype(np.uint32)
    words = sum(quad[:, i] << (bits * i) for i in range(4))
    return words.astype(np.uint32 if bits == 8 else np.uint16)


def scale_tile(scales, partitions):
    """(G, F) scales in the SBUF layout: group g at partition mx_scale_partition(g)."""
    out = np.zeros((partitions, scales.shape[1]), np.uint8)
    for g in range(scales.shape[0]):
        out[mx_scale_partition(g)] = scales[g]
    return out


ELEMENT = {"mxfp8_x4": ml_dtypes.float8_e4m3fn, "mxfp4_x4": ml_dtypes.float4_e2m1fn}


def mx_reference(w, x, wdt, xdt, sw, sx):
    """Products of ml_dtypes element values and float8_e8m0fnu scales, exact in float64,
    rounded once to float32 and summed in k order from +0.0."""
    def values(codes, dt):
        return codes.astype(np.uint8).view(ELEMENT[dt]).astype(np.float64)

    def scale(s):
        return s.astype(np.uint8).view(ml_dtypes.float8_e8m0fnu).astype(np.float64)

    wv, xv, swv, sxv = values(w, wdt), values(x, xdt), scale(sw), scale(sx)
    acc = np.zeros((w.shape[1], x.shape[1]), np.float32)
    with np.errstate(all="ignore"):
        for k in range(w.shape[0]):
            b = k // 32
            product = wv[k][:, None] * xv[k][None, :] * swv[b][:, None] * sxv[b][None, :]
            acc = acc + product.astype(np.float32)
    return acc


@pytest.mark.parametrize("wdt, xdt, p", [("mxfp8_x4", "mxfp8_x4", 64),
                                         ("mxfp8_x4", "mxfp4_x4", 20),
                                         ("mxfp4_x4", "mxfp4_x4", 1)])
def test_mx_matmul_is_bit_exact(trn3, seed, wdt, xdt, p):
    """An MX matmul of P quad partitions (4P contraction elements, groups of 8 partitions
    crossing quadrants at P = 64) equals the ml_dtypes reference and the golden
    ``matmul_mx`` bit for bit, mxfp8 with mxfp4 included [NKI4]."""
    rng = np.random.default_rng(seed)
    m, n = 16, 24
    k, groups = 4 * p, -(-p // 8)

    def codes(dt, cols):
        bits = 8 if dt == "mxfp8_x4" else 4
        c = rng.integers(0, 1 << bits, (k, cols))
        if bits == 8:  # keep NaN codes out of the float reference's way
            c[(c & 0x7F) == 0x7F] = 0x38
        return c

    w, x = codes(wdt, m), codes(xdt, n)
    sw, sx = rng.integers(110, 140, (groups, m)), rng.integers(110, 140, (groups, n))
    sp = p if p > 32 else groups
    st, mv = tile("sbuf", wdt, 0, p, 0, m), tile("sbuf", xdt, 0, p, 256, n)
    st_s, mv_s = tile("sbuf", "uint8", 0, sp, 1024, m), tile("sbuf", "uint8", 0, sp, 1088, n)
    out = tile("psum", "fp32", 0, m, 0, n)
    r = run_with(trn3, {"tensor": [LoadStationary(src=st, scale=st_s),
                                   MultiplyMoving(dst=out, src=mv, scale=mv_s)]},
                 {"w": (st, pack(w, wdt)), "x": (mv, pack(x, xdt)),
                  "sw": (st_s, scale_tile(sw, sp)), "sx": (mv_s, scale_tile(sx, sp))})
    got = r.psum[:m, :4 * n].copy().view(np.uint32)
    assert np.array_equal(got, mx_reference(w, x, wdt, xdt, sw, sx).view(np.uint32))
    golden = systolic.matmul_mx(w, x, wdt[:5], sw, sx, moving_fmt=xdt[:5])
    assert np.array_equal(got, golden)
    assert r.flops == 2 * k * m * n


def test_mx_runs_at_four_times_bf16(trn3):
    """The spec's MX rate 4: a matmul of 128 quad partitions (K = 512) takes the cycles of a
    bf16 one of K = 128, four times its work."""
    res = {}
    for fmt in ("mxfp8_x4", "bf16"):
        scale = (lambda n: tile("sbuf", "uint8", 0, 128, 8192, n)) if fmt != "bf16" else \
            (lambda n: None)
        prog = Program()
        prog.streams = {"tensor": [LoadStationary(src=tile("sbuf", fmt, 0, 128, 0, 128),
                                                  scale=scale(128)),
                                   MultiplyMoving(dst=tile("psum", "fp32", 0, 128, 0, 512),
                                                  src=tile("sbuf", fmt, 0, 128, 4096, 512),
                                                  scale=scale(512))]}
        res[fmt] = Core(trn3).run(prog, timing_only=True)
    assert res["mxfp8_x4"].time == res["bf16"].time
    assert res["mxfp8_x4"].flops == 4 * res["bf16"].flops


@pytest.mark.parametrize("fmt, rate", [("mxfp8_x4", 4.0), ("mxfp4_x4", 4.0), ("bf16", 1.0)])
def test_mx_stream_is_the_one_cost_rule(trn3, fmt, rate):
    """Three passes of 128 partitions back to back, each a new stationary: the simulator's
    tensor time is ``matmul_cycles`` at the spec's rate, the rule the system model and
    exploration use, cycle for cycle (K = 1536 in MX, 384 in bf16)."""
    mx = fmt != "bf16"
    ins = []
    for i in range(3):
        ins += [LoadStationary(src=tile("sbuf", fmt, 0, 128, 0, 128),
                               scale=tile("sbuf", "uint8", 0, 128, 8192, 128) if mx else None),
                MultiplyMoving(dst=tile("psum", "fp32", 0, 128, 0, 512),
                               src=tile("sbuf", fmt, 0, 128, 4096, 512), accumulate=i > 0,
                               scale=tile("sbuf", "uint8", 0, 128, 9216, 512) if mx else None)]
    prog = Program()
    prog.streams = {"tensor": ins}
    r = Core(trn3).run(prog, timing_only=True)
    k = 3 * 128 * (4 if mx else 1)
    want = systolic_cycles.matmul_cycles(128, k, 512, trn3.rows, trn3.cols, rate, trn3.moving_max,
                                         trn3.tensor.load_columns)
    assert r.time * trn3.clock("tensor") == pytest.approx(want, abs=1e-6)
    assert trn3.rate(fmt.removesuffix("_x4")) == rate


@pytest.mark.parametrize("streams, match", [
    ({"tensor": [LoadStationary(src=tile("sbuf", "mxfp8_x4", 0, 8, 0, 8))]},
     r"tensor\[0\].*format: an mxfp8_x4 tile needs its scale operand"),
    ({"tensor": [LoadStationary(src=tile("sbuf", "mxfp8_x4", 0, 64, 0, 8),
                                scale=tile("sbuf", "uint8", 0, 8, 512, 8))]},
     r"operand shape: the scale of a 64 x 8 MX tile must be 36 to 64 partitions x 8, not "
     r"8 x 8"),
    ({"tensor": [LoadStationary(src=tile("sbuf", "bf16", 0, 8, 0, 8),
                                scale=tile("sbuf", "uint8", 0, 1, 512, 8))]},
     r"format: only an MX tile takes a scale, not bf16"),
    ({"tensor": [LoadStationary(src=tile("sbuf", "bf16", 0, 8, 0, 8)),
                 MultiplyMoving(dst=tile("psum", "fp32", 0, 8, 0, 8),
                                src=tile("sbuf", "mxfp8_x4", 0, 8, 64, 8),
                                scale=tile("sbuf", "uint8", 0, 1, 512, 8))]},
     r"tensor\[1\].*stationary: the loaded stationary is 8 x 8 bf16"),
    ({"vector": [TensorCopy(dst=tile("sbuf", "bf16", 0, 8, 0, 8),
                            src=tile("sbuf", "mxfp8_x4", 0, 8, 64, 8))]},
     r"vector\[0\].*format: the vector engine does not compute on mxfp8_x4 \(src\)"),
    ({"tensor": [Transpose(dst=AP("psum", "mxfp8_x4", 0, 8, 0, ((8, 1),)),
                           src=tile("sbuf", "mxfp8_x4", 0, 8, 0, 8))]},
     r"format: the array has no transpose of an MX tile"),
])
def test_mx_rules(trn3, streams, match):
    prog = Program()
    prog.streams = streams
    with pytest.raises(ProgramError, match=match):
        Core(trn3).run(prog, timing_only=True)


def test_mx_needs_an_array_with_mx(trn1):
    prog = Program()
    prog.streams = {"tensor": [LoadStationary(src=tile("sbuf", "mxfp8_x4", 0, 8, 0, 8),
                                              scale=tile("sbuf", "uint8", 0, 1, 512, 8))]}
    with pytest.raises(ProgramError, match=r"format: the tensor engine of trn1 takes .*, "
                                           r"not mxfp8$"):
        Core(trn1).run(prog, timing_only=True)


def test_mx_scale_round_trips_and_unknown_types_are_refused():
    ins = MultiplyMoving(dst=tile("psum", "fp32", 0, 8, 0, 8),
                         src=tile("sbuf", "mxfp4_x4", 0, 8, 64, 8),
                         scale=tile("sbuf", "uint8", 0, 1, 512, 8))
    assert decode(encode(ins)) == ins == parse(format_instruction(ins))
    assert ins.src.itemsize == 2
    with pytest.raises(IsaError, match=r"matmul.src.dtype must be one of .*mxfp8_x4, "
                                       r"mxfp4_x4, uint8, uint16, mxfp8_e5m2_x4, not 'mxfp8'"):
        encode(MultiplyMoving(dst=ins.dst, src=tile("sbuf", "mxfp8", 0, 8, 64, 8)))


def test_core_rtl_takes_the_array_formats_mx_included(trn3, trn1):
    """The core RTL's tensor engine runs tf32 (its codes shifted down from the top of their
    words) and the MX quad types where the array has MX formats (it reads their scale
    operand; the co-simulation's mx_matmuls program runs them), and refuses an MX tile on
    an array without MX, and a multiply into bf16 PSUM, in one line."""
    from hdl.core.tensor import supported

    for dtype in ("bf16", "tf32", "mxfp8_x4", "mxfp8_e5m2_x4", "mxfp4_x4"):
        assert supported(LoadStationary(src=tile("sbuf", dtype, 0, 8, 0, 8)), trn3.formats) \
            is None
    into_bf16 = MultiplyMoving(dst=tile("psum", "bf16", 0, 8, 0, 8),
                               src=tile("sbuf", "bf16", 0, 8, 0, 8))
    assert supported(into_bf16, trn3.formats).endswith("bf16 PSUM destination is not built)")
    for dtype in ("mxfp8_x4", "mxfp4_x4"):
        reason = supported(LoadStationary(src=tile("sbuf", dtype, 0, 8, 0, 8)), trn1.formats)
        assert reason.startswith("src must be one of ") and reason.endswith(f", not {dtype}")
        assert "mxfp" not in reason.removesuffix(dtype) and "\n" not in reason


def test_core_rtl_refuses_what_its_engines_do_not_compute():
    """GpSimd's power (software on its cores) and an Activation on the vector engine
    (NeuronCore-v4's exp) are refused by name before anything is simulated."""
    from hdl.core.engines import supported
    from hdl.vector.ops import VectorOp

    a = tile("sbuf", "fp32", 0, 8, 0, 8)
    power = TensorTensor(dst=a, a=a, b=a, op=VectorOp.POWER)
    assert supported(power, kind="gpsimd") == "the gpsimd engine's lanes compute no power"
    assert supported(TensorTensor(dst=a, a=a, b=a, op=VectorOp.ADD), kind="gpsimd") is None
    assert supported(Activation(dst=a, src=a, func=2)).startswith("the vector engine runs ")
