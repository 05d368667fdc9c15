"""The NeuronCore simulator: every engine's stream on SBUF, PSUM and HBM, timed and checked.

:class:`Core` runs a :class:`~sim.core.program.Program`:

* **Rules** (:mod:`sim.core.rules`). Before anything runs, every instruction is checked
  against the documented rules [NKI2, ISA]; while it runs, every multiply against the
  stationary it reads. Deadlock (every unfinished stream waiting) is reported with the wait
  graph (:mod:`sim.core.deadlock`); races (by default in numeric mode), two streams touching
  the same bytes, one writing, with no semaphore ordering them, by vector clocks
  (:mod:`sim.core.races`). Every error is a :class:`~sim.core.rules.ProgramError` naming the
  stream, the index, the instruction's text form and the rule.
* **Timing.** An event model on the engine of :mod:`sim.core.events`: each stream issues in
  order on its engine's own clock; costs come from :mod:`sim.core.costs`. The tensor
  engine is timed by the array's sequencer in closed form
  (:class:`sim.golden.systolic_cycles.Sequencer`, pinned to the RTL-checked cycle model): each
  instruction is accepted when the array can take it, so a load runs behind the multiply
  before it and tiles at disjoint tile positions (the array's row and column tiling) multiply
  at once; its busy time counts overlapping loads and multiplies once. A
  semaphore increment becomes visible ``semaphore_latency`` after every earlier instruction
  of its stream completed; a wait resumes when the count reaches its value. DMA queues are
  in order; transfers share the core's DMA bandwidth first come, first served. Engines that
  share a memory port (the spec's ``shared_ports``: on NeuronCore-v2 vector and GpSimd on
  SBUF, vector and scalar on PSUM) take turns.
* **Data** (unless ``timing_only``, :mod:`sim.core.data`): results bit for bit through the
  unit golden models.

Against the core RTL, the data are equal byte for byte and each instruction's cycles are
those of :mod:`sim.core.rtl_cycles` (the vector, scalar and GpSimd engines': equal).
"""

from __future__ import annotations

import json
from bisect import insort
from dataclasses import dataclass, field

import numpy as np

from hdl.core import isa
from hdl.core.isa import (
    Activation,
    DmaCompute,
    Instruction,
    LoadStationary,
    MultiplyMoving,
    SemSignal,
    SemWait,
    TensorReduce,
    TensorScalar,
    TensorTensor,
    TensorTensorScan,
)
from hdl.core.params import CoreParams
from hdl.core.timing import elements_field, instruction_cycles
from hdl.vector.ops import VectorOp
from sim.golden import systolic_cycles

from . import deadlock
from .costs import dma_seconds
from .data import Data
from .events import Agenda, Resources
from .program import Program
from .races import Races
from .rules import ProgramError, Rules, fail, shares_pes

__all__ = ["Core", "Result"]


_WAIT, _SIGNAL, _LOAD, _MULTIPLY, _TRANSPOSE, _STREAM, _DMA = (
    "wait", "signal", "load", "multiply", "transpose", "stream", "dma")


@dataclass
class Result:
    """What a run produced: time, per-engine figures, work done and the trace."""

    time: float
    busy: dict[str, float]
    cycles: dict[str, float]
    instructions: dict[str, int]
    flops: float
    dma_bytes: int
    events: list[dict] = field(default_factory=list)
    #: The final SBUF and PSUM (partitions x bytes) in numeric mode, else None.
    sbuf: np.ndarray | None = None
    psum: np.ndarray | None = None

    def busy_fraction(self, stream: str) -> float:
        return self.busy[stream] / self.time if self.time else 0.0

    def trace_json(self) -> str:
        """The run as Chrome/Perfetto trace-event JSON (one track per engine and queue)."""
        names = sorted(self.busy, key=lambda s: (s.startswith("dma"), len(s), s))
        meta = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "NeuronCore"}}]
        meta += [{"name": "thread_name", "ph": "M", "pid": 0, "tid": i, "args": {"name": s}}
                 for i, s in enumerate(names)]
        meta += [{"name": "thread_sort_index", "ph": "M", "pid": 0, "tid": i,
                  "args": {"sort_index": i}} for i in range(len(names))]
        tid = {s: i for i, s in enumerate(names)}
        events = [dict(e, pid=0, tid=tid[e.pop("stream")]) for e in
                  (dict(e) for e in self.events)]
        return json.dumps({"traceEvents": meta + events, "displayTimeUnit": "ns"})

class Core:
    """One NeuronCore of ``params``; :meth:`run` executes programs on it."""

    def __init__(self, params: CoreParams):
        self.params = params
        self.rules = Rules(params)

    def check(self, program: Program) -> None:
        """Raise :class:`~sim.core.rules.ProgramError` for the first instruction that breaks a
        static rule."""
        self.rules.check(program)

    # --- costs ----------------------------------------------------------------------------
    def _stream_cost(self, kind: str, ins: Instruction) -> tuple[float, float]:
        """(cycles, flops) of a vector/scalar/GpSimd instruction."""
        cycles = instruction_cycles(self.params, kind, ins)
        src = getattr(ins, elements_field(type(ins)))  # the rule's N elements a partition
        # floating-point operations per element: scale-and-bias plus the function; one per
        # operation otherwise; copies, memsets and iota do none
        per_element = {Activation: 2, TensorTensor: 1, TensorReduce: 1, TensorTensorScan: 2,
                       TensorScalar: 1 if getattr(ins, "op1", None) == VectorOp.COPY else 2}
        return cycles, src.partitions * src.free * per_element.get(type(ins), 0)

    # --- running --------------------------------------------------------------------------
    def _plan(self, kind: str, ins: Instruction) -> tuple:
        """What the event loop needs of one instruction, costs in seconds."""
        cls = ins.__class__
        if cls is SemWait:
            return (_WAIT, ins.sem, ins.value)
        if cls is SemSignal:
            return (_SIGNAL, ins.sem, ins.count)
        if kind == "dma":
            first, *more = ins.sources if cls is DmaCompute else (ins.src,)
            latency, transfer = dma_seconds(self.params, first, ins.dst, tuple(more))
            return (_DMA, latency, transfer, sum(s.nbytes for s in (first, *more)))
        if kind == "tensor":
            pairs = 2 if getattr(ins, "double_row", False) else 1
            if cls is LoadStationary:
                fmt, k = isa.input_format(ins.src.dtype), ins.src.partitions
                return (_LOAD, (fmt, k, ins.src.free // pairs, ins.double_row),
                        self.rules.placement(ins), (ins.row, ins.col))
            if cls is MultiplyMoving:
                fmt, k = isa.input_format(ins.src.dtype), ins.src.partitions
                n = ins.src.free // pairs
                array_fmt = self.params.array_format(fmt)
                contraction = k * (isa.MX_QUAD if ins.src.dtype in isa.MX_DTYPES else pairs)
                return (_MULTIPLY, fmt, k, ins.dst.partitions, n,
                        systolic_cycles.Multiply(n, fmt=array_fmt, row=ins.row, col=ins.col),
                        (ins.row, ins.col), n * self.params.tensor.column_cycles(array_fmt),
                        contraction, ins.double_row)
            k, m = ins.src.partitions, ins.src.free
            return (_TRANSPOSE, systolic_cycles.Load(k, m), systolic_cycles.Transpose(k))
        cycles, work = self._stream_cost(kind, ins)
        spaces = {ap.space for _, ap, _ in ins.operands()}
        ports = tuple(i for i, (engines, memory) in enumerate(self.params.shared_ports)
                      if kind in engines and memory in spaces)
        return (_STREAM, cycles / self.params.clock(kind), work, ports)

    def memories(self, program: Program, hbm: np.ndarray | None = None,
                 seed: int = 0) -> Data:
        """Fresh memories for a run of ``program`` (:meth:`run`'s ``memories``)."""
        return Data(self.rules, program, hbm, seed)

    def run(self, program: Program, *, timing_only: bool = False, trace: bool = False,
            hbm: np.ndarray | None = None, seed: int = 0, races: bool | None = None,
            memories: Data | None = None) -> Result:
        """Run ``program``; ``hbm`` (uint8, ``program.hbm_bytes``) is read and updated in
        place in numeric mode. ``races`` (default: in numeric mode) checks that every two
        accesses of different streams to the same bytes, one of them a write, are ordered by
        semaphores. ``memories`` (:meth:`memories`, numeric mode) continues the SBUF, PSUM,
        HBM and generators an earlier run left, as a program run in parts does; the engines
        start idle."""
        self.check(program)
        if races is None:
            races = not timing_only
        races = Races(list(program.streams), program.streams) if races else None
        p = self.params
        if timing_only:
            data = None
        elif memories is not None:
            data = memories
            data.kinds = [isa.engine_kind(s) for s in program.streams]
        else:
            data = Data(self.rules, program, hbm, seed)
        streams = list(program.streams)
        kinds = [isa.engine_kind(s) for s in streams]
        code = [program.streams[s] for s in streams]
        plans = []
        cache: dict[int, tuple] = {}
        for kind, instructions in zip(kinds, code, strict=True):
            row = []
            for ins in instructions:
                plan = cache.get(id(ins))
                if plan is None:
                    plan = cache[id(ins)] = self._plan(kind, ins)
                row.append(plan)
            plans.append(row)
        lengths = [len(c) for c in code]
        pc = [0] * len(streams)
        now = [0.0] * len(streams)
        done = [0.0] * len(streams)
        busy = [0.0] * len(streams)
        sems: dict[int, list[float]] = {}
        waiting: dict[int, list[int]] = {}
        pending: dict[int, float] = {}  # stream -> time its satisfied wait resumes
        agenda = Agenda(len(streams))
        for i in range(len(streams)):
            if code[i]:
                agenda.wake(0.0, i)
        heap = agenda.heap
        resources = Resources()  # the shared memory ports and the DMA fabric
        tensor_clock = p.clock("tensor")
        tensor_period = 1.0 / tensor_clock
        sem_latency = p.semaphore_latency
        # The array's sequencer in closed form: each tensor instruction is offered when its
        # stream reaches it, accepted when the array can take it; tiles at disjoint tile
        # positions multiply at once. The engine is busy while a load's beats or a
        # multiply's moving columns run, overlaps counted once.
        sequencer = systolic_cycles.Sequencer(p.tensor)
        load_tile, multiply = sequencer.load, sequencer.multiply
        tiles: dict[tuple[int, int], tuple] = {}  # tile position -> (fmt, k, m)
        tensor_busy_until = 0.0
        flops = 0.0
        moved = 0
        events: list[dict] = []
        pop, wake, serve, serve_all = agenda.pop, agenda.wake, resources.serve, \
            resources.serve_all
        while (woken := pop()) is not None:
            t, s, _ = woken
            while True:  # run stream s while it is the earliest
                i = pc[s]
                plan = plans[s][i]
                op = plan[0]
                if op is _WAIT:
                    sem, value = plan[1], plan[2]
                    if s in pending:
                        del pending[s]
                        waiting[sem].remove(s)
                        if races is not None:
                            races.acquire(s, sem, value)
                    else:
                        vis = sems.get(sem, ())
                        if len(vis) >= value and vis[value - 1] <= t:
                            if races is not None:
                                races.acquire(s, sem, value)
                        else:
                            waiting.setdefault(sem, []).append(s)
                            if len(vis) >= value:
                                pending[s] = vis[value - 1]
                                wake(vis[value - 1], s)
                            break
                elif op is _SIGNAL:
                    sem = plan[1]
                    visible = max(t, done[s]) + sem_latency
                    vis = sems.setdefault(sem, [])
                    if not vis or visible >= vis[-1]:
                        vis.extend([visible] * plan[2])
                    else:
                        for _ in range(plan[2]):
                            insort(vis, visible)
                    if races is not None:
                        races.release(s, sem, visible, plan[2])
                    for w in waiting.get(sem, ()):
                        want = plans[w][pc[w]][2]
                        if len(vis) >= want:
                            resume = max(now[w], vis[want - 1])
                            if w not in pending or resume < pending[w]:
                                pending[w] = resume
                                wake(resume, w)
                else:
                    ins = code[s][i]
                    if races is not None:
                        races.access(s, i, ins)
                    if op is _MULTIPLY:
                        fmt, k, m, n = plan[1], plan[2], plan[3], plan[4]
                        tile = tiles.get(plan[6])
                        if tile is None or tile[1] != k or tile[2] != m \
                                or tile[3] != plan[9] or not self.rules.partners(tile[0], fmt):
                            self.rules.bad_multiply(streams[s], i, ins, tile)
                        accept, last = multiply(plan[5], t * tensor_clock)
                        occupied = accept + plan[7]
                        flops += 2.0 * plan[8] * m * n
                        if data is not None:
                            data.multiply(ins)
                    elif op is _LOAD:
                        box = plan[2]
                        held = tiles.get(plan[3])
                        if len(tiles) != 1 or held is None or held[4] is not box:
                            tiles = {pos: held for pos, held in tiles.items()
                                     if not shares_pes(box, held[4])}
                        tiles[plan[3]] = plan[1] + (box,)
                        accept, last = load_tile(box, t * tensor_clock)
                        occupied = last
                        if data is not None:
                            data.load(ins)
                    elif op is _STREAM:
                        cost = plan[1]
                        if plan[3]:  # engines sharing a memory port take turns
                            t = serve_all(plan[3], t, cost)
                        end = finish = t + cost
                        flops += plan[2]
                        if data is not None:
                            try:
                                data.execute(s, ins)
                            except ProgramError as e:  # located: this stream, this index
                                if e.at is not None:
                                    raise
                                fail(streams[s], i, ins, e.rule, e.detail)
                    elif op is _DMA:
                        begin = serve(_DMA, t + plan[1], plan[2])  # the core's DMA bandwidth
                        end = finish = begin + plan[2]
                        cost = end - t
                        moved += plan[3]
                        if data is not None:
                            if type(ins) is DmaCompute:
                                data.dma_compute(ins)
                            else:
                                data.dma(ins, streams[s], i)
                    else:  # _TRANSPOSE: a load of the data and the array's transpose pass
                        accept, _ = load_tile(plan[1], t * tensor_clock)
                        second, last = multiply(plan[2], accept + 1)
                        occupied = second + plan[2].n
                        tiles = {}
                        if data is not None:
                            data.transpose(ins)
                    if op is _MULTIPLY or op is _LOAD or op is _TRANSPOSE:
                        begin = accept * tensor_period
                        stop = occupied * tensor_period
                        if stop > tensor_busy_until:
                            cost = stop - (begin if begin > tensor_busy_until
                                           else tensor_busy_until)
                            tensor_busy_until = stop
                        else:
                            cost = 0.0
                        t, end, finish = begin, begin + tensor_period, last * tensor_period
                        if trace:
                            events.append({"name": ins.MNEMONIC, "ph": "X", "ts": t * 1e6,
                                           "dur": (stop - begin) * 1e6,
                                           "stream": streams[s], "args": {"index": i}})
                    elif trace:
                        events.append({"name": ins.MNEMONIC, "ph": "X", "ts": t * 1e6,
                                       "dur": cost * 1e6, "stream": streams[s],
                                       "args": {"index": i}})
                    busy[s] += cost
                    t = end
                    if finish > done[s]:
                        done[s] = finish
                pc[s] = i + 1
                now[s] = t
                if i + 1 >= lengths[s]:
                    break
                if heap and heap[0][0] < t:  # another stream is earlier
                    wake(t, s)
                    break
        blocked = [s for s in range(len(streams)) if pc[s] < lengths[s]]
        if blocked:
            deadlock.diagnose(streams, code, pc, blocked, sems)
        total = max(max(done, default=0.0), max(now, default=0.0))
        cycles = {name: b * p.clock(kind) if kind != "dma" else 0.0
                  for name, kind, b in zip(streams, kinds, busy, strict=True)}
        return Result(total, dict(zip(streams, busy, strict=True)), cycles,
                      dict(zip(streams, lengths, strict=True)), flops, moved, events,
                      data.sbuf if data else None, data.psum if data else None)
