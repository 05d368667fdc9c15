"""Executed collectives (sim/system/execute.py) and the sharded GEMM around them
(explore/sharded.py) against the golden GEMM, numpy, hand-worked times, the analytic formulas
and the link model's replay figures."""

from __future__ import annotations

import dataclasses
import functools
import math

import ml_dtypes
import numpy as np
import pytest

from hdl.numerics.formats import BF16
from sim.golden import link as golden_link
from sim.golden import numerics, systolic
from sim.system import collectives, execute, model
from specs.errors import ModelError


@pytest.fixture(scope="module")
def instance():
    return model.build("trn2.48xlarge")


def _bf16_bits(x: np.ndarray) -> np.ndarray:
    return x.astype(ml_dtypes.bfloat16).view(np.uint16).astype(np.uint32)


def _ring_members(instance) -> list[int]:
    fab = execute.fabric(instance)
    where = {c: i for i, c in enumerate(fab.coords)}
    return [where[n] for n in execute.ring_order(fab.coords)]


def _ring_order_sum(parts, members, out_len, fold):
    """The documented ring order, written out: the first half of the buffer goes round
    ``members``, the second half round the reversed ring; segment ``j`` of each half (cut as
    numpy.array_split cuts it) is the left fold over members ``j+1, j+2, ..., j``."""
    out = np.empty(out_len, dtype=np.uint32)
    mid = out_len // 2
    for order, (lo, hi) in ((members, (0, mid)), (members[::-1], (mid, out_len))):
        g = len(order)
        cuts = np.array_split(np.arange(lo, hi), g)
        for j, idx in enumerate(cuts):
            chain = [order[(j + 1 + t) % g] for t in range(g)]
            out[idx] = fold(chain)[idx]
    return out


def test_tensor_parallel_gemm_equals_golden_bit_for_bit(instance, seed):
    """An MLP block over the 16 chips of a trn2.48xlarge: Y = X W1 column-sharded, then
    Z = Y W2 row-sharded and all-reduced in fp32 over the ring. Each chip's columns of Y are
    the golden full GEMM's, and Z is the golden full GEMM accumulated in the documented
    order (PSUM accumulation of the K blocks, one block per chip)."""
    rng = np.random.default_rng(seed)
    p, m, d, h, n = 16, 8, 32, 16 * 8, 12
    x = _bf16_bits(rng.standard_normal((m, d)))
    w1 = _bf16_bits(rng.standard_normal((d, h)))
    w2 = _bf16_bits(rng.standard_normal((h, n)))
    cols = np.split(np.arange(h), p)
    full_y = systolic.matmul(x.T, w1, "bf16")                      # golden, whole width
    ys = [systolic.matmul(x.T, w1[:, c], "bf16") for c in cols]     # one shard per chip
    for c, y in zip(cols, ys, strict=True):
        assert np.array_equal(y, full_y[:, c])
    y16 = [numerics.cast_bits(y.view(np.float32), BF16).astype(np.uint32) for y in ys]
    partial = [systolic.matmul(y16[i].T, w2[cols[i]], "bf16") for i in range(p)]
    r = execute.run(instance, "all_reduce", m * n * 4, algorithm="ring", timing_only=False,
                    inputs=[q.reshape(-1) for q in partial], chunk=16)
    members = _ring_members(instance)
    y_all = numerics.cast_bits(full_y.view(np.float32), BF16).astype(np.uint32)

    def golden_fold(chain):
        acc = None
        for c in chain:
            acc = systolic.matmul(y_all[:, cols[c]].T, w2[cols[c]], "bf16", acc,
                                  accumulate=acc is not None)
        return acc.reshape(-1)

    def numpy_fold(chain):
        acc = partial[chain[0]].reshape(-1).view(np.float32).copy()
        for c in chain[1:]:
            acc = acc + partial[c].reshape(-1).view(np.float32)
        return acc.view(np.uint32)

    want = _ring_order_sum(partial, members, m * n, golden_fold)
    assert np.array_equal(want, _ring_order_sum(partial, members, m * n, numpy_fold))
    for c in range(p):
        assert np.array_equal(r.data[c], want), f"chip {c}"
    # the order matters: the plain left fold over chips 0 .. 15 differs somewhere
    assert not np.array_equal(want, numpy_fold(list(range(p))))


@pytest.mark.parametrize("rounding", ["rne", "stochastic"])
@pytest.mark.parametrize("algorithm", ["ring", "torus"])
def test_bf16_all_reduce_within_documented_bound(instance, seed, rounding, algorithm):
    """bf16 reduction: every add is rounded once, by at most one bf16 ulp (stochastic) or
    half of one (RNE) of a partial sum bounded by S = sum |x_i|; so the result is within
    (p - 1) * 2**-7 * S (2**-8 for RNE) of the exact sum, on every chip alike."""
    p, n = 16, 16 * 64
    rng = np.random.default_rng(seed)
    xs = [_bf16_bits(rng.standard_normal(n)) for _ in range(p)]
    r = execute.run(instance, "all_reduce", n * 2, algorithm=algorithm, dtype="bf16",
                    rounding=rounding, timing_only=False, inputs=xs, chunk=64, seed=seed)
    vals = np.stack([numerics.widen(x, BF16).view(np.float32) for x in xs]).astype(np.float64)
    exact, s = vals.sum(0), np.abs(vals).sum(0)
    unit = 2.0 ** (-7 if rounding == "stochastic" else -8)
    got = numerics.widen(r.data[0], BF16).view(np.float32).astype(np.float64)
    err = np.abs(got - exact)
    assert (err <= (p - 1) * unit * s * (1 + 2**-6)).all()
    assert err.max() > 0
    assert all(np.array_equal(d, r.data[0]) for d in r.data)


def test_stochastic_rounding_is_seeded_and_differs_from_rne(instance, seed):
    p, n = 16, 16 * 32
    rng = np.random.default_rng(seed)
    xs = [_bf16_bits(rng.standard_normal(n)) for _ in range(p)]
    kw = {"algorithm": "torus", "dtype": "bf16", "timing_only": False, "inputs": xs}
    a = execute.run(instance, "all_reduce", n * 2, rounding="stochastic", seed=1, **kw)
    b = execute.run(instance, "all_reduce", n * 2, rounding="stochastic", seed=1, **kw)
    c = execute.run(instance, "all_reduce", n * 2, rounding="rne", **kw)
    assert np.array_equal(a.data[0], b.data[0])
    assert not np.array_equal(a.data[0], c.data[0])


def test_all_gather_and_all_to_all_move_every_shard_once(instance, seed):
    p, n = 16, 16 * 10
    rng = np.random.default_rng(seed)
    xs = [rng.integers(0, 2**32, n, dtype=np.uint32) for _ in range(p)]
    r = execute.run(instance, "all_to_all", n * 4, timing_only=False, inputs=xs, chunk=8)
    block = n // p
    for d in range(p):
        for s in range(p):  # block s of chip d's output is block d of chip s's input
            want = xs[s][d * block:(d + 1) * block]
            assert np.array_equal(r.data[d][s * block:(s + 1) * block], want)
    assert set(r.deliveries.values()) == {1}
    assert len(r.deliveries) == p * (p - 1) * math.ceil(block * 4 / 8)
    g = execute.run(instance, "all_gather", n * 4, algorithm="ring", timing_only=False,
                    inputs=xs, chunk=4 * 3)
    assert set(g.deliveries.values()) == {1}
    assert all(np.array_equal(d, g.data[0]) for d in g.data)
    # every element of the result is that element of exactly one chip's input
    hits = sum((np.asarray(x) == g.data[0]) for x in xs)
    assert (hits >= 1).all()


def test_send_recv_hand_worked(instance):
    """One hop: the chunks follow each other on the link, the last lands alpha later; two
    hops, store and forward: one more chunk time and one more alpha."""
    bw = 1024e9 / 4
    eff = instance.chip.efficiency
    alpha = instance.link_alpha
    n, chunk = 64 * 2**20, 2**20
    one = execute.run(instance, "send_recv", n, chunk=chunk, peer=1)
    assert one.time == pytest.approx(n / (bw * eff) + alpha, rel=1e-9)
    two = execute.run(instance, "send_recv", n, chunk=chunk, peer=5)  # (0,0) -> (1,1)
    assert two.time == pytest.approx((n + chunk) / (bw * eff) + 2 * alpha, rel=1e-9)
    assert one.busbw == pytest.approx(one.algbw) == pytest.approx(n / one.time)


@pytest.mark.parametrize("name, peer, members", [
    ("trn2.48xlarge", None, None), ("trn2.48xlarge", 10, None),  # 1 and 3 torus hops
    ("trn3-ultraserver", 7, None),                                 # through the switch
    ("trn2-cluster", 16, 2)])                                      # NeuronLink, then EFA
@pytest.mark.parametrize("nbytes", [4096, 3 * 2**20 + 4, 64 * 2**20])
def test_send_recv_equals_the_send_formula(name, peer, members, nbytes):
    """The executed send/receive takes the time of the one point-to-point cost rule,
    ``collectives.send_time`` (which the exploration model charges for pipeline stages),
    on its path's links: on one hop exactly ``alpha + n / (bandwidth x efficiency)``."""
    system = model.build(name)
    r = execute.run(system, "send_recv", nbytes, chunk=2**20, peer=peer, members=members)
    formula = execute.analytic(system, "send_recv", nbytes, r.algorithm, members, 2**20, peer)
    assert r.time == pytest.approx(formula, rel=1e-12)
    if name == "trn2.48xlarge" and peer is None:
        link = 1024e9 / 4
        assert formula == pytest.approx(collectives.send_time(
            nbytes, link, system.link_alpha, system.chip.efficiency), rel=1e-12)


def test_contention_two_transfers_share_a_link(instance):
    """An all-to-all puts several transfers on one link: no link carries more than its
    bandwidth, and the busiest link's bytes over its payload rate bound the time."""
    r = execute.run(instance, "all_to_all", 16 * 2**20)
    eff = instance.chip.efficiency
    rate = 1024e9 / 4 * eff
    busiest = max(r.link_bytes.values())
    assert r.time >= busiest / rate
    assert max(r.utilisation().values()) <= 1 + 1e-12
    assert busiest > 16 * 2**20 // 16  # more than one shard crossed that link


@pytest.mark.parametrize("op", collectives.OPS)
def test_large_messages_match_the_formula(instance, op):
    """1 GiB on the 4 x 4 torus, no contention: executed and analytic within 0.1 % (the
    formula pipelines the chunks as the execution does)."""
    r = execute.run(instance, op, 2**30)
    analytic = instance.collective(op).to("s").magnitude
    assert r.time == pytest.approx(analytic, rel=1e-3)
    p = 16
    factor = 2 * (p - 1) / p if op == "all_reduce" else (p - 1) / p
    assert r.busbw == pytest.approx(2**30 / r.time * factor)


@pytest.mark.parametrize(("name", "op", "nbytes", "tolerance"), [
    ("trn2.48xlarge", "all_reduce", 4096, 0.015), ("trn2.48xlarge", "all_gather", 4096, 1e-3),
    ("trn3-ultraserver", "all_reduce", 4096, 1e-3),
    ("trn2.48xlarge", "all_reduce", 16 * 2**20, 1e-3),
    ("trn2.48xlarge", "all_gather", 16 * 2**20, 1e-3),
    ("trn3-ultraserver", "reduce_scatter", 16 * 2**20, 1e-3)])
def test_small_and_middle_messages_match_the_formula(name, op, nbytes, tolerance):
    """4 KiB: latency and the adds' fixed costs dominate; the formula charges one add per
    reduce-scatter step and the adds of a chip's regions queued on its vector engines (on a
    torus the executed adds of several regions partly overlap, hence the wider tolerance).
    16 MiB: the chunks pipeline across ring steps, and the switch's owner adds its
    chunks as they arrive; the formula was up to 32 % high here before it modelled that."""
    s = _built(name)
    r = execute.run(s, op, nbytes)
    assert r.time == pytest.approx(s.collective(op, nbytes).to("s").magnitude, rel=tolerance)


@functools.cache
def _built(name: str):
    """One model per system for the tests above, so that its fabric is built once."""
    return model.build(name)


def test_cluster_slice_matches_hierarchical_formula():
    c = model.build("trn2-ultracluster")
    r = execute.run(c, "all_reduce", 2**30, members=2)
    inner = c.member
    want = collectives.hierarchical_time(
        "all_reduce", 2**30, inner.topology, 2, inner.efa.to("B/s").magnitude,
        inner.link_alpha, inner.efa_alpha, c.chip.efficiency, bidirectional=True,
        reduce=c.chip.add(), chunk=collectives.CHUNK)
    assert r.chips == 32
    assert r.time == pytest.approx(want, rel=1e-3)
    # 16 MiB: the first chip's all-gather overlaps the others' reduce-scatter on EFA, as the
    # formula has it (it was 7 % high before it did).
    mid = execute.run(c, "all_reduce", 16 * 2**20, members=2)
    assert mid.time == pytest.approx(execute.analytic(c, "all_reduce", 16 * 2**20,
                                                      "hierarchical", 2), rel=0.01)
    assert any(name.startswith("efa") for name in r.link_busy)


def test_faults_replay_and_deliver_once(instance, seed):
    """At a bit error rate that fails about 5 % of packets, a 256 MiB transfer takes as much
    longer as the link model's go-back-N figure predicts, and the data still arrives once."""
    lp = execute.fabric(instance).link_params
    D = instance.chip.spec.neuronlink.latency
    ber = 0.05 / (lp.width * (lp.header_flits + lp.max_packet + lp.crc_flits))
    clean = execute.run(instance, "send_recv", 256 * 2**20, peer=1)
    faulty = execute.run(instance, "send_recv", 256 * 2**20, peer=1, bit_error_rate=ber,
                         seed=seed)
    predicted = (golden_link.efficiency(lp, D, lp.max_packet)
                 / golden_link.efficiency_with_errors(lp, D, lp.max_packet, ber))
    assert faulty.replays > 0
    assert faulty.time / clean.time - 1 == pytest.approx(predicted - 1, rel=0.15)
    xs = [np.arange(16 * 256, dtype=np.uint32) * (c + 1) for c in range(16)]
    a = execute.run(instance, "all_reduce", 16 * 1024, timing_only=False, inputs=xs, chunk=256)
    b = execute.run(instance, "all_reduce", 16 * 1024, timing_only=False, inputs=xs, chunk=256,
                    bit_error_rate=ber * 4, seed=seed)
    assert b.replays > 0 and b.time > a.time
    assert set(b.deliveries.values()) == {1} and b.deliveries.keys() == a.deliveries.keys()
    assert all(np.array_equal(x, y) for x, y in zip(a.data, b.data, strict=True))


def test_trace_has_a_track_per_chip_and_link(instance):
    import json

    r = execute.run(instance, "all_reduce", 16 * 2**16, trace=True)
    doc = json.loads(r.trace_json())
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert {f"chip {c}" for c in range(16)} <= names
    assert len(names) == 16 + len(r.link_busy) == 16 + 64
    assert any(e.get("ph") == "X" and e["pid"] == 0 for e in doc["traceEvents"])


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"op": "broadcast"}, "op must be one of"),
    ({"algorithm": "hierarchical"}, "algorithm must be one of torus, ring"),
    ({"nbytes": 6}, "size must be a whole number"),
    ({"dtype": "fp8"}, "dtype must be one of fp32, bf16"),
    ({"chunk": 0}, "chunk must be"),
])
def test_bad_arguments(instance, kwargs, match):
    args = {"op": "all_reduce", "nbytes": 2**20} | kwargs
    with pytest.raises(ModelError, match=match):
        execute.run(instance, args.pop("op"), args.pop("nbytes"), **args)


def test_check_lays_executed_beside_formula():
    from sim.system.check import rows

    got = {r.quantity: r for r in rows(model.build("trn2.48xlarge"))
           if r.quantity.endswith(".executed")}
    assert set(got) == {f"collective.{op}.executed" for op in collectives.OPS}
    for r in got.values():
        assert r.source == "formula" and r.level == "instance"
        assert abs(r.difference) < 0.02
    assert not any(r.quantity.endswith(".executed") for r in rows(model.build("trn2")))


def test_sharded_gemm_on_the_core_simulator_then_all_reduce(instance):
    """Each chip runs its K shard of a GEMM on the core simulator with data: its output is
    the golden GEMM of its shard cast to bf16; the bf16 all-reduce over the ring is the left
    fold of the documented order, each add rounded to bf16 (ml_dtypes as the reference)."""
    import kernels
    from explore.sharded import run_sharded

    r = run_sharded(instance, kernels.KERNELS["gemm"], {"M": 128, "K": 16 * 64, "N": 48},
                    "bf16", timing_only=False, algorithm="ring", seed=3)
    lhs_t, rhs = (r.inputs[n].view(np.uint16).astype(np.uint32) for n in ("lhsT", "rhs"))
    for c in range(16):
        rows = slice(c * 64, (c + 1) * 64)
        golden = systolic.matmul(lhs_t[rows], rhs[rows], "bf16").view(np.float32)
        assert np.array_equal(r.outputs[c], numerics.cast_bits(golden, BF16).reshape(-1))
    parts = [x.astype(np.uint16).view(ml_dtypes.bfloat16) for x in r.outputs]

    def fold(chain):
        acc = parts[chain[0]]
        for c in chain[1:]:
            acc = (acc.astype(np.float32) + parts[c].astype(np.float32)).astype(
                ml_dtypes.bfloat16)
        return acc.view(np.uint16).astype(np.uint32)

    want = _ring_order_sum(parts, _ring_members(instance), 128 * 48, fold)
    assert np.array_equal(r.result, want)
    assert r.time == r.kernel_time + r.collective.time and r.kernel_time > 0


def test_sharded_gemm_in_tf32_and_not_in_mx(instance):
    """tf32 shards are drawn as the instruction set stores tf32 (32-bit words, the low 13
    bits clear) and each chip's output is the golden tf32 GEMM of its shard; MX formats are
    refused in one line (their scales are not split over chips)."""
    import kernels
    from explore.sharded import run_sharded

    r = run_sharded(instance, kernels.KERNELS["gemm"], {"M": 8, "K": 16 * 8, "N": 8}, "tf32",
                    timing_only=False, algorithm="ring", seed=1)
    lhs_t, rhs = (r.inputs[n].view(np.uint32) for n in ("lhsT", "rhs"))
    assert not (lhs_t & 0x1FFF).any() and not (rhs & 0x1FFF).any()
    golden = systolic.matmul(lhs_t[:8] >> 13, rhs[:8] >> 13, "tf32").view(np.float32)
    assert np.array_equal(r.outputs[0], numerics.cast_bits(golden, BF16).reshape(-1))
    with pytest.raises(ModelError, match=r"^dtype of a sharded run must not be block-scaled "
                                         r".*, not 'mxfp8'$"):
        run_sharded(instance, kernels.KERNELS["gemm"], {"M": 8, "K": 16 * 32, "N": 8}, "mxfp8")


def test_tensor_parallel_gemm_bf16_stochastic_within_bound(instance, seed):
    """The row-sharded GEMM's partials (golden, cast to bf16) all-reduced in bf16 with
    stochastic rounding on the torus: within (p - 1) * 2**-7 * sum |partial| of the exact
    sum of the partials, and unbiased enough that the mean error is far below that bound."""
    rng = np.random.default_rng(seed)
    p, m, k, n = 16, 32, 16 * 16, 64
    lhs_t = _bf16_bits(rng.standard_normal((k, m)))
    rhs = _bf16_bits(rng.standard_normal((k, n)))
    parts = [numerics.cast_bits(systolic.matmul(lhs_t[c * 16:(c + 1) * 16],
                                                rhs[c * 16:(c + 1) * 16], "bf16")
                                .view(np.float32), BF16).astype(np.uint32).reshape(-1)
             for c in range(p)]
    r = execute.run(instance, "all_reduce", m * n * 2, dtype="bf16", rounding="stochastic",
                    timing_only=False, inputs=parts, seed=seed)
    vals = np.stack([numerics.widen(x, BF16).view(np.float32) for x in parts]).astype(
        np.float64)
    got = numerics.widen(r.data[0], BF16).view(np.float32).astype(np.float64)
    err, s = got - vals.sum(0), np.abs(vals).sum(0)
    assert (np.abs(err) <= (p - 1) * 2**-7 * s * (1 + 2**-6)).all()
    assert abs(err.mean()) < 0.05 * ((p - 1) * 2**-7 * s).mean()


def test_the_spec_bit_error_rate_is_the_fault_models_default(instance):
    """Without an argument the run takes the chip spec's neuronlink.bit_error_rate: a chip
    whose spec says 1e-6 replays exactly as a run given 1e-6."""
    chip = instance.chip.spec
    noisy = chip.model_copy(update={"neuronlink": chip.neuronlink.model_copy(
        update={"bit_error_rate": 1e-6})})
    system = model.System(instance.spec, dataclasses.replace(instance.chip, spec=noisy))
    a = execute.run(system, "send_recv", 16 * 2**20, peer=1, seed=1)
    b = execute.run(instance, "send_recv", 16 * 2**20, peer=1, seed=1, bit_error_rate=1e-6)
    assert a.bit_error_rate == 1e-6 and a.replays == b.replays > 0 and a.time == b.time
    assert execute.run(instance, "send_recv", 2**20, peer=1).bit_error_rate == \
        chip.neuronlink.bit_error_rate
