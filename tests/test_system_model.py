"""System model figures against arithmetic done by hand from the published parameters.

Every expectation is written out as literal arithmetic on the spec's figures (array size,
clock, chips, capacities), never computed by the code under test.
"""

from __future__ import annotations

import numpy as np
import pytest

from hdl.tensor.params import SystolicParams
from sim.golden import systolic_cycles
from sim.system import formulas
from sim.system.model import (
    Chip,
    ModelError,
    System,
    build,
    default_link_efficiency,
    sustained,
    tile_interval,
)
from specs.loader import load

GiB = 2**30
TiB = 2**40


def si(q, unit):
    return q.to(unit).magnitude


def close(q, unit, expected, rel=1e-12):
    assert si(q, unit) == pytest.approx(expected, rel=rel)


# --- formulas ----------------------------------------------------------------------------

def test_peak_flops_scalar_and_array():
    assert formulas.peak_flops(128, 128, 2.4e9, 1.0, 8) == pytest.approx(629.1456e12)
    got = formulas.peak_flops(np.array([64, 128]), 128, 2.8e9, np.array([1.0, 0.25]), 2)
    np.testing.assert_allclose(got, [64 * 128 * 2 * 2.8e9 * 2, 128 * 128 * 2 * 2.8e9 * 0.25 * 2])


def test_engine_buffer_and_logical_cores():
    assert formulas.engine_flops(128, 0.96e9, 8) == pytest.approx(983.04e9)
    assert formulas.buffer_bytes(128, 224 * 1024, 8) == 128 * 224 * 1024 * 8
    np.testing.assert_array_equal(formulas.logical_cores(np.array([8, 8, 2]),
                                                         np.array([1, 2, 1])), [8, 4, 2])
    assert formulas.sparse_flops(128, 128, 2.4e9, 4) == pytest.approx(128 * 128 * 2 * 2.4e9 * 4)


# A new tile every max(n, ceil(m / 4) + 1) cycles (33 for 128 columns), plus the first
# tile's load and the pipeline's drain: min(ceil(m / 4), n - 1) + 128 + 128 + 3.
@pytest.mark.parametrize(("m", "k", "n", "rate", "expected"), [
    (128, 128, 512, 1.0, 512 + 291),                 # one tile
    (256, 256, 1024, 1.0, 2 * 2 * 2 * 512 + 291),    # 2 k-passes x 2 m-tiles x 2 n-tiles
    (256, 256, 1024, 2.0, 1 * 2 * 2 * 512 + 291),    # double rate: k = 256 in one pass
    (256, 256, 1024, 0.25, 2 * 2 * 2 * 512 * 4 + 291),  # FP32 at a quarter rate
    (128, 128, 32, 1.0, 33 + 31 + 259),              # short moving tile: the next load's pace
    (128, 128, 600, 1.0, 512 + 88 + 291),            # 600 = 512 + 88
    (1, 1, 1, 1.0, 2 + 0 + 259),
    (100, 300, 513, 1.0, 3 * 1 * (512 + 26) + 25 + 259),  # 300 = 3 passes; 513 = 512 + 1
])
def test_matmul_cycles_by_hand(m, k, n, rate, expected):
    assert formulas.matmul_cycles(m, k, n, 128, 128, rate, 512, 4) == expected


def test_matmul_cycles_vectorised():
    got = formulas.matmul_cycles(np.array([128, 256]), np.array([128, 256]),
                                 np.array([512, 1024]), 128, 128, np.array([1.0, 2.0]), 512, 4)
    np.testing.assert_array_equal(got, [512 + 291, 2 * 2 * 512 + 291])


def test_link_efficiency():
    assert formulas.link_efficiency(4096 * 8, 2 * 256) == pytest.approx(32768 / (32768 + 512))


# --- core and chip -----------------------------------------------------------------------

def test_trn2_core():
    f = build("trn2").levels()["core"]
    close(f["compute.bf16"], "FLOPS", 128 * 128 * 2 * 2.4e9)
    close(f["compute.fp8"], "FLOPS", 128 * 128 * 2 * 2.4e9 * 2)
    close(f["compute.fp32"], "FLOPS", 128 * 128 * 2 * 2.4e9 / 4)
    close(f["compute.fp8_sparse"], "FLOPS", 128 * 128 * 2 * 2.4e9 * 4)
    close(f["vector.fp32"], "FLOPS", 128 * 0.96e9 * 8)
    close(f["scalar.fp32"], "FLOPS", 128 * 1.2e9 * 8)
    close(f["sbuf.capacity"], "B", 128 * 224 * 1024)
    close(f["psum.capacity"], "B", 128 * 16 * 1024)
    close(f["clock.tensor"], "Hz", 2.4e9)
    close(f["clock.vector"], "Hz", 0.96e9)
    assert f["vector.ops_per_cycle"] == 128 * 8
    assert "compute.int8" not in f  # Trainium2 lists no int8
    assert "cores" not in f and "memory.capacity" not in f


def test_trn2_chip():
    f = build("trn2").levels()["chip"]
    close(f["compute.bf16"], "TFLOPS", 8 * 128 * 128 * 2 * 2.4e9 / 1e12)  # 629.1456
    close(f["compute.fp8"], "TFLOPS", 8 * 128 * 128 * 2 * 2.4e9 * 2 / 1e12)
    close(f["compute.fp8_sparse"], "FLOPS", 8 * 128 * 128 * 2 * 2.4e9 * 4)
    close(f["memory.capacity"], "B", 96 * GiB)
    close(f["memory.bandwidth"], "B/s", 2.9e12)
    close(f["neuronlink.bandwidth"], "B/s", 1.28e12)
    close(f["sbuf.capacity"], "B", 8 * 128 * 224 * 1024)
    assert f["cores"] == 8
    assert f["logical_cores.lnc1"] == 8
    assert f["logical_cores.lnc2"] == 4
    assert f["cc_cores"] == 16
    assert f["dma.engines"] == 128
    assert f["neuronlink.efficiency"] == pytest.approx(4096 * 8 / (4096 * 8 + 2 * 256))
    assert "clock.tensor" not in f and "chips" not in f


def test_trn1_chip_int8_and_no_lnc2():
    f = build("trn1").levels()["chip"]
    close(f["compute.int8"], "OPS", 2 * 128 * 128 * 2 * 2.8e9 * 2)
    close(f["compute.bf16"], "FLOPS", 2 * 128 * 128 * 2 * 2.8e9)  # 183.5 TF
    close(f["vector.fp32"], "FLOPS", 2 * 128 * 1.12e9 * 8)
    close(f["memory.bandwidth"], "B/s", 820 * GiB)
    assert "logical_cores.lnc2" not in f
    assert "compute.fp8_sparse" not in f


def test_trn3_mx_formats():
    f = build("trn3").levels()["chip"]
    close(f["compute.mxfp8"], "FLOPS", 8 * 128 * 128 * 2 * 2.4e9 * 4)
    close(f["compute.mxfp4"], "FLOPS", 8 * 128 * 128 * 2 * 2.4e9 * 4)
    assert "compute.fp8_sparse" not in f  # sparsity removed on v4


def test_inf1_meets_its_assumed_clock():
    f = build("inf1").levels()
    close(f["core"]["compute.fp16"], "FLOPS", 128 * 64 * 2 * 976.5625e6)  # 16 TFLOPS
    assert f["core"]["vector.ops_per_cycle"] == 128 * 2
    assert f["core"]["scalar.ops_per_cycle"] == 128 * 4


# --- systems -----------------------------------------------------------------------------

def test_trn1_32xlarge():
    m = build("trn1.32xlarge")
    f = m.figures()
    assert m.level == "instance" and m.chips == 16
    close(f["compute.bf16"], "FLOPS", 16 * 2 * 128 * 128 * 2 * 2.8e9)  # 2.936 PF
    close(f["compute.fp32"], "FLOPS", 16 * 2 * 128 * 128 * 2 * 2.8e9 / 4)
    close(f["compute.int8"], "OPS", 16 * 2 * 128 * 128 * 2 * 2.8e9 * 2)
    close(f["memory.capacity"], "B", 16 * 32 * GiB)
    close(f["memory.bandwidth"], "B/s", 16 * 820 * GiB)
    close(f["efa.bandwidth"], "bps", 800e9)
    assert f["chips"] == 16 and f["cores"] == 32 and f["logical_cores.lnc1"] == 32


def test_trn2_48xlarge():
    m = build("trn2.48xlarge")
    f = m.figures()
    close(f["compute.bf16"], "FLOPS", 16 * 8 * 128 * 128 * 2 * 2.4e9)  # 10.07 PF
    close(f["compute.fp8"], "FLOPS", 16 * 8 * 128 * 128 * 2 * 2.4e9 * 2)
    close(f["memory.capacity"], "B", 16 * 96 * GiB)
    close(f["memory.capacity"], "TiB", 1.5)
    close(f["memory.bandwidth"], "B/s", 16 * 2.9e12)
    close(f["efa.bandwidth"], "bps", 3200e9)
    assert f["logical_cores.lnc2"] == 64 and f["logical_cores.lnc1"] == 128
    # The instance's 1,024 GB/s per chip replaces the chip page's 1.28 TB/s inside it.
    close(m.levels()["chip"]["neuronlink.bandwidth"], "B/s", 1024e9)


def test_trn2_ultraserver():
    m = build("trn2-ultraserver")
    f = m.figures()
    assert m.level == "server" and m.chips == 64
    assert isinstance(m.member, System) and m.member.name == "trn2u.48xlarge"
    assert list(m.levels()) == ["core", "chip", "instance", "server"]
    close(f["compute.bf16"], "FLOPS", 64 * 8 * 128 * 128 * 2 * 2.4e9)  # 40.27 PF
    close(f["compute.fp8"], "FLOPS", 64 * 8 * 128 * 128 * 2 * 2.4e9 * 2)
    close(f["memory.capacity"], "B", 64 * 96 * GiB)
    close(f["memory.capacity"], "B", 6 * TiB)
    close(f["memory.bandwidth"], "B/s", 64 * 2.9e12)
    close(f["efa.bandwidth"], "bps", 4 * 3200e9)  # the members' EFA, summed
    assert f["chips"] == 64 and f["cores"] == 512 and f["logical_cores.lnc2"] == 256


def test_trn3_ultraserver_of_chips():
    m = build("trn3-ultraserver")
    f = m.figures()
    assert isinstance(m.member, Chip) and list(m.levels()) == ["core", "chip", "server"]
    close(f["compute.mxfp8"], "FLOPS", 144 * 8 * 128 * 128 * 2 * 2.4e9 * 4)  # 362.4 PF
    close(f["memory.capacity"], "B", 144 * 144 * GiB)
    close(f["memory.bandwidth"], "B/s", 144 * 4.9e12)
    close(f["efa.bandwidth"], "bps", 28800e9)  # its own: chips have no EFA


def test_ultracluster():
    m = build("trn2-ultracluster")
    f = m.figures()
    assert f["chips"] == 6250 * 16
    close(f["efa.bandwidth"], "bps", 6250 * 3200e9)
    close(f["compute.bf16"], "FLOPS", 6250 * 16 * 8 * 128 * 128 * 2 * 2.4e9)


# --- collectives -------------------------------------------------------------------------

def _pass(n, p, bw, alpha, eff):
    """A bidirectional ring pass over a 1 GiB-scale buffer in 4 MiB chunks: p - 1 steps of
    n / p / 2 bytes per direction, the chunks back to back on each link (their number covers
    every step's latency and add), then the last chunk's landing."""
    return (p - 1) * n / p / 2 / (bw * eff) + alpha


#: The add of one 4 MiB chunk of fp32 (2**20 elements) on the vector engines of the chip's 8
#: cores x 128 lanes: 1,024 elements per lane, two input streams at 2 elements per cycle, so
#: access_start 60 + 1,024 cycles (trn1.yaml, which trn2 and trn3 extend) at the 0.96 GHz
#: vector clock. A reduce-scatter pass ends with the last chunk's add in each direction.
ADD = (60 + 1024) / 0.96e9

#: One NeuronLink hop's latency: the systems' link_latency, 1.5 us (the middle of the runtime
#: page's "about 1-2 us" per hop).
HOP = 1.5e-6


def test_trn2_48xlarge_all_reduce_by_hand():
    eff = 4096 * 8 / (4096 * 8 + 2 * 256)
    link = 1024e9 / 4  # 1,024 GB/s per chip over its 4 links
    n = 2**30
    # 2D torus 4 x 4: reduce-scatter and all-gather along x on n, then along y on n / 4.
    moves = _pass(n, 4, link, HOP, eff) + _pass(n / 4, 4, link, HOP, eff)
    expected = 2 * moves + 2 * 2 * ADD
    m = build("trn2.48xlarge")
    close(m.collective("all_reduce"), "s", expected, rel=1e-9)
    close(m.figures()["collective.all_reduce"], "s", expected, rel=1e-9)
    close(m.collective("all_gather"), "s", moves, rel=1e-9)


def test_link_efficiency_is_an_input():
    link = 1024e9 / 4
    n = 2**30
    expected = (2 * _pass(n, 4, link, HOP, 0.5) + 2 * _pass(n / 4, 4, link, HOP, 0.5)
                + 4 * ADD)
    close(build("trn2.48xlarge", link_efficiency=0.5).collective("all_reduce"), "s", expected,
          rel=1e-9)


def test_trn2_ultraserver_all_reduce_by_hand():
    eff = 4096 * 8 / (4096 * 8 + 2 * 256)
    link = 1024e9 / 4
    n = 2**30
    # 3D torus 4 x 4 x 4: by the third dimension a chip owns 4 regions (two directions of
    # each of the two before), each 2 MiB per step: its chunks are 2 MiB, adds of 512
    # elements per lane, (60 + 512) cycles.
    last_add = (60 + 512) / 0.96e9
    expected = (sum(2 * _pass(n / 4**i, 4, link, HOP, eff) for i in range(3))
                + 4 * ADD + 2 * last_add)
    close(build("trn2-ultraserver").collective("all_reduce"), "s", expected, rel=1e-9)


def test_trn3_switch_all_reduce_by_hand():
    eff = 4096 * 8 / (4096 * 8 + 2 * 256)
    n = 2**30
    port = 2.56e12 * eff
    # Two phases, each 143/144 of the buffer through the chip's port, store and forward
    # through the switch (one 4 MiB chunk's link time, 1.66 us) and 2 hops of latency. The
    # owner's 143 x 2 chunk adds (1.13 us each, 323 us) hide behind the 423 us of transfers
    # but the last.
    chunk = 4 * 2**20 / port
    expected = 2 * (2 * HOP + chunk + 143 / 144 * n / port) + ADD
    close(build("trn3-ultraserver").collective("all_reduce"), "s", expected, rel=1e-9)


def test_single_chip_has_no_collective_rows():
    f = build("trn1.2xlarge").figures()
    assert not any(k.startswith("collective.") for k in f)


# --- sustained ---------------------------------------------------------------------------

# A full 128 x 128 tile on trn2: a new tile every max(n, ceil(128 / 4) + 1) cycles; what
# nothing hides is the first tile's load and the pipeline's drain, min(32, n - 1) + 128 + 128
# + 3 = 291 cycles.

def test_sustained_bf16_by_hand():
    s = sustained(load("trn2"), 256, 256, 1024, "bf16")
    cycles = 2 * 2 * 2 * 512 + 291
    assert s.cycles == cycles
    close(s.time, "s", cycles / 2.4e9)
    close(s.flops, "FLOPS", 8 * 2 * 256 * 256 * 1024 * 2.4e9 / cycles)
    assert s.efficiency == pytest.approx(4096 / 4387)


def test_sustained_fp8_double_rate_and_fp32():
    fp8 = sustained(load("trn2"), 256, 256, 1024, "fp8_e4m3")
    assert fp8.cycles == 1 * 2 * 2 * 512 + 291
    fp32 = sustained(load("trn2"), 256, 256, 1024, "fp32")
    assert fp32.cycles == 2 * 2 * 2 * 512 * 4 + 291
    close(fp32.peak, "FLOPS", 8 * 128 * 128 * 2 * 2.4e9 / 4)


def test_sustained_small_n_pays_the_next_load():
    # n = 16: the next tile's 32 load beats and a cycle set the pace, 33 per tile.
    s = sustained(load("trn1"), 128, 256, 16, "bf16")
    assert s.cycles == 2 * 33 + 15 + 259
    short = sustained(load("trn2"), 128, 128, 600, "bf16")
    assert short.cycles == 512 + 88 + 291


def test_sustained_decode_shape_meets_the_published_rule():
    """4096 x 4096 x 64 on trn2: 1024 tiles at max(64, 64) cycles each, as the documented
    rule has it, plus 291; within 0.5 % of the rule's 629 TFLOPS per chip."""
    s = sustained(load("trn2"), 4096, 4096, 64, "bf16")
    assert s.cycles == 32 * 32 * 64 + 291
    rule = 8 * 2 * 4096 * 4096 * 64 * 2.4e9 / (32 * 32 * 64)
    assert rule == pytest.approx(629.1e12, rel=1e-3)
    assert si(s.flops, "FLOPS") / rule == pytest.approx(65536 / 65827)


def test_sustained_rejects_bad_input():
    with pytest.raises(ModelError, match=r"fmt must be one of the array's formats .*, "
                                         r"not 'int8'"):
        sustained(load("trn2"), 128, 128, 128, "int8")
    with pytest.raises(ModelError, match=r"k must be a positive integer, not 0"):
        sustained(load("trn2"), 128, 0, 128, "bf16")


def test_topology_that_does_not_hold_the_chips(tmp_path):
    (tmp_path / "odd.yaml").write_text(
        "system:\n  name: odd\n  title: Odd\n  level: instance\n  member: trn2\n  count: 8\n"
        "  topology: {kind: torus2d, dims: [4, 4]}\n  link_latency: 1 us\n")
    m = build(tmp_path / "odd.yaml")
    with pytest.raises(ModelError, match=r"odd: topology dims \[4, 4\] must hold 8 chips, "
                                         r"not 16"):
        m.figures()


# --- link efficiency from the link's golden model ----------------------------------------

def _toy_chip(tmp_path, credits):
    (tmp_path / "toy.yaml").write_text(
        f"extends: trn2\nchip:\n  name: toy\n  title: Toy\n  neuronlink: {{credits: {credits}}}\n")
    return load(tmp_path / "toy.yaml")


def test_link_efficiency_framing_bound():
    # 4 KiB packets of 256-bit flits: 128 payload flits, one header flit, one CRC flit.
    assert default_link_efficiency(load("trn2")) == pytest.approx(128 / (1 + 128 + 1))


def test_link_efficiency_credit_bound(tmp_path):
    # One packet of credit and of replay buffer: the replay loop of n + 2D + L + 3 cycles
    # (n = 130 flits, D = 16) bounds the rate.
    chip = _toy_chip(tmp_path, 128)
    assert default_link_efficiency(chip) == pytest.approx(128 / (130 + 2 * 16 + 128 + 3))


def test_link_parameters_that_make_no_port(tmp_path):
    chip = _toy_chip(tmp_path, 16)
    with pytest.raises(ModelError, match=r"toy: neuronlink parameters do not make a link port "
                                         r"\(credits must be at least max_packet \(128\), "
                                         r"not 16; a packet of 4096 B is 128 flits"):
        default_link_efficiency(chip)


def test_system_efa_that_contradicts_its_members(tmp_path):
    (tmp_path / "pair.yaml").write_text(
        "system:\n  name: pair\n  title: Pair\n  level: server\n  member: trn2.48xlarge\n"
        "  count: 2\n  topology: {kind: torus3d, dims: [4, 4, 2]}\n  link_latency: 1 us\n"
        "  efa: 100 Gbps\n")
    with pytest.raises(ModelError, match=r"pair: efa must be its members' 2 x 3200 Gbps = "
                                         r"6400 Gbps or be left out, not 100 Gbps"):
        build(tmp_path / "pair.yaml").figures()


# --- the tensor engine's RTL-checked cycle model -----------------------------------------

def test_tile_interval_is_the_replayed_sequencer():
    t = load("trn2").core.tensor
    for fmt, k, m, n, double in [("bf16", 128, 128, 64, False), ("bf16", 100, 77, 5, False),
                                 ("fp8_e4m3", 256, 128, 512, True)]:
        params = SystolicParams(rows=128, cols=128, formats=(fmt,), moving_max=512,
                                double_rate=(fmt,) if double else (),
                                load_columns=t.load_columns)
        assert tile_interval(t, fmt, k, m, n) == systolic_cycles.cycles(params, k, m, n)["interval"]
    # FP32 at a quarter rate: four times the bf16 tile.
    assert tile_interval(t, "fp32", 128, 128, 512) == 4 * 512


def test_build_uses_the_cycle_model():
    chip = build("trn2")
    assert chip.figures()["sustained.bf16"] == sustained(load("trn2"), 4096, 4096, 4096,
                                                         "bf16").flops


def test_collective_latencies_are_the_specs_and_exploration_takes_the_same():
    """The hop and EFA step latencies come from the system specs (a cluster takes its
    members' EFA latency; one chip has no hop), and exploration reads the same figures."""
    from explore import model as explore_model

    for name, link, efa in [("trn2.48xlarge", 1.5e-6, 15e-6), ("trn2-cluster", 1.5e-6, 15e-6),
                            ("trn2-ultraserver", 1.5e-6, 15e-6), ("trn1.2xlarge", 0.0, 15e-6)]:
        m = build(name)
        inner = m.member if m.over_efa else m
        assert (inner.link_alpha, m.efa_alpha) == pytest.approx((link, efa), rel=1e-12)
        base = explore_model.base_from_spec(name)
        assert (base.link_alpha, base.efa_alpha) == pytest.approx((link, efa), rel=1e-12)
