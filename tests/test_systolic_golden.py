"""The systolic golden model against float32 references written apart from it.

Inputs are made with ml_dtypes. The vectorised reference computes each product and each sum in
float64 and rounds it to float32: narrow-format products are exact in float64, and float64
(53 bits >= 2 * 24 + 2) rounds sums and products of float32 values innocuously, so one rounding
to float32 afterwards is the correctly rounded binary32 result. A scalar loop in plain Python
floats checks small tiles the same way, and int8 is checked with Python integers. The compiled
float kernel is also checked bit for bit against the model's own numpy passes on larger tiles.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from hdl.numerics.formats import format_by_name
from hdl.tensor.params import SystolicParams
from sim.golden import systolic, systolic_cycles
from sim.golden.systolic import matmul
from sim.golden.systolic_cycles import (
    Load,
    Multiply,
    Sequencer,
    Transpose,
    cycles,
    matmul_cycles,
    schedule,
    tile_interval,
)

NAN = 0x7FC00000

# name -> (ml_dtypes type used to make and decode it, scale applied after decoding)
ML = {
    "fp8_e4m3": (ml_dtypes.float8_e4m3, 1.0),
    "fp8_e4m3fn": (ml_dtypes.float8_e4m3fn, 1.0),
    "fp8_e5m2": (ml_dtypes.float8_e5m2, 1.0),
    "cfp8_e4m3_b10": (ml_dtypes.float8_e4m3, 2.0 ** (7 - 10)),
    "cfp8_e5m2_b12": (ml_dtypes.float8_e5m2, 2.0 ** (15 - 12)),
    "bf16": (ml_dtypes.bfloat16, 1.0),
    "fp16": (np.float16, 1.0),
    "fp32": (np.float32, 1.0),
}
FLOATS = [*ML, "tf32"]


def _uint(bits: int):
    return {8: np.uint8, 16: np.uint16, 32: np.uint32}[bits]


def decode(bits, name: str) -> np.ndarray:
    """float64 values of bit patterns, by ml_dtypes (tf32: the top 19 bits of a float32)."""
    bits = np.asarray(bits)
    if name == "tf32":
        return (bits.astype(np.uint32) << 13).view(np.float32).astype(np.float64)
    dtype, scale = ML[name]
    width = np.dtype(dtype).itemsize * 8
    return bits.astype(_uint(width)).view(dtype).astype(np.float64) * scale


def encode(values, name: str) -> np.ndarray:
    """Bit patterns (uint32) of float values, rounded by ml_dtypes (tf32: truncated fp32)."""
    values = np.asarray(values, dtype=np.float64)
    if name == "tf32":
        return (values.astype(np.float32).view(np.uint32) >> 13).astype(np.uint32)
    dtype, scale = ML[name]
    width = np.dtype(dtype).itemsize * 8
    return (values / scale).astype(dtype).view(_uint(width)).astype(np.uint32)


def specials(name: str) -> np.ndarray:
    """Zeros, subnormals, extremes, infinities and NaN of a format, as bit patterns."""
    if name == "tf32":
        fi = np.finfo(np.float32)
        values = [0.0, -0.0, 2.0**-136, -(2.0**-136), float(fi.max) * (1 - 2**-11), 1.0,
                  -1.0, 2.0**-126, np.inf, -np.inf, np.nan]
        return encode(values, name)
    dtype, scale = ML[name]
    fi = ml_dtypes.finfo(dtype)
    values = [0.0, -0.0, float(fi.smallest_subnormal), -float(fi.smallest_subnormal),
              float(fi.max), -float(fi.max), float(fi.smallest_normal), 1.0, -1.0, np.nan]
    if name not in ("fp8_e4m3fn",):
        values += [np.inf, -np.inf]
    return encode(np.array(values) * scale, name)


def reference(stationary, moving, name: str, psum=None, accumulate=False) -> np.ndarray:
    w, x = decode(stationary, name), decode(moving, name)
    k_dim, m_dim = w.shape
    acc = np.zeros((m_dim, moving.shape[1]), dtype=np.float32)
    with np.errstate(all="ignore"):
        for k in range(k_dim):
            product = (w[k][:, None] * x[k][None, :]).astype(np.float32)
            acc = (acc.astype(np.float64) + product.astype(np.float64)).astype(np.float32)
        if accumulate:
            old = np.asarray(psum, np.uint32).view(np.float32).astype(np.float64)
            acc = (old + acc.astype(np.float64)).astype(np.float32)
    return np.where(np.isnan(acc), NAN, acc.view(np.uint32)).astype(np.uint32)


def scalar_reference(stationary, moving, name: str) -> np.ndarray:
    w, x = decode(stationary, name), decode(moving, name)
    out = np.zeros((w.shape[1], x.shape[1]), np.uint32)
    for m in range(w.shape[1]):
        for n in range(x.shape[1]):
            acc = 0.0
            for k in range(w.shape[0]):
                with np.errstate(all="ignore"):
                    product = float(np.float32(w[k, m] * x[k, n]))
                    acc = float(np.float32(acc + product))
            out[m, n] = NAN if acc != acc else np.float32(acc).view(np.uint32)
    return out


def random_tile(rng, name, shape, spread=2.0):
    return encode(rng.standard_normal(shape) * np.exp2(rng.uniform(-spread, spread, shape)),
                  name)


@pytest.mark.parametrize("name", FLOATS)
def test_float_random_tiles(name, seed):
    rng = np.random.default_rng(seed)
    for k, m, n in [(1, 1, 1), (7, 5, 3), (32, 16, 24)]:
        w, x = random_tile(rng, name, (k, m)), random_tile(rng, name, (k, n))
        got = matmul(w, x, name)
        np.testing.assert_array_equal(got, reference(w, x, name))
        psum = random_tile(rng, "fp32", (m, n))
        np.testing.assert_array_equal(matmul(w, x, name, psum=psum, accumulate=True),
                                      reference(w, x, name, psum=psum, accumulate=True))


@pytest.mark.parametrize("name", FLOATS)
def test_float_edge_tiles(name, seed):
    rng = np.random.default_rng(seed)
    pool = specials(name)
    for k, m, n in [(4, 3, 5), (16, 8, 8)]:
        w, x = rng.choice(pool, (k, m)), rng.choice(pool, (k, n))
        got = matmul(w, x, name)
        np.testing.assert_array_equal(got, reference(w, x, name))
        np.testing.assert_array_equal(got, scalar_reference(w, x, name))


@pytest.mark.parametrize("name", ["fp8_e4m3", "bf16", "fp16"])
def test_float_underflow(name, seed):
    """Products that underflow round once, in mul32, to the subnormal binary32 grid."""
    rng = np.random.default_rng(seed)
    _, scale = ML[name]
    fi = ml_dtypes.finfo(ML[name][0])
    tiny = float(fi.smallest_subnormal) * scale
    w = encode(rng.choice([tiny, -tiny, 3 * tiny, 1.0], (8, 4)), name)
    x = encode(rng.choice([tiny, 2.0**-60, 2.0**-70, -tiny], (8, 6)), name)
    np.testing.assert_array_equal(matmul(w, x, name), scalar_reference(w, x, name))


@pytest.mark.parametrize("name", ["bf16", "fp16", "tf32"])
def test_float_sum_order(name):
    """Products 1, 2**-24, 2**-24 summed k = 0, 1, 2 stay 1.0 (each half-ulp tie rounds to
    even); any other order would give 1 + 2**-23."""
    col = encode([[1.0], [2.0**-12], [2.0**-12]], name)
    assert matmul(col, col, name)[0, 0] == np.float32(1.0).view(np.uint32)
    assert matmul(col[::-1], col[::-1], name)[0, 0] == np.float32(1 + 2**-23).view(np.uint32)


def test_compiled_kernel_in_use():
    assert systolic.numba is not None
    assert systolic._sum is not systolic._sum_reference


@pytest.mark.parametrize("name", FLOATS)
def test_kernel_matches_numpy_passes(name, seed, monkeypatch):
    """matmul through the compiled kernel gives the bits of matmul through the numpy passes,
    on shapes across the kernel's row groups (4) and column blocks (128): random values,
    special values (NaN, infinities, subnormals, extremes), both mixed, and random codes."""
    rng = np.random.default_rng(seed)
    codes = 1 << format_by_name(name).bits

    def tiles(name, shape, codes):
        pool = specials(name)
        return [random_tile(rng, name, shape, 4.0), rng.choice(pool, shape),
                np.where(rng.random(shape) < 0.1, rng.choice(pool, shape),
                         random_tile(rng, name, shape, 4.0)),
                rng.integers(0, codes, shape, dtype=np.uint64).astype(np.uint32)]

    cases = []
    for k, m, n in [(1, 1, 1), (3, 5, 129), (40, 9, 300), (130, 4, 128), (2, 7, 256)]:
        cases += zip(tiles(name, (k, m), codes), tiles(name, (k, n), codes),
                     tiles("fp32", (m, n), 2**32), strict=True)

    def run():
        return [(matmul(w, x, name), matmul(w, x, name, psum=psum, accumulate=True))
                for w, x, psum in cases]

    compiled = run()
    monkeypatch.setattr(systolic, "_sum", systolic._sum_reference)
    for (got, got_acc), (want, want_acc) in zip(compiled, run(), strict=True):
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got_acc, want_acc)


def test_int8_wraps(seed):
    rng = np.random.default_rng(seed)
    for k, m, n in [(1, 1, 1), (9, 4, 7), (64, 8, 8)]:
        w = rng.integers(-128, 128, (k, m))
        x = rng.integers(-128, 128, (k, n))
        psum = rng.integers(0, 2**32, (m, n), dtype=np.uint64).astype(np.uint32)
        want = np.zeros((m, n), np.uint32)
        for i in range(m):
            for j in range(n):
                total = int(psum[i, j]) + sum(int(w[t, i]) * int(x[t, j]) for t in range(k))
                want[i, j] = total % 2**32
        got = matmul(w.astype(np.int8).view(np.uint8), x.astype(np.int8).view(np.uint8), "int8",
                     psum=psum, accumulate=True)
        np.testing.assert_array_equal(got, want)
    extreme = np.full((4096, 1), 0x80, np.uint8)  # (-128)**2 * 4096 * 64 = 2**32 wraps to 0
    assert matmul(np.tile(extreme, (64, 1)), np.tile(extreme, (64, 1)), "int8")[0, 0] == 0


def test_matmul_rejects_mismatched_tiles():
    with pytest.raises(ValueError, match=r"must share K"):
        matmul(np.zeros((3, 2)), np.zeros((4, 2)), "bf16")
    with pytest.raises(ValueError, match=r"psum must be given"):
        matmul(np.zeros((3, 2)), np.zeros((3, 2)), "bf16", accumulate=True)


def test_matmul_mixes_float_formats_not_int_and_float(seed):
    """A bf16 stationary tile against an fp16 moving tile: each widened by its own format."""
    rng = np.random.default_rng(seed)
    w, x = random_tile(rng, "bf16", (5, 3), 4.0), random_tile(rng, "fp16", (5, 4), 4.0)
    wf = decode(w, "bf16").astype(np.float32)
    xf = decode(x, "fp16").astype(np.float32)
    want = np.zeros((3, 4), np.float32)
    for k in range(5):  # the contract's order, one rounded multiply and add per step
        want = want + wf[k][:, None] * xf[k][None, :]
    got = matmul(w, x, "bf16", moving_fmt="fp16")
    np.testing.assert_array_equal(got, want.view(np.uint32))
    with pytest.raises(ValueError, match=r"moving_fmt must be a float format with a float "
                                         r"stationary and int8 with int8, not 'int8' with "
                                         r"'bf16'"):
        matmul(w, x, "bf16", moving_fmt="int8")


def test_params_errors():
    one = ("bf16",)
    with pytest.raises(ValueError, match=r"rows must be a positive integer, not 0"):
        SystolicParams(rows=0, cols=4, formats=one)
    with pytest.raises(ValueError, match=r"cols must be a positive integer, not 'x'"):
        SystolicParams(rows=4, cols="x", formats=one)
    with pytest.raises(ValueError, match=r"formats must be one of .*bf16.*, not 'bf17'"):
        SystolicParams(rows=4, cols=4, formats=("bf17",))
    with pytest.raises(ValueError, match=r"formats must be one of .*, mxfp8, mxfp8_e5m2, "
                                         r"mxfp4, not 'mxfp9'"):
        SystolicParams(rows=4, cols=4, formats=("mxfp9",))
    with pytest.raises(ValueError, match=r"formats must be a non-empty tuple"):
        SystolicParams(rows=4, cols=4, formats="bf16")
    with pytest.raises(ValueError, match=r"formats must not repeat a format"):
        SystolicParams(rows=4, cols=4, formats=("bf16", "bf16"))
    with pytest.raises(ValueError, match=r"double_rate must name 8-bit float formats "
                                         r"\(not MX\), not 'bf16'"):
        SystolicParams(rows=4, cols=4, formats=one, double_rate=one)
    with pytest.raises(ValueError, match=r"double_rate must name 8-bit float formats "
                                         r"\(not MX\), not 'mxfp8'"):
        SystolicParams(rows=4, cols=4, formats=("mxfp8",), double_rate=("mxfp8",))
    with pytest.raises(ValueError, match=r"double_rate must name formats of"):
        SystolicParams(rows=4, cols=4, formats=one, double_rate=("fp8_e4m3",))
    with pytest.raises(ValueError, match=r"quarter_rate must name formats of \('bf16',\) that "
                                         r"are not double-rate, not 'fp32'"):
        SystolicParams(rows=4, cols=4, formats=one, quarter_rate=("fp32",))
    with pytest.raises(ValueError, match=r"moving_max must be a positive integer, not -1"):
        SystolicParams(rows=4, cols=4, formats=one, moving_max=-1)


def test_schedule_checks_formats():
    p = SystolicParams(rows=2, cols=2, formats=("int8", "fp8_e4m3", "bf16", "fp32"),
                       double_rate=("fp8_e4m3",), quarter_rate=("fp32",))
    assert p.k_limit("fp8_e4m3") == 4 and p.k_limit("bf16") == 2
    schedule(p, [Load(4, 2, "fp8_e4m3"), Multiply(1, fmt="fp8_e4m3")])
    with pytest.raises(ValueError, match=r"k must be in 1 \.\. 2, not 3"):
        schedule(p, [Load(3, 2, "bf16")])
    with pytest.raises(ValueError, match=r"fmt must be one of int8, fp8_e4m3, bf16, fp32, not "
                                         r"'fp16'"):
        schedule(p, [Load(2, 2, "fp16")])
    for tile, moving in (("fp8_e4m3", "bf16"), ("int8", "bf16"), ("bf16", "fp32")):
        with pytest.raises(ValueError, match=rf"fmt of a multiply must match its tile's "
                                             rf"'{tile}' in rate and kind, not '{moving}'"):
            schedule(p, [Load(1, 2, tile), Multiply(1, fmt=moving)])
    # "FP32/TF32 not mixed with others" [ISA]: tf32 is single-rate float, as bf16 and fp16.
    t = SystolicParams(rows=2, cols=2, formats=("bf16", "fp16", "tf32", "fp32"))
    schedule(t, [Load(2, 2, "tf32"), Multiply(1, fmt="tf32"), Load(2, 2, "bf16"),
                 Multiply(1, fmt="fp16")])
    for tile, moving in (("tf32", "bf16"), ("fp16", "tf32"), ("fp32", "tf32"),
                         ("bf16", "fp32")):
        with pytest.raises(ValueError, match=rf"fmt of a multiply must be its tile's "
                                             rf"'{tile}' when either is one of fp32, tf32 "
                                             rf"\(not mixed with others\), not '{moving}'"):
            schedule(t, [Load(1, 2, tile), Multiply(1, fmt=moving)])
    mx = SystolicParams(rows=2, cols=2, formats=("bf16", "mxfp8", "mxfp4"))
    schedule(mx, [Load(2, 2, "mxfp8"), Multiply(1, fmt="mxfp4")])  # MX with MX: one kind
    for tile, moving in (("mxfp8", "bf16"), ("bf16", "mxfp4")):
        with pytest.raises(ValueError, match=rf"fmt of a multiply must match its tile's "
                                             rf"'{tile}' in rate and kind, not '{moving}'"):
            schedule(mx, [Load(1, 2, tile), Multiply(1, fmt=moving)])


def test_cycle_model_closed_forms():
    """The replayed schedule against hand-worked figures of the sequencer's timing."""
    for rows, cols, k, m, n in [(1, 1, 1, 1, 1), (4, 4, 4, 4, 8), (5, 3, 2, 3, 16),
                                (128, 128, 128, 128, 512), (128, 128, 128, 128, 64),
                                (128, 128, 128, 128, 16), (128, 128, 128, 5, 1)]:
        p = SystolicParams(rows=rows, cols=cols, formats=("bf16",))
        beats = -(-m // min(4, cols))
        c = cycles(p, k, m, n)
        assert c["load"] == beats
        assert c["multiply"] == n
        assert c["latency"] == n + rows + cols + 2
        assert c["matmul"] == beats + n + rows + cols + 3
        # Back to back, each load fills the idle bank while the previous multiply runs.
        assert c["interval"] == max(n, beats + 1)
    # The published rule at N = 64 on a full array: one tile every 64 cycles.
    full = SystolicParams(rows=128, cols=128, formats=("bf16",))
    assert cycles(full, 128, 128, 64)["interval"] == 64
    assert schedule(SystolicParams(rows=2, cols=2, formats=("int8",)),
                    [Load(2, 2), Multiply(1), Multiply(1)]).accepted == (0, 1, 2)
    # fp32 at a quarter rate: each moving column after three idle cycles.
    q = SystolicParams(rows=4, cols=4, formats=("fp32",), quarter_rate=("fp32",))
    c = cycles(q, 4, 4, 8, "fp32")
    assert (c["load"], c["multiply"], c["latency"]) == (1, 32, 32 + 4 + 4 + 2)
    assert c["interval"] == 32


def test_load_waits_for_the_multiply_that_reads_its_bank():
    """Two loads in a row: the second refills the bank the running multiply reads, so its
    beats wait for that multiply's last moving beat (and may share its cycle)."""
    p = SystolicParams(rows=2, cols=8, formats=("bf16",), load_columns=4)
    s = schedule(p, [Load(2, 8), Multiply(10), Load(2, 8), Load(2, 8), Multiply(1)])
    # Load 0: beats at 1, 2; multiply at 2 (moving 3 .. 12); load 1 at 3 (beats 4, 5);
    # load 2 at 5, into multiply 0's bank: beats at 12 (its last moving beat) and 13;
    # the last multiply at 13.
    assert s.accepted == (0, 2, 3, 5, 13)
    assert s.outputs[-1] == 14 + p.depth + 2


@pytest.mark.parametrize("name", [*ML, "int8"])
def test_transpose_keeps_every_bit(name):
    """The transpose pass against numpy's transpose of the typed tile: -0, NaN payloads,
    infinities and subnormals leave as they were loaded (an identity matmul would make the
    zero +0 and the NaN canonical)."""
    rng = np.random.default_rng(7)
    dtype = np.int8 if name == "int8" else ML[name][0]
    width = np.dtype(dtype).itemsize * 8
    raw = rng.integers(0, 1 << width, size=(5, 3)).astype(_uint(width))
    if name != "int8":
        sign = 1 << (width - 1)
        raw[0, 0], raw[1, 0] = sign, sign | 1  # -0, the smallest negative subnormal
        raw[2, 0] = np.array(np.nan, dtype).view(_uint(width)) | 1  # a NaN with a payload
    typed = raw.view(dtype)
    want = np.ascontiguousarray(typed.T).view(_uint(width)).astype(np.uint32)
    got = systolic.transpose(raw, name)
    assert got.dtype == np.uint32 and np.array_equal(got, want)


def test_transpose_refuses_mx_and_bad_programs():
    p = SystolicParams(rows=2, cols=2, formats=("bf16", "fp8_e4m3", "mxfp8"),
                       double_rate=("fp8_e4m3",), moving_max=8)
    with pytest.raises(ValueError, match=r"fmt must not be a block-scaled MX format, "
                                         r"not 'mxfp8'"):
        systolic.transpose(np.zeros((2, 2), np.uint32), "mxfp8")
    with pytest.raises(ValueError, match=r"a transpose must follow a Load"):
        schedule(p, [Transpose(1)])
    with pytest.raises(ValueError, match=r"a transpose must not read an MX tile, not 'mxfp8'"):
        schedule(p, [Load(2, 2, "mxfp8"), Transpose(2)])
    with pytest.raises(ValueError, match=r"n of a transpose must be in 1 \.\. 3 \(the tile's "
                                         r"k, at most moving_max\), not 4"):
        schedule(p, [Load(3, 2, "fp8_e4m3"), Transpose(4)])
    schedule(p, [Load(4, 2, "fp8_e4m3"), Transpose(4)])  # a double-rate tile: 2 per row


def test_transpose_times_as_a_full_rate_multiply():
    """A transpose's beats are made by the sequencer, one a cycle whatever the tile's format
    (fp32's included): the replay equals that of a full-rate multiply of as many beats, and
    its figures are the hand-worked ones of a matmul."""
    p = SystolicParams(rows=4, cols=6, formats=("bf16", "fp32"), quarter_rate=("fp32",),
                       moving_max=8)
    for fmt in ("bf16", "fp32"):
        program = [Load(4, 6, fmt), Transpose(4), Multiply(3, fmt=fmt), Load(2, 5, fmt),
                   Transpose(2), Transpose(1), Multiply(1, fmt=fmt)]
        timed = [Multiply(op.n) if isinstance(op, Transpose) else op for op in program]
        assert schedule(p, program) == schedule(p, timed)
    for k, m in ((1, 1), (4, 6), (3, 2)):
        beats = -(-m // p.beat_columns)
        c = systolic_cycles.transpose_cycles(p, k, m)
        assert c == {"issue": beats + k, "latency": k + p.rows + p.cols + 2,
                     "total": beats + k + p.rows + p.cols + 3}


@pytest.mark.parametrize("fmt", ["bf16", "fp32"])
@pytest.mark.parametrize("rows,cols,load_columns", [(1, 1, 4), (2, 3, 4), (3, 5, 2),
                                                     (4, 9, 4), (2, 2, 1)])
def test_tile_interval_is_the_schedule(rows, cols, load_columns, fmt):
    """The vectorised rule every model uses against the replayed sequencer, every shape, at
    full rate and at fp32's quarter rate."""
    p = SystolicParams(rows=rows, cols=cols, formats=("bf16", "fp32"), quarter_rate=("fp32",),
                       moving_max=12, load_columns=load_columns)
    slow = p.column_cycles(fmt)
    ms, ns = np.meshgrid(np.arange(1, cols + 1), np.arange(1, 13), indexing="ij")
    rule = tile_interval(ms, ns, p.beat_columns, slow)
    for m, n, want in zip(ms.ravel(), ns.ravel(), rule.ravel(), strict=True):
        for k in (1, rows):
            assert cycles(p, k, int(m), int(n), fmt)["interval"] == want
            # A one-tile matmul: the rule's total is the replay's.
            tiles = schedule(p, [Load(k, int(m), fmt), Multiply(int(n), fmt=fmt)]).total
            assert matmul_cycles(int(m), k, int(n), rows, cols, 1 / slow, 12,
                                 p.beat_columns) == tiles
    for a, b in ((2, 1), (3, 2)):  # whole matmuls of identical tiles
        total = schedule(p, [Load(rows, cols, fmt), Multiply(12, fmt=fmt)] * (a * b)).total
        assert matmul_cycles(a * cols, b * rows, 12, rows, cols, 1 / slow, 12,
                             p.beat_columns) == total


def test_mx_runs_at_rate_4():
    """An MX tile's k counts words, quads of contraction indices, one per PE row: a pass
    contracts 4 * rows indices at one moving column per cycle, so whole MX matmuls take the
    throughput model's cycles at the spec's rate 4, and a tile deeper than the rows is
    refused."""
    rows, cols = 3, 4
    p = SystolicParams(rows=rows, cols=cols, formats=("bf16", "mxfp8", "mxfp4"),
                       moving_max=12)
    for a, b in ((1, 1), (2, 1), (3, 2)):
        total = schedule(p, [Load(rows, cols, "mxfp8"), Multiply(12, fmt="mxfp4")]
                         * (a * b)).total
        assert matmul_cycles(a * cols, b * 4 * rows, 12, rows, cols, 4, 12,
                             p.beat_columns) == total
    with pytest.raises(ValueError, match=r"k must be in 1 \.\. 3, not 4"):
        schedule(p, [Load(rows + 1, cols, "mxfp8")])


# ---- block-scaled (MX) formats, against a scalar reference built on ml_dtypes --------------

MX_ML = {"mxfp8": ml_dtypes.float8_e4m3fn, "mxfp4": ml_dtypes.float4_e2m1fn}


def _mx_reference(w, x, sw, sx, name, psum=None):
    """Scalar loop: ml_dtypes decodes elements and E8M0 scales exactly into float64, whose
    product is exact; np.float32 rounds it once; float32 additions in k order from +0.0."""
    elem = MX_ML[name]
    wv = w.astype(np.uint8).view(elem).astype(np.float64)
    xv = x.astype(np.uint8).view(elem).astype(np.float64)
    swv = sw.astype(np.uint8).view(ml_dtypes.float8_e8m0fnu).astype(np.float64)
    sxv = sx.astype(np.uint8).view(ml_dtypes.float8_e8m0fnu).astype(np.float64)
    k_dim, m_dim = w.shape
    out = np.zeros((m_dim, x.shape[1]), np.uint32)
    with np.errstate(all="ignore"):
        for m in range(m_dim):
            for n in range(x.shape[1]):
                acc = np.float32(0.0)
                for k in range(k_dim):
                    b = k // 32
                    # the scales as exact powers of two: 2**-127 * 2**-127 underflows float64's
                    # normal range only past 2**-1022, so the product stays exact
                    p = np.float32(wv[k, m] * xv[k, n] * swv[b, m] * sxv[b, n])
                    acc = np.float32(acc + p)
                if psum is not None:
                    acc = np.float32(np.uint32(psum[m, n]).view(np.float32) + acc)
                out[m, n] = NAN if np.isnan(acc) else np.float32(acc).view(np.uint32)
    return out


@pytest.mark.parametrize("name", ["mxfp8", "mxfp4"])
def test_mx_matmul_against_ml_dtypes(name, seed):
    rng = np.random.default_rng(seed)
    codes = 256 if name == "mxfp8" else 16
    for k, m, n in [(1, 1, 1), (32, 2, 3), (70, 3, 4)]:
        blocks = -(-k // 32)
        w = rng.integers(0, codes, (k, m))
        x = rng.integers(0, codes, (k, n))
        # scales near 2**0 (busy rounding), at the extremes (overflow, subnormal products,
        # underflow to zero) and NaN (255)
        pool = np.array([127, 126, 130, 0, 1, 60, 200, 254, 255])
        sw = np.where(rng.random((blocks, m)) < 0.5, rng.integers(120, 135, (blocks, m)),
                      rng.choice(pool, (blocks, m)))
        sx = np.where(rng.random((blocks, n)) < 0.5, rng.integers(120, 135, (blocks, n)),
                      rng.choice(pool, (blocks, n)))
        psum = rng.integers(0, 2**32, (m, n), dtype=np.uint64).astype(np.uint32)
        np.testing.assert_array_equal(systolic.matmul_mx(w, x, name, sw, sx),
                                      _mx_reference(w, x, sw, sx, name))
        np.testing.assert_array_equal(
            systolic.matmul_mx(w, x, name, sw, sx, psum=psum, accumulate=True),
            _mx_reference(w, x, sw, sx, name, psum))


def test_mx_scale_folds_into_the_products_exponent():
    """Scales that cancel (2**100 * 2**-100) give the unscaled product exactly, where scaling
    an operand first would overflow; one product of 2**-149 * 0.75 rounds once, to 2**-149."""
    one = 0x38  # e4m3 1.0
    got = systolic.matmul_mx([[one]], [[one]], "mxfp8", [[227]], [[27]])
    assert got[0, 0] == np.float32(1.0).view(np.uint32)
    three_quarters = 0x30 | 0x4  # 0.75 = 1.5 * 2**-1
    got = systolic.matmul_mx([[three_quarters]], [[one]], "mxfp8", [[0]], [[105]])
    assert got[0, 0] == 1


def test_mx_rejects_bad_scales():
    with pytest.raises(ValueError, match=r"stationary_scales must have shape \(2, 1\)"):
        systolic.matmul_mx(np.zeros((33, 1)), np.zeros((33, 1)), "mxfp4", np.zeros((1, 1)),
                           np.zeros((2, 1)))


# ---- tile positions (row and column tiling) ------------------------------------------------

HALF = {"row_size": 4, "col_size": 4}


def test_tiles_on_disjoint_groups_run_at_once():
    """Hand-worked: two 4 x 4 tiles of an 8 x 8 array split two ways. On the diagonal they
    multiply at once (the second accepted two cycles after the first, its beats interleaved
    with the first's); in one row of groups (shared row groups) or one column of groups
    (shared column groups) the second waits for the first's last moving beat."""
    p = SystolicParams(rows=8, cols=8, formats=("bf16",), tiles=(1, 2), moving_max=16)
    depth = 8 + 8 + 2
    diagonal = schedule(p, [Load(4, 4, **HALF), Multiply(10),
                            Load(4, 4, row=4, col=4, **HALF), Multiply(10, row=4, col=4)])
    # load accepted at 0, its one beat at 1 (when the multiply is accepted); the second
    # load at 2, its beat and the second multiply at 3; vectors from the next cycle
    assert diagonal.accepted == (0, 1, 2, 3)
    assert diagonal.outputs == tuple(range(2 + depth, 12 + depth)) + tuple(
        range(4 + depth, 14 + depth))
    for place in ({"row": 0, "col": 4, **HALF}, {"row": 4, "col": 0, **HALF}):
        shared = schedule(p, [Load(4, 4, **HALF), Multiply(10), Load(4, 4, **place),
                              Multiply(10, row=place["row"], col=place["col"])])
        assert shared.accepted == (0, 1, 2, 11)  # the first multiply's last beat is at 11
        assert shared.outputs == tuple(range(2 + depth, 22 + depth))


def test_a_load_waits_only_for_multiplies_on_its_groups_and_bank():
    """A load into groups where a running multiply reads the same bank waits for that
    multiply's last moving beat; elsewhere, or in the other bank, it does not."""
    p = SystolicParams(rows=8, cols=8, formats=("bf16",), tiles=(1, 2), moving_max=16)
    # the whole-array tile fills bank 1 everywhere; a quadrant's next tile fills bank 0
    # at once, and the one after it (bank 1 again) waits for the first multiply
    program = [Load(8, 8), Multiply(10), Load(4, 4, **HALF), Load(4, 4, row=4, col=4, **HALF),
               Load(4, 4, **HALF)]
    s = schedule(p, program + [Multiply(1)])
    # accepted: 0; multiply at 2 (the load's two beats, 1-2); its vectors 3-12; the
    # quadrant loads at 3 (beat 4) and 4 (beat 5, bank 0 too: its quadrant's tile was in
    # bank 1); the third at 5 fills bank 1, which the multiply reads until its last beat
    # at 12: its one beat waits until 12, and the multiply after it with it
    assert s.accepted == (0, 2, 3, 4, 5, 12)
    sequencer = Sequencer(p)
    assert [sequencer.issue(op)[1] for op in program] == [3, 13 + 18, 5, 6, 13]


@pytest.mark.parametrize("rows,cols,load_columns", [(8, 8, 4), (8, 8, 1), (4, 8, 2),
                                                     (16, 8, 4)])
@pytest.mark.parametrize("ways", [1, 2, 4])
def test_tiled_streams_follow_the_rule(rows, cols, load_columns, ways):
    """Pairs on the ``ways`` diagonal tile positions in turn: the replayed sequencer's total
    is the closed form (``ways`` pairs a round, the loads taking turns), at full and quarter
    rate; and a whole matmul whose k fits a tile's rows is matmul_cycles with the tiling."""
    rng = np.random.default_rng(ways * 100 + rows + load_columns)
    p = SystolicParams(rows=rows, cols=cols, formats=("bf16", "fp32"), quarter_rate=("fp32",),
                       tiles=(1, 2, 4), moving_max=24, load_columns=load_columns)
    gr, gc = rows // ways, cols // ways
    for _ in range(12):
        fmt = str(rng.choice(["bf16", "fp32"]))
        slow = p.column_cycles(fmt)
        n, m, k = (int(rng.integers(1, 25)), int(rng.integers(1, gc + 1)),
                   int(rng.integers(1, gr + 1)))
        pairs = ways * int(rng.integers(1, 4))
        program = []
        for i in range(pairs):
            at = {"row": i % ways * gr, "col": i % ways * gc}
            program += [Load(k, m, fmt, row_size=gr, col_size=gc, **at),
                        Multiply(n, fmt=fmt, **at)]
        total = schedule(p, program).total
        assert total == pairs * tile_interval(m, n, p.beat_columns, slow, ways) \
            + systolic_cycles.stream_tail(m, n, rows, cols, p.beat_columns, slow, ways)
    # a whole matmul, k within a tile's rows: its pairs on the diagonal in turn
    k, m, n = gr, gc * ways, 24 * 2
    program = []
    for i in range(2 * ways):  # m tiles of gc columns by n tiles of 24
        at = {"row": i % ways * gr, "col": i % ways * gc}
        program += [Load(k, gc, "bf16", row_size=gr, col_size=gc, **at),
                    Multiply(24, fmt="bf16", **at)]
    total = schedule(p, program).total
    if ways == 1:  # the whole array's tiles are gc = cols wide: k, m, n as they are
        assert matmul_cycles(m, k, n, rows, cols, 1.0, 24, p.beat_columns) == total
    else:  # with the tiling, the fastest way is at least as fast as this one
        assert min(total, matmul_cycles(m, k, n, rows, cols, 1.0, 24, p.beat_columns)) \
            == matmul_cycles(m, k, n, rows, cols, 1.0, 24, p.beat_columns, (1, ways))


def test_tile_positions_are_checked():
    p = SystolicParams(rows=8, cols=8, formats=("fp8_e4m3", "bf16"), double_rate=("fp8_e4m3",),
                       tiles=(1, 2), moving_max=16)
    bad = [
        ([Load(4, 4, row_size=2)], "row_size must be one of 4, 8"),
        ([Load(4, 4, col=2, col_size=4)], "col must be a multiple of the tile's col_size 4"),
        ([Load(4, 4, row=8, row_size=4)], "row must be a multiple"),
        ([Load(5, 4, "bf16", row_size=4)], r"k must be in 1 \.\. 4"),
        ([Load(4, 5, col_size=4)], r"m must be in 1 \.\. 4"),
        ([Load(6, 4, "fp8_e4m3", row_size=4, col_size=4)], "double-row tile"),
        ([Load(4, 4), Multiply(2, row=4)], r"at tile position \(4, 0\) needs a tile"),
        ([Load(4, 4, row_size=4), Load(4, 4, row=4, row_size=4), Load(8, 8, col=0),
          Multiply(2, row=4)], "needs a tile"),
    ]
    for program, match in bad:
        with pytest.raises(ValueError, match=match):
            schedule(p, program)
    # a double-rate tile contracts two indices per row of its row group
    schedule(p, [Load(8, 4, "fp8_e4m3", row=4, row_size=4), Multiply(2, fmt="fp8_e4m3", row=4)])
    with pytest.raises(ValueError, match="tiles must be a tuple of distinct ways"):
        SystolicParams(rows=8, cols=6, formats=("bf16",), tiles=(1, 4))
    with pytest.raises(ValueError, match="tiles must be"):
        SystolicParams(rows=8, cols=8, formats=("bf16",), tiles=(2,))


@pytest.mark.parametrize("rows,cols,tiles", [(8, 8, (1, 2, 4)), (4, 8, (1, 2, 4)),
                                             (16, 4, (1, 2))])
def test_sequencer_is_the_schedule(rows, cols, tiles):
    """The closed form the core simulator times its tensor engine by, command by command,
    against the replayed sequencer: random programs of tiles of every size and position,
    multiplies at full and quarter rate and transposes; every acceptance and every
    multiply's last output beat."""
    rng = np.random.default_rng(rows * cols)
    ran = 0
    while ran < 40:
        p = SystolicParams(rows=rows, cols=cols, formats=("bf16", "fp32"),
                           quarter_rate=("fp32",), tiles=tiles, moving_max=12,
                           load_columns=int(rng.integers(1, 4)))
        program, loaded = [], []
        for _ in range(int(rng.integers(1, 14))):
            if rng.random() < 0.45 or not loaded:
                w, v = int(rng.choice(tiles)), int(rng.choice(tiles))
                at = {"row": int(rng.integers(0, w)) * (rows // w), "row_size": rows // w,
                      "col": int(rng.integers(0, v)) * (cols // v), "col_size": cols // v}
                fmt = str(rng.choice(["bf16", "fp32"]))
                program.append(Load(int(rng.integers(1, rows // w + 1)),
                                    int(rng.integers(1, cols // v + 1)), fmt, **at))
                loaded.append((at["row"], at["col"], fmt))
            elif rng.random() < 0.9:
                row, col, fmt = loaded[int(rng.integers(0, len(loaded)))]
                program.append(Multiply(int(rng.integers(1, 13)), fmt=fmt, row=row, col=col))
            else:
                program.append(Transpose(1))
        try:
            replay = schedule(p, program)
        except ValueError:  # a multiply whose tile a later load overlapped
            continue
        ran += 1
        sequencer = Sequencer(p)
        issued = [sequencer.issue(op) for op in program]
        assert tuple(a for a, _ in issued) == replay.accepted
        lasts = np.cumsum([op.n for op in program if not isinstance(op, Load)]) - 1
        assert [d - 1 for (_, d), op in zip(issued, program, strict=True)
                if not isinstance(op, Load)] == [replay.outputs[i] for i in lasts]
