"""The systolic array's sequencer (:class:`hdl.tensor.systolic.SystolicArray`): instruction
decode, stationary loading and moving injection (:class:`SystolicControl`), with one runner
per row group for the multiply on it (:class:`SystolicGroup`)."""

from __future__ import annotations

from amaranth import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.utils import bits_for

from hdl.emitted import member_ports, place

from .params import SystolicParams
from .pe import ctl_layout
from .signatures import (
    Op,
    control_ports,
    group_ports,
    job_layout,
    meta_layout,
)

__all__ = ["SystolicControl", "SystolicGroup"]


class SystolicGroup(wiring.Component):
    """The runner of one row group and the metadata delay of one column group.

    The runner holds the multiply (or transpose) on its row group (``job``, set by
    ``start``): it takes the group's moving words when every row group of the multiply has
    its word valid (``valid``; a transpose makes its selector words instead), one a cycle or
    one every fourth at a quarter rate, and drives the row group's first stage of the
    moving wave (``mov``, ``ctl``, ``mk``). ``meta_in``, the PSUM metadata of this column
    group's vector, leaves on ``meta_out`` ``rows + 1`` cycles later, as the vector's sums
    reach the PSUM columns. Every group's runner is the same module, so a generator emits
    it once.
    """

    def __init__(self, params: SystolicParams):
        if not isinstance(params, SystolicParams):
            raise TypeError(f"params must be a SystolicParams, not {params!r}")
        self.params = params
        super().__init__(group_ports(params))

    def elaborate(self, platform):
        p = self.params
        m = Module()
        job = Signal(job_layout(p))
        m.d.comb += self.job.eq(job)
        run, count = self.run, Signal(p.index_bits)
        m.d.comb += self.index.eq(count)
        if p.quarter_rate:
            phase = Signal(2)
            pace = ~job.quarter | (phase == 3)
        else:
            pace = 1
        every = (self.valid | ~job.rows) == (1 << p.ways) - 1
        want = Signal()
        m.d.comb += [want.eq(run & self.en & pace),
                     self.ready.eq(want & ~job.tr & every),
                     self.inject.eq(want & (job.tr | every)),
                     self.last.eq(self.inject & (count == job.last))]
        if p.quarter_rate:
            with m.If(self.inject):
                m.d.sync += phase.eq(0)
            with m.Elif(self.en & run & (phase != 3)):
                m.d.sync += phase.eq(phase + 1)
        with m.If(self.inject):
            m.d.sync += count.eq(count + 1)
            with m.If(self.last):
                m.d.sync += run.eq(0)
        with m.If(self.start):
            m.d.sync += [run.eq(1), count.eq(0), job.eq(self.job_in)]
            if p.quarter_rate:
                m.d.sync += phase.eq(0)

        # A transpose's vector j selects contraction index j: bit 0 of word j, or of a
        # double-rate tile bit 0 (j even) or bit 8 (j odd) of word j // 2; ``base`` of them
        # belong to the row groups above.
        local = Signal(range(-(1 << job.base.shape().width), p.moving_max + 1))
        m.d.comb += local.eq(count - job.base)
        select = []
        for r in range(p.group_rows):
            if p.double_rate:
                even = Mux(job.double, local == 2 * r, local == r)
                odd = job.double & (local == 2 * r + 1)
                select.append(Cat(even, Const(0, 7), odd, Const(0, p.width - 9)))
            else:
                select.append(Cat(local == r, Const(0, p.width - 1)))
        ctl = Signal(ctl_layout(p))
        m.d.comb += [ctl.bank.eq(job.bank), ctl.wfmt.eq(job.wfmt), ctl.xfmt.eq(job.xfmt),
                     ctl.double.eq(job.double), ctl.int.eq(job.int), ctl.transpose.eq(job.tr)]
        if p.has_mx:
            m.d.comb += ctl.mx.eq(job.mx)
        if p.ways > 1:
            m.d.comb += ctl.cols.eq(Mux(self.inject, job.cols, 0))
        k = Mux(job.k > job.base, job.k - job.base, 0)
        delay = [Signal(meta_layout(p), name=f"meta_{j}") for j in range(1, p.rows + 2)]
        with m.If(self.en):
            m.d.sync += [
                # zeroed by the rows where no vector is
                self.mov.eq(Mux(job.tr, Cat(*select), self.payload)),
                self.ctl.eq(ctl),
                self.mk.eq(Mux(self.inject, k, 0)),
                delay[0].eq(self.meta_in),
            ]
            m.d.sync += [delay[j].eq(delay[j - 1]) for j in range(1, p.rows + 1)]
        m.d.comb += self.meta_out.eq(delay[p.rows])
        return m


def _tile_layout(params: SystolicParams) -> data.StructLayout:
    """A loaded tile: its bank, shape, format and position and size in groups."""
    return data.StructLayout({"bank": 1, "k": params.k_bits, "m": params.m_bits,
                              "fmt": params.code_bits, "double": 1, "row": params.group_bits,
                              "rows": params.size_bits, "col": params.group_bits,
                              "cols": params.size_bits})


def _span(first, size, ways: int):
    """The mask of groups ``first .. first + size - 1``."""
    ones = ((Const(1, ways + 1) << size) - 1)[:ways]
    return (ones << first)[:ways]


class SystolicControl(wiring.Component):
    """The array's sequencer: instruction decode, stationary loading, moving injection.

    Drives the first stage of both waves (``mov`` with its control ``ctl`` and index count
    ``mk``, an entry per row group; ``stat`` with ``wv``/``wb``/``ws``/``wk``/``wd``, and in
    a tiled array ``wr``/``wlo``), the metadata that reaches the PSUM columns ``rows + 1``
    cycles later (``meta``, an entry per column group), and the pipeline enable ``en``;
    ``last_meta`` (the metadata leaving the last PSUM column) becomes ``out_valid``.

    A tiled array splits into ``ways x ways`` groups; the sequencer keeps, per group pair
    (quad), the bank its latest tile uses, per tile position the tile loaded there, and per
    row group a runner (:class:`SystolicGroup`) for the multiply on it. With
    ``group_module`` set, the runners are instances of that separately emitted module.
    """

    def __init__(self, params: SystolicParams, *, group_module: str | None = None):
        if not isinstance(params, SystolicParams):
            raise TypeError(f"params must be a SystolicParams, not {params!r}")
        self.params = params
        self.group_module = group_module
        super().__init__(control_ports(params))

    def elaborate(self, platform):
        p = self.params
        m = Module()
        layout = meta_layout(p)
        bc, ways, tiled = p.beat_columns, p.ways, p.ways > 1
        en = self.en
        m.d.comb += en.eq(~self.out_valid.any() | self.out_ready)
        cmd = self.cmd.payload

        # Per-format constants, looked up by code (codes past the list read as zero).
        def table(flags):
            flags = [int(f) for f in flags]
            flags += [0] * ((1 << p.code_bits) - len(flags))
            return Array(Const(f, 1) for f in flags)[cmd.fmt]

        cmd_double = table(p.is_double(f) for f in p.formats)
        cmd_int = table(p.is_int(f) for f in p.formats)
        cmd_quarter = table(p.is_quarter(f) for f in p.formats) if p.quarter_rate else 0
        cmd_mx = table(p.is_mx(f) for f in p.formats)

        # The runners of the row groups.
        groups = []
        ports = group_ports(p)
        for g in range(ways):
            wires = {name: Signal(member.shape, name=f"g{g}_{name}")
                     for name, member in ports.items()}
            place(m, f"group_{g}", lambda: SystolicGroup(p), self.group_module,
                  member_ports(ports, wires.__getitem__))
            groups.append(wires)
        jobs = [data.View(job_layout(p), g["job"]) for g in groups]
        span = p.group_rows * p.width
        mov_payload = self.moving.payload.as_value()
        for g, wires in enumerate(groups):
            m.d.comb += [wires["en"].eq(en), wires["valid"].eq(self.moving.valid),
                         wires["payload"].eq(mov_payload[g * span:(g + 1) * span])]
        m.d.comb += self.moving.ready.eq(Cat(g["ready"] for g in groups))

        # The latest tile (a transpose's), and per position the tile loaded there.
        tl = _tile_layout(p)
        cur = Signal(tl)
        if tiled:
            held = [Signal(tl, name=f"tile_{i}") for i in range(ways * ways)]
            qbank = Signal(ways * ways)
            index_bits = bits_for(ways * ways - 1)
            entries = held + held[:1] * ((1 << index_bits) - len(held))
            at = Array(entries)[(cmd.row * ways + cmd.col)[:index_bits]]
            cmd_row, cmd_col = cmd.row, cmd.col
            cmd_rows, cmd_cols = cmd.rows, cmd.cols
        else:
            held, qbank, at = [cur], Signal(1), cur
            cmd_row = cmd_col = Const(0, 1)
            cmd_rows = cmd_cols = Const(1, 1)
        is_load = cmd.op == Op.LOAD
        is_tr = cmd.op == Op.TRANSPOSE
        tile = Signal(tl)
        m.d.comb += tile.eq(Mux(is_tr, cur, at))
        tile_rows = _span(tile.row, tile.rows, ways)
        tile_cols = _span(tile.col, tile.cols, ways)

        # The load path.
        load_run = Signal()
        load_bank = Signal()
        load_k = Signal(p.wk_bits)
        load_end = Signal(p.skip_bits)
        load_cend = Signal(p.skip_bits)
        load_skip = Signal(p.skip_bits)
        load_double = Signal()
        load_rows = Signal(ways)
        load_cols = Signal(ways)
        beat = Signal()
        last_beat = Signal()
        load_free = Signal()
        conflict = [g["run"] & ~g["last"] & (j.bank == load_bank) & (j.rows & load_rows).any()
                    & (j.cols & load_cols).any() for g, j in zip(groups, jobs, strict=True)]
        busy = [g["run"] & ~g["last"] & (tile_rows[i] | (j.cols & tile_cols).any())
                for i, (g, j) in enumerate(zip(groups, jobs, strict=True))]
        m.d.comb += [
            self.stationary.ready.eq(load_run & en & ~Cat(*conflict).any()),
            beat.eq(self.stationary.valid & self.stationary.ready),
            last_beat.eq(beat & (load_skip >= load_end)),
            load_free.eq(~load_run | last_beat),
        ]
        with m.If(is_load):
            m.d.comb += self.cmd.ready.eq(load_free)
        with m.Else():
            m.d.comb += self.cmd.ready.eq(load_free & ~Cat(*busy).any())
        fire = self.cmd.valid & self.cmd.ready

        with m.If(beat):
            m.d.sync += load_skip.eq(load_skip + bc)
            with m.If(last_beat):
                m.d.sync += load_run.eq(0)
        first = cmd_row * ways + cmd_col
        bank = ~qbank.bit_select(first, 1) if tiled else ~qbank
        new_rows = _span(cmd_row, cmd_rows, ways)
        new_cols = _span(cmd_col, cmd_cols, ways)
        step = Mux(cmd_double, 2, 1) if p.double_rate else 1
        col0 = cmd_col * p.group_cols
        with m.If(fire & is_load):
            loaded = Signal(tl)
            m.d.comb += [loaded.bank.eq(bank), loaded.k.eq(cmd.k), loaded.m.eq(cmd.m),
                         loaded.fmt.eq(cmd.fmt), loaded.double.eq(cmd_double),
                         loaded.row.eq(cmd_row), loaded.rows.eq(cmd_rows),
                         loaded.col.eq(cmd_col), loaded.cols.eq(cmd_cols)]
            m.d.sync += [load_run.eq(1), load_bank.eq(bank),
                         load_k.eq(cmd.k + cmd_row * p.group_rows * step),
                         load_end.eq(col0 + cmd.m - 1), load_skip.eq(col0 + bc - 1),
                         load_cend.eq((cmd_col + cmd_cols) * p.group_cols - 1),
                         load_double.eq(cmd_double), load_rows.eq(new_rows),
                         load_cols.eq(new_cols), cur.eq(loaded)]
            if tiled:
                for i, entry in enumerate(held):
                    with m.If(first == i):
                        m.d.sync += entry.eq(loaded)
                for i in range(ways * ways):
                    with m.If(new_rows[i // ways] & new_cols[i % ways]):
                        m.d.sync += qbank[i].eq(bank)
            else:
                m.d.sync += qbank.eq(bank)

        # A multiply or transpose starts on its tile's row groups.
        job = Signal(job_layout(p))
        m.d.comb += [job.tr.eq(is_tr), job.last.eq(cmd.n - 1),
                     job.acc.eq(cmd.accumulate & ~is_tr), job.bank.eq(tile.bank),
                     job.k.eq(tile.k), job.m.eq(tile.m), job.wfmt.eq(tile.fmt),
                     job.xfmt.eq(Mux(is_tr, tile.fmt, cmd.fmt)),
                     job.double.eq(Mux(is_tr, tile.double, cmd_double)),
                     job.int.eq(~is_tr & cmd_int), job.mx.eq(~is_tr & cmd_mx),
                     job.quarter.eq(~is_tr & cmd_quarter), job.rows.eq(tile_rows),
                     job.cols.eq(tile_cols), job.c0.eq(tile.col)]
        jstep = Mux(job.double, 2, 1) if p.double_rate else 1
        for g, wires in enumerate(groups):
            mine = Signal(job_layout(p), name=f"job_{g}")
            m.d.comb += [mine.eq(job),
                         mine.base.eq(((g - tile.row)[:p.group_bits] if tiled else 0)
                                      * p.group_rows * jstep),
                         mine.primary.eq(tile.row == g),
                         wires["job_in"].eq(mine),
                         wires["start"].eq(fire & ~is_load & tile_rows[g])]

        # Each column group's PSUM metadata comes from the runner whose tile covers it.
        for h, wires in enumerate(groups):
            meta = Signal(layout, name=f"meta_{h}")
            for src, j in zip(groups, jobs, strict=True):
                offset = ((h - j.c0)[:p.group_bits] if tiled else 0) * p.group_cols
                with m.If(src["inject"] & j.primary & j.cols[h]):
                    m.d.comb += [meta.valid.eq(1), meta.index.eq(src["index"]),
                                 meta.accumulate.eq(j.acc),
                                 meta.m_left.eq(Mux(j.m > offset, j.m - offset, 0))]
                    if p.has_int:
                        m.d.comb += meta.int.eq(j.int)
            m.d.comb += wires["meta_in"].eq(meta)

        # Stage 1 of both waves.
        columns = self.stationary.payload
        weights = Cat(*[columns[j][r] for r in range(p.rows) for j in range(bc)])
        last = data.View(data.ArrayLayout(layout, ways), self.last_meta)
        m.d.comb += [self.mov.eq(Cat(g["mov"] for g in groups)),
                     self.ctl.eq(Cat(g["ctl"] for g in groups)),
                     self.mk.eq(Cat(g["mk"] for g in groups)),
                     self.meta.eq(Cat(g["meta_out"] for g in groups))]
        with m.If(en):
            m.d.sync += [
                self.stat.eq(weights),
                self.wv.eq(beat),
                self.wk.eq(load_k),
                self.wd.eq(load_double),
                self.wb.eq(load_bank),
                self.ws.eq(load_skip),
                self.out_valid.eq(Cat(last[h].valid for h in range(ways))),
            ]
            if tiled:
                m.d.sync += [self.wr.eq(load_rows),
                             self.wlo.eq(Mux(load_skip > load_cend, load_skip - load_cend,
                                             0))]
        return m
