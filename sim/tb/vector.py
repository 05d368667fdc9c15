"""cocotb testbench of the vector engine, checked bit-exactly against :mod:`sim.golden.vector`.

Cocotb tests (run inside the simulator by :func:`simulate`, which ``gen sim`` calls; the
pytest entry points are in ``sim/tb/test_vector.py``):

* ``directed``: every operation, tensor-tensor and tensor-scalar, on special values (zeros of
  both signs, infinities, NaNs, subnormals, the largest finite value) and random ones; every
  operation as the second of a two-operation tensor-scalar, on specials and on the first's
  non-canonical NaNs, one-operation ones of them kept as they are (``op1`` COPY); sum and
  max reductions over rows of lengths 1, 2, 3 and 7; every narrow input format (every bit
  pattern of the 8-bit ones); every narrow output format with both roundings, element-wise
  and reduced, from other input formats, ``a`` and ``b`` of two different ones
  (round-to-nearest-even alone on an engine without a generator, ``rng`` None: every draw of
  a rounding is among the engine's); scans of rows, every operand order, narrow inputs and
  output; on an engine with a generator, the lanes' draws (numbers in [0, 1), and dropout at
  probabilities below, within and above [0, 1] and NaN).
* ``random_streams``: seeded random operations, reductions, scans, input formats (``a``'s and
  ``b``'s drawn apart), second operations, output formats, roundings, operands and row
  lengths, with random
  idle cycles on the input and random backpressure on the output.

Each case resets the engine (so the stochastic-rounding generators restart from their seed),
streams its beats through, collects the output beats and compares them, all lanes at once,
with the golden model (its output cast included); then checks that no further beat comes out.
"""

import random

import cocotb
import numpy as np

from hdl.numerics.cast import roundings
from hdl.vector.ops import LANE_OPS, Draw, Reduce, VectorOp
from hdl.vector.vector import Vector, VectorParams
from sim.golden import vector as golden
from sim.tb.engine import (
    PAUSES,
    SPECIALS,
    EngineTB,
    check_equal,
    pack,
    simulate_engine,
    unpack,
)
from sim.tb.runner import RunResult, emit_verilog, stored_verilog


def random_f32(rng: np.random.Generator, shape) -> np.ndarray:
    """fp32 bit patterns: mostly moderate values of mixed scale, some raw bits and specials."""
    moderate = (rng.standard_normal(shape) * np.exp2(rng.integers(-12, 12, shape)))
    out = moderate.astype(np.float32).view(np.uint32)
    pick = rng.random(shape)
    raw = rng.integers(0, 2**32, shape, dtype=np.uint64).astype(np.uint32)
    out = np.where(pick < 0.15, raw, out)
    out = np.where(pick > 0.9, rng.choice(SPECIALS, shape), out)
    return out.astype(np.uint32)


class VectorTB(EngineTB):
    """Wires the stream bench, the golden model and the checker for :class:`Vector`."""

    async def case(self, op, reduce=Reduce.NONE, a=None, b=None, scalar=None, last=None,
                   idle=0.0, stall=0.0, in_format="fp32", out_format="fp32", rounding="rne",
                   b_format=None, op1=VectorOp.COPY, scalar1=None, scanning=False,
                   reverse0=False, reverse1=False, draw=Draw.NONE):
        """One instruction: ``a`` lane words in ``in_format``, ``b`` in ``b_format``
        (``in_format`` when None), the second operation ``op1`` with ``scalar1`` (fp32, one
        per lane; zeros when None), or with ``scanning`` a scan of each row of ``last``
        from ``scalar`` (``reverse0`` / ``reverse1`` swapping the operations' operands),
        the result written in ``out_format`` with ``rounding``, or the lanes' ``draw``
        instead (``scalar`` a dropout's probabilities); every beat checked against the
        golden model."""
        p, dut = self.params, self.dut
        await self.begin(in_format, out_format, rounding)
        b_format = in_format if b_format is None else b_format
        dut.b_format.value = p.format_index(b_format)
        n = len(a)
        b = np.zeros_like(a) if b is None else b
        last = np.zeros(n, dtype=bool) if last is None else np.asarray(last, dtype=bool)
        dut.op.value = VectorOp(op).value
        dut.reduce.value = Reduce(reduce).value
        dut.use_scalar.value = int(scalar is not None)
        sc = np.zeros(p.lanes, np.uint32) if scalar is None else np.asarray(scalar, np.uint32)
        dut.scalar.value = pack([sc[None]], [32])[0]
        sc1 = np.zeros(p.lanes, np.uint32) if scalar1 is None else \
            np.asarray(scalar1, np.uint32)
        dut.op1.value = VectorOp(op1).value
        dut.scalar1.value = pack([sc1[None]], [32])[0]
        dut.scan.value = int(scanning)
        dut.reverse0.value = int(reverse0)
        dut.reverse1.value = int(reverse1)
        dut.draw.value = Draw(draw).value
        want = golden.run(p, op, a, b, last=last, scalar=scalar, reduce=reduce,
                          in_format=in_format, out_format=out_format, rounding=rounding,
                          b_format=b_format, op1=op1, scalar1=sc1, scanning=scanning,
                          reverse0=reverse0, reverse1=reverse1, draw=draw)
        beats = pack([a, b, last.astype(np.uint8)], [32, 32, 8])
        got = await self.bench.transfer(beats, len(want), idle, stall)
        got = np.array([unpack(v, p.lanes, 32) for v in got],
                       dtype=np.uint32).reshape(-1, p.lanes)
        check_equal("output", got, want.reshape(-1, p.lanes),
                    {"op": VectorOp(op).name, "reduce": Reduce(reduce).name,
                     "scalar": scalar is not None, "op1": VectorOp(op1).name, "beats": n,
                     "scan": (scanning, reverse0, reverse1), "draw": Draw(draw).name,
                     "in": in_format, "b": b_format, "out": out_format, "rounding": rounding})
        self.cases += 1


def params_from_json(cfg: dict) -> VectorParams:
    return VectorParams(**{**cfg, "formats": tuple(cfg["formats"])})


def _rows(rng: random.Random, n_rows: int, max_len: int) -> np.ndarray:
    last = []
    for _ in range(n_rows):
        length = rng.randint(1, max_len)
        last += [False] * (length - 1) + [True]
    return np.array(last, dtype=bool)


def _words(tb: VectorTB, fmt: str, shape) -> np.ndarray:
    """Random lane words in ``fmt``."""
    return random_f32(tb.nprng, shape) if fmt == "fp32" else tb.random_words(fmt, shape)


def _operands(tb: VectorTB, fmt: str, shape,
              b_format: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Random ``a`` lane words in ``fmt`` and ``b`` ones in ``b_format`` (``fmt`` when
    None)."""
    return _words(tb, fmt, shape), _words(tb, fmt if b_format is None else b_format, shape)


@cocotb.test()
async def directed(dut):
    tb = VectorTB.from_config(dut, params_from_json)
    await tb.bench.start()
    lanes = tb.params.lanes
    formats = tb.params.formats
    # every special against every special, spread over lanes
    ai, bi = np.meshgrid(np.arange(len(SPECIALS)), np.arange(len(SPECIALS)), indexing="ij")
    a, b = tb.lane_rows(SPECIALS[ai.ravel()]), tb.lane_rows(SPECIALS[bi.ravel()])
    for op in LANE_OPS:
        await tb.case(op, a=a, b=b)
    rnd_a, rnd_b = _operands(tb, "fp32", (12, lanes))
    scalar = random_f32(tb.nprng, (lanes,))
    for op in (VectorOp.ADD, VectorOp.SUBTRACT, VectorOp.MULTIPLY, VectorOp.MAX,
               VectorOp.GREATER_EQUAL, VectorOp.BITWISE_XOR):
        await tb.case(op, a=rnd_a, b=rnd_b, scalar=scalar)
    # shifts by every count up to 33 (the specials' words count from 32 on)
    counts = np.resize(np.arange(34, dtype=np.uint32), (12, lanes))
    for op in (VectorOp.LEFT_SHIFT, VectorOp.RIGHT_SHIFT):
        await tb.case(op, a=rnd_a, b=counts)
    # every operation second, on every special against every special: the first operation
    # (an OR with zero) passes each, non-canonical NaNs included, as it is
    firsts = np.repeat(SPECIALS, lanes).reshape(-1, lanes)
    zeros = np.zeros(lanes, np.uint32)
    for op1 in LANE_OPS:
        for j in range(0, len(SPECIALS), lanes):
            await tb.case(VectorOp.BITWISE_OR, a=firsts, scalar=zeros, op1=op1,
                          scalar1=SPECIALS[(j + np.arange(lanes)) % len(SPECIALS)])
    await tb.case(VectorOp.MULTIPLY, a=rnd_a, scalar=scalar, op1=VectorOp.ADD,
                  scalar1=random_f32(tb.nprng, (lanes,)), out_format=formats[-1])
    last = np.array([True, False, True, False, False, True] + [False] * 6 + [True])
    rows = random_f32(tb.nprng, (len(last), lanes))
    for reduce in (Reduce.SUM, Reduce.MAX):
        for op in (VectorOp.COPY, VectorOp.SQUARE, VectorOp.MULTIPLY):
            await tb.case(op, reduce, a=rows, b=rows[::-1].copy(), last=last)
    narrow = [f for f in formats if f != "fp32"]
    for fmt in narrow:  # every narrow input format, every bit pattern of fp8
        words = tb.format_words(fmt)
        for op in (VectorOp.COPY, VectorOp.ADD, VectorOp.MULTIPLY):
            await tb.case(op, a=words, b=words[::-1].copy(), in_format=fmt)
    # every narrow output format, every rounding the engine has (both, or RNE alone without
    # a generator), from another format than its own, a and b of two different formats
    for i, fmt in enumerate(narrow):
        in_format = formats[(formats.index(fmt) + 1) % len(formats)]
        b_format = formats[(formats.index(fmt) + 2) % len(formats)]
        a, b = _operands(tb, in_format, (16, lanes), b_format)
        for rounding in roundings(tb.params.rng):
            await tb.case(VectorOp.MULTIPLY if i % 2 else VectorOp.ADD, a=a, b=b,
                          in_format=in_format, b_format=b_format, out_format=fmt,
                          rounding=rounding)
            await tb.case(VectorOp.COPY, Reduce.SUM, a=rows, last=last, out_format=fmt,
                          rounding=rounding)
    # scans: each row of last from the scalar, every operand order, a narrow a and b
    for op0, op1, reverse0, reverse1 in ((VectorOp.ADD, VectorOp.BITWISE_OR, False, False),
                                         (VectorOp.MULTIPLY, VectorOp.ADD, False, False),
                                         (VectorOp.SUBTRACT, VectorOp.SUBTRACT, True, True),
                                         (VectorOp.MAX, VectorOp.COPY, False, True)):
        await tb.case(op0, a=rows, b=rows[::-1].copy(), scalar=scalar, last=last,
                      op1=op1, scanning=True, reverse0=reverse0, reverse1=reverse1)
    if narrow:
        a, b = _operands(tb, narrow[0], (len(last), lanes), formats[-1])
        await tb.case(VectorOp.MULTIPLY, a=a, b=b, scalar=scalar, last=last,
                      op1=VectorOp.ADD, in_format=narrow[0], b_format=formats[-1],
                      out_format=narrow[-1], scanning=True)
    if tb.params.rng is not None:
        # the lanes' draws: numbers in [0, 1), fp32 and narrow; dropouts of specials at
        # probabilities below 0, within [0, 1), above 1 and NaN, into fp32 and a narrow format
        probs = np.resize(np.array([-0.5, 0.0, 0.25, 0.5, 0.9, 1.0, 1.5, np.nan],
                                   np.float32), lanes).view(np.uint32)
        for fmt in dict.fromkeys(("fp32", formats[-1])):
            await tb.case(VectorOp.COPY, a=rnd_a, out_format=fmt, draw=Draw.UNIFORM)
            await tb.case(VectorOp.COPY, a=np.resize(SPECIALS, (len(SPECIALS), lanes)),
                          scalar=probs, out_format=fmt, draw=Draw.DROPOUT)
    dut._log.info("directed: %d cases passed", tb.cases)


@cocotb.test()
async def random_streams(dut):
    tb = VectorTB.from_config(dut, params_from_json)
    await tb.bench.start()
    lanes = tb.params.lanes
    rng = tb.rng
    for _ in range(10):
        op = rng.choice(list(LANE_OPS))
        reduce = rng.choice(list(Reduce))
        last = _rows(rng, rng.randint(1, 4), 6)
        if rng.random() < 0.3:
            last[-1] = False  # an unterminated row: the reduction emits nothing for it
        in_format, b_format, out_format = (rng.choice(tb.params.formats) for _ in range(3))
        a, b = _operands(tb, in_format, (len(last), lanes), b_format)
        scalar = random_f32(tb.nprng, (lanes,)) if rng.random() < 0.4 else None
        op1 = rng.choice(list(LANE_OPS)) if rng.random() < 0.5 else VectorOp.COPY
        scanning = rng.random() < 0.25
        if scanning:
            reduce = Reduce.NONE
        idle, stall = rng.choice(PAUSES)
        await tb.case(op, reduce, a=a, b=b, scalar=scalar, last=last, idle=idle, stall=stall,
                      in_format=in_format, b_format=b_format, out_format=out_format,
                      rounding=rng.choice(roundings(tb.params.rng)), op1=op1,
                      scalar1=random_f32(tb.nprng, (lanes,)), scanning=scanning,
                      reverse0=rng.random() < 0.5, reverse1=rng.random() < 0.5)
    dut._log.info("random_streams: %d cases passed", tb.cases)


def simulate(params: VectorParams, sim: str, seed: int | None = None) -> RunResult:
    """Run the vector engine's full cocotb testbench for ``params`` on ``sim``."""
    cfg = {f: getattr(params, f) for f in params.__dataclass_fields__}
    return simulate_engine(stored_verilog(engine_verilog, params), "vector",
                           "sim.tb.vector", sim, cfg, seed)


def engine_verilog(params: VectorParams) -> str:
    """The vector engine's Verilog as the bench runs it (its lanes as instances)."""
    return emit_verilog(Vector(params, lane_instances=True), "vector")
