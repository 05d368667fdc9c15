"""cocotb co-simulation of the NeuronCore RTL against the core simulator.

The cocotb test ``programs`` runs the programs named in the testbench parameters in one
simulation (:func:`simulate_many`), programs of :mod:`sim.tb.core_programs`; for each:

1. the core simulator (:class:`sim.core.Core`, numeric mode) checks the program and runs it;
   a program it rejects is never run on the RTL, except ``deadlock``, which both must refuse;
2. the testbench clears SBUF and PSUM (the shipped core's memories have no initial image:
   the first program's clearing is the vector engine's memset, the others' direct writes),
   loads the program's words through the host port (a stream longer than its sequencer's
   ring fed while it runs), fills the external memory
   (cocotbext-axi's ``AxiRam`` on the AXI4 port) with the same seeded inputs, starts the core
   and polls its status until it stops, the deadlock bit rises or the cycle limit passes;
3. every byte of SBUF and PSUM (their rows read from the simulator directly, one word of
   each partition also through the host port) and of the external memory must equal the
   simulator's.

The core simulated is the one `gen chip SPEC --scale sim` ships: the files of its
``neuron_core.f``, each text as written (:func:`core_verilog`).

Per-instruction cycle stamps (decode to retirement) are read back, logged beside the
simulator's cycles, and each compute instruction's must be what the simulator documents
(:func:`sim.core.rtl_cycles.rtl_cycles`: the stream rule's cycles on the vector, scalar
and GpSimd engines; :func:`timing`).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import functools
import gc
import logging
import math
import pickle
import random
import tempfile
from pathlib import Path

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, RisingEdge, Timer
from cocotbext.axi import AxiBus, AxiRam

from generators.core import TOP
from hdl.core import engines, isa, scalar, tensor
from hdl.core.core import HostMap
from hdl.core.isa import WORD_BITS, DmaCompute, DmaCopy, Memset, SemSignal, SemWait, encode
from hdl.core.params import CoreParams
from hdl.params import core_params
from kernels.builder import Builder, KernelError
from sim.core import Core, ProgramError
from sim.core.program import Program
from sim.core.rtl_cycles import rtl_cycles
from sim.tb.core_programs import build_program, must_deadlock, random_inputs, throughput_program
from sim.tb.runner import RunResult, run_verilog, tb_params
from specs.loader import load, load_document

__all__ = ["CoreTB", "check_program", "co_simulate", "core_files", "core_verilog", "rtl_refusal",
           "simulate_many"]

#: Probability that an AXI channel of the memory model pauses in a cycle (``pause``).
STALL = 0.3

#: The clock's period in the testbench, ns (rising edges at its multiples).
PERIOD_NS = 10

#: What each engine of the core RTL runs (the DMA queues: every DmaCopy, indirect and
#: adding too, and every DmaCompute).
SUPPORTED = {"tensor": tensor.supported, "vector": engines.supported,
             "scalar": scalar.supported,
             "gpsimd": functools.partial(engines.supported, kind="gpsimd")}


def rtl_refusal(program: Program, params: CoreParams) -> str | None:
    """Why the core RTL of ``params`` as built cannot run ``program`` (None: it can)."""
    if program.hbm_bytes > params.hbm_bytes:
        return (f"its external memory is {program.hbm_bytes} bytes, the core's AXI memory "
                f"{params.hbm_bytes}")
    streams = HostMap(params).streams
    for stream, code in program.streams.items():
        if stream not in streams:
            return f"stream {stream}: the core RTL has streams {', '.join(streams)}"
        for i, ins in enumerate(code):
            if isinstance(ins, SemSignal | SemWait) and ins.sem >= params.semaphores:
                return f"{stream}[{i}]: the core has semaphores 0 .. {params.semaphores - 1}"
            if isinstance(ins, SemSignal | SemWait | DmaCopy | DmaCompute):
                continue
            kind = isa.engine_kind(stream)
            formats = params.formats if kind == "tensor" else engines.ENGINE_DTYPES
            why = SUPPORTED[kind](ins, formats)
            if why:
                return f"{stream}[{i}] {type(ins).__name__}: {why}"
    return None


def words(ins) -> list[int]:
    """The instruction's word as host writes, least significant first."""
    word = int.from_bytes(encode(ins), "little")
    return [(word >> (32 * k)) & 0xFFFFFFFF for k in range(WORD_BITS // 32)]


# --- the cocotb side ------------------------------------------------------------------------

@contextlib.contextmanager
def collector_frozen():
    """Within: the objects alive on entry (the imports, the program, the simulator's
    results) are left out of the cyclic collector's passes (:func:`gc.freeze`), which the
    objects every simulated cycle makes would otherwise run over again and again; on exit
    they are returned to it."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


class CoreTB:
    """Drives a :class:`~hdl.core.core.NeuronCore`: its host port and its AXI memory."""

    def __init__(self, dut, params: CoreParams, pause: bool, seed: int):
        self.dut, self.params = dut, params
        self.map = HostMap(params)
        self.spot = random.Random(seed)
        dut.rst.value = 1  # before the memory model samples it
        dut.host__we.value = 0
        self.ram = AxiRam(AxiBus.from_prefix(dut, "m_axi_"), dut.clk, dut.rst,
                          size=params.hbm_bytes)
        for side in (self.ram.write_if, self.ram.read_if):
            # the model logs every burst at INFO (tens of thousands of lines a run, a few per
            # cent of its time); its warnings and errors still reach the log
            side.log.setLevel(logging.WARNING)
        self.channels = ([getattr(self.ram.write_if, ch)
                          for ch in ("aw_channel", "w_channel", "b_channel")]
                         + [getattr(self.ram.read_if, ch) for ch in ("ar_channel", "r_channel")])
        self.pause = pause
        self.rng = random.Random(seed)

    def start_stalls(self):
        """Random stalls on every AXI channel, each cycle paused with probability
        :data:`STALL` independently of the others (when the testbench was made with
        ``pause``)."""
        if self.pause:
            for ch in self.channels:
                cocotb.start_soon(self._stalls(ch))

    async def _stalls(self, channel):
        # The runs of a Bernoulli(STALL) sequence, one cycle at a time, are geometric: a
        # paused run ends each cycle with probability 1 - STALL, a free one with STALL. Drawn
        # a run at a time, the channel's pause changes only at the run's end.
        rng, clk = self.rng, self.dut.clk
        paused = rng.random() < STALL
        while True:
            channel.pause = paused
            end = 1 - STALL if paused else STALL
            await ClockCycles(clk, 1 + int(math.log(1 - rng.random()) / math.log(1 - end)))
            paused = not paused

    async def start_clock(self):
        cocotb.start_soon(Clock(self.dut.clk, PERIOD_NS, unit="ns").start())
        self.start_stalls()
        self.dut.host__we.value = 0
        self.dut.host__addr.value = 0
        self.dut.host__wdata.value = 0
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 2)
        self.dut.rst.value = 0

    async def reset(self):
        """Reset the core (every register; the memories keep their contents)."""
        await FallingEdge(self.dut.clk)
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 2)
        await FallingEdge(self.dut.clk)
        self.dut.rst.value = 0

    async def clear(self, memset: bool = True):
        """Zero every byte of SBUF and PSUM: with ``memset``, the vector engine's memset of
        fp32 zeros over each, run as a program of its own (which the memories' first
        clearing must be: they start undefined, as the shipped core's SRAMs); else each of
        their rows written directly in the simulator, the core idle, in no cycle of its own."""
        p = self.params
        if not memset:
            await FallingEdge(self.dut.clk)
            for name, nbytes in (("sbuf", p.sbuf_bytes), ("psum", p.psum_bytes)):
                rows = getattr(self.dut, name)
                for w in range(nbytes // 4):
                    rows[w].value = 0
            await FallingEdge(self.dut.clk)
            return
        b = Builder(p)
        for space, nbytes in (("sbuf", p.sbuf_bytes), ("psum", p.psum_bytes)):
            b.emit("vector", Memset(dst=b.tile(space, "fp32", 0, p.partitions,
                                               ((nbytes // 4, 1),)), value=0.0))
        await self.load(b.program)
        _, deadlock = await self.run(4 * (p.sbuf_bytes + p.psum_bytes))
        assert not deadlock

    async def write(self, addr: int, value: int):
        await FallingEdge(self.dut.clk)
        self.dut.host__addr.value = addr
        self.dut.host__wdata.value = value
        self.dut.host__we.value = 1
        await RisingEdge(self.dut.clk)
        await FallingEdge(self.dut.clk)
        self.dut.host__we.value = 0

    async def read(self, addr: int) -> int:
        await FallingEdge(self.dut.clk)
        self.dut.host__addr.value = addr
        await RisingEdge(self.dut.clk)
        await FallingEdge(self.dut.clk)
        return int(self.dut.host__rdata.value)

    async def load(self, program: Program):
        """Every stream's length and its first instructions, as many as its sequencer's ring
        holds, one host write per cycle; the rest of a longer stream is fed while it runs
        (:meth:`feed`)."""
        depth = self.params.instructions
        self.feeding, self.stamped, writes = {}, {}, []
        for s, name in enumerate(self.map.streams):
            code = program.streams.get(name, [])
            first = min(len(code), depth)
            writes += self._slots(s, code, 0, first)
            writes += [(self.map.length(s), len(code)), (self.map.loaded(s), first)]
            self.stamped[s] = []
            if first < len(code):
                self.feeding[s] = (code, first)
        await self.write_many(writes)

    def _slots(self, s: int, code: list, begin: int, end: int) -> list[tuple[int, int]]:
        """The host writes of instructions ``begin`` .. ``end`` of stream ``s`` into their
        slots of its ring."""
        depth = self.params.instructions
        return [(self.map.imem(s, i % depth, k), w) for i in range(begin, end)
                for k, w in enumerate(words(code[i]))]

    async def write_many(self, writes: list[tuple[int, int]]):
        """Host writes back to back, one a cycle."""
        await FallingEdge(self.dut.clk)
        for addr, value in writes:
            self.dut.host__addr.value = addr
            self.dut.host__wdata.value = value
            self.dut.host__we.value = 1
            await FallingEdge(self.dut.clk)
        self.dut.host__we.value = 0

    async def feed(self):
        """Each stream longer than its ring, once a quarter of the ring (or the rest of the
        stream) is free: the stamps of the instructions it retired, then the next
        instructions into the slots they held and the new count loaded."""
        depth = self.params.instructions
        for s, (code, loaded) in list(self.feeding.items()):
            pc = await self.read(self.map.pc(s))
            end = min(len(code), pc + depth)
            if end - loaded < min(depth // 4, len(code) - loaded):
                continue
            await self.collect(s, pc)
            await self.write_many(self._slots(s, code, loaded, end)
                                  + [(self.map.loaded(s), end)])
            if end == len(code):
                del self.feeding[s]
            else:
                self.feeding[s] = (code, end)

    async def collect(self, s: int, retired: int):
        """Read the stamps of stream ``s``'s instructions up to ``retired`` not read yet
        (their slots are then free to load again)."""
        depth, done = self.params.instructions, self.stamped[s]
        v = await self.read_many([self.map.stamp(s, i % depth, end)
                                  for i in range(len(done), retired) for end in (False, True)])
        done += zip(v[::2], v[1::2], strict=True)

    async def idle(self, cycles: int):
        """From a falling edge, let ``cycles`` rising edges pass, the inputs held: it ends
        between the last of them and the next falling edge, as ``ClockCycles(clk, cycles)``
        would, but woken once (a timer) rather than at every edge."""
        await Timer(PERIOD_NS * (cycles - 0.25), unit="ns")

    async def run(self, limit: int, poll: int = 16) -> tuple[int, bool]:
        """Start, poll every ``poll`` cycles until stopped; (cycles, deadlock). Fails past
        ``limit`` cycles. The collector is frozen meanwhile (:func:`collector_frozen`)."""
        with collector_frozen():
            return await self._run(limit, poll)

    async def _run(self, limit: int, poll: int) -> tuple[int, bool]:
        await self.write(self.map.reg(self.map.START), 1)
        while True:
            await self.idle(poll)
            status = await self.read(self.map.reg(self.map.STATUS))
            cycles = await self.read(self.map.reg(self.map.CYCLES))
            if not status & 1:
                return cycles, bool(status & 2)
            if self.feeding:
                await self.feed()
            if cycles > limit:
                state = []
                for s, name in enumerate(self.map.streams):
                    pc = await self.read(self.map.pc(s))
                    w = await self.read(self.map.waiting(s))
                    state.append(f"{name} at {pc}" + (f" waiting on S[{w >> 8}]" if w & 1
                                                      else ""))
                raise AssertionError(f"the core ran past the cycle limit {limit} without "
                                     f"stopping: {'; '.join(state)}")

    async def read_many(self, addresses: list[int]) -> list[int]:
        """Reads back to back: each cycle a new address, the previous one's data."""
        out = []
        await FallingEdge(self.dut.clk)
        for addr in addresses:
            self.dut.host__addr.value = addr
            await FallingEdge(self.dut.clk)
            out.append(int(self.dut.host__rdata.value))
        return out

    async def memory(self, name: str) -> np.ndarray:
        """Every byte of SBUF or PSUM, partitions x bytes: each row of the memory (one 32-bit
        word of every partition) read directly from the simulator, and one word of each
        partition through the host port, which must agree (a word that is not zero, where the
        partition has one)."""
        p = self.params
        nbytes = p.sbuf_bytes if name == "sbuf" else p.psum_bytes
        words = nbytes // 4
        await FallingEdge(self.dut.clk)
        rows, width = getattr(self.dut, name), 4 * p.partitions  # partition 0 lowest
        raw = b"".join(int(rows[w].value).to_bytes(width, "little") for w in range(words))
        out = np.ascontiguousarray(np.frombuffer(raw, "<u4").reshape(words, p.partitions).T)
        at = self.map.sbuf if name == "sbuf" else self.map.psum
        spots = []
        for part in range(p.partitions):  # a word the program wrote where there is one
            held = np.flatnonzero(out[part])
            spots.append((part, int(self.spot.choice(held)) if held.size
                          else self.spot.randrange(words)))
        host = await self.read_many([at(part, w) for part, w in spots])
        for (part, w), value in zip(spots, host, strict=True):
            assert value == out[part, w], (
                f"{name.upper()} partition {part} word {w}: the host port reads "
                f"{value:#010x}, the memory holds {int(out[part, w]):#010x}")
        return out.view(np.uint8).reshape(p.partitions, nbytes)

    async def stamps(self, program: Program) -> dict[str, list[tuple[int, int]]]:
        """Each stream's (decode cycle, retirement cycle) per instruction, the core stopped:
        those read while it was fed (:meth:`feed`) and the rest."""
        out = {}
        for s, name in enumerate(self.map.streams):
            await self.collect(s, len(program.streams.get(name, [])))
            out[name] = self.stamped[s]
        return out


def _first_difference(name: str, rtl: np.ndarray, sim: np.ndarray) -> str:
    idx = tuple(int(i) for i in np.argwhere(rtl != sim)[0])
    count = int(np.count_nonzero(rtl != sim))
    return f"{name}: {count} bytes differ, first at {idx}: RTL {rtl[idx]:#04x}, " \
           f"simulator {sim[idx]:#04x}"


async def co_simulate(dut, tb: CoreTB, params: CoreParams, name: str, seed: int,
                      cycle_limit: int, given: tuple[Program, np.ndarray] | None = None
                      ) -> list[str]:
    """Run the program ``name`` of ``seed`` (or the ``given`` program and the HBM image it
    starts from) on the RTL (clock running, memories clear) and on the simulator; what
    differs, one line each (none: everything matched). The RTL fails past ``cycle_limit``
    cycles more than twice the simulator's engines' summed cycles."""
    prog = build_program(params, name, seed) if given is None else given[0]
    deadlocks = given is None and must_deadlock(name)
    why = rtl_refusal(prog, params)
    if why is not None:
        return [f"the core RTL cannot run {name}: {why}"]
    hbm = np.zeros(params.hbm_bytes, dtype=np.uint8)
    inputs = random_inputs(prog, seed) if given is None else given[1]
    hbm[:inputs.size] = inputs
    sim_hbm = inputs.copy()
    try:
        result = Core(params).run(prog, hbm=sim_hbm, trace=True, seed=engines.GENERATOR_SEED)
    except ProgramError as err:
        if not (deadlocks and "deadlock" in str(err)):
            return [f"the simulator rejects it: {err}"]
        result = None
    else:
        if deadlocks:
            return ["the simulator ran a program that must deadlock"]
    tb.ram.write(0, hbm.tobytes())
    await tb.load(prog)
    # the limit holds beyond twice the engines' summed cycles, which a run cannot exceed
    # unless it hangs
    busy = 0 if result is None else sum(
        seconds * params.clock(isa.engine_kind(s)) for s, seconds in result.busy.items()
        if isa.engine_kind(s) != "dma")
    cycles, deadlock = await tb.run(cycle_limit + 2 * int(busy))
    dut._log.info(f"{name}: {cycles} cycles, deadlock {deadlock}")
    if deadlocks:
        return [] if deadlock else ["the RTL did not report the deadlock"]
    if deadlock:
        return ["the RTL reported a deadlock the simulator did not see"]
    failures = []
    for memory, sim_mem in (("sbuf", result.sbuf), ("psum", result.psum)):
        rtl_mem = await tb.memory(memory)
        if not np.array_equal(rtl_mem, sim_mem):
            failures.append(_first_difference(memory.upper(), rtl_mem, sim_mem))
    rtl_hbm = np.frombuffer(tb.ram.read(0, params.hbm_bytes), dtype=np.uint8)
    sim_full = np.zeros(params.hbm_bytes, dtype=np.uint8)
    sim_full[:sim_hbm.size] = sim_hbm
    if not np.array_equal(rtl_hbm, sim_full):
        failures.append(_first_difference("HBM", rtl_hbm, sim_full))
    stamps = await tb.stamps(prog)
    for stream, rows in stamps.items():
        for i, (begin, end) in enumerate(rows):
            ins = prog.streams[stream][i]
            dut._log.info(f"{stream}[{i}] {type(ins).__name__}: cycles {begin} .. {end}")
    for line in timing(params, prog, result, stamps):
        dut._log.info(line)
        if "UNEQUAL" in line:
            failures.append(line)
    return failures


@cocotb.test()
async def programs(dut):
    """Run every program of ``programs`` in turn on one simulation, each on the RTL and the
    simulator with every byte compared (:func:`co_simulate`): before each, the core is reset
    and its SBUF and PSUM are cleared (:meth:`CoreTB.clear`: before the first, the memories
    undefined as the shipped core's SRAMs, by a vector memset of zeros over each; before the
    others, by writing their rows directly, since the memset is the same each time). One
    failure does not stop the others."""
    cfg = tb_params()
    params = pickle.loads(base64.b64decode(cfg["params"]))
    with open(cfg["given"], "rb") as fh:
        given = pickle.load(fh)
    tb = CoreTB(dut, params, cfg["pause"], cfg["seed"])
    await tb.start_clock()
    failures = []
    for k, name in enumerate(cfg["programs"]):
        if k:
            await tb.reset()
        await tb.clear(memset=not k)
        failures += [f"{name}: {f}" for f in await co_simulate(
            dut, tb, params, name, cfg["seed"], cfg["cycle_limit"], given.get(name))]
    assert not failures, "; ".join(failures)


def timing(params: CoreParams, prog: Program, result, stamps: dict) -> list[str]:
    """Each compute instruction's cycles on the RTL (decode to retirement) beside the
    simulator's and what :func:`sim.core.rtl_cycles.rtl_cycles` says they are, one line each;
    a line holding ``UNEQUAL`` differs from it."""
    sim_cycles = {}
    for e in result.events:
        kind = isa.engine_kind(e["stream"])
        if kind == "dma":
            continue
        sim_cycles[e["stream"], e["args"]["index"]] = e["dur"] * 1e-6 * params.clock(kind)
    lines = []
    for name, rows in stamps.items():
        kind = isa.engine_kind(name)
        if kind == "dma":
            continue
        for i, (begin, end) in enumerate(rows):
            ins = prog.streams[name][i]
            if isinstance(ins, SemSignal | SemWait):
                continue
            rtl, want = end - begin, rtl_cycles(params, kind, ins)
            lines.append(f"timing {name}[{i}] {ins.MNEMONIC}: RTL {rtl} cycles, simulator "
                         f"{sim_cycles[name, i]:.0f}, want {want}"
                         + ("" if rtl == want else " UNEQUAL"))
    return lines


@cocotb.test()
async def throughput(dut):
    """Simulated cycles per wall-clock second (used by benchmarks/core_rtl.py): the program
    of :func:`throughput_program` (parameters ``instructions`` and ``n``) with the testbench
    quiet, status polled every 1024 cycles; cycles and seconds go to the JSON file
    ``report``. The memories are cleared first and the SBUF compared with the simulator's
    after, outside the timed part."""
    import json
    import time

    cfg = tb_params()
    params = pickle.loads(base64.b64decode(cfg["params"]))
    prog = throughput_program(params, cfg["instructions"], cfg["n"])
    want = Core(params).run(prog, seed=engines.GENERATOR_SEED)
    tb = CoreTB(dut, params, pause=False, seed=1)
    await tb.start_clock()
    await tb.clear()
    await tb.load(prog)
    begin = time.perf_counter()
    cycles, deadlock = await tb.run(cfg["cycle_limit"], poll=1024)
    seconds = time.perf_counter() - begin
    assert not deadlock
    rtl = await tb.memory("sbuf")
    assert np.array_equal(rtl, want.sbuf), _first_difference("SBUF", rtl, want.sbuf)
    with open(cfg["report"], "w") as fh:
        json.dump({"cycles": cycles, "seconds": seconds}, fh)


def simulate_many(spec: str, names: list[str], sim: str, seed: int | None = None,
                  pause: bool = True, cycle_limit: int = 100_000,
                  given: dict[str, tuple[Program, np.ndarray]] | None = None) -> RunResult:
    """Co-simulate the programs ``names`` in turn in one simulation (the cocotb test
    ``programs``) on the core of the chip spec ``spec`` (a name or path, as `gen chip`
    takes it) at simulation scale, as `gen chip` ships it (:func:`core_verilog`): one
    start-up of the simulator for all. A name of ``given`` is that program and the HBM image
    it starts from (as `gen nki --rtl` traces an NKI kernel), not :func:`build_program`'s."""
    if seed is None:
        seed = random.SystemRandom().randrange(2**31)
    params = core_params(load(spec), "sim")
    with tempfile.TemporaryDirectory(prefix="trngen-given-") as tmp:
        path = Path(tmp) / "programs.pickle"
        path.write_bytes(pickle.dumps(given or {}))
        cfg = {"params": base64.b64encode(pickle.dumps(params)).decode(),
               "programs": list(names), "given": str(path), "seed": seed, "pause": pause,
               "cycle_limit": cycle_limit}
        result = run_verilog(core_verilog(spec), TOP, "sim.tb.core", sim, cfg,
                             testcase="programs", seed=seed)
    return dataclasses.replace(result, name=", ".join(names))


def check_program(params: CoreParams, name: str, seed: int) -> str | None:
    """Why ``name`` is not run on the RTL (None: it is): the core simulator rejects it (a
    program that must deadlock is rejected for its deadlock alone), or the RTL cannot run
    it (:func:`rtl_refusal`)."""
    try:
        prog = build_program(params, name, seed)
    except KernelError as err:
        return f"{name}: {err}"
    try:
        Core(params).run(prog, timing_only=True)
    except ProgramError as err:
        if not (must_deadlock(name) and "deadlock" in str(err)):
            return f"{name}: the core simulator rejects it: {err}"
    else:
        if must_deadlock(name):
            return f"{name}: the core simulator runs it, but it must deadlock"
    why = rtl_refusal(prog, params)
    return None if why is None else f"{name}: the core RTL cannot run it: {why}"


def core_files(spec: str) -> dict[str, str]:
    """The files the core's file list ``neuron_core.f`` names, file name -> text, in its
    order (compile order, the core's own module last), as `gen chip SPEC --scale sim` writes
    them (:func:`generators.chip.generate_chip`, whose store of emissions keeps them)."""
    from generators.chip import generate_chip  # not in the simulator's process

    with tempfile.TemporaryDirectory(prefix="trngen-core-") as out:
        generate_chip(load_document(spec), Path(out), "sim")
        rtl = Path(out) / "rtl"
        names = [line for line in (rtl / f"{TOP}.f").read_text().splitlines()
                 if line and not line.startswith("#")]
        return {name: (rtl / name).read_text() for name in names}


@functools.cache
def core_verilog(spec: str) -> str:
    """What the co-simulation of ``spec``'s core builds: the texts of :func:`core_files`
    one after another, each byte for byte as shipped."""
    return "".join(core_files(spec).values())
