"""Graph properties of the instance and server topologies."""

import networkx as nx
import pytest

from sim.system import topology as topo


def test_instance_torus_is_4x4_with_degree_4():
    g = topo.instance_torus(320e9)
    assert g.number_of_nodes() == 16
    assert g.number_of_edges() == 32  # 16 nodes x degree 4 / 2
    assert {d for _, d in g.degree()} == {4}
    assert nx.diameter(g) == 4  # 2 hops per ring of 4
    assert {bw for *_, bw in g.edges(data="bandwidth")} == {320e9}


def test_trn2_ultraserver_is_a_4x4x4_torus_with_instance_rings():
    g = topo.trn2_ultraserver(320e9, ring_bandwidth=100e9)
    assert g.number_of_nodes() == 64
    assert {d for _, d in g.degree()} == {6}
    assert nx.diameter(g) == 6
    # The ring across instances joins chips of the same (row, col) position.
    for (r, c, i), (r2, c2, i2), data in g.edges(data=True):
        if data["dim"] == 2:
            assert (r, c) == (r2, c2) and (i - i2) % 4 in (1, 3)
            assert data["bandwidth"] == 100e9
        else:
            assert i == i2 and data["bandwidth"] == 320e9
    # Each instance alone is the 4x4 torus.
    inst = g.subgraph([n for n in g if n[2] == 0])
    assert nx.is_isomorphic(inst, topo.instance_torus(1.0))


def test_switch_is_two_hops_all_to_all():
    g = topo.switch(144, 1e12)
    assert len(topo.chips(g)) == 144 and g.graph["chips"] == 144
    assert g.degree("switch") == 144
    assert nx.diameter(g) == 2


def test_single_chip_and_small_dimensions():
    assert topo.single_chip().number_of_nodes() == 1
    ring2 = topo.torus((2,), 1.0)
    assert ring2.number_of_edges() == 1
    assert topo.torus((1, 3), 1.0).number_of_edges() == 3


@pytest.mark.parametrize("call, match", [
    (lambda: topo.torus((4, 0), 1.0), r"dims must be a non-empty sequence"),
    (lambda: topo.torus((4, 4), (1.0,)), r"bandwidth must have one figure per dimension"),
    (lambda: topo.torus((4,), -1.0), r"bandwidth must be a positive number of bytes/s, not -1.0"),
    (lambda: topo.switch(1, 1.0), r"chips must be an integer of at least 2, not 1"),
    (lambda: topo.per_link_bandwidth(1.28e12, 0), r"links must be a positive integer, not 0"),
])
def test_bad_arguments_are_explained(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_per_link_bandwidth_of_neuronlink_v3():
    assert topo.per_link_bandwidth(1.28e12, 4) == 320e9
