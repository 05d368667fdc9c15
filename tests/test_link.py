"""Link port: parameters, CRC-32 against zlib, framing on the lane, golden timing model."""

import random
import zlib

import pytest
from amaranth.hdl import Elaboratable, Module
from amaranth.sim import Simulator

from hdl.link.link import (
    CRC32_INIT,
    CRC32_XOROUT,
    LinkParams,
    LinkPort,
    LinkRx,
    LinkTx,
    crc32_update_bits,
)
from sim.golden import link as golden


@pytest.mark.parametrize("kwargs, match", [
    ({"width": 12}, r"width must be a multiple of 8, not 12"),
    ({"width": 4}, r"width must be an integer of at least 8, not 4"),
    ({"credits": 4, "max_packet": 8}, r"credits must be at least max_packet \(8\), not 4"),
    ({"replay_depth": 4, "max_packet": 8},
     r"replay_depth must be at least max_packet \(8\), not 4"),
    ({"ack_timeout": 0}, r"ack_timeout must be an integer of at least 1, not 0"),
    ({"max_packet": True}, r"max_packet must be an integer of at least 1, not True"),
])
def test_bad_parameters_are_explained(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LinkParams(**kwargs)


def test_parameters_are_frozen_and_keyword_only():
    p = LinkParams()
    with pytest.raises(AttributeError):
        p.width = 32
    with pytest.raises(TypeError):
        LinkParams(64)


@pytest.mark.parametrize("nbytes", [1, 3, 4, 8, 13])
def test_crc_reference_matches_zlib(nbytes):
    rng = random.Random(nbytes)
    for _ in range(20):
        data = bytes(rng.randrange(256) for _ in range(nbytes))
        value = int.from_bytes(data, "little")
        crc = crc32_update_bits(CRC32_INIT, value, 8 * nbytes) ^ CRC32_XOROUT
        assert crc == zlib.crc32(data)


class _BackToBack(Elaboratable):
    """Transmitter straight into receiver (no channel), so a test can watch the lane."""

    def __init__(self, params):
        self.tx = LinkTx(params)
        self.rx = LinkRx(params)

    def elaborate(self, platform):
        m = Module()
        m.submodules.tx, m.submodules.rx = self.tx, self.rx
        tx, rx = self.tx, self.rx
        m.d.comb += [
            rx.flits.valid.eq(tx.flits.valid), rx.flits.first.eq(tx.flits.first),
            rx.flits.last.eq(tx.flits.last), rx.flits.data.eq(tx.flits.data),
            tx.status.valid.eq(rx.status.valid), tx.status.data.eq(rx.status.data),
            rx.source.ready.eq(1), tx.node_id.eq(3),
        ]
        return m


@pytest.mark.parametrize("params", [
    LinkParams(width=64, credits=8, max_packet=8, replay_depth=16),
    LinkParams(width=8, credits=5, max_packet=5, replay_depth=7, node_bits=3),
    LinkParams(width=24, credits=11, max_packet=7, replay_depth=13),
], ids=["w64", "w8", "w24"])
def test_lane_carries_the_golden_frames_with_zlib_crc(params):
    """The flits on the lane are exactly golden.frame(): header, payload, zlib CRC-32."""
    rng = random.Random(params.width)
    sent = []
    for k in range(12):
        length = rng.randrange(1, params.max_packet + 1)
        data = [rng.randrange(2 ** params.width) for _ in range(length)]
        sent.append((data, rng.randrange(2 ** params.node_bits), rng.randrange(4), k))
    dut = _BackToBack(params)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    lane, lasts, delivered = [], [], []

    async def drive(ctx):
        for data, dest, typ, _ in sent:
            for i, w in enumerate(data):
                ctx.set(dut.tx.sink.valid, 1)
                ctx.set(dut.tx.sink.payload, {"data": w, "last": i == len(data) - 1,
                                              "dest": dest, "type": typ})
                await ctx.tick().until(dut.tx.sink.ready)
        ctx.set(dut.tx.sink.valid, 0)

    async def watch(ctx):
        async for _, _, valid, first, last, data, out_valid, payload in ctx.tick().sample(
                dut.tx.flits.valid, dut.tx.flits.first, dut.tx.flits.last, dut.tx.flits.data,
                dut.rx.source.valid, dut.rx.source.payload):
            if valid:
                if first:
                    lane.append([])
                    lasts.append([])
                lane[-1].append(data)
                lasts[-1].append(bool(last))
            if out_valid:
                delivered.append(payload.data)

    sim.add_testbench(drive)
    sim.add_process(watch)
    sim.run_until(2e-8 * 40 * len(sent) * (params.max_packet + 8))
    expect = [golden.frame(params, data, type=typ, dest=dest, src=3, seq=k)
              for data, dest, typ, k in sent]
    assert lane == expect
    assert all(flags == [False] * (len(flags) - 1) + [True] for flags in lasts)
    assert delivered == [w for data, *_ in sent for w in data]
    # The CRC flits decode to zlib's CRC of the header and payload bytes.
    for flits in lane:
        nb = params.width // 8
        body = flits[:-params.crc_flits]
        crc = sum(f << (params.width * i) for i, f in enumerate(flits[-params.crc_flits:]))
        assert crc == zlib.crc32(b"".join(f.to_bytes(nb, "little") for f in body))


# --- golden timing model ------------------------------------------------------------------

@pytest.mark.parametrize("params, latency", [
    (LinkParams(width=64, credits=16, max_packet=8, replay_depth=32), 3),
    (LinkParams(width=64, credits=8, max_packet=8, replay_depth=64), 6),      # credit bound
    (LinkParams(width=32, credits=64, max_packet=8, replay_depth=10), 5),     # replay bound
    (LinkParams(width=8, credits=9, max_packet=7, replay_depth=13), 2),
    (LinkParams(width=32, credits=1, max_packet=1, replay_depth=1, ack_timeout=64), 3),
])
def test_closed_form_is_the_steady_state_of_the_cycle_model(params, latency):
    for length in sorted({1, params.max_packet // 2 or 1, params.max_packet}):
        traffic = golden.Traffic(len_min=length)
        s = golden.schedule(params, traffic, latency, 6000)
        # Packet starts are periodic in steady state (a pattern of gaps may repeat every few
        # packets): the mean spacing over the second half, to within one gap pattern.
        starts = s.starts[len(s.starts) // 2:]
        spacing = (starts[-1] - starts[0]) / (len(starts) - 1)
        expect = golden.period(params, length, latency)
        gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
        assert spacing == pytest.approx(expect, abs=(max(gaps) - min(gaps)) / len(gaps))
        eff = s.words(2000, 6000) / 4000
        assert eff == pytest.approx(golden.efficiency(params, latency, length), abs=0.005)


def test_framing_bound_is_length_over_flits():
    p = LinkParams(width=64, credits=64, max_packet=16, replay_depth=128)
    # Header 2+8+9+5 = 24 bits: one flit; CRC one flit.
    assert golden.efficiency(p, 1, 16) == 16 / 18
    assert golden.framing_efficiency(p, 16) == 16 / 18


def test_distribution_estimate_against_the_cycle_model():
    p = LinkParams(width=32, credits=16, max_packet=8, replay_depth=32)
    traffic = golden.Traffic(seed_len=99, len_min=1, len_mask=7)
    s = golden.schedule(p, traffic, 3, 20000)
    measured = s.words(2000, 20000) / 18000
    assert measured == pytest.approx(
        golden.efficiency(p, 3, traffic.length_distribution()), rel=0.03)


def test_error_estimate_degrades_with_the_error_rate():
    p = LinkParams(width=64, credits=16, max_packet=8, replay_depth=32)
    clean = golden.efficiency(p, 3, 8)
    assert golden.efficiency_with_errors(p, 3, 8, 0.0) == pytest.approx(clean)
    rates = [golden.efficiency_with_errors(p, 3, 8, ber) for ber in (1e-6, 1e-5, 1e-4)]
    assert clean > rates[0] > rates[1] > rates[2]
    assert golden.packet_error_rate(p, 8, 1e-4) == pytest.approx(1 - (1 - 1e-4) ** 640)


def test_schedule_refuses_a_timeout_shorter_than_the_round_trip():
    p = LinkParams(width=64, credits=16, max_packet=8, replay_depth=32, ack_timeout=5)
    with pytest.raises(ValueError, match="ack_timeout 5 fires without errors"):
        golden.schedule(p, golden.Traffic(len_min=8), 3, 500)


def test_packets_follow_the_generator():
    p = LinkParams(width=8, credits=8, max_packet=8, replay_depth=8, node_bits=2)
    t = golden.Traffic(seed_len=7, len_min=2, len_mask=3)
    pk = golden.packets(p, t, 40)
    assert [len(x.data) for x in pk] == t.lengths(40)
    flat = [w for x in pk for w in x.data]
    assert flat == [i % 256 for i in range(len(flat))]
    assert [x.dest for x in pk[:5]] == [0, 1, 2, 3, 0]
    assert [x.type for x in pk[:9:4]] == [0, 1, 2]


class _TwoPorts(Elaboratable):
    """Two full-duplex ports joined lane to lane, as two chips would be."""

    def __init__(self, params):
        self.a = LinkPort(params)
        self.b = LinkPort(params)

    def elaborate(self, platform):
        m = Module()
        m.submodules.a, m.submodules.b = self.a, self.b
        for x, y in ((self.a, self.b), (self.b, self.a)):
            f_out, f_in = x.flits_out, y.flits_in
            m.d.comb += [
                f_in.valid.eq(f_out.valid), f_in.first.eq(f_out.first),
                f_in.last.eq(f_out.last), f_in.data.eq(f_out.data),
                y.status_in.valid.eq(x.status_out.valid),
                y.status_in.data.eq(x.status_out.data),
            ]
        m.d.comb += [self.a.node_id.eq(1), self.b.node_id.eq(2)]
        return m


def test_two_ports_exchange_packets_both_ways():
    params = LinkParams(width=16, credits=4, max_packet=3, replay_depth=6)
    rng = random.Random(5)
    streams = {name: [[rng.randrange(2 ** 16) for _ in range(rng.randrange(1, 4))]
                      for _ in range(15)] for name in "ab"}
    dut = _TwoPorts(params)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    got = {"a": [], "b": []}

    def driver(port, packets):
        async def drive(ctx):
            for data in packets:
                for i, w in enumerate(data):
                    ctx.set(port.sink.valid, 1)
                    ctx.set(port.sink.payload, {"data": w, "last": i == len(data) - 1,
                                                "dest": 0, "type": 0})
                    await ctx.tick().until(port.sink.ready)
            ctx.set(port.sink.valid, 0)
        return drive

    def monitor(port, name):
        async def watch(ctx):
            ctx.set(port.source.ready, 1)
            current = []
            async for _, _, valid, payload in ctx.tick().sample(port.source.valid,
                                                                port.source.payload):
                if valid:
                    current.append(payload.data)
                    if payload.last:
                        got[name].append((current, payload.src))
                        current = []
        return watch

    sim.add_testbench(driver(dut.a, streams["a"]))
    sim.add_testbench(driver(dut.b, streams["b"]))
    sim.add_process(monitor(dut.b, "b"))
    sim.add_process(monitor(dut.a, "a"))
    sim.run_until(1e-8 * 1500)
    assert got["b"] == [(d, 1) for d in streams["a"]]   # a's packets arrive at b, from a
    assert got["a"] == [(d, 2) for d in streams["b"]]


def test_packet_latency_is_the_first_delivery_of_the_cycle_model():
    p = LinkParams(width=24, credits=11, max_packet=7, replay_depth=13)
    s = golden.schedule(p, golden.Traffic(len_min=5), 4, 200)
    assert s.pops[0] - s.starts[0] == golden.packet_latency(p, 5, 4)
