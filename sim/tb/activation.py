"""cocotb testbench of the scalar (activation) engine, bit-exact against
:mod:`sim.golden.activation`.

Cocotb tests (run inside the simulator by :func:`simulate`, which ``gen sim`` calls; the
pytest entry points are in ``sim/tb/test_activation.py``):

* ``directed``: every function of the set on values from random binades of fp32 (subnormals
  included), every special value and, for a function fitted over a range of ``x``, its
  segment boundaries (+- 1 ulp) and ends, for sin and cos values next to multiples of pi/2
  far out; identity scale and zero bias, then random
  per-lane scale and bias; rows of several lengths for the running sum. Then every narrow
  input format (every bit pattern of the 8-bit ones, random ones of the 16-bit ones) and
  every output format with both roundings (round-to-nearest-even alone on an engine without
  a generator, ``rng`` None: every draw of a rounding is among the engine's).
* ``random_streams``: seeded random functions, input and output formats, roundings, scales,
  biases, inputs and row lengths, with random idle cycles on the input and random
  backpressure on the output.

Each output beat is checked, all lanes at once: ``data`` against the golden ``out``, ``sum``
against the golden running sum, and ``last`` against the input's.
"""

import random

import cocotb
import numpy as np

from hdl.numerics.cast import roundings
from hdl.numerics.constants import ONE32
from hdl.vector.activation import Activation, ActivationParams
from hdl.vector.fitting import segment_bounds
from hdl.vector.functions import TRIG, FunctionSpec
from sim.golden import activation as golden
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


def function_inputs(spec: FunctionSpec, rng: np.random.Generator, count: int) -> np.ndarray:
    """fp32 inputs for ``spec``: ``count`` values from random binades of fp32 (both signs,
    subnormals included), every special value, and for a function fitted over a range of
    ``x``: values inside it, its segment edges +- 1 ulp and both ends."""
    fields = rng.integers(0, 255, count, dtype=np.uint32)
    mant = rng.integers(0, 1 << 23, count, dtype=np.uint32) >> rng.integers(0, 23, count,
                                                                             dtype=np.uint32)
    signs = rng.integers(0, 2, count, dtype=np.uint32) << 31
    x = [signs | (fields << 23) | mant, SPECIALS]
    if spec.name in TRIG:  # next to the zeros of sin and cos, near and far
        turns = rng.integers(1, 1 << 12, count // 4) * 2.0 ** rng.integers(0, 110, count // 4)
        near = (turns * (np.pi / 2)).astype(np.float32)
        x += [v.view(np.uint32) for v in (near, np.nextafter(near, np.float32(0)))]
    if spec.mode == "uniform" and not spec.reduced:
        edges = segment_bounds(spec)[:, 0].astype(np.float32)
        pick = rng.choice(edges, count // 3)
        inside = rng.uniform(spec.lo, spec.hi, count // 2).astype(np.float32)
        ends = np.float32([spec.lo, spec.hi])
        x += [v.view(np.uint32) for v in (np.nextafter(pick, np.float32(np.inf)), pick,
                                          np.nextafter(pick, np.float32(-np.inf)), inside,
                                          ends, np.nextafter(ends, np.float32(-np.inf)))]
    return np.concatenate(x).astype(np.uint32)


class ActivationTB(EngineTB):
    """Wires the stream bench, the golden model and the checker for :class:`Activation`."""

    async def case(self, func: int, data, scale, bias, last, idle=0.0, stall=0.0,
                   in_format="fp32", out_format="fp32", rounding="rne"):
        """One instruction: ``data`` lane words in ``in_format``, the result written in
        ``out_format`` with ``rounding``; every beat checked against the golden model."""
        p, dut = self.params, self.dut
        lanes = p.lanes
        await self.begin(in_format, out_format, rounding)
        data = np.asarray(data, dtype=np.uint32).reshape(-1, lanes)
        last = np.asarray(last, dtype=bool)
        dut.func.value = func
        dut.scale.value = pack([scale[None]], [32])[0]
        dut.bias.value = pack([bias[None]], [32])[0]
        out, sums = golden.run(p, func, data, scale, bias, last, in_format=in_format,
                               out_format=out_format, rounding=rounding)
        beats = pack([data, last.astype(np.uint8)], [32, 8])
        got = await self.bench.transfer(beats, len(data), idle, stall)
        g_out = np.array([unpack(v, lanes, 32) for v in got]).reshape(-1, lanes)
        g_sum = np.array([unpack(v, lanes, 32, 32 * lanes) for v in got]).reshape(-1, lanes)
        g_last = np.array([(v >> (64 * lanes)) & 1 for v in got], dtype=bool)
        ctx = {"function": p.functions[func].name, "beats": len(data), "in": in_format,
               "out": out_format, "rounding": rounding}
        check_equal("data", g_out, out, ctx)
        check_equal("sum", g_sum, sums, ctx)
        if not np.array_equal(g_last, last):
            raise AssertionError(f"last flags differ: got {g_last}, expected {last} ({ctx})")
        self.cases += 1


def _rows(rng: random.Random, n: int) -> np.ndarray:
    last = np.zeros(n, dtype=bool)
    pos = -1
    while pos < n - 1:
        pos = min(n - 1, pos + rng.randint(1, 9))
        last[pos] = True
    return last


@cocotb.test()
async def directed(dut):
    tb = ActivationTB.from_config(dut, params_from_json)
    await tb.bench.start()
    lanes = tb.params.lanes
    ones = np.full(lanes, ONE32, dtype=np.uint32)
    zeros = np.zeros(lanes, dtype=np.uint32)
    for func, spec in enumerate(tb.params.functions):
        x = tb.lane_rows(function_inputs(spec, tb.nprng, 16))
        await tb.case(func, x, ones, zeros, _rows(tb.rng, len(x)))
        scale = (tb.nprng.uniform(0.5, 2.0, lanes)).astype(np.float32).view(np.uint32)
        bias = (tb.nprng.uniform(-1.0, 1.0, lanes)).astype(np.float32).view(np.uint32)
        await tb.case(func, x[:6], scale, bias, _rows(tb.rng, min(6, len(x))))
    func = tb.rng.randrange(len(tb.params.functions))
    for fmt in tb.params.formats:
        if fmt == "fp32":
            continue
        words = tb.format_words(fmt)
        await tb.case(func, words, ones, zeros, _rows(tb.rng, len(words)), in_format=fmt)
        x = tb.lane_rows(function_inputs(tb.params.functions[func], tb.nprng, 24))
        for rounding in roundings(tb.params.rng):
            await tb.case(func, x, ones, zeros, _rows(tb.rng, len(x)), out_format=fmt,
                          rounding=rounding)
    dut._log.info("directed: %d cases passed", tb.cases)


@cocotb.test()
async def random_streams(dut):
    tb = ActivationTB.from_config(dut, params_from_json)
    await tb.bench.start()
    lanes = tb.params.lanes
    rng = tb.rng
    formats = tb.params.formats
    for _ in range(10):
        func = rng.randrange(len(tb.params.functions))
        n = rng.randint(1, 20)
        spec = tb.params.functions[func]
        in_format, out_format = rng.choice(formats), rng.choice(formats)
        if in_format == "fp32":
            data = tb.nprng.choice(function_inputs(spec, tb.nprng, 8), (n, lanes))
        else:  # every bit pattern of the narrow format: all its binades and specials
            data = tb.random_words(in_format, (n, lanes))
        scale = tb.nprng.choice(np.float32([1.0, 0.5, -1.0, 1.25, 3.0]).view(np.uint32), lanes)
        bias = tb.nprng.choice(np.float32([-0.0, 0.25, -0.5]).view(np.uint32), lanes)
        idle, stall = rng.choice(PAUSES)
        await tb.case(func, data, scale, bias, _rows(rng, n), idle, stall, in_format,
                      out_format, rng.choice(roundings(tb.params.rng)))
    dut._log.info("random_streams: %d cases passed", tb.cases)


def params_to_json(params: ActivationParams) -> dict:
    return {"lanes": params.lanes, "formats": list(params.formats), "rng": params.rng,
            "seed": params.seed,
            "functions": [{f: getattr(spec, f) for f in spec.__dataclass_fields__}
                          for spec in params.functions]}


def params_from_json(cfg: dict) -> ActivationParams:
    return ActivationParams(lanes=cfg["lanes"], formats=tuple(cfg["formats"]), rng=cfg["rng"],
                            seed=cfg["seed"],
                            functions=tuple(FunctionSpec(**f) for f in cfg["functions"]))


def simulate(params: ActivationParams, sim: str, seed: int | None = None) -> RunResult:
    """Run the activation engine's full cocotb testbench for ``params`` on ``sim``."""
    return simulate_engine(stored_verilog(engine_verilog, params), "activation",
                           "sim.tb.activation", sim, params_to_json(params), seed)


def engine_verilog(params: ActivationParams) -> str:
    """The activation engine's Verilog as the bench runs it (its lanes as instances)."""
    return emit_verilog(Activation(params, lane_instances=True), "activation")
