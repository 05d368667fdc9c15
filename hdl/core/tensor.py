"""The core's tensor engine: the multi-format systolic array fed from SBUF (or PSUM) through
the access patterns of ``LoadStationary`` and ``MultiplyMoving``, its results written to PSUM.

The array is an instance of the emitted array module (:class:`hdl.tensor.structural.ArrayInstance`,
the circuit of :class:`hdl.tensor.systolic.SystolicArray`), the very module `gen chip` writes
for the tensor unit, so that the core does not elaborate its rows x cols cells again; the
PSUM accumulation's fp32 adders are instances of the scalar engine's adder module.

Per instruction: decode, hand the array its command (format code, ``k`` the source's
partitions, ``m`` or ``n`` its free size), then

* ``LoadStationary``: every cycle the next element of ``src`` (one stationary column, K x M
  tile) is read from all partitions at once; its partitions ``src.partition + r`` become the
  array's row words (with a double-rate format row ``r`` takes partitions ``2r`` and
  ``2r + 1`` in its low two bytes); ``beat_columns`` columns make one beat. The instruction
  retires when the array has taken the last beat.
* ``MultiplyMoving``: likewise one moving column per cycle into the array; each row the
  array puts out (``cols`` column sums, moving column ``j``) is written to ``dst``'s element
  ``j`` in partitions ``dst.partition + c`` for ``c < m``: the array overwrites its own PSUM
  bank, and with ``accumulate`` the engine reads the core's PSUM word first and writes
  ``add32(psum, sum)`` (an int32 sum for integer formats), which is the golden model's
  accumulation (:func:`sim.golden.systolic.matmul`). One result row per cycle: its PSUM
  read with the row, the write the cycle after.

Tile positions (``row``, ``col`` of ``LoadStationary``) change no data: the array is used
whole. What this datapath runs (:func:`supported` says why not otherwise): ``LoadStationary``
and ``MultiplyMoving`` of the array's formats with round-to-nearest-even, no ``Transpose``.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, wiring

from hdl.core.access import AP_LAYOUT, SPACE, ApWalker, dtype_shift
from hdl.core.engines import engine_ports, read_step, rotate, unrotate
from hdl.core.isa import (
    DTYPES,
    MX_DTYPES,
    WORD_BITS,
    Instruction,
    LoadStationary,
    MultiplyMoving,
    field_positions,
)
from hdl.numerics.fpu import FpAdd32
from hdl.tensor.structural import UNIT_TOP, ArrayInstance
from hdl.tensor.systolic import Op
from hdl.vector.activation import FP_MODULES
from hdl.vector.lanes import add_lane, lane_verilog

__all__ = ["TENSOR_OPS", "TensorEngine", "supported"]

TENSOR_OPS = (LoadStationary, MultiplyMoving)


def supported(ins: Instruction, formats: tuple[str, ...]) -> str | None:
    """Why the core's tensor engine, whose array takes ``formats``, cannot run ``ins``
    (None: it can)."""
    if not isinstance(ins, TENSOR_OPS):
        return f"the tensor engine runs {', '.join(c.__name__ for c in TENSOR_OPS)}"
    if ins.src.dtype in _NOT_RUN:
        return f"src must not be {ins.src.dtype}: {_NOT_RUN[ins.src.dtype]}"
    if ins.src.dtype not in formats or ins.src.dtype not in DTYPES:
        usable = [f for f in formats if f in DTYPES and f not in _NOT_RUN]
        return f"src must be one of {', '.join(usable)}, not {ins.src.dtype}"
    return None


#: Element types of the instruction set the core's tensor engine does not run, and why.
_NOT_RUN = {"tf32": "the engine passes an operand's low bits to the array, and a tf32 "
                    "word holds its code in the top 19",
            **{t: "the engine reads no scale operand for the array's MX formats"
               for t in MX_DTYPES}}


class TensorEngine(wiring.Component):
    """The tensor engine of a core of ``partitions`` partitions with the array of
    ``array`` (:class:`~hdl.tensor.params.SystolicParams`), whose formats are the core's
    ``formats`` in the same order (the instruction set's names); ``words`` is the depth of
    the deeper of SBUF and PSUM in 32-bit words."""

    def __init__(self, partitions: int, array, formats: tuple[str, ...], words: int):
        if array.cols > partitions or array.rows > partitions:
            raise ValueError(f"the array ({array.rows} x {array.cols}) must fit the core's "
                             f"{partitions} partitions")
        if len(formats) != len(array.formats):
            raise ValueError(f"formats must name the array's {len(array.formats)} formats, "
                             f"not {formats!r}")
        self.partitions, self.array, self.formats = partitions, array, formats
        n = partitions
        super().__init__(engine_ports(("r", "q"), n, words))
        self.unit = ArrayInstance(array, UNIT_TOP)

    def verilog_dependencies(self) -> list[str]:
        """The array's modules and, for a float array, the fp32 adder of the PSUM
        accumulation (the scalar engine's module: one definition in the core)."""
        texts = self.unit.verilog_dependencies()
        if self.array.has_float:
            texts.append(lane_verilog(FpAdd32(), FP_MODULES["add"], no_inline=False))
        return texts

    def elaborate(self, platform):
        m = Module()
        n, a = self.partitions, self.array
        chunk = min(32, n)
        m.submodules.array = array = self.unit
        word = Signal(WORD_BITS)
        opcode = word[:8]
        is_load = opcode == LoadStationary.OPCODE

        def field(cls, name):
            pos, bits, _ = field_positions(cls)[name]
            return data.View(AP_LAYOUT, word[pos:pos + bits])

        src = Signal(AP_LAYOUT)
        dst = field(MultiplyMoving, "dst")
        accumulate = word[field_positions(MultiplyMoving)["accumulate"][0]]
        m.d.comb += src.eq(Mux(is_load, field(LoadStationary, "src").as_value(),
                               field(MultiplyMoving, "src").as_value()))

        # the source's format: its code in the array, double rate, integer
        code, double, integer = 0, 0, 0
        for index, name in enumerate(self.formats):
            if name not in DTYPES:
                continue
            hit = src.dtype == DTYPES[name][0]
            code = Mux(hit, index, code)
            double = Mux(hit, int(a.is_double(a.formats[index])), double)
            integer = Mux(hit, int(a.is_int(a.formats[index])), integer)
        free = 1
        for i in range(3):
            size = getattr(src, f"n{i}")
            free = free * Mux(size == 0, 1, size)

        cmd = array.cmd.payload
        m.d.comb += [cmd.op.eq(Mux(is_load, Op.LOAD, Op.MULTIPLY)), cmd.fmt.eq(code),
                     cmd.k.eq(src.partitions), cmd.m.eq(free), cmd.n.eq(free),
                     cmd.accumulate.eq(0)]
        if a.ways > 1:  # the whole array: the tile at position (0, 0) of every group
            m.d.comb += [cmd.row.eq(0), cmd.col.eq(0), cmd.rows.eq(a.ways),
                         cmd.cols.eq(a.ways)]

        m.submodules.ws = ws = ApWalker()
        m.submodules.wd = wd = ApWalker()
        start = Signal()
        m.d.comb += [ws.ap.eq(src), wd.ap.eq(dst), ws.start.eq(start), wd.start.eq(start)]

        # the read side: one column of the source per cycle, as the array's row words
        s1_valid, s1_last, sent, shift = Signal(), Signal(), Signal(), Signal(2)
        rows = rotate([self.r_data[p] for p in range(n)], src.partition, chunk)
        item_bits = 8 << dtype_shift(src.dtype)

        def element(i):
            if i >= n:
                return Const(0, 32)
            return (rows[i] >> (shift * 8)) & ((1 << item_bits) - 1)

        packed = []
        for r in range(a.rows):
            single = element(r)
            if a.double_rate:
                pair = Cat(element(2 * r)[:8], element(2 * r + 1)[:8])
                single = Mux(double, pair, single)
            packed.append(single)
        moving = Signal(data.ArrayLayout(a.width, a.rows))
        m.d.comb += [moving[r].eq(packed[r]) for r in range(a.rows)]
        m.d.comb += [self.r_addr.eq(ws.byte[2:]), self.r_psum.eq(src.space == SPACE["psum"]),
                     array.moving.payload.eq(moving)]

        # LoadStationary: columns gathered into beats
        bc = a.beat_columns
        slot = Signal(range(bc))
        beat_valid, beat_last = Signal(), Signal()
        columns = Signal(data.ArrayLayout(data.ArrayLayout(a.width, a.rows), bc))
        m.d.comb += [array.stationary.valid.eq(beat_valid),
                     array.stationary.payload.eq(columns)]

        # MultiplyMoving: each result row read-modify-written, one per cycle: the row and its
        # PSUM read in one cycle, the write in the next
        w_valid, w_last = Signal(), Signal()
        w_at = Signal.like(self.w_addr)
        staged = Signal(data.ArrayLayout(32, a.cols))
        old = rotate([self.q_data[p] for p in range(n)], dst.partition, chunk)
        total = []
        for c in range(a.cols):
            new = staged[c]
            summed = (old[c] + new)[:32]
            if a.has_float:
                y = Signal(32, name=f"acc{c}_y")
                add_lane(m, f"acc{c}", None, FP_MODULES["add"], {"a": old[c], "b": new},
                         {"y": y}, clocked=False)
                summed = Mux(integer, summed, y) if a.has_int else y
            total.append(Mux(accumulate, summed, new))
        total += [0] * (n - a.cols)
        out_rows = unrotate(total, dst.partition, chunk)
        m.d.comb += [self.q_addr.eq(wd.byte[2:]), self.q_psum.eq(1),
                     self.w_addr.eq(w_at), self.w_psum.eq(dst.space == SPACE["psum"]),
                     self.w_be.eq(Mux(w_valid, 0xF, 0)),
                     self.w_part.eq(Cat(*[(dst.partition <= p)
                                          & (p < dst.partition + dst.partitions)
                                          for p in range(n)]))]
        m.d.comb += [self.w_data[p].eq(out_rows[p]) for p in range(n)]
        m.d.sync += w_valid.eq(0)

        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.issue):
                    m.d.sync += word.eq(self.word)
                    m.next = "CMD"
            with m.State("CMD"):
                m.d.comb += [array.cmd.valid.eq(1), start.eq(1)]
                m.d.sync += [sent.eq(0), s1_valid.eq(0), slot.eq(0), beat_valid.eq(0)]
                with m.If(array.cmd.ready & is_load):
                    m.next = "LOAD"
                with m.Elif(array.cmd.ready):
                    m.next = "MULTIPLY"
            with m.State("LOAD"):
                take = s1_valid & ~beat_valid
                read_step(m, ~s1_valid | take, self.r_en, ws, sent, s1_valid, s1_last, shift)
                with m.If(take):
                    for j in range(bc):
                        with m.If(slot == j):
                            m.d.sync += columns[j].eq(moving)
                    m.d.sync += slot.eq(Mux(s1_last | (slot == bc - 1), 0, slot + 1))
                    with m.If(s1_last | (slot == bc - 1)):
                        m.d.sync += [beat_valid.eq(1), beat_last.eq(s1_last)]
                with m.If(beat_valid & array.stationary.ready):
                    m.d.sync += beat_valid.eq(0)
                    with m.If(beat_last):
                        m.d.comb += self.done.eq(1)
                        m.next = "IDLE"
            with m.State("MULTIPLY"):
                # A whole-array tile: every row group's words at once, every column
                # group's output at once.
                m.d.comb += [array.moving.valid.eq(s1_valid.replicate(a.ways)),
                             array.out.ready.eq(1)]
                read_step(m, ~s1_valid | array.moving.ready[0], self.r_en, ws, sent, s1_valid,
                          s1_last, shift)
                with m.If(array.out.valid[0]):
                    m.d.comb += [self.q_en.eq(1), wd.step.eq(1)]
                    m.d.sync += [w_valid.eq(1), w_last.eq(wd.row_last), w_at.eq(wd.byte[2:]),
                                 staged.eq(array.out.payload)]
                with m.If(w_valid & w_last):
                    m.d.comb += self.done.eq(1)
                    m.next = "IDLE"
        return m
