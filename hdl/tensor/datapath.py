"""The systolic array's datapath (:class:`hdl.tensor.systolic.SystolicArray`): a row of
``cols`` processing elements with one stage of the input skew (:class:`SystolicRow`) and a
PSUM column (:class:`PsumColumn`), each emitted once by a generator and instantiated."""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, memory, wiring

from hdl.emitted import member_ports, place

from .params import SystolicParams
from .pe import ProcessingElement, ctl_layout, pe_ports
from .signatures import column_ports, meta_layout, row_ports, wlo_bits

__all__ = ["PsumColumn", "SystolicRow"]


def _mask_word(word, keep0, keep1):
    """``word`` with element 0 (bits 0-7 and 16 up) zeroed unless ``keep0`` and element 1
    (bits 8-15, a double-rate word's second element) unless ``keep1``."""
    if len(word) < 16:
        return Mux(keep0, word, 0)
    parts = [Mux(keep0, word[:8], 0), Mux(keep1, word[8:16], 0)]
    if len(word) > 16:
        parts.append(Mux(keep0, word[16:], 0))
    return Cat(*parts)


def _rotate(value, size: int, last):
    """``value``'s entries of ``size`` bits moved down one (entry 0 to the end) where
    ``last`` (the last row or column of a group) is set."""
    if len(value) == size:
        return value
    return Mux(last, Cat(value[size:], value[:size]), value)


class SystolicRow(wiring.Component):
    """``cols`` PEs chained left to right (the moving wave and the weight wave flow right).

    The row takes word 0 of ``mov_in`` and words ``0 .. beat_columns-1`` of ``stat_in`` (its
    own contraction indices; ``stat_in`` is row-major, ``beat_columns`` words per row) and
    passes both vectors on, one cycle later and shifted down by one row's words, to the next
    row: that is the input skew of both waves, built from identical rows. Each wave carries
    the count of its tile's contraction indices left (``mk``, ``wk``): the row zeroes the
    elements of its word past that count, so indices >= k contribute +0. With
    ``pe_module`` set, the PEs are instances of that separately emitted Verilog module
    (ports :func:`pe_ports`).

    In a tiled array (``ways > 1``) each row group has its own moving vector: ``ctl`` and
    ``mk`` hold one entry per row group, the row uses entry 0, and the last row of a group
    (input ``last``) moves the entries down one, so that the next group's entry comes first.
    ``ctl.cols`` tells each PE whether its column group belongs to the vector's tile (else
    it passes the partial sum). The weight wave carries the loading tile's row groups
    (``wr``, moved down as the entries are) and ``wlo`` (see :mod:`hdl.tensor.pe`): a row
    outside the tile lets the beat pass without a write.
    """

    def __init__(self, params: SystolicParams, *, pe_module: str | None = None):
        if not isinstance(params, SystolicParams):
            raise TypeError(f"params must be a SystolicParams, not {params!r}")
        self.params = params
        self.pe_module = pe_module
        super().__init__(row_ports(params))

    def elaborate(self, platform):
        p = self.params
        m = Module()
        lw = p.width
        ww = lw * p.beat_columns
        kb, cs, tiled = p.k_bits, ctl_layout(p).size, p.ways > 1
        last = self.last if tiled else None
        # Contraction indices >= k load as zeros: ``wk`` counts the tile's indices left,
        # two per row for a double-rate tile (``wd``).
        step = Mux(self.wd_in, 2, 1) if p.double_rate else 1
        ctl = data.View(ctl_layout(p), self.ctl_in[:cs])
        mk = self.mk_in[:kb]
        mstep = Mux(ctl.double, 2, 1) if p.double_rate else 1
        with m.If(self.en):
            m.d.sync += [self.mov_out.eq(self.mov_in[lw:]),
                         self.ctl_out.eq(_rotate(self.ctl_in, cs, last)),
                         self.stat_out.eq(self.stat_in[ww:]), self.wv_out.eq(self.wv_in),
                         self.wb_out.eq(self.wb_in), self.ws_out.eq(self.ws_in),
                         self.wd_out.eq(self.wd_in)]
            if tiled:
                m.d.sync += [self.wr_out.eq(_rotate(self.wr_in, 1, last)),
                             self.wlo_out.eq(self.wlo_in)]
            if p.rows > 1:  # else no row follows
                left = Mux(mk > mstep, mk - mstep, 0)[:kb]
                m.d.sync += [self.wk_out.eq(Mux(self.wk_in > step, self.wk_in - step, 0)),
                             self.mk_out.eq(_rotate(Cat(left, self.mk_in[kb:]), kb, last))]
        keep0 = self.wk_in > 0
        keep1 = Mux(self.wd_in, self.wk_in > 1, keep0) if p.double_rate else keep0
        weights = Cat(*[_mask_word(self.stat_in[j * lw:(j + 1) * lw], keep0, keep1)
                        for j in range(p.beat_columns)])
        mkeep0 = mk > 0
        mkeep1 = Mux(ctl.double, mk > 1, mkeep0) if p.double_rate else mkeep0
        chain = {"x": _mask_word(self.mov_in[:lw], mkeep0, mkeep1), "ctl": self.ctl_in[:cs],
                 "w": weights,
                 "wv": self.wv_in & self.wr_in[0] if tiled else self.wv_in,
                 "wb": self.wb_in, "ws": self.ws_in}
        widths = {"x": lw, "ctl": cs, "w": ww, "wv": 1, "wb": 1, "ws": p.skip_bits}
        if tiled:
            chain["wlo"] = self.wlo_in
            widths["wlo"] = wlo_bits(p)
        ports = pe_ports(p)
        for col in range(p.cols):
            wires = {"en": self.en,
                     "psum_in": self.psum_in[32 * col:32 * (col + 1)],
                     "psum_out": self.psum_out[32 * col:32 * (col + 1)]}
            if tiled:  # the moving word's tile covers this PE's column group, or not
                wires["skip"] = ~data.View(ctl_layout(p), chain["ctl"]).cols[
                    col // p.group_cols]
            nxt = {}
            for name, value in chain.items():
                wires[f"{name}_in"] = value
                wires[f"{name}_out"] = nxt[name] = Signal(widths[name], name=f"{name}_{col}")
            place(m, f"pe_{col}", lambda: ProcessingElement(p), self.pe_module,
                  member_ports(ports, wires.__getitem__))
            chain = nxt
        return m


class PsumColumn(wiring.Component):
    """One column of the PSUM bank with its read-modify-write, chained left to right.

    A vector's metadata and its column sum arrive one cycle later at each column, exactly
    as the sums leave the bottom PE row. Stage A reads the bank at ``index``; stage B writes
    ``sum`` (overwrite) or ``add32(bank, sum)`` (accumulate) where ``m_left`` is nonzero, and
    appends the column's new value to ``vec``, which thereby leaves the last column as one
    aligned row of the bank (the deskew, built from identical columns). In a tiled array the
    metadata holds one entry per column group: the column uses entry 0, and the last column
    of a group (input ``last``) moves the entries down one, so that all leave the last
    column in order, each with the beat's columns of its group.
    """

    def __init__(self, params: SystolicParams):
        if not isinstance(params, SystolicParams):
            raise TypeError(f"params must be a SystolicParams, not {params!r}")
        self.params = params
        super().__init__(column_ports(params))

    def elaborate(self, platform):
        p = self.params
        m = Module()
        layout = meta_layout(p)
        size = layout.size
        m.submodules.bank = bank = memory.Memory(shape=32, depth=p.bank_depth, init=[])
        wp = bank.write_port()
        rp = bank.read_port(domain="sync", transparent_for=(wp,))
        meta_in = data.View(layout, self.meta_in[:size])
        held = Signal(len(self.meta_in))
        meta_a = data.View(layout, held[:size])
        sum_a = Signal(32)
        m.d.comb += [rp.addr.eq(meta_in.index), rp.en.eq(self.en)]
        with m.If(self.en):
            m.d.sync += [held.eq(self.meta_in), sum_a.eq(self.sum_in)]

        total = int_total = (rp.data + sum_a)[:32]
        if p.has_float:
            from hdl.numerics.fpu import FpAdd32

            m.submodules.add = add = FpAdd32()
            m.d.comb += [add.a.eq(rp.data), add.b.eq(sum_a)]
            total = Mux(meta_a.int, int_total, add.y) if p.has_int else add.y
        write = meta_a.m_left != 0
        updated = Mux(write, Mux(meta_a.accumulate, total, sum_a), rp.data)
        m.d.comb += [wp.addr.eq(meta_a.index), wp.data.eq(updated),
                     wp.en.eq(self.en & meta_a.valid & write)]
        passed = Signal(layout)
        m.d.comb += [
            passed.valid.eq(meta_a.valid),
            passed.index.eq(meta_a.index),
            passed.accumulate.eq(meta_a.accumulate),
            passed.m_left.eq(Mux(write, meta_a.m_left - 1, 0)),
        ]
        if p.has_int:
            m.d.comb += passed.int.eq(meta_a.int)
        entries = Cat(passed, held[size:])
        m.d.comb += self.meta_out.eq(
            _rotate(entries, size, self.last if p.ways > 1 else None))
        with m.If(self.en):
            m.d.sync += self.vec_out.eq(Cat(self.vec_in[32:], updated))
        return m
