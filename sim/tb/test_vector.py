"""cocotb testbench of the vector engine, checked bit-exactly against :mod:`sim.golden.vector`.

Cocotb tests (run inside the simulator by :func:`simulate`):

* ``directed``: every operation, tensor-tensor and tensor-scalar, on special values (zeros of
  both signs, infinities, NaNs, subnormals, the largest finite value) and random ones; sum and
  max reductions over rows of lengths 1, 2, 3 and 7; every narrow input format (every bit
  pattern of the 8-bit ones).
* ``random_streams``: seeded random operations, reductions, input formats, operands and row
  lengths, with random idle cycles on the input and random backpressure on the output.

Each case resets the engine (so the stochastic-rounding generators restart from their seed),
streams its beats through, collects the output beats and compares them, all lanes at once,
with the golden model followed by the golden cast; then checks that no further beat comes out.
"""

import random

import cocotb
import numpy as np
import pytest
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, RisingEdge

from hdl.numerics.formats import format_by_name
from hdl.vector.ops import Reduce, VectorOp
from hdl.vector.vector import Vector, VectorParams
from sim.golden import vector as golden
from sim.golden.numerics import cast_bits as golden_cast
from sim.golden.numerics import cast_params
from sim.tb.runner import RunResult, run, skip_unless_available, tb_params
from sim.tb.streams import (
    StreamBus,
    StreamSink,
    StreamSource,
    no_pause,
    nothing_left_over,
    random_pause,
)

SPECIALS = np.array([
    0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001, 0x7F800001,
    0x00000001, 0x807FFFFF, 0x00400000, 0x7F7FFFFF, 0xFF7FFFFF, 0x00800000, 0x3F800000,
    0xBF800000, 0x3F800001,
], dtype=np.uint32)


def random_f32(rng: np.random.Generator, shape) -> np.ndarray:
    """fp32 bit patterns: mostly moderate values of mixed scale, some raw bits and specials."""
    moderate = (rng.standard_normal(shape) * np.exp2(rng.integers(-12, 12, shape)))
    out = moderate.astype(np.float32).view(np.uint32)
    pick = rng.random(shape)
    raw = rng.integers(0, 2**32, shape, dtype=np.uint64).astype(np.uint32)
    out = np.where(pick < 0.15, raw, out)
    out = np.where(pick > 0.9, rng.choice(SPECIALS, shape), out)
    return out.astype(np.uint32)


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


def check_equal(log, what: str, got: np.ndarray, want: np.ndarray, context: dict):
    if got.shape != want.shape:
        raise AssertionError(f"{what}: shape {got.shape} != expected {want.shape} ({context})")
    bad = np.argwhere(got != want)
    if bad.size:
        e, lane = bad[0]
        raise AssertionError(
            f"{what}: {len(bad)} mismatches, first at beat {e} lane {lane}: got "
            f"0x{int(got[e, lane]):08x}, expected 0x{int(want[e, lane]):08x} ({context})")


class VectorTB:
    """Wires the stream bench, the golden model and the checker for :class:`Vector`."""

    def __init__(self, dut, params: VectorParams, seed: int):
        self.dut = dut
        self.params = params
        self.rng = random.Random(seed)
        self.nprng = np.random.default_rng(seed)
        self.bench = StreamBench(dut, self.rng)
        self.cases = 0

    def expected(self, op, reduce, a, b, scalar, last, in_format) -> np.ndarray:
        r = golden.run(self.params, op, a, b, last=last, scalar=scalar, reduce=reduce,
                       in_format=in_format)
        cast = self.params.cast
        if cast is None or len(r) == 0:
            return r
        return golden_cast(r.view(np.float32), **cast_params(cast)).astype(np.uint32)

    async def case(self, op, reduce=Reduce.NONE, a=None, b=None, scalar=None, last=None,
                   idle=0.0, stall=0.0, in_format="fp32"):
        p, dut = self.params, self.dut
        await self.bench.reset()
        n = len(a)
        b = np.zeros_like(a) if b is None else b
        last = np.zeros(n, dtype=bool) if last is None else np.asarray(last, dtype=bool)
        dut.op.value = VectorOp(op).value
        dut.reduce.value = Reduce(reduce).value
        dut.use_scalar.value = int(scalar is not None)
        sc = np.zeros(p.lanes, np.uint32) if scalar is None else np.asarray(scalar, np.uint32)
        dut.scalar.value = pack([sc[None]], [32])[0]
        dut.in_format.value = p.format_index(in_format)
        want = self.expected(op, reduce, a, b, scalar, last, in_format)
        beats = pack([a, b, last.astype(np.uint8)], [32, 32, 8])
        got = await self.bench.transfer(beats, len(want), idle, stall)
        got = np.array([unpack(v, p.lanes, p.out_bits) for v in got],
                       dtype=np.uint32).reshape(-1, p.lanes)
        check_equal(dut._log, "output", got, want.reshape(-1, p.lanes),
                    {"op": VectorOp(op).name, "reduce": Reduce(reduce).name,
                     "scalar": scalar is not None, "beats": n, "in": in_format})
        self.cases += 1


def _tb(dut):
    cfg = tb_params()
    params = VectorParams(**{**cfg["params"], "formats": tuple(cfg["params"]["formats"])})
    seed = cfg["seed"]
    dut._log.info("seed=%d params=%s", seed, params)
    return VectorTB(dut, params, seed)


def _rows(rng: random.Random, n_rows: int, max_len: int) -> np.ndarray:
    last = []
    for _ in range(n_rows):
        length = rng.randint(1, max_len)
        last += [False] * (length - 1) + [True]
    return np.array(last, dtype=bool)


@cocotb.test()
async def directed(dut):
    tb = _tb(dut)
    await tb.bench.start()
    lanes = tb.params.lanes
    k = len(SPECIALS)
    # every special against every special, spread over lanes
    ai, bi = np.meshgrid(np.arange(k), np.arange(k), indexing="ij")
    pairs_a = SPECIALS[ai.ravel()]
    pairs_b = SPECIALS[bi.ravel()]
    pad = (-len(pairs_a)) % lanes
    a = np.concatenate([pairs_a, SPECIALS[:pad]]).reshape(-1, lanes)
    b = np.concatenate([pairs_b, SPECIALS[-pad:] if pad else SPECIALS[:0]])
    b = b.reshape(-1, lanes)
    for op in VectorOp:
        await tb.case(op, a=a, b=b)
    rnd_a = random_f32(tb.nprng, (12, lanes))
    rnd_b = random_f32(tb.nprng, (12, lanes))
    scalar = random_f32(tb.nprng, (lanes,))
    for op in (VectorOp.ADD, VectorOp.SUBTRACT, VectorOp.MULTIPLY, VectorOp.MAX,
               VectorOp.GREATER_EQUAL, VectorOp.BITWISE_XOR):
        await tb.case(op, a=rnd_a, b=rnd_b, scalar=scalar)
    last = np.array([True, False, True, False, False, True] + [False] * 6 + [True])
    rows = random_f32(tb.nprng, (len(last), lanes))
    for reduce in (Reduce.SUM, Reduce.MAX):
        for op in (VectorOp.COPY, VectorOp.SQUARE, VectorOp.MULTIPLY):
            await tb.case(op, reduce, a=rows, b=rows[::-1].copy(), last=last)
    for fmt in tb.params.formats:  # every narrow input format, every bit pattern of fp8
        if fmt == "fp32":
            continue
        bits = format_by_name(fmt).bits
        words = (np.arange(1 << bits, dtype=np.uint32) if bits <= 8 else
                 tb.nprng.integers(0, 1 << bits, 64 * lanes, dtype=np.uint32))
        words = np.concatenate([words, words[: (-len(words)) % lanes]]).reshape(-1, lanes)
        for op in (VectorOp.COPY, VectorOp.ADD, VectorOp.MULTIPLY):
            await tb.case(op, a=words, b=words[::-1].copy(), in_format=fmt)
    dut._log.info("directed: %d cases passed", tb.cases)

@cocotb.test()
async def random_streams(dut):
    tb = _tb(dut)
    await tb.bench.start()
    lanes = tb.params.lanes
    rng = tb.rng
    for _ in range(10):
        op = rng.choice(list(VectorOp))
        reduce = rng.choice(list(Reduce))
        last = _rows(rng, rng.randint(1, 4), 6)
        if rng.random() < 0.3:
            last[-1] = False  # an unterminated row: the reduction emits nothing for it
        in_format = rng.choice(tb.params.formats)
        if in_format == "fp32":
            a = random_f32(tb.nprng, (len(last), lanes))
            b = random_f32(tb.nprng, (len(last), lanes))
        else:
            bits = format_by_name(in_format).bits
            a, b = tb.nprng.integers(0, 1 << bits, (2, len(last), lanes), dtype=np.uint32)
        scalar = random_f32(tb.nprng, (lanes,)) if rng.random() < 0.4 else None
        idle, stall = rng.choice([(0.0, 0.0), (0.3, 0.3), (0.6, 0.1), (0.1, 0.6)])
        await tb.case(op, reduce, a=a, b=b, scalar=scalar, last=last,
                      idle=idle, stall=stall, in_format=in_format)
    dut._log.info("random_streams: %d cases passed", tb.cases)


def simulate(params: VectorParams, sim: str, seed: int | None = None) -> RunResult:
    """Run the vector engine's full cocotb testbench for ``params`` on ``sim``."""
    if seed is None:
        seed = random.SystemRandom().randrange(2**31)
    cfg = {"params": {f: getattr(params, f) for f in params.__dataclass_fields__},
           "seed": seed}
    return run(lambda: Vector(params, lane_instances=True), "vector", "sim.tb.test_vector",
               sim, cfg, seed=seed)


PARAMS = {
    "lanes1-fp32": VectorParams(lanes=1),
    "lanes4-bf16-stochastic": VectorParams(lanes=4, out_format="bf16", rounding="stochastic",
                                           seed=7),
    "lanes3-fp8e4m3": VectorParams(lanes=3, out_format="fp8_e4m3"),
}


# One parameter set runs on every simulator; the other sizes run on Icarus only, because a
# Verilator build of this engine costs minutes of C++ compilation per parameter set.
BOTH_SIMULATORS = "lanes4-bf16-stochastic"


@pytest.mark.cocotb
def test_vector(sim, seed):
    result = simulate(PARAMS[BOTH_SIMULATORS], sim, seed)
    assert result.ok, f"{result} (seed {seed})"


@pytest.mark.cocotb
@pytest.mark.parametrize("name", [n for n in PARAMS if n != BOTH_SIMULATORS])
def test_vector_sizes_icarus(name, seed):
    skip_unless_available("icarus")
    result = simulate(PARAMS[name], "icarus", seed)
    assert result.ok, f"{result} (seed {seed})"
