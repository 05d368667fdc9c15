"""Seeded random programs for the NeuronCore co-simulation, built only of what the core RTL
runs and ordered by semaphores so that no two streams race.

:func:`random_program` draws a sequence of operations on a few SBUF slots and PSUM banks:
DMA loads from HBM (some indirect, the rows in reverse), element-wise operations
(``TensorTensor`` on inputs of one type or two), copies and memsets on every engine that
runs them (vector, GpSimd, and the scalar engine's
TensorScalar, of one operation or two, TensorCopy and TensorCopyDynamic, its source moved
by a place read at run time), the vector engine's reductions,
transposes, shuffles (partitions moved within quadrants, some kept), range selects (from
NeuronCore-v3 on), Max8, FindIndex8, MatchReplace8, numbers drawn from the lanes'
generators (``Random``) and dropouts (``Dropout``, on a chip with generators), and scans
(``TensorTensorScan``, either operation's operands swapped, from an immediate or a
per-partition column), GpSimd's iotas and sequence bounds, the scalar engine's activations
(with a bias column and a running sum), the tensor engine's load-and-multiply pairs (with
accumulation), and DMA stores back to HBM (some of fp32, bf16 and fp16 adding to what it
holds).
Slots hold fp32, bf16, fp16, fp8_e4m3fn, tf32 and int8 (fp8_e4m3 loaded for the tensor
engine). On a chip with stochastic rounding, some of the element-wise operations, copies,
scans and activations round their results stochastically.
Each operation waits for the last writer of every slot it touches and, before it writes a
slot, for every reader since; the streams otherwise run concurrently. A draw the core
simulator rejects never reaches the RTL: :func:`random_program` draws again from the next
seed.
"""

from __future__ import annotations

import dataclasses
import random

from hdl.core.isa import (
    DMA_ADD_DTYPES,
    DTYPES,
    SHUFFLE_KEEP,
    SHUFFLE_LANES,
    Activation,
    AffineSelect,
    DmaCompute,
    DmaCopy,
    Dropout,
    FindIndex8,
    Iota,
    LoadStationary,
    MatchReplace8,
    Max8,
    Memset,
    MultiplyMoving,
    NonzeroWithCount,
    Random,
    RangeSelect,
    SequenceBounds,
    StreamShuffle,
    TensorCopy,
    TensorCopyDynamic,
    TensorReduce,
    TensorScalar,
    TensorTensor,
    TensorTensorScan,
    Transpose,
)
from hdl.core.params import CoreParams
from hdl.vector.ops import Reduce, VectorOp
from kernels.builder import Builder, Event
from sim.core import Core, ProgramError
from sim.core.program import Program

__all__ = ["draw", "random_program"]

#: Element operations of its ``TensorTensor`` and ``TensorScalar`` instructions.
_OPS = (VectorOp.ADD, VectorOp.SUBTRACT, VectorOp.MULTIPLY, VectorOp.MAX, VectorOp.MIN,
        VectorOp.GREATER, VectorOp.LESS_EQUAL, VectorOp.IS_EQUAL, VectorOp.LOGICAL_AND,
        VectorOp.LOGICAL_XOR)
#: An affine select's comparisons with 0.
_COMPARISONS = (VectorOp.IS_EQUAL, VectorOp.NOT_EQUAL, VectorOp.LESS, VectorOp.LESS_EQUAL,
                VectorOp.GREATER, VectorOp.GREATER_EQUAL)
_TYPES = ("fp32", "bf16", "fp16")
#: The other types its slots take, loaded and written (not in reach of every operation: fp8
#: is loaded only, for the tensor engine; int8 is never multiplied there)
_OTHER_TYPES = ("fp8_e4m3fn", "tf32", "int8")
_SIZE = {"uint32": 4, "fp32": 4, "bf16": 2, "fp16": 2, "fp8_e4m3": 1, "fp8_e4m3fn": 1,
         "tf32": 4, "int8": 1}
_SLOTS = 6


class _Plan:
    """Slots with their last writer and readers since, and the events that order them."""

    def __init__(self, b: Builder, rng: random.Random, free: int):
        self.b, self.rng, self.free = b, rng, free
        p = b.params
        self.slot_bytes = 4 * free
        self.slots = [b.sbuf(self.slot_bytes, f"slot{i}") for i in range(_SLOTS)]
        self.cols = b.sbuf(4 * _SLOTS, "columns")  # one fp32 per partition each
        self.places = b.sbuf(16, "places")  # TensorCopyDynamic's offsets: int32 0 .. 3
        self.reverse = b.sbuf(4, "reverse")  # indirect loads' index: p - 1 - partition
        self.banks = b.psum_banks(2, "psum")
        # per resource: (last writer event, reader events since)
        self.state: dict[tuple, tuple[Event | None, list[Event]]] = {}
        self.types: dict[tuple, tuple[str, int]] = {}  # SBUF slot -> (dtype, elements)
        self.p = p.partitions

    def touch(self, stream: str, reads: list[tuple], writes: list[tuple], emit) -> None:
        """Wait for what ``reads``/``writes`` need, run ``emit()`` on ``stream``, record."""
        waits: list[Event] = []
        for key in reads + writes:
            writer, readers = self.state.get(key, (None, []))
            if writer is not None:
                waits.append(writer)
            if key in writes:
                waits.extend(readers)
        self.b.wait(stream, *dict.fromkeys(waits))
        emit()
        ev = self.b.signal(stream)
        for key in reads:
            writer, readers = self.state.get(key, (None, []))
            self.state[key] = (writer, readers + [ev])
        for key in writes:
            self.state[key] = (ev, [])


def draw(b: Builder, seed: int, steps: int = 14) -> None:
    """Build into ``b`` one random program of about ``steps`` operations drawn from
    ``seed`` (not yet vetted)."""
    rng = random.Random(seed)
    params = b.params
    p = params.partitions
    free = min(16, params.moving_max)
    plan = _Plan(b, rng, free)
    tile = Builder.tile
    loaded = _TYPES + ("fp8_e4m3",) + _OTHER_TYPES
    hbm_in = {dt: b.hbm(f"in_{dt}", (p, free), dt) for dt in loaded}
    queues = [f"dma{q}" for q in range(params.dma_queues)]

    def slot_ap(i: int, dtype: str, n: int, parts: int = p, stride: int = 1, at: int = 0):
        return tile("sbuf", dtype, plan.slots[i] + at * _SIZE[dtype], parts,
                    ((n, stride),))

    def filled() -> list[int]:
        return [i for i in range(_SLOTS) if ("s", i) in plan.types]

    def places():
        """The int32 places 0 .. 3 in SBUF (GpSimd's Iota writes them, the first time)."""
        if ("o",) not in plan.state:
            plan.touch("gpsimd", [], [("o",)], lambda: b.emit("gpsimd", Iota(
                dst=tile("sbuf", "int32", plan.places, 1, ((4, 1),)), step=1)))

    def load(i: int, dtype: str) -> None:
        """A slot loaded from HBM; a fifth of the loads indirect, the rows in reverse (an
        int32 index from GpSimd's Iota, p - 1 - partition), and a tenth from columns 0 .. 3
        on of a wider tensor, the place read at run time (one index for every partition)."""
        n = free
        plan.types[("s", i)] = (dtype, n)
        q = rng.choice(queues)
        reads, index = [], {}
        draw = rng.random()
        if draw >= 0.9:
            places()
            wide = b.hbm(f"wide{i}_{len(b.program.tensors)}", (p, n + 3), dtype)
            at = tile("sbuf", "int32", plan.places + 4 * rng.randrange(4), 1, ((1, 1),))
            plan.touch(q, [("o",)], [("s", i)],
                       lambda: b.emit(q, DmaCopy(
                           dst=slot_ap(i, dtype, n), src=wide.ap((0, p), (0, n)), index=at,
                           rows=4, index_stride=DTYPES[dtype][1])))
            return
        if draw < 0.2:
            if ("r",) not in plan.state:
                plan.touch("gpsimd", [], [("r",)], lambda: b.emit("gpsimd", Iota(
                    dst=tile("sbuf", "int32", plan.reverse, p, ((1, 1),)), base=p - 1,
                    pstep=-1, step=0)))
            reads = [("r",)]
            index = {"index": tile("sbuf", "int32", plan.reverse, p, ((1, 1),)), "rows": p}
        plan.touch(q, reads, [("s", i)],
                   lambda: b.emit(q, DmaCopy(dst=slot_ap(i, dtype, n),
                                             src=hbm_in[dtype].ap((0, p)), **index)))

    def dynamic_copy(a: int, a_t: str, n: int, dst: int, out_t: str):
        """A TensorCopyDynamic of half of slot ``a``'s ``n`` elements, moved at run time
        forward or backward by the int32 place 0 .. 3 that it reads (:func:`places`); the
        instruction and its elements."""
        places()
        half = n // 2
        step, v = (n - half) // 3, rng.randrange(4)
        back = rng.random() < 0.5
        return TensorCopyDynamic(
            dst=slot_ap(dst, out_t, half), src=slot_ap(a, a_t, half, at=n - half if back
                                                       else 0),
            offset=tile("sbuf", "int32", plan.places + 4 * v, 1, ((1, 1),)),
            stride=-step if back else step, count=4), half

    for i in range(3):
        load(i, rng.choice(loaded))
    stores = 0
    for _ in range(steps):
        have = [i for i in filled() if plan.types[("s", i)][0] != "fp8_e4m3"]
        kind = rng.choice(("tt", "ts", "ts", "reduce", "copy", "memset", "iota", "act", "act",
                           "mm", "mm", "load", "store", "scan", "transpose", "shuffle",
                           "rselect", "max8", "find8", "replace8", "bounds", "draw",
                           "nonzero"))
        dst = rng.randrange(_SLOTS)
        out_t = rng.choice(_TYPES + _OTHER_TYPES)
        if kind == "load":
            load(dst, rng.choice(loaded))
        elif kind == "store" and have:
            i = rng.choice(have)
            dtype, n = plan.types[("s", i)]
            # into HBM of its own type, or converted through fp32 into another
            into = dtype if rng.random() < 0.7 else rng.choice(_TYPES + ("int32",))
            t = b.hbm(f"out{stores}", (p, n), into)
            stores += 1
            q = rng.choice(queues)
            # added to what HBM holds, where a DMA adds into the type; or a fifth of the
            # time summed with another slot of as many elements (DmaCompute)
            add = into in DMA_ADD_DTYPES and rng.random() < 0.7
            other = [j for j in have if j != i and plan.types[("s", j)][1] == n]
            if other and rng.random() < 0.2:
                j = rng.choice(other)
                ins = DmaCompute(dst=t.ap((0, p)), a=slot_ap(i, dtype, n),
                                 b=slot_ap(j, plan.types[("s", j)][0], n))
                plan.touch(q, [("s", i), ("s", j)], [],
                           lambda ins=ins, q=q: b.emit(q, ins))
                continue
            plan.touch(q, [("s", i)], [],
                       lambda i=i, dtype=dtype, n=n, t=t, q=q, add=add: b.emit(
                           q, DmaCopy(dst=t.ap((0, p)), src=slot_ap(i, dtype, n), add=add)))
        elif kind in ("tt", "ts", "copy", "act", "scan") and have:
            a = rng.choice(have)
            a_t, n = plan.types[("s", a)]
            if kind in ("tt", "scan"):  # b of any type, a's or another
                c = rng.choice(have)
                c_t, c_n = plan.types[("s", c)]
                n = min(n, c_n)
                reads_from = (a, c)
            else:
                reads_from = (a,)
            if dst in reads_from:  # no operation writes what it reads
                dst = rng.choice([i for i in range(_SLOTS) if i not in reads_from])
            strided = rng.random() < 0.3 and n >= 4
            src_ap = slot_ap(a, a_t, n // 2, stride=2) if strided else slot_ap(a, a_t, n)
            m = n // 2 if strided else n
            dst_ap = slot_ap(dst, out_t, m)
            reads, writes = [("s", a)], [("s", dst)]
            if kind == "tt":
                b_ap = slot_ap(c, c_t, n // 2, stride=2) if strided else slot_ap(c, c_t, n)
                ins = TensorTensor(dst=dst_ap, a=src_ap, b=b_ap, op=rng.choice(_OPS))
                reads.append(("s", c))
                stream = rng.choice(("vector", "gpsimd"))
            elif kind == "scan":
                b_ap = slot_ap(c, c_t, n // 2, stride=2) if strided else slot_ap(c, c_t, n)
                start: dict = {"imm": rng.choice((0.0, 1.0, -0.5))}
                if rng.random() < 0.5:  # the running value from a per-partition column
                    col = rng.randrange(_SLOTS)
                    start = {"initial": b.column(plan.cols + 4 * col, p)}
                    reads.append(("c", col))
                ins = TensorTensorScan(dst=dst_ap, a=src_ap, b=b_ap, op0=rng.choice(_OPS),
                                       op1=rng.choice(_OPS), reverse0=rng.random() < 0.5,
                                       reverse1=rng.random() < 0.5, **start)
                reads.append(("s", c))
                stream = "vector"
            elif kind == "ts":
                stream = rng.choice(("vector", "scalar", "gpsimd"))
                fields = {"op0": rng.choice(_OPS)}
                if rng.random() < 0.5:  # a second operation
                    fields["op1"] = rng.choice(_OPS)
                for k in range(2 if "op1" in fields else 1):
                    if rng.random() < 0.4:  # a per-partition operand, such as a reduction's
                        col = rng.randrange(_SLOTS)
                        fields[f"operand{k}"] = b.column(plan.cols + 4 * col, p)
                        reads.append(("c", col))
                    else:
                        fields[f"imm{k}"] = rng.choice((0.5, -1.25, 3.0, 1.0 / 3.0, 0.0))
                ins = TensorScalar(dst=dst_ap, src=src_ap, **fields)
            elif kind == "copy" and rng.random() < 0.3:  # from a place read at run time
                ins, m = dynamic_copy(a, a_t, n, dst, out_t)
                reads.append(("o",))
                stream = rng.choice(("vector", "scalar", "gpsimd"))
            elif kind == "copy" and rng.random() < 0.4:  # GpSimd's affine select
                ins = AffineSelect(dst=dst_ap, base=rng.randint(-20, 20),
                                   pstep=rng.choice((0, 1, -1, 3)),
                                   step=rng.choice((0, 1, -1, -2)), src=src_ap,
                                   op=rng.choice(_COMPARISONS),
                                   fill=rng.choice((0.0, -3.5, float("-inf"))))
                stream = "gpsimd"
            elif kind == "copy":
                ins = TensorCopy(dst=dst_ap, src=src_ap)
                stream = rng.choice(("vector", "scalar", "gpsimd"))
            else:
                col = rng.randrange(_SLOTS)
                bias = b.column(plan.cols + 4 * col, p) if rng.random() < 0.5 else None
                red_col = rng.choice([k for k in range(_SLOTS) if k != col])
                red = b.column(plan.cols + 4 * red_col, p) if rng.random() < 0.5 else None
                func = rng.randrange(len(params.functions))
                ins = Activation(dst=dst_ap, src=src_ap, func=func, bias=bias, reduce_dst=red,
                                 scale=rng.choice((1.0, 0.5, -1.5)))
                stream = "scalar"
                if bias is not None:
                    reads.append(("c", col))
                if red is not None:
                    writes.append(("c", red_col))
            if params.rng is not None and rng.random() < 0.3 and hasattr(ins, "rounding"):
                ins = dataclasses.replace(ins, rounding="stochastic")
            plan.types[("s", dst)] = (out_t, m)
            plan.touch(stream, reads, writes, lambda s=stream, ins=ins: b.emit(s, ins))
        elif kind == "reduce" and have:
            a = rng.choice(have)
            a_t, n = plan.types[("s", a)]
            col = rng.randrange(_SLOTS)
            ins = TensorReduce(dst=b.column(plan.cols + 4 * col, p), src=slot_ap(a, a_t, n),
                               reduce=rng.choice((Reduce.SUM, Reduce.MAX)),
                               op=rng.choice((VectorOp.COPY, VectorOp.SQUARE)))
            plan.touch("vector", [("s", a)], [("c", col)], lambda ins=ins: b.emit("vector", ins))
        elif kind == "transpose" and have and min(free, params.vector_transpose) == p:
            # the vector engine's: a square tile of every partition, so that slots keep them
            a = rng.choice(have)
            a_t, n = plan.types[("s", a)]
            if n == p and dst != a:
                plan.types[("s", dst)] = (a_t, p)
                ins = Transpose(dst=slot_ap(dst, a_t, p), src=slot_ap(a, a_t, p))
                plan.touch("vector", [("s", a)], [("s", dst)],
                           lambda ins=ins: b.emit("vector", ins))
        elif kind == "shuffle" and have:
            # partitions moved within each quadrant; some kept where dst holds a's type
            a = rng.choice(have)
            a_t, n = plan.types[("s", a)]
            if dst == a:
                continue
            same = plan.types.get(("s", dst)) == (a_t, n)
            lanes = min(SHUFFLE_LANES, p)
            entries = tuple(SHUFFLE_KEEP if j >= p or (same and rng.random() < 0.2)
                            else rng.randrange(lanes) for j in range(SHUFFLE_LANES))
            plan.types[("s", dst)] = (a_t, n)
            ins = StreamShuffle(dst=slot_ap(dst, a_t, n), src=slot_ap(a, a_t, n),
                                shuffle=entries)
            plan.touch("vector", [("s", a)], [("s", dst)], lambda ins=ins: b.emit("vector", ins))
        elif kind == "rselect" and have and params.generation >= 3:
            # kept where its place holds against two per-partition columns, else the fill
            a = rng.choice(have)
            a_t, n = plan.types[("s", a)]
            if dst == a:
                continue
            c0, c1 = rng.randrange(_SLOTS), rng.randrange(_SLOTS)
            plan.types[("s", dst)] = (out_t, n)
            comparisons = (VectorOp.IS_EQUAL, VectorOp.LESS, VectorOp.LESS_EQUAL,
                           VectorOp.GREATER, VectorOp.GREATER_EQUAL)
            ins = RangeSelect(dst=slot_ap(dst, out_t, n), src=slot_ap(a, a_t, n),
                              bound0=b.column(plan.cols + 4 * c0, p),
                              bound1=b.column(plan.cols + 4 * c1, p),
                              op0=rng.choice(comparisons), op1=rng.choice(comparisons),
                              start=rng.randint(-n, n), fill=rng.uniform(-3, 3))
            plan.touch("vector", [("s", a), ("c", c0), ("c", c1)], [("s", dst)],
                       lambda ins=ins: b.emit("vector", ins))
        elif kind == "max8" and have:
            # each partition's 8 largest, largest first
            a = rng.choice(have)
            a_t, n = plan.types[("s", a)]
            if dst == a or n < 8:
                continue
            plan.types[("s", dst)] = (out_t, 8)
            ins = Max8(dst=slot_ap(dst, out_t, 8), src=slot_ap(a, a_t, n))
            plan.touch("vector", [("s", a)], [("s", dst)], lambda ins=ins: b.emit("vector", ins))
        elif kind in ("find8", "replace8") and have:
            # where each of 8 values first occurs in a slot (the slot's own last 8: found),
            # MatchReplace8 replacing them in a copy (its indices to a slot, or none)
            a = rng.choice(have)
            a_t, n = plan.types[("s", a)]
            others = [i for i in range(_SLOTS) if i != a]
            if n < 8 or len(others) < 2:
                continue
            dst, at = rng.sample(others, 2)
            vals = slot_ap(a, a_t, 8, at=n - 8)
            if kind == "find8":
                ins = FindIndex8(dst=slot_ap(dst, "uint32", 8), data=slot_ap(a, a_t, n),
                                 vals=vals)
                plan.types[("s", dst)] = ("uint32", 8)
                writes = [("s", dst)]
            else:
                idx = slot_ap(at, "uint32", 8) if rng.random() < 0.7 else None
                ins = MatchReplace8(dst=slot_ap(dst, out_t, n), data=slot_ap(a, a_t, n),
                                    vals=vals, imm=rng.uniform(-3, 3), dst_idx=idx)
                plan.types[("s", dst)] = (out_t, n)
                writes = [("s", dst)]
                if idx is not None:
                    plan.types[("s", at)] = ("uint32", 8)
                    writes.append(("s", at))
            plan.touch("vector", [("s", a)], writes, lambda ins=ins: b.emit("vector", ins))
        elif kind == "bounds" and have:
            # GpSimd's SequenceBounds of a slot's first partition (fp32 or int32 ids) into
            # an fp32 slot's first, never written or holding fp32 throughout
            ids = [i for i in have if plan.types[("s", i)][0] in ("fp32", "int32")]
            if not ids:
                continue
            a = rng.choice(ids)
            a_t, n = plan.types[("s", a)]
            n = min(n, free // 2)
            into = [i for i in range(_SLOTS) if i != a and (
                plan.types.get(("s", i)) is None or (plan.types[("s", i)][0] == "fp32"
                                                     and plan.types[("s", i)][1] >= 2 * n))]
            if not into:
                continue
            dst = rng.choice(into)
            plan.types[("s", dst)] = plan.types.get(("s", dst)) or ("fp32", 2 * n)
            ins = SequenceBounds(dst=slot_ap(dst, "fp32", 2 * n, parts=1),
                                 src=slot_ap(a, a_t, n, parts=1))
            plan.touch("gpsimd", [("s", a)], [("s", dst)], lambda ins=ins: b.emit("gpsimd", ins))
        elif kind == "nonzero" and have and params.generation >= 3:
            # GpSimd's NonzeroWithCount of an fp32 slot (its first elements) into another,
            # int32 (the first partition of each GpSimd core's 16 written), then read as the
            # uint32 the indices of the searches are
            ids = [i for i in have if plan.types[("s", i)][0] == "fp32" and i != dst]
            if not ids:
                continue
            a = rng.choice(ids)
            n = min(plan.types[("s", a)][1], free - 1)
            plan.types[("s", dst)] = ("uint32", n + 1)
            ins = NonzeroWithCount(dst=tile("sbuf", "int32", plan.slots[dst], p,
                                            ((n + 1, 1),)), src=slot_ap(a, "fp32", n),
                                   offset=rng.randrange(-8, 8), padding=rng.randrange(-9, 9))
            plan.touch("gpsimd", [("s", a), ("s", dst)], [("s", dst)],
                       lambda ins=ins: b.emit("gpsimd", ins))
        elif kind == "draw" and params.rng is not None:
            # numbers in [0, 1) into a slot (Random), or a slot's dropout (at an immediate
            # probability or a per-partition column's) into another, strided or not
            if have and rng.random() < 0.6:
                a = rng.choice(have)
                a_t, n = plan.types[("s", a)]
                if dst == a:
                    continue
                strided = rng.random() < 0.3 and n >= 4
                m = n // 2 if strided else n
                src_ap = slot_ap(a, a_t, m, stride=2) if strided else slot_ap(a, a_t, n)
                reads = [("s", a)]
                if rng.random() < 0.5:
                    col = rng.randrange(_SLOTS)
                    prob = {"prob": b.column(plan.cols + 4 * col, p)}
                    reads.append(("c", col))
                else:
                    prob = {"imm": rng.choice((0.0, 0.25, 0.5, 0.9))}
                ins = Dropout(dst=slot_ap(dst, out_t, m), src=src_ap, **prob)
            else:
                reads, m = [], rng.randint(1, free)
                ins = Random(dst=slot_ap(dst, out_t, m))
            plan.types[("s", dst)] = (out_t, m)
            plan.touch("vector", reads, [("s", dst)], lambda ins=ins: b.emit("vector", ins))
        elif kind == "memset":
            plan.types[("s", dst)] = (out_t, free)
            ins = Memset(dst=slot_ap(dst, out_t, free), value=rng.uniform(-3, 3))
            stream = rng.choice(("vector", "gpsimd"))
            plan.touch(stream, [], [("s", dst)], lambda s=stream, ins=ins: b.emit(s, ins))
        elif kind == "iota":
            plan.types[("s", dst)] = (out_t, free)
            ins = Iota(dst=slot_ap(dst, out_t, free), base=rng.randint(-2**31, 2**31 - 1),
                       pstep=rng.choice((0, 1, -3, rng.randint(-2**31, 2**31 - 1))),
                       step=rng.choice((1, 2, -1, rng.randint(-2**31, 2**31 - 1))))
            plan.touch("gpsimd", [], [("s", dst)], lambda ins=ins: b.emit("gpsimd", ins))
        elif kind == "mm":
            usable = [i for i in filled()
                      if plan.types[("s", i)][0] in params.formats
                      and plan.types[("s", i)][0] != "int8"]
            if not usable:
                continue
            w = rng.choice(usable)
            w_t, w_n = plan.types[("s", w)]
            movers = [i for i in usable if plan.types[("s", i)][0] == w_t]
            x = rng.choice(movers)
            k_max = min(p, params.rows)
            k = rng.randint(1, k_max)
            m = rng.randint(1, min(params.cols, w_n))
            n = rng.randint(1, min(plan.types[("s", x)][1], params.moving_max))
            bank = rng.randrange(2)
            acc = ("b", bank) in plan.types and plan.types[("b", bank)] == (m, n) \
                and rng.random() < 0.6
            plan.types[("b", bank)] = (m, n)
            load_ins = LoadStationary(src=tile("sbuf", w_t, plan.slots[w], k, ((m, 1),)))
            mul = MultiplyMoving(dst=tile("psum", "fp32", plan.banks[bank], m, ((n, 1),)),
                                 src=tile("sbuf", w_t, plan.slots[x], k, ((n, 1),)),
                                 accumulate=acc)

            def emit(load_ins=load_ins, mul=mul):
                b.emit("tensor", load_ins)
                b.emit("tensor", mul)
            plan.touch("tensor", [("s", w), ("s", x)], [("b", bank)], emit)


def random_program(params: CoreParams, seed: int) -> Program:
    """The random program of ``seed``: the first draw from ``seed`` on (:func:`draw`) that
    the core simulator accepts."""
    core = Core(params)
    for attempt in range(seed, seed + 100):
        b = Builder(params)
        draw(b, attempt)
        try:
            core.run(b.program, timing_only=True, races=True)
        except ProgramError:
            continue
        return b.program
    raise ProgramError(f"no random program from seeds {seed} .. {seed + 99} passes the "
                       f"core simulator's rules")
