"""The alpha-beta collective model against times worked out by hand."""

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
    g = topo.switch(144, 1e12)
    t = coll.topology_time(g, "all_reduce", N, ALPHA, EFF)
    assert t == pytest.approx(2 * (2 * ALPHA + 143 / 144 * N / (1e12 * EFF)), rel=1e-12)


def test_hierarchical_all_reduce_over_efa():
    efa = 3200e9 / 8  # 3,200 Gbps per trn2.48xlarge
    server = topo.instance_torus(B)
    servers = 8
    t = coll.hierarchical_time("all_reduce", N, server, servers, efa, ALPHA, 10e-6)
    rs_local = 3 * (ALPHA + N / 4 / B) + 3 * (ALPHA + N / 16 / B)
    inter = 2 * 7 * (10e-6 + N / 8 / efa)
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
    assert ring - coll.ring_time("all_reduce", N, 16, B, ALPHA, EFF, bidirectional=True) \
        == pytest.approx(15 * 2 * add, rel=1e-9)
    assert coll.ring_time("all_gather", N, 16, B, ALPHA, EFF, reduce=add) == \
        coll.ring_time("all_gather", N, 16, B, ALPHA, EFF)
    g = topo.switch(144, 1e12)
    assert coll.topology_time(g, "reduce_scatter", N, ALPHA, EFF, reduce=add) == pytest.approx(
        2 * ALPHA + 143 / 144 * N / (1e12 * EFF) + 143 * add, rel=1e-12)
    with pytest.raises(ValueError, match="reduce must be a non-negative number of seconds"):
        coll.ring_time("all_reduce", N, 4, B, ALPHA, reduce=-1.0)
