"""What the cocotb benches of the two lane engines share (:mod:`sim.tb.vector`,
:mod:`sim.tb.activation`): stream beats packed and unpacked, one transfer at a time on the
engine's ``i`` and ``o`` streams with idle cycles and backpressure, the all-lanes checker, and
:class:`EngineTB`, the per-engine bench's base: its seeded generators, a case's reset and
run-time formats, and the start from the parameters ``gen sim`` passes.

Both engines read their inputs in the instruction's ``in_format`` and write their outputs in
its ``out_format`` (indices into ``params.formats``, a narrow value in the low bits of a
32-bit lane word) with round-to-nearest-even or, with ``stochastic``, stochastic rounding by
per-lane generators that restart from their seed at reset.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, RisingEdge

from hdl.numerics.formats import format_by_name
from sim.tb.runner import RunResult, run_verilog, tb_params
from sim.tb.streams import (
    StreamBus,
    StreamSink,
    StreamSource,
    no_pause,
    nothing_left_over,
    random_pause,
)

#: fp32 special values: zeros, infinities, NaNs (quiet, signalling, negative), subnormals,
#: the largest finite values, the smallest normal, one and its neighbour.
SPECIALS = np.array([
    0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001, 0x7F800001,
    0x00000001, 0x807FFFFF, 0x00400000, 0x7F7FFFFF, 0xFF7FFFFF, 0x00800000, 0x3F800000,
    0xBF800000, 0x3F800001,
], dtype=np.uint32)

#: (idle, stall) probabilities a random stream test picks from.
PAUSES = [(0.0, 0.0), (0.3, 0.3), (0.6, 0.1), (0.1, 0.6)]


def pack(rows: list[np.ndarray], widths: list[int]) -> list[int]:
    """Pack beats: each beat is the concatenation (LSB first) of the given fields."""
    out = []
    for fields in zip(*rows, strict=True):
        value, pos = 0, 0
        for field, width in zip(fields, widths, strict=True):
            field = np.atleast_1d(field)
            value |= int.from_bytes(field.astype(f"<u{width // 8}").tobytes(), "little") << pos
            pos += width * field.size
        out.append(value)
    return out


def unpack(value: int, lanes: int, width: int, offset: int = 0) -> np.ndarray:
    """``lanes`` fields of ``width`` bits starting at bit ``offset`` of ``value``."""
    raw = (value >> offset) & ((1 << (lanes * width)) - 1)
    if width % 8:
        mask = (1 << width) - 1
        return np.array([(raw >> (width * i)) & mask for i in range(lanes)], dtype=np.uint32)
    return np.frombuffer(raw.to_bytes(lanes * width // 8, "little"),
                         dtype=f"<u{width // 8}").astype(np.uint32)


def check_equal(what: str, got: np.ndarray, want: np.ndarray, context: dict):
    """Raise unless ``got`` equals ``want`` bit for bit, naming the first mismatch."""
    if got.shape != want.shape:
        raise AssertionError(f"{what}: shape {got.shape} != expected {want.shape} ({context})")
    bad = np.argwhere(got != want)
    if bad.size:
        e, lane = bad[0]
        raise AssertionError(
            f"{what}: {len(bad)} mismatches, first at beat {e} lane {lane}: got "
            f"0x{int(got[e, lane]):08x}, expected 0x{int(want[e, lane]):08x} ({context})")


class StreamBench:
    """Clock, reset and one transfer at a time on the engine's ``i`` and ``o`` streams,
    through the shared stream source and sink (:mod:`sim.tb.streams`).

    ``idle`` is the probability that the source holds ``valid`` low in a cycle, ``stall`` the
    probability that the sink holds ``ready`` low; both pause generators draw from the
    bench's seeded ``rng``.
    """

    def __init__(self, dut, rng: random.Random):
        self.dut = dut
        self.rng = rng

    async def start(self):
        cocotb.start_soon(Clock(self.dut.clk, 10, unit="ns").start())
        await self.reset()

    async def reset(self):
        dut = self.dut
        await FallingEdge(dut.clk)
        dut.rst.value = 1
        dut.i__valid.value = 0
        dut.o__ready.value = 0
        await FallingEdge(dut.clk)
        await FallingEdge(dut.clk)
        dut.rst.value = 0

    def _pause(self, probability: float):
        return random_pause(self.rng, probability) if probability else no_pause()

    async def transfer(self, beats: list[int], expect: int, idle: float = 0.0,
                       stall: float = 0.0, drain: int = 12) -> list[int]:
        """Send ``beats``, collect ``expect`` output payloads, then check that ``drain``
        quiet cycles (with ``ready`` high) bring no further beat."""
        dut = self.dut
        bus_i, bus_o = StreamBus.from_prefix(dut, "i"), StreamBus.from_prefix(dut, "o")
        source = StreamSource(bus_i, dut.clk, dut.rst, self._pause(idle))
        sink = StreamSink(bus_o, dut.clk, dut.rst, self._pause(stall))
        source.send(beats)
        limit = 50 * (len(beats) + expect) + 200
        cycles = 0
        while not (source.idle and sink.count >= expect):
            if cycles == limit:
                raise AssertionError(f"timeout: sent {source.sent}/{len(beats)}, "
                                     f"got {sink.count}/{expect} after {cycles} cycles")
            await RisingEdge(dut.clk)
            cycles += 1
        got = sink.take(expect)
        sink.stop()
        quiet = StreamSink(bus_o, dut.clk, dut.rst)
        for _ in range(drain):
            await RisingEdge(dut.clk)
        quiet.stop()
        source.stop()
        if quiet.received or sink.received:
            raise AssertionError(f"unexpected output beat after {expect} beats")
        nothing_left_over(source, sink, quiet)
        await FallingEdge(dut.clk)
        dut.i__valid.value = 0
        dut.o__ready.value = 0
        return got


class EngineTB:
    """Base of a lane engine's bench: the engine's parameters, its seeded generators
    (``rng`` for the control flow and the pauses, ``nprng`` for the data), the stream bench
    and the count of cases passed."""

    def __init__(self, dut, params, seed: int):
        self.dut = dut
        self.params = params
        self.rng = random.Random(seed)
        self.nprng = np.random.default_rng(seed)
        self.bench = StreamBench(dut, self.rng)
        self.cases = 0

    @classmethod
    def from_config(cls, dut, params_from_json: Callable[[dict], object]):
        """The bench for the parameters and seed ``simulate`` passed (:func:`tb_params`)."""
        cfg = tb_params()
        params = params_from_json(cfg["params"])
        dut._log.info("seed=%d params=%s", cfg["seed"], params)
        return cls(dut, params, cfg["seed"])

    async def begin(self, in_format: str, out_format: str, rounding: str):
        """Start a case: reset the engine (its generators restart from their seed) and set
        the instruction's formats and rounding."""
        await self.bench.reset()
        p, dut = self.params, self.dut
        dut.in_format.value = p.format_index(in_format)
        dut.out_format.value = p.format_index(out_format)
        dut.stochastic.value = int(rounding == "stochastic")

    def lane_rows(self, words: np.ndarray) -> np.ndarray:
        """``words`` padded (by repeating its head) to whole beats of all lanes."""
        lanes = self.params.lanes
        words = np.asarray(words, dtype=np.uint32).ravel()
        return np.concatenate([words, words[: (-len(words)) % lanes]]).reshape(-1, lanes)

    def format_words(self, fmt: str) -> np.ndarray:
        """Lane words of the narrow format ``fmt``: every bit pattern of an 8-bit format, 64
        random beats' worth of a wider one; in whole beats."""
        bits = format_by_name(fmt).bits
        lanes = self.params.lanes
        words = (np.arange(1 << bits, dtype=np.uint32) if bits <= 8 else
                 self.nprng.integers(0, 1 << bits, 64 * lanes, dtype=np.uint32))
        return self.lane_rows(words)

    def random_words(self, fmt: str, shape) -> np.ndarray:
        """Random lane words of the narrow format ``fmt`` (every bit pattern equally likely:
        all its binades and special values)."""
        return self.nprng.integers(0, 1 << format_by_name(fmt).bits, shape, dtype=np.uint32)


def simulate_engine(verilog_text: str, toplevel: str, test_module: str, sim: str,
                    params_json: dict, seed: int | None) -> RunResult:
    """Run an engine's cocotb benches (``test_module``) on ``verilog_text``, with
    ``params_json`` and ``seed`` (random when None) passed to :func:`tb_params`."""
    if seed is None:
        seed = random.SystemRandom().randrange(2**31)
    return run_verilog(verilog_text, toplevel, test_module, sim,
                       {"params": params_json, "seed": seed}, seed=seed)
