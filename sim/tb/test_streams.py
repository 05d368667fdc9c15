"""The stream driver and monitor (sim/tb/streams.py) on a small pipeline of their own.

The design under test is a two-stage stream pipeline that adds one to each byte: ``i``
(Amaranth ports ``i__valid``, ``i__ready``, ``i__payload``) in, ``o`` out. The cocotb tests:

- ``transfer`` (one per :data:`~sim.tb.streams.PAUSES` setting): a seeded random byte sequence
  arrives plus one, in order, exactly once; a protocol checker on both streams fails the test
  if ``valid`` drops or the payload changes while a beat waits for ``ready``; the pauses are
  seen to happen (the run takes longer than one beat per cycle).
- ``left_over``: :func:`~sim.tb.streams.nothing_left_over` names received beats the checker did
  not take, and beats a source could not send (the sink never ready).
"""

from __future__ import annotations

import random

import pytest
from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from sim.tb.runner import run, tb_params

TOPLEVEL = "stream_pipe"
BEATS = 300


class StreamPipe(wiring.Component):
    """Two register stages, each with a valid/ready handshake; ``o = i + 1`` (mod 256)."""

    def __init__(self):
        super().__init__({"i": In(stream.Signature(8)), "o": Out(stream.Signature(8))})

    def elaborate(self, platform):
        m = Module()
        mid = stream.Signature(8).create()
        for src, dst, inc in ((self.i, mid, 1), (mid, self.o, 0)):
            m.d.comb += src.ready.eq(~dst.valid | dst.ready)
            with m.If(src.valid & src.ready):
                m.d.sync += [dst.valid.eq(1), dst.payload.eq(src.payload + inc)]
            with m.Elif(dst.ready):
                m.d.sync += dst.valid.eq(0)
        return m


try:
    import cocotb
    from cocotb.clock import Clock
    from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge
except ImportError:  # pytest collection without cocotb is not a supported setup
    cocotb = None


if cocotb is not None:
    from sim.tb.streams import (
        PAUSES,
        StreamBus,
        StreamSink,
        StreamSource,
        nothing_left_over,
        random_pause,
    )

    async def _reset(dut):
        cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
        dut.rst.value = 1
        await ClockCycles(dut.clk, 2)
        dut.rst.value = 0

    async def _protocol(dut, bus, name, errors):
        """Once valid is high, it stays high with the same payload until ready."""
        waiting = None
        while True:
            await RisingEdge(dut.clk)
            await ReadOnly()
            valid, ready = int(bus.valid.value), int(bus.ready.value)
            if waiting is not None and (not valid or bus.read() != waiting):
                errors.append(f"{name}: valid or payload changed while waiting for ready")
            waiting = bus.read() if valid and not ready else None

    @cocotb.test()
    @cocotb.parametrize(pauses=list(PAUSES))
    async def transfer(dut, pauses):
        """Random bytes through the pipeline under one idle/backpressure setting."""
        seed = tb_params()["seed"]
        rng = random.Random(f"{seed}-{pauses}")
        idle, stall = PAUSES[pauses]
        data = [rng.randrange(256) for _ in range(BEATS)]
        i_bus, o_bus = StreamBus.from_prefix(dut, "i"), StreamBus.from_prefix(dut, "o")
        errors: list[str] = []
        for bus, name in ((i_bus, "i"), (o_bus, "o")):
            cocotb.start_soon(_protocol(dut, bus, name, errors))
        source = StreamSource(i_bus, dut.clk, dut.rst, random_pause(rng, idle))
        sink = StreamSink(o_bus, dut.clk, dut.rst, random_pause(rng, stall))
        await _reset(dut)
        source.send(data)
        cycles = 0
        while sink.count < BEATS:
            await RisingEdge(dut.clk)
            cycles += 1
            assert cycles < 20 * BEATS, f"stalled after {sink.count} beats"
        await ClockCycles(dut.clk, 10)          # anything extra would arrive now
        got = sink.take()
        assert got == [(x + 1) % 256 for x in data], "beats lost, duplicated or reordered"
        nothing_left_over(source, sink)
        assert not errors, errors[:3]
        if idle or stall:       # the pauses happened: fewer beats than cycles
            assert cycles > BEATS * (1 + max(idle, stall) / 2), cycles
        else:
            assert cycles <= BEATS + 4, cycles
        dut._log.info("%s: %d beats in %d cycles", pauses, BEATS, cycles)

    @cocotb.test()
    async def left_over(dut):
        """The end-of-test check names what was not sent and what was not checked."""
        i_bus, o_bus = StreamBus.from_prefix(dut, "i"), StreamBus.from_prefix(dut, "o")
        source = StreamSource(i_bus, dut.clk, dut.rst)
        never = iter(lambda: True, None)       # a sink that is never ready
        sink = StreamSink(o_bus, dut.clk, dut.rst, never)
        await _reset(dut)
        source.send(range(5))
        await ClockCycles(dut.clk, 20)
        # two beats fill the pipeline's two stages; three wait in the source's queue
        assert source.sent == 2 and len(source.queue) == 3
        try:
            nothing_left_over(source, sink)
        except AssertionError as exc:
            assert str(exc) == ("left over at the end of the test: 3 beats not sent "
                                "(sent 2)"), str(exc)
        else:
            raise AssertionError("three unsent beats were not reported")
        sink.stop()
        sink = StreamSink(o_bus, dut.clk, dut.rst)
        await ClockCycles(dut.clk, 20)
        assert sink.count == 5 and source.idle
        sink.take(4)
        try:
            nothing_left_over(source, sink)
        except AssertionError as exc:
            assert str(exc) == ("left over at the end of the test: 1 beats received and not "
                                "checked, first 5"), str(exc)
        else:
            raise AssertionError("an unchecked beat was not reported")
        sink.take()
        nothing_left_over(source, sink)

    @cocotb.test()
    async def off_by_one(dut):
        """Expects the pipeline to add two: fails, so that a failing bench can be seen to
        report its assertion."""
        o_bus = StreamBus.from_prefix(dut, "o")
        source = StreamSource(StreamBus.from_prefix(dut, "i"), dut.clk, dut.rst)
        sink = StreamSink(o_bus, dut.clk, dut.rst)
        await _reset(dut)
        source.send([40])
        await ClockCycles(dut.clk, 10)
        (got,) = sink.take()
        assert got == 42, f"the pipeline gave {got} for 40, expected 42"


def simulate(sim: str, seed: int):
    """Run both cocotb tests (``transfer`` once per pause setting)."""
    from sim.tb.streams import PAUSES

    return run(StreamPipe, TOPLEVEL, "sim.tb.test_streams", sim, {"seed": seed},
               testcase=["transfer", "left_over"], seed=seed, expected=len(PAUSES) + 1)


@pytest.mark.cocotb
def test_streams(sim, seed):
    result = simulate(sim, seed)
    assert result.ok, f"{result} (seed {seed})"
