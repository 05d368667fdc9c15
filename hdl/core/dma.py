"""The core's DMA engine: its queues' ``DmaCopy`` instructions, element by element, between
an AXI4 memory port (HBM) and SBUF.

Queues are served round robin, one instruction at a time, in order within a queue. Each
element is read (an AXI4 single-beat read of the aligned 32-bit word holding it, or an SBUF
read) and written (an AXI4 single-beat write with byte strobes, or an SBUF write with byte
enables) before the next; both patterns are walked by :class:`~hdl.core.access.ApWalker`,
partitions outermost. The data port is 32 bits wide: every element (at most 4 bytes,
aligned to its size) lies in one word.

An indirect copy (``index``) reads, before each of its rows, the row's index (the index
tile's partition for that row, its first element) from SBUF; its HBM side's row is then the
one indexed (its pattern's offset moved by index x pstride, rows one after another walked
with no stride between them). A row out of ``0 .. rows - 1`` is not moved (``skip``; the
core simulator refuses a program with one otherwise). One of one index (``index_stride``)
reads it once, from the index tile's first partition, and moves its HBM side's pattern
by index x ``index_stride``, out of range moving nothing. An adding copy (``add``, of a type of
:data:`~hdl.core.isa.DMA_ADD_DTYPES`) reads each element of ``dst`` after ``src``'s and
writes their sum: both widened to fp32 exactly, added by the vector unit's fp32 adder
(:data:`~hdl.vector.lanes.FP_MODULES`' ``add``), cast to ``dst``'s type to nearest even. A
copy between two types (:data:`~hdl.core.isa.DMA_CAST_DTYPES`) writes each element
converted as the engines convert their operands and results: widened to fp32 by value
(:func:`~hdl.core.engines.lane_input`, :func:`~hdl.vector.convert.widen_input`), cast to
``dst``'s type to nearest even (:class:`~hdl.numerics.cast.FormatCastLane`,
:func:`~hdl.core.engines.lane_output`).
"""

from __future__ import annotations

from amaranth.hdl import Array, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from hdl.core.access import AP_LAYOUT, SPACE, ApWalker, dtype_shift
from hdl.core.engines import lane_input, lane_output, unit_format
from hdl.core.isa import (
    DMA_ADD_DTYPES,
    DTYPES,
    OPCODE_BITS,
    WORD_BITS,
    DmaCompute,
    DmaCopy,
    field_positions,
)
from hdl.numerics.cast import FormatCastLane
from hdl.numerics.formats import format_by_name
from hdl.vector.convert import ENGINE_FORMATS, widen_input
from hdl.vector.lanes import add_fp

__all__ = ["AxiSignature", "Dma", "SbufPort"]

DATA_BITS = 32


class AxiSignature(wiring.Signature):
    """An AXI4 initiator with a 32-bit data bus and one-bit IDs, members named as
    cocotbext-axi's ``AxiBus`` expects them (``awaddr`` ... ``rready``)."""

    def __init__(self, addr_bits: int):
        if not isinstance(addr_bits, int) or addr_bits < 2:
            raise ValueError(f"addr_bits must be an integer of at least 2, not {addr_bits!r}")
        self.addr_bits = addr_bits
        members = {}
        for ch in ("aw", "ar"):
            members.update({f"{ch}id": Out(1), f"{ch}addr": Out(addr_bits), f"{ch}len": Out(8),
                            f"{ch}size": Out(3), f"{ch}burst": Out(2), f"{ch}valid": Out(1),
                            f"{ch}ready": In(1)})
        members.update({"wdata": Out(DATA_BITS), "wstrb": Out(DATA_BITS // 8), "wlast": Out(1),
                        "wvalid": Out(1), "wready": In(1),
                        "bid": In(1), "bresp": In(2), "bvalid": In(1), "bready": Out(1),
                        "rid": In(1), "rdata": In(DATA_BITS), "rresp": In(2), "rlast": In(1),
                        "rvalid": In(1), "rready": Out(1)})
        super().__init__(members)

    def __eq__(self, other):
        return isinstance(other, AxiSignature) and other.addr_bits == self.addr_bits

    def __repr__(self):
        return f"AxiSignature({self.addr_bits})"


class SbufPort(wiring.Signature):
    """One partition-addressed port into SBUF: a read (``raddr`` -> ``rdata`` next cycle)
    and a write (``waddr``, ``wdata``, byte enables ``wen``) of one 32-bit word of one
    partition."""

    def __init__(self, partitions: int, words: int):
        self.partitions, self.words = partitions, words
        super().__init__({
            "rpart": Out(range(partitions)), "raddr": Out(range(words)), "ren": Out(1),
            "rdata": In(DATA_BITS),
            "wpart": Out(range(partitions)), "waddr": Out(range(words)),
            "wdata": Out(DATA_BITS), "wen": Out(DATA_BITS // 8),
        })

    def __eq__(self, other):
        return isinstance(other, SbufPort) and (other.partitions, other.words) == (
            self.partitions, self.words)

    def __repr__(self):
        return f"SbufPort({self.partitions}, {self.words})"


def _ap(word, name, cls=DmaCopy):
    pos, bits, _ = field_positions(cls)[name]
    return data.View(AP_LAYOUT, word[pos:pos + bits])


class Dma(wiring.Component):
    """The DMA engine of ``queues`` queues; ``issue[q]``/``word[q]`` from queue ``q``'s
    sequencer, ``done[q]`` back to it."""

    def __init__(self, queues: int, partitions: int, sbuf_words: int, addr_bits: int):
        self.queues = queues
        super().__init__({
            "issue": In(queues), "word": In(WORD_BITS).array(queues), "done": Out(queues),
            "axi": Out(AxiSignature(addr_bits)),
            "sbuf": Out(SbufPort(partitions, sbuf_words)),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        axi = self.axi
        word = Signal(WORD_BITS)
        queue = Signal(range(self.queues))
        dst, index = _ap(word, "dst"), _ap(word, "index")
        # DmaCompute: dst = a + b (+ c), its a read where a copy's src is
        compute = word[:OPCODE_BITS] == DmaCompute.OPCODE
        src = Signal(AP_LAYOUT)
        m.d.comb += src.eq(Mux(compute, _ap(word, "a", DmaCompute).as_value(),
                               _ap(word, "src").as_value()))
        b_ap, c_ap = _ap(word, "b", DmaCompute), _ap(word, "c", DmaCompute)
        pos, _, _ = field_positions(DmaCopy)["index_dst"]
        indirect, index_dst = ~compute & (index.partitions != 0), word[pos]
        pos, bits, _ = field_positions(DmaCopy)["rows"]
        rows = word[pos:pos + bits]
        pos, _, _ = field_positions(DmaCopy)["skip"]
        skip = word[pos]
        pos, _, _ = field_positions(DmaCopy)["add"]
        adding = ~compute & word[pos]
        pos, bits, _ = field_positions(DmaCopy)["index_stride"]
        index_stride = word[pos:pos + bits]
        scalar = index_stride != 0  # one index, read once, for every partition
        # an indirect copy's indexed side: the row's offset, no stride between rows (with
        # one index: the pattern's offset moved, its partitions as they are)
        row_offset, row_ok = Signal.like(src.offset), Signal()
        moved_src, moved_dst = Signal(AP_LAYOUT), Signal(AP_LAYOUT)
        m.d.comb += [moved_src.eq(src), moved_dst.eq(dst)]
        with m.If(indirect & ~index_dst):
            m.d.comb += [moved_src.offset.eq(row_offset),
                         moved_src.pstride.eq(Mux(scalar, src.pstride, 0))]
        with m.If(indirect & index_dst):
            m.d.comb += [moved_dst.offset.eq(row_offset),
                         moved_dst.pstride.eq(Mux(scalar, dst.pstride, 0))]
        m.submodules.rd = rd = ApWalker()
        m.submodules.wr = wr = ApWalker()
        # DmaCompute's b and c, walked with a
        m.submodules.rb = rb = ApWalker()
        m.submodules.rc = rc = ApWalker()
        value = Signal(DATA_BITS)
        start = Signal()
        m.d.comb += [rd.ap.eq(moved_src), wr.ap.eq(moved_dst), rd.start.eq(start),
                     wr.start.eq(start), rb.ap.eq(b_ap), rc.ap.eq(c_ap), rb.start.eq(start),
                     rc.start.eq(start), rb.step.eq(rd.step), rc.step.eq(rd.step)]
        # the element held (src's; DmaCompute's a, b or c in turn: ``term``) widened to fp32
        # and cast to dst's type: a converting, adding or summing copy
        term, total_sum = Signal(2), Signal(DATA_BITS)
        wide_dtype = Signal.like(src.dtype)
        m.d.comb += wide_dtype.eq(Mux(term == 1, b_ap.dtype,
                                      Mux(term == 2, c_ap.dtype, src.dtype)))
        src_wide = widen_input(m, ENGINE_FORMATS, lane_input(m, value, wide_dtype, "cast_src"),
                               unit_format(ENGINE_FORMATS, wide_dtype), "cast_src")
        m.submodules.cast = cast = FormatCastLane(
            tuple(format_by_name(name) for name in ENGINE_FORMATS), None)
        m.d.comb += cast.fmt.eq(unit_format(ENGINE_FORMATS, dst.dtype))
        cast_out = Signal(DATA_BITS)
        m.d.comb += cast_out.eq(lane_output(m, cast.y, dst.dtype))
        written = Mux(((src.dtype != dst.dtype) & ~adding) | compute, cast_out, value)
        item_mask = Signal(DATA_BITS // 8)
        m.d.comb += item_mask.eq((1 << (1 << dtype_shift(dst.dtype))) - 1)
        rshift = rd.byte[:2] * 8
        wshift = wr.byte[:2]
        aligned_r = rd.byte[2:] << 2
        aligned_w = wr.byte[2:] << 2
        aw_done, w_done = Signal(), Signal()
        for ch in ("aw", "ar"):
            m.d.comb += [getattr(axi, f"{ch}size").eq(2), getattr(axi, f"{ch}burst").eq(1)]
        m.d.comb += [axi.araddr.eq(aligned_r), axi.awaddr.eq(aligned_w), axi.wlast.eq(1),
                     axi.wdata.eq(written << (wshift * 8)), axi.wstrb.eq(item_mask << wshift),
                     self.sbuf.rpart.eq(src.partition + rd.row), self.sbuf.raddr.eq(rd.byte[2:]),
                     self.sbuf.wpart.eq(dst.partition + wr.row), self.sbuf.waddr.eq(wr.byte[2:]),
                     self.sbuf.wdata.eq(written << (wshift * 8))]
        rr = Signal(range(self.queues))  # the queue served first at the next choice
        with m.FSM():
            with m.State("IDLE"):
                chosen = Signal(range(self.queues))
                found = Signal()
                for k in reversed(range(self.queues)):  # the first from rr onwards wins
                    idx = Signal(range(self.queues), name=f"candidate{k}")
                    m.d.comb += idx.eq((rr + k) % self.queues if self.queues > 1 else 0)
                    with m.If(self.issue.bit_select(idx, 1)):
                        m.d.comb += [chosen.eq(idx), found.eq(1)]
                with m.If(found):
                    m.d.sync += [queue.eq(chosen), word.eq(Array(self.word)[chosen])]
                    m.d.sync += rr.eq(chosen + 1 if self.queues > 1 else 0)
                    m.next = "START"
            with m.State("START"):
                m.d.comb += start.eq(1)
                m.next = "READ"
                with m.If(indirect):
                    m.next = "INDEX"
            with m.State("INDEX"):  # the row's index, from its partition of the index tile
                m.d.comb += [self.busy.eq(1), self.sbuf.ren.eq(1),
                             self.sbuf.rpart.eq(index.partition + Mux(scalar, 0, wr.row)),
                             self.sbuf.raddr.eq(index.offset[2:])]
                m.next = "INDEX_DATA"
            with m.State("INDEX_DATA"):
                side = Mux(index_dst, dst.offset, src.offset)
                pstride = Mux(scalar, index_stride, Mux(index_dst, dst.pstride, src.pstride))
                at = self.sbuf.rdata
                negative = (index.dtype == DTYPES["int32"][0]) & at[31]
                m.d.comb += self.busy.eq(1)
                m.d.sync += [row_offset.eq(side + at * pstride),
                             row_ok.eq(~negative & (at < rows))]
                m.next = "READ"
            with m.State("READ"):
                m.d.comb += self.busy.eq(1)
                with m.If(indirect & skip & ~row_ok):  # a row out of the tensor, skipped
                    m.next = "NEXT"
                with m.Elif(src.space == SPACE["hbm"]):
                    m.d.comb += axi.arvalid.eq(1)
                    with m.If(axi.arready):
                        m.next = "READ_DATA"
                with m.Else():
                    m.d.comb += self.sbuf.ren.eq(1)
                    m.next = "SBUF_DATA"
            with m.State("READ_DATA"):
                m.d.comb += [self.busy.eq(1), axi.rready.eq(1)]
                with m.If(axi.rvalid):
                    m.d.sync += value.eq(axi.rdata >> rshift)
                    m.next = "WRITE"
                    with m.If(adding):
                        m.next = "DST_READ"
                    with m.If(compute):
                        m.next = "SUM"
            with m.State("SBUF_DATA"):
                m.d.comb += self.busy.eq(1)
                m.d.sync += value.eq(self.sbuf.rdata >> rshift)
                m.next = "WRITE"
                with m.If(adding):
                    m.next = "DST_READ"
                with m.If(compute):
                    m.next = "SUM"
            # one fp32 adder: an adding copy's dst element and src's, or DmaCompute's sum so
            # far and its term
            add_type = unit_format(DMA_ADD_DTYPES, dst.dtype)
            held = Mux(dst.space == SPACE["hbm"], axi.rdata, self.sbuf.rdata) >> (wshift * 8)
            total = add_fp(m, "add", "rmw_add",
                           Mux(compute, total_sum,
                               widen_input(m, DMA_ADD_DTYPES, held, add_type, "rmw_dst")),
                           src_wide, False)
            # DmaCompute: the term held added to the sum (a: the sum), then the next term
            # read (b, then c where there is one), or the sum cast and written
            with m.State("SUM"):
                m.d.comb += self.busy.eq(1)
                m.d.sync += [total_sum.eq(Mux(term == 0, src_wide, total)), term.eq(term + 1)]
                m.next = "WRITE"
                with m.If((term == 0) | ((term == 1) & (c_ap.partitions != 0))):
                    m.next = "TERM_READ"
            ap_of = Mux(term == 1, b_ap.as_value(), c_ap.as_value())
            t_ap = data.View(AP_LAYOUT, ap_of)
            t_byte = Mux(term == 1, rb.byte, rc.byte)
            t_row = Mux(term == 1, rb.row, rc.row)
            with m.State("TERM_READ"):
                m.d.comb += self.busy.eq(1)
                with m.If(t_ap.space == SPACE["hbm"]):
                    m.d.comb += [axi.arvalid.eq(1), axi.araddr.eq(t_byte[2:] << 2)]
                    with m.If(axi.arready):
                        m.next = "TERM_DATA"
                with m.Else():
                    m.d.comb += [self.sbuf.ren.eq(1), self.sbuf.rpart.eq(t_ap.partition + t_row),
                                 self.sbuf.raddr.eq(t_byte[2:])]
                    m.next = "TERM_SBUF"
            with m.State("TERM_DATA"):
                m.d.comb += [self.busy.eq(1), axi.rready.eq(1)]
                with m.If(axi.rvalid):
                    m.d.sync += value.eq(axi.rdata >> (t_byte[:2] * 8))
                    m.next = "SUM"
            with m.State("TERM_SBUF"):
                m.d.comb += self.busy.eq(1)
                m.d.sync += value.eq(self.sbuf.rdata >> (t_byte[:2] * 8))
                m.next = "SUM"
            # an adding copy: dst's element, then the sum written in its place, in fp32
            # between the widenings and the cast to dst's type
            m.d.comb += cast.x.eq(Mux(adding, total, Mux(compute, total_sum, src_wide)))
            with m.State("DST_READ"):
                m.d.comb += self.busy.eq(1)
                with m.If(dst.space == SPACE["hbm"]):
                    m.d.comb += [axi.arvalid.eq(1), axi.araddr.eq(aligned_w)]
                    with m.If(axi.arready):
                        m.next = "DST_DATA"
                with m.Else():
                    m.d.comb += [self.sbuf.ren.eq(1), self.sbuf.rpart.eq(dst.partition + wr.row),
                                 self.sbuf.raddr.eq(wr.byte[2:])]
                    m.next = "DST_SBUF"
            with m.State("DST_DATA"):
                m.d.comb += [self.busy.eq(1), axi.rready.eq(1)]
                with m.If(axi.rvalid):
                    m.d.sync += value.eq(cast_out)
                    m.next = "WRITE"
            with m.State("DST_SBUF"):
                m.d.comb += self.busy.eq(1)
                m.d.sync += value.eq(cast_out)
                m.next = "WRITE"
            with m.State("WRITE"):
                m.d.comb += self.busy.eq(1)
                with m.If(dst.space == SPACE["hbm"]):
                    m.d.comb += [axi.awvalid.eq(~aw_done), axi.wvalid.eq(~w_done)]
                    aw = aw_done | axi.awready
                    w = w_done | axi.wready
                    with m.If(aw & w):
                        m.d.sync += [aw_done.eq(0), w_done.eq(0)]
                        m.next = "RESPONSE"
                    with m.Else():
                        m.d.sync += [aw_done.eq(aw), w_done.eq(w)]
                with m.Else():
                    m.d.comb += self.sbuf.wen.eq(item_mask << wshift)
                    m.next = "NEXT"
            with m.State("RESPONSE"):
                m.d.comb += [self.busy.eq(1), axi.bready.eq(1)]
                with m.If(axi.bvalid):
                    m.next = "NEXT"
            with m.State("NEXT"):
                m.d.comb += [self.busy.eq(1), rd.step.eq(1), wr.step.eq(1)]
                m.d.sync += term.eq(0)
                with m.If(wr.last):
                    m.d.comb += self.done.bit_select(queue, 1).eq(1)
                    m.next = "IDLE"
                with m.Elif(indirect & ~scalar & wr.row_last):  # the next row's index first
                    m.next = "INDEX"
                with m.Else():
                    m.next = "READ"
        return m
