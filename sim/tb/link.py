"""The link port's cocotb testbench: two ports back to back through a lossy channel.

The design under test is :class:`hdl.link.loopback.LinkLoopback`: a transmitter and a receiver
joined by a channel that delays both lanes and flips bits, with a hardware traffic generator
(random packet lengths, random idle cycles) and an in-order checker (random backpressure) on
the user sides, so thousands of packets run under one ``await``. Two cocotb tests:

- ``bulk``: generator to checker. Checks that nothing is lost, duplicated or reordered (the
  checker compares every delivered word, delimiter and header field with the next one due);
  without bit errors, that the words and flits counted by the RTL equal the cycle-exact golden
  schedule (:func:`sim.golden.link.schedule`); with saturated traffic of fixed length, that
  the efficiency matches the closed form (:func:`sim.golden.link.efficiency`) within one packet
  per measurement window, or with bit errors the go-back-N estimate within
  :data:`ERROR_TOLERANCE`.
- ``directed`` (once per idle/backpressure setting of :data:`sim.tb.streams.PAUSES`): the
  stream driver and monitor of :mod:`sim.tb.streams` on the ``ext_*``/``out_*`` ports send the
  golden packet list (:func:`sim.golden.link.packets`) and compare what arrives, packet by
  packet, and that nothing more arrives.

With ``corrupt_at`` set, ``bulk`` has the loopback flip one delivered word on its way to the
in-hardware checker and requires the checker to count exactly that one mismatch.

:func:`simulate` runs both for one parameter set; :func:`measured_efficiency` runs a short
saturated simulation and returns the measured payload words per cycle. The pytest entry
points are in ``sim/tb/test_link.py``; ``gen sim`` calls :func:`simulate` here.
"""

from __future__ import annotations

import json
import random
import tempfile
from dataclasses import asdict
from pathlib import Path

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge

from hdl.link.link import LinkParams
from hdl.link.loopback import LinkLoopback
from sim.golden import link as golden
from sim.tb.runner import RunResult, emit_verilog, run_verilog, stored_verilog, tb_params
from sim.tb.streams import (
    PAUSES,
    StreamBus,
    StreamSink,
    StreamSource,
    no_pause,
    nothing_left_over,
    random_pause,
)

TOPLEVEL = "link_loopback"
#: Relative tolerance of measured against estimated efficiency with bit errors.
ERROR_TOLERANCE = 0.15
CHUNK = 1024


# --- cocotb side -------------------------------------------------------------------------------

async def _start(dut, cfg: dict, ext: bool):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.run.value = 0
    dut.ext.value = int(ext)
    for name in ("seed_len", "seed_valid", "seed_ready", "seed_flit", "seed_status",
                 "len_min", "len_mask", "valid_thr", "ready_thr", "flit_flip_thr",
                 "status_flip_thr", "stop_at", "warmup", "corrupt_at"):
        getattr(dut, name).value = cfg[name]
    for name in ("ext_valid", "ext_data", "ext_last", "ext_dest", "ext_type", "out_ready"):
        getattr(dut, name).value = 0
    dut.rst.value = 1
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 2)
    dut.run.value = 1


def _counters(dut) -> dict:
    return {name: int(getattr(dut, name).value) for name in (
        "cycles", "words", "packets", "mismatches", "replays", "drops", "flits",
        "window_words")}


@cocotb.test()
async def bulk(dut):
    """Generator to checker through the lossy channel; counters against the golden model."""
    cfg = tb_params()
    params = LinkParams(**cfg["link"])
    traffic = golden.Traffic(**cfg["traffic"])
    dut._log.info("seed=%s params=%s traffic=%s", cfg["seed"], params, traffic)
    await _start(dut, cfg, ext=False)
    while True:
        await ClockCycles(dut.clk, CHUNK)
        await ReadOnly()
        c = _counters(dut)   # all read after the same edge, so consistent with each other
        enough = c["packets"] >= cfg["packets"] and c["cycles"] > cfg["warmup"]
        if c["cycles"] >= cfg["stop_at"] or enough:
            break
    dut._log.info("counters %s", c)
    if cfg["corrupt_at"]:
        assert c["mismatches"] == 1, f"the checker counted {c['mismatches']} mismatches, not " \
                                     f"the one corrupted word {cfg['corrupt_at']}"
    else:
        assert c["mismatches"] == 0, f"{c['mismatches']} words delivered wrong or out of order"
    assert c["packets"] >= cfg["packets"], f"only {c['packets']} packets delivered"
    window = c["cycles"] - cfg["warmup"]
    measured = c["window_words"] / window
    report = {**c, "measured": measured}
    saturated = traffic.len_mask == 0 and traffic.valid_thr == traffic.ready_thr == 256
    if cfg["flit_flip_thr"] == 0 and cfg["status_flip_thr"] == 0:
        assert c["replays"] == 0 and c["drops"] == 0
        s = golden.schedule(params, traffic, cfg["latency"], c["cycles"])
        assert c["words"] == s.words(), (c["words"], s.words())
        assert c["flits"] == s.flits, (c["flits"], s.flits)
        assert c["window_words"] == s.words(cfg["warmup"]), "window differs from golden"
        if saturated:
            expect = golden.efficiency(params, cfg["latency"], traffic.len_min)
            # A window of W cycles holds the steady-state rate to within one packet.
            assert abs(measured - expect) * window <= traffic.len_min, (measured, expect)
            report["expected"] = expect
    else:
        assert c["drops"] > 0, "no packet was corrupted: raise the error rate"
        if saturated:
            expect = golden.efficiency_with_errors(params, cfg["latency"], traffic.len_min,
                                                   cfg["bit_error_rate"])
            report["expected"] = expect
            assert abs(measured - expect) <= ERROR_TOLERANCE * expect, (measured, expect)
    if cfg.get("report"):
        Path(cfg["report"]).write_text(json.dumps(report))


@cocotb.test()
@cocotb.parametrize(pauses=list(PAUSES))
async def directed(dut, pauses):
    """The golden packet list through the stream driver and monitor, under one setting of
    idle cycles and backpressure; every packet arrives once, in order, and nothing more."""
    cfg = tb_params()
    params = LinkParams(**cfg["link"])
    traffic = golden.Traffic(**cfg["traffic"])
    rng = random.Random(f"{cfg['seed']}-{pauses}")
    idle, stall = PAUSES[pauses]
    dut._log.info("seed=%s params=%s pauses=%s", cfg["seed"], params, pauses)
    expected = golden.packets(params, traffic, cfg["directed_packets"])
    beats = [{"data": w, "last": int(i == len(p.data) - 1), "dest": p.dest, "type": p.type}
             for p in expected for i, w in enumerate(p.data)]
    source = StreamSource(StreamBus.from_prefix(dut, "ext", ("data", "last", "dest", "type")),
                          dut.clk, dut.rst, random_pause(rng, idle))
    sink = StreamSink(StreamBus.from_prefix(dut, "out", ("data", "first", "last", "dest",
                                                         "src", "type")),
                      dut.clk, dut.rst, random_pause(rng, stall))
    await _start(dut, cfg, ext=True)
    source.send(beats)
    got: list[golden.Packet] = []
    current: list[int] = []
    for _ in range(200 * len(beats) + 10 * params.ack_timeout):
        await RisingEdge(dut.clk)
        for b in sink.take():
            assert b["first"] == (not current), f"first flag, packet {len(got)}"
            current.append(b["data"])
            if b["last"]:
                got.append(golden.Packet(tuple(current), b["dest"], b["src"], b["type"]))
                current = []
                k = len(got) - 1
                assert got[k] == expected[k], f"packet {k}: {got[k]} != {expected[k]}"
        if len(got) == len(expected):
            break
    assert got == expected, f"delivered {len(got)} of {len(expected)} packets"
    sink.pause = no_pause()
    await ClockCycles(dut.clk, 4 * params.ack_timeout)   # a replayed duplicate would show
    nothing_left_over(source, sink)
    await ReadOnly()
    assert int(dut.packets.value) == len(expected), "a packet was delivered twice"


# --- runs -----------------------------------------------------------------------------------------

def _full_mask(len_min: int, max_packet: int) -> int:
    mask = 0
    while len_min + 2 * mask + 1 <= max_packet:
        mask = 2 * mask + 1
    return mask


def _seeds(rng: random.Random) -> dict:
    return {name: rng.randrange(1, 2 ** 32) for name in (
        "seed_len", "seed_valid", "seed_ready", "seed_flit", "seed_status")}


def _flip_thr(p: float) -> int:
    return min(2 ** 32 - 1, round(p * 2 ** 32))


def config(params: LinkParams, seed: int, *, packets: int, bit_error_rate: float,
           latency: int, traffic: golden.Traffic | None = None, directed_packets: int = 0,
           corrupt_at: int = 0, report: str | None = None) -> dict:
    """The JSON parameters of one run (see the cocotb tests above)."""
    rng = random.Random(seed)
    seeds = _seeds(rng)
    if traffic is None:
        traffic = golden.Traffic(
            seed_len=seeds["seed_len"], seed_valid=seeds["seed_valid"],
            seed_ready=seeds["seed_ready"], len_min=1,
            len_mask=_full_mask(1, params.max_packet), valid_thr=224, ready_thr=192)
    traffic.check(params)
    mean_len = traffic.len_min + traffic.len_mask / 2
    rate = golden.efficiency_with_errors(params, latency, max(1, round(mean_len)),
                                         bit_error_rate)
    rate *= min(traffic.valid_thr, traffic.ready_thr) / 256
    # Cycles for the packets at the estimated rate, with a margin; error-free runs stop there
    # exactly (the golden schedule is computed for that many cycles).
    cycles = int(packets * mean_len / rate * 1.3) + 2000
    return {
        "link": asdict(params),
        "traffic": asdict(traffic),
        "seed": seed,
        **{k: getattr(traffic, k) for k in ("seed_len", "seed_valid", "seed_ready", "len_min",
                                             "len_mask", "valid_thr", "ready_thr")},
        "seed_flit": seeds["seed_flit"], "seed_status": seeds["seed_status"],
        "flit_flip_thr": _flip_thr(golden.flit_error_rate(params, bit_error_rate)),
        "status_flip_thr": _flip_thr(1 - (1 - bit_error_rate) ** params.status_bits),
        "bit_error_rate": bit_error_rate,
        "latency": latency,
        "packets": packets,
        "stop_at": cycles,
        "warmup": min(cycles // 4, 2000),
        "directed_packets": directed_packets,
        "corrupt_at": corrupt_at,
        "report": report,
    }


def simulate(params: LinkParams, sim: str, seed: int | None = None, *, packets: int = 10_000,
             bit_error_rate: float = 1e-4, latency: int = 4,
             traffic: golden.Traffic | None = None, directed_packets: int = 100,
             corrupt_at: int = 0, report: str | None = None) -> RunResult:
    """Run the link testbench: ``bulk`` and, if ``directed_packets``, ``directed`` under
    every pause setting; the result is ok only when every one of them ran and passed."""
    if seed is None:
        seed = random.SystemRandom().randrange(2 ** 31)
    cfg = config(params, seed, packets=packets, bit_error_rate=bit_error_rate,
                 latency=latency, traffic=traffic, directed_packets=directed_packets,
                 corrupt_at=corrupt_at, report=report)
    testcase = ["bulk", "directed"] if directed_packets else ["bulk"]
    return run_verilog(stored_verilog(loopback_verilog, params, latency), TOPLEVEL,
                       "sim.tb.link", sim, params=cfg, testcase=testcase, seed=seed,
                       expected=1 + (len(PAUSES) if directed_packets else 0))


def loopback_verilog(params: LinkParams, latency: int) -> str:
    """The loopback's Verilog: two ports over a channel of ``latency`` cycles."""
    return emit_verilog(LinkLoopback(params, latency), TOPLEVEL)


def measured_efficiency(params: LinkParams, sim: str, *, length: int | None = None,
                        latency: int = 4, packets: int = 400, bit_error_rate: float = 0.0
                        ) -> float:
    """Payload words per cycle over the raw datapath, measured on the RTL.

    Saturated traffic (source always valid, sink always ready) of packets of ``length``
    words (default ``max_packet``); the rate is counted over a window after a warm-up.
    Without bit errors it equals :func:`sim.golden.link.efficiency` to within one packet
    per window (the testbench asserts it).
    """
    length = params.max_packet if length is None else length
    traffic = golden.Traffic(len_min=length, len_mask=0)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.json"
        result = simulate(params, sim, seed=1, packets=packets, bit_error_rate=bit_error_rate,
                          latency=latency, traffic=traffic, directed_packets=0,
                          report=str(out))
        if not result.ok:
            raise RuntimeError(f"link simulation failed on {sim}: see {result.results_xml}")
        return json.loads(out.read_text())["measured"]
