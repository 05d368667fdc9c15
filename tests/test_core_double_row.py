"""The fp8 double row of NeuronCore-v3 [NKI3]: a contraction of twice the PE rows per
instruction, ``[P, 2, free]`` operands whose pair axis holds the contraction's two halves,
in its encoding, its numerics against numpy/ml_dtypes, its cost, its rules and the GEMM
kernel that uses it."""

import dataclasses

import ml_dtypes
import numpy as np
import pytest

import kernels
from hdl.core import tensor
from hdl.core.isa import (
    AP,
    DmaCopy,
    LoadStationary,
    MultiplyMoving,
    TensorCopy,
    decode,
    encode,
    format_instruction,
    parse,
)
from hdl.params import core_params
from kernels.builder import Builder
from sim.core import Core, Program, ProgramError
from sim.core.rtl_cycles import rtl_cycles
from sim.golden.systolic_cycles import matmul_cycles
from specs.loader import load

ML = {"fp8_e4m3": ml_dtypes.float8_e4m3, "fp8_e5m2": ml_dtypes.float8_e5m2}


@pytest.fixture(scope="module")
def trn2():
    return core_params(load("trn2"))


@pytest.fixture(scope="module")
def trn2_sim():
    return core_params(load("trn2"), "sim")


def pairs(dtype, offset, parts, free, space="sbuf"):
    """``[parts, 2, free]`` at ``offset``: pair ``i`` the ``free`` elements ``i * free`` on."""
    return AP(space, dtype, 0, parts, offset, ((2, free), (free, 1)))


def double_matmul(parts, m, n, w_t="fp8_e4m3", x_t="fp8_e4m3", accumulate=False):
    return [LoadStationary(src=pairs(w_t, 0, parts, m), double_row=True),
            MultiplyMoving(dst=AP("psum", "fp32", 0, m, 0, ((n, 1),)),
                           src=pairs(x_t, 2 * m, parts, n), accumulate=accumulate,
                           double_row=True)]


def run(params, tensor_code, **kw):
    prog = Program()
    prog.streams = {"tensor": list(tensor_code)}
    return Core(params).run(prog, **kw)


def test_double_row_round_trips_through_the_word():
    for ins in double_matmul(128, 128, 512):
        assert decode(encode(ins)) == ins == parse(format_instruction(ins))
        assert "double_row=1" in format_instruction(ins)
        assert encode(dataclasses.replace(ins, double_row=False)) != encode(ins)


@pytest.mark.parametrize("scale, w_t, x_t", [("sim", "fp8_e4m3", "fp8_e4m3"),
                                             ("sim", "fp8_e4m3", "fp8_e5m2"),
                                             ("full", "fp8_e5m2", "fp8_e4m3")])
def test_double_row_contracts_both_halves_in_the_arrays_order(scale, w_t, x_t, seed):
    """Stationary [P, 2, M] and moving [P, 2, N] in HBM rows ``i * P + p`` (the documented
    layout of a K = 2P contraction), DMAed to SBUF, multiplied onto a PSUM bank already
    holding values (accumulate, copied there by the vector engine): the fp32 bits equal
    numpy float32 arithmetic on ml_dtypes' values, product by product, PE row p's pair 0
    (index p) then its pair 1 (index P + p), each rounded; the same sum is near the float64
    matmul of the whole contraction. Mixed e4m3 and e5m2 inputs are allowed [NKI3]."""
    params = core_params(load("trn2"), scale)
    parts, m, n = params.rows, params.cols, min(params.moving_max, 64)
    rng = np.random.default_rng(seed)
    # magnitudes spread over 2^-6 .. 2^6, below e4m3's largest finite value (240: 3.5 * 2^6
    # at most), so that no input is infinite
    w = (np.clip(rng.standard_normal((2 * parts, m)), -3.5, 3.5)
         * 2.0 ** rng.integers(-6, 7, (2 * parts, 1))).astype(ML[w_t])
    x = (np.clip(rng.standard_normal((2 * parts, n)), -3.5, 3.5)
         * 2.0 ** rng.integers(-6, 7, (2 * parts, 1))).astype(ML[x_t])
    # output (0, 0): 128 * 128 at index 0 cancelled by index P before index 1 adds 2^-12,
    # which the index order would lose (2^14 + 2^-12 rounds to 2^14)
    w[:, 0] = 0
    w[[0, parts, 1], 0] = np.array([128.0, -128.0, 2.0 ** -6]).astype(ML[w_t])
    x[[0, parts, 1], 0] = np.array([128.0, 128.0, 2.0 ** -6]).astype(ML[x_t])
    before = rng.standard_normal((m, n)).astype(np.float32)
    b = Builder(params)
    hw, hx = b.hbm("w", (2 * parts, m), w_t), b.hbm("x", (2 * parts, n), x_t)
    hp = b.hbm("psum0", (m, n), "fp32")
    bank = b.psum_banks(1, "psum")[0]
    b.emit("dma0", DmaCopy(dst=pairs(w_t, 0, parts, m),
                                   src=AP("hbm", w_t, 0, parts, hw.offset,
                                          ((2, parts * m), (m, 1)), pstride=m)))
    b.emit("dma0", DmaCopy(dst=pairs(x_t, 2 * m, parts, n),
                                   src=AP("hbm", x_t, 0, parts, hx.offset,
                                          ((2, parts * n), (n, 1)), pstride=n)))
    staged = AP("sbuf", "fp32", 0, m, 2 * m + 2 * n, ((n, 1),))
    b.emit("dma0", DmaCopy(dst=staged, src=hp.ap((0, m))))
    b.wait("vector", b.signal("dma0"))
    b.emit("vector", TensorCopy(dst=AP("psum", "fp32", 0, m, bank, ((n, 1),)), src=staged))
    b.wait("tensor", b.signal("vector"))
    for ins in double_matmul(parts, m, n, w_t, x_t, accumulate=True):
        b.emit("tensor", ins)
    hbm = np.zeros(b.program.hbm_bytes, np.uint8)
    for t, a in ((hw, w), (hx, x), (hp, before)):
        hbm[t.offset:t.offset + t.nbytes] = np.ascontiguousarray(a).view(np.uint8).ravel()
    got = Core(params).run(b.program, hbm=hbm).psum[:m, bank:bank + 4 * n].copy() \
        .view(np.uint32)

    wf, xf = w.astype(np.float32), x.astype(np.float32)
    acc = np.zeros((m, n), np.float32)
    for p in range(parts):
        for i in range(2):
            acc = acc + wf[i * parts + p][:, None] * xf[i * parts + p][None, :]
    want = before + acc
    want[np.isnan(want)] = np.nan
    assert np.array_equal(got, want.view(np.uint32))
    exact = before + wf.astype(np.float64).T @ xf.astype(np.float64)
    assert np.allclose(got.view(np.float32), exact, rtol=1e-5,
                       atol=1e-6 * np.abs(exact).max())
    in_order = np.zeros((m, n), np.float32)  # index order 0 .. 2P - 1: other bits
    for k in range(2 * parts):
        in_order = in_order + wf[k][:, None] * xf[k][None, :]
    assert not np.array_equal(got, (before + in_order).view(np.uint32))


def test_double_row_costs_a_bf16_matmul(trn2):
    """[128, 2, 128] x [128, 2, 512] fp8 takes the time of a bf16 [128, 128] x [128, 512]
    matmul [NKI3], alone and back to back, for twice the work."""
    bf16 = [LoadStationary(src=AP("sbuf", "bf16", 0, 128, 0, ((128, 1),))),
            MultiplyMoving(dst=AP("psum", "fp32", 0, 128, 0, ((512, 1),)),
                           src=AP("sbuf", "bf16", 0, 128, 256, ((512, 1),)))]
    for times in (1, 4):
        fp8 = run(trn2, double_matmul(128, 128, 512) * times, timing_only=True)
        ref = run(trn2, bf16 * times, timing_only=True)
        assert fp8.time == ref.time
        assert fp8.flops == 2 * ref.flops == times * 2 * 256 * 128 * 512


def _bad(params, code, match):
    with pytest.raises(ProgramError, match=match):
        run(params, code, timing_only=True)


def test_double_row_rules(trn2_sim):
    p = trn2_sim
    load_, mul = double_matmul(8, 8, 16)
    plain_src = AP("sbuf", "fp8_e4m3", 0, 8, 0, ((8, 1),))
    _bad(p, [LoadStationary(src=pairs("bf16", 0, 8, 8), double_row=True)],
         r"tensor\[0\].*format: the double row takes the double-rate formats of trn2 "
         r"\(fp8_e4m3, fp8_e5m2, cfp8\), not bf16")
    _bad(core_params(load("trn1"), "sim"), [load_],
         r"tensor\[0\].*format: the double row takes the double-rate formats of trn1 "
         r"\(none\), not fp8_e4m3")
    _bad(p, [LoadStationary(src=AP("sbuf", "fp8_e4m3", 0, 8, 0, ((4, 2), (2, 1))),
                            double_row=True)],
         r"operand shape: a double-row src is \[partitions, 2, free\]: its outermost free "
         r"dimension \(the pair axis\) must have size 2, not shape \(8, 4, 2\)")
    _bad(p, [LoadStationary(src=AP("sbuf", "fp8_e4m3", 0, 16, 0, ((8, 1),)))],
         r"tile limit: a stationary of 16 partitions x 8 at tile position \(0, 0\) does not "
         r"fit the 8-row, 8-wide array; the double row contracts twice the rows: src "
         r"\[partitions, 2, free\] with double_row")
    _bad(p, [LoadStationary(src=pairs("fp8_e4m3", 0, 16, 8), double_row=True)],
         r"tile limit: a stationary of 16 partitions x 8")
    _bad(p, [load_, MultiplyMoving(dst=mul.dst, src=AP("sbuf", "fp8_e4m3", 0, 8, 16,
                                                       ((16, 1),)))],
         r"tensor\[1\].*stationary: the loaded stationary is a double row, the multiply is "
         r"not one \(double_row=0\)")
    _bad(p, [LoadStationary(src=plain_src), mul],
         r"tensor\[1\].*stationary: the loaded stationary is not a double row, the multiply "
         r"is one \(double_row=1\)")
    _bad(p, [load_, MultiplyMoving(dst=AP("psum", "fp32", 0, 8, 0, ((32, 1),)),
                                   src=pairs("fp8_e4m3", 16, 8, 32), double_row=True)],
         r"tensor\[1\].*tile limit: moving free size 32 exceeds 16")
    _bad(p, [load_, MultiplyMoving(dst=AP("psum", "fp32", 0, 8, 0, ((32, 1),)),
                                   src=mul.src, double_row=True)],
         r"operand shape: dst has 32 elements per partition, the moving tile 16")
    _bad(core_params(load("trn3"), "sim"),
         [LoadStationary(src=pairs("mxfp8_x4", 0, 8, 8), double_row=True)],
         r"format: the double row takes the double-rate formats of trn3 .*, not mxfp8_x4")


def test_core_rtl_runs_the_double_row_from_sbuf(trn2_sim):
    """The core RTL reads a double row's pair 1 on its second SBUF read port: it runs a
    double row from SBUF and says why not from PSUM."""
    load_, mul = double_matmul(8, 8, 16)
    for ins in (load_, mul):
        assert tensor.supported(ins, trn2_sim.formats) is None
        in_psum = dataclasses.replace(ins, src=dataclasses.replace(ins.src, space="psum"))
        assert tensor.supported(in_psum, trn2_sim.formats) == (
            "a double row's src must be in SBUF: its pair 1 comes through the engine's "
            "second read port, which reads SBUF alone")


def test_core_rtl_cycles_of_a_double_row_are_those_of_its_columns(trn2_sim):
    """The RTL's cycles of a double row (:func:`rtl_cycles`) are those of a plain fp8
    instruction of its columns: a multiply of N columns takes the exact cycles of a plain
    N-column multiply (the simulator's cost, [NKI3]), a load of M columns reads M of them,
    not the 2M elements of its free axis: 8 columns read, 2 beats of 4 handed to the array,
    4 stages."""
    p = trn2_sim
    load_, mul = double_matmul(8, 8, 16)
    plain_load = LoadStationary(src=AP("sbuf", "fp8_e4m3", 0, 8, 0, ((8, 1),)))
    plain_mul = MultiplyMoving(dst=mul.dst, src=AP("sbuf", "fp8_e4m3", 0, 8, 16, ((16, 1),)))
    assert rtl_cycles(p, "tensor", mul) == rtl_cycles(p, "tensor", plain_mul)
    assert rtl_cycles(p, "tensor", load_) == rtl_cycles(p, "tensor", plain_load) == 8 + 2 + 4


def _matmuls(params, shape, dtype):
    b = Builder(params)
    kernels.KERNELS["gemm"].build(b, *shape.values(), dtype)
    return sum(isinstance(i, MultiplyMoving) for i in b.program.streams["tensor"])


@pytest.mark.parametrize("name", ["gemm", "gemm_rows", "gemm_naive"])
@pytest.mark.parametrize("shape", [dict(M=8, K=32, N=16),   # two double rows
                                   dict(M=20, K=23, N=40),  # a double row and 7 plain
                                   dict(M=9, K=13, N=7)])   # 13 odd: two plain tiles
def test_fp8_gemm_on_double_rows_matches_numpy(trn2_sim, name, shape, seed):
    k = kernels.KERNELS[name]
    run_ = kernels.run(trn2_sim, k, shape, "fp8_e4m3", seed=seed)
    want = run_.reference()["out"]
    err = np.abs(run_.outputs["out"] - want).max() / np.abs(want).max()
    assert err <= kernels.tolerance(k, "fp8_e4m3")
    assert run_.result.flops == 2.0 * shape["M"] * shape["K"] * shape["N"]


def test_fp8_gemm_issues_half_the_matmuls_in_the_system_models_time(trn2):
    """At full scale trn2's fp8 GEMM contracts K-tiles of 256: half the matmuls of bf16.
    Its tensor-engine busy cycles are the system model's (:func:`matmul_cycles` at rate 2)
    but for the array's drain after the last multiply (rows + cols + 3 cycles), which the
    engine's busy time leaves out in every format, and the stationary loads that a wait for
    an operand's DMA leaves unhidden, which the model does not charge: bf16 the same."""
    shape = dict(M=256, K=1024, N=1024)
    assert _matmuls(trn2, shape, "fp8_e4m3") * 2 == _matmuls(trn2, shape, "bf16") == 32
    t = trn2.tensor
    for dtype in ("fp8_e4m3", "bf16"):
        res = kernels.run(trn2, kernels.KERNELS["gemm"], shape, dtype,
                          timing_only=True).result
        model = matmul_cycles(*shape.values(), t.rows, t.cols, trn2.rate(dtype),
                              t.moving_max, t.load_columns, t.tiles)
        unhidden = t.rows + t.cols + 3 - (float(model) - res.cycles["tensor"])
        assert 0 <= unhidden < 0.01 * float(model)
