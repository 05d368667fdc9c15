"""The alpha-beta collective model against times worked out by hand."""

import numpy as np
import pytest

from sim.system import collectives as coll
from sim.system import topology as topo

N = 256 * 2**20          # 256 MiB per chip
B = 320e9                # bytes/s per link direction
ALPHA = 2e-6             # seconds per hop
EFF = 0.9


def test_ring_all_reduce_on_a_4x4_torus_by_hand():
    # Dimension 1: rings of 4 on n bytes; dimension 2: rings of 4 on n/4 bytes.
    # Reduce-scatter then all-gather on each: 2 * (p-1) steps of (alpha + chunk / (B * eff)).
    p = 4
    bw = B * EFF
    dim1 = 2 * (p - 1) * ALPHA + 2 * (p - 1) / p * N / bw
    dim2 = 2 * (p - 1) * ALPHA + 2 * (p - 1) / p * (N / 4) / bw
    expect = dim1 + dim2
    g = topo.instance_torus(B)
    assert coll.topology_time(g, "all_reduce", N, ALPHA, EFF) == pytest.approx(expect, rel=1e-12)
    # The bandwidth term alone approaches 2 (p-1)/p n/B x (1 + 1/4) for 16 chips.
    beta_only = coll.torus_time("all_reduce", N, (4, 4), B, 0.0)
    assert beta_only == pytest.approx(1.5 * N / B * 1.25, rel=1e-12)


def test_bidirectional_rings_halve_the_bandwidth_term():
    one = coll.torus_time("all_reduce", N, (4, 4), B, 0.0, bidirectional=False)
    two = coll.torus_time("all_reduce", N, (4, 4), B, 0.0, bidirectional=True)
    assert two == pytest.approx(one / 2, rel=1e-12)


def test_all_gather_and_reduce_scatter_are_half_an_all_reduce_on_a_ring():
    ar = coll.ring_time("all_reduce", N, 16, B, ALPHA, EFF)
    ag = coll.ring_time("all_gather", N, 16, B, ALPHA, EFF)
    rs = coll.ring_time("reduce_scatter", N, 16, B, ALPHA, EFF)
    assert ag == rs == pytest.approx(ar / 2, rel=1e-12)
    assert ag == pytest.approx(15 * (ALPHA + N / 16 / (B * EFF)), rel=1e-12)


def test_3d_torus_with_a_slower_instance_ring():
    ring_bw = 100e9
    g = topo.trn2_ultraserver(B, ring_bandwidth=ring_bw)
    t = coll.topology_time(g, "all_reduce", N, 0.0)
    expect = 1.5 * N / B + 1.5 * (N / 4) / B + 1.5 * (N / 16) / ring_bw
    assert t == pytest.approx(expect, rel=1e-12)


def test_switch_collectives():
    # Each phase: 143 shares of N/144 through the port, store and forward through the switch
    # (one share's link time more, the message uncut), two hops of latency.
    g = topo.switch(144, 1e12)
    t = coll.topology_time(g, "all_reduce", N, ALPHA, EFF)
    assert t == pytest.approx(2 * (2 * ALPHA + N / (1e12 * EFF)), rel=1e-12)


def test_hierarchical_all_reduce_over_efa():
    efa = 3200e9 / 8  # 3,200 Gbps per trn2.48xlarge
    server = topo.instance_torus(B)
    servers = 8
    t = coll.hierarchical_time("all_reduce", N, server, servers, efa, ALPHA, 10e-6)
    rs_local = 3 * (ALPHA + N / 4 / B) + 3 * (ALPHA + N / 16 / B)
    # Over EFA the 16 chips' shards pipeline on the one link: 7 steps of N/8 back to back
    # (N/8/efa = 84 us, far above a 16th of it plus the 10 us latency), and the first chip
    # to finish its reduce-scatter starts its all-gather while the others' last chunks land:
    # both passes' bytes back to back, one latency at the end.
    inter = 2 * 7 * N / 8 / efa + 10e-6
    assert t == pytest.approx(2 * rs_local + inter, rel=1e-12)
    one = coll.hierarchical_time("all_reduce", N, server, 1, efa, ALPHA, 10e-6)
    assert one == pytest.approx(coll.topology_time(server, "all_reduce", N, ALPHA))


def test_single_chip_costs_nothing():
    assert coll.topology_time(topo.single_chip(), "all_reduce", N, ALPHA) == 0.0


@pytest.mark.parametrize("call, match", [
    (lambda: coll.ring_time("broadcast", N, 4, B, ALPHA), r"op must be one of all_reduce"),
    (lambda: coll.ring_time("all_reduce", N, 4, B, ALPHA, 1.5), r"efficiency must be in"),
    (lambda: coll.ring_time("all_reduce", -1, 4, B, ALPHA), r"n must be a non-negative"),
    (lambda: coll.ring_time("all_reduce", N, 0, B, ALPHA), r"p must be a positive integer"),
])
def test_bad_arguments_are_explained(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_reduce_adds_one_add_per_reduce_scatter_step():
    add = 1e-7
    ring = coll.ring_time("all_reduce", N, 16, B, ALPHA, EFF, bidirectional=True, reduce=add)
    # Uncut messages: the chain through the 15 steps holds one add per step but the last,
    # which ends with the adds of both directions.
    assert ring - coll.ring_time("all_reduce", N, 16, B, ALPHA, EFF, bidirectional=True) \
        == pytest.approx((14 + 2) * add, rel=1e-9)
    assert coll.ring_time("all_gather", N, 16, B, ALPHA, EFF, reduce=add) == \
        coll.ring_time("all_gather", N, 16, B, ALPHA, EFF)
    g = topo.switch(144, 1e12)
    # The owner's adds keep up with the shares (one add is far below a share's link time):
    # only the last one shows.
    assert coll.topology_time(g, "reduce_scatter", N, ALPHA, EFF, reduce=add) == pytest.approx(
        2 * ALPHA + N / (1e12 * EFF) + add, rel=1e-12)
    with pytest.raises(ValueError, match="reduce must be a non-negative number of seconds"):
        coll.ring_time("all_reduce", N, 4, B, ALPHA, reduce=-1.0)


def test_chunks_pipeline_across_ring_steps():
    """A ring of 4 (3 steps of s = n/4), messages cut in chunks of C: the last chunk leaves
    after every chunk in turn, 3 s/B, when the chunks cover one chunk's round (C/B + alpha +
    add); after the first chunk's chain through the steps, s/B + 2 (C/B + alpha + add),
    when they do not. Then it lands (alpha) and is added."""
    n, bw, alpha, add = 64 * 2**20, 100e9, 1e-6, 1e-7
    s = n / 4
    for chunk in (2**20, 8 * 2**20):
        hop = chunk / bw + alpha + add
        want = max(3 * s / bw, s / bw + 2 * hop) + alpha + add
        assert coll.ring_time("reduce_scatter", n, 4, bw, alpha, reduce=add,
                              chunk=chunk) == pytest.approx(want, rel=1e-12)
    # A latency longer than the chunks in a step take: the chain binds (two 8 MiB chunks
    # take 168 us, one chunk's round 184 us).
    slow = 100e-6
    assert coll.ring_time("all_gather", n, 4, bw, slow, chunk=8 * 2**20) == pytest.approx(
        s / bw + 2 * (8 * 2**20 / bw + slow) + slow, rel=1e-12)
    # One chunk per step is the classic alpha-beta ring.
    assert coll.ring_time("all_gather", n, 4, bw, alpha, chunk=s) == pytest.approx(
        3 * (alpha + s / bw), rel=1e-12)


def test_adds_slower_than_the_link_queue():
    """Two regions per step (the second stage of a bidirectional torus), chunks whose add
    (3 us) outlasts their link time (1 us): the second chunk waits 2 us for the vector
    engines at every step."""
    bw, alpha = 1e9, 1e-6
    add = coll.Add(3e-6, 0.0, 1e30)
    n = 4 * 2 * 2 * 1000          # s = 2,000 bytes per step and direction, two regions of 1,000
    t, a = 1000 / bw, 3e-6
    queue = a - t
    hop = t + alpha + a + queue
    want = max(3 * 2000 / bw, 2000 / bw + 2 * hop) + alpha + 2 * a + queue
    assert coll.ring_time("reduce_scatter", n, 4, bw, alpha, bidirectional=True, reduce=add,
                          chunk=1000, pieces=2) == pytest.approx(want, rel=1e-12)


def test_arrays_give_what_scalars_give():
    """Every formula evaluates arrays of design points as it does each point alone."""
    import numpy as np

    ns = np.array([4096.0, 2**20, 2**30])
    ps = np.array([1.0, 4.0, 16.0])
    bws = np.array([100e9, 200e9, 300e9])
    add = coll.Add(1e-7, 6e-8, 4e12)
    for op in coll.OPS:
        got = coll.ring_time(op, ns, ps, bws, ALPHA, EFF, True, add, coll.CHUNK)
        want = [coll.ring_time(op, float(n), int(p), float(b), ALPHA, EFF, True, add,
                               coll.CHUNK) for n, p, b in zip(ns, ps, bws, strict=True)]
        assert got == pytest.approx(want, rel=1e-12)
        got = coll.torus_time(op, ns, (ps, np.array([4.0, 1.0, 2.0])), bws, ALPHA, EFF, True,
                              add, coll.CHUNK)
        want = [coll.torus_time(op, float(n), (int(p), int(q)), float(b), ALPHA, EFF, True,
                                add, coll.CHUNK)
                for n, p, q, b in zip(ns, ps, (4, 1, 2), bws, strict=True)]
        assert got == pytest.approx(want, rel=1e-12)
        got = coll.switch_time(op, ns, ps, bws, ALPHA, EFF, add, coll.CHUNK)
        want = [coll.switch_time(op, float(n), int(p), float(b), ALPHA, EFF, add, coll.CHUNK)
                for n, p, b in zip(ns, ps, bws, strict=True)]
        assert got == pytest.approx(want, rel=1e-12)


def test_send_is_latency_plus_bytes_over_bandwidth():
    # 1 MB over 100 GB/s at 80 % efficiency: 12.5 us, plus 2 us of latency
    assert coll.send_time(1e6, 100e9, 2e-6, 0.8) == pytest.approx(14.5e-6, rel=1e-12)
    got = coll.send_time(np.array([0.0, 1e6]), 100e9, 2e-6, 0.8)
    np.testing.assert_allclose(got, [2e-6, 14.5e-6], rtol=1e-12)
