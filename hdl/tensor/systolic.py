"""Weight-stationary systolic array: the tensor engine's matmul datapath.

``rows`` PE rows hold the contraction (partition) axis K, ``cols`` PE columns the stationary
free axis M. PE (r, c) holds ``stationary[r, c]`` (with a double-rate format:
``stationary[2r + l, c]`` in element l of its word, with an MX format ``stationary[4r + l, c]``
for l < 4). Each instruction names its input format
(a code, the position in ``params.formats``), so one array runs every format and a program
may change format from one instruction to the next. A moving vector (one column of the K x N
moving tile) enters row r after r cycles of skew and travels right; partial sums travel
down, so column c sums k = 0 .. K-1 in order from +0.0 and leaves the bottom row as
``dst[c, n]``. Each column's sum then meets its PSUM column, one cycle after the column to its left,
which stores it (overwrite) or adds it to what the bank holds (accumulate) and appends the
new value to the output row passing along the columns, so the row leaves the last column
aligned (the deskew). Each PSUM row written leaves on ``out``.

Structure: :class:`SystolicControl` (sequencer), ``rows`` identical :class:`SystolicRow` (``cols``
:class:`~hdl.tensor.pe.ProcessingElement` each, plus one stage of the input skew) and ``cols``
identical :class:`PsumColumn`, so that a generator can emit each kind of cell once.

Instructions (``cmd`` stream, executed in order):

* ``LOAD`` (LoadStationary, fields ``fmt``, ``k``, ``m``): takes ``ceil(m / beat_columns)``
  beats from ``stationary``, beat g holding columns ``g * beat_columns + j`` of the K x M
  stationary tile (``rows`` words each, packed as :class:`SystolicParams` says; columns >= m
  are ignored by the PSUM write). Contraction indices >= k (an MX tile: words >= k) read
  as zero (a count of the indices left travels down the rows with the beat). The array has
  two weight banks: a load fills the one the latest tile
  does not use, as soon as no moving vector still to be injected reads it, so it runs while
  the previous tile's multiply does (the load path takes ``beat_columns`` columns per cycle,
  a multiply one).
* ``MULTIPLY`` (MultiplyMoving, fields ``fmt``, ``n``, ``accumulate``): takes ``n`` beats from
  ``moving``, beat j holding column j of the K x N moving tile (``rows`` words, indices
  >= k zeroed), and produces ``n`` beats on ``out``: beat j is PSUM row j after the update,
  ``cols`` fp32 (or int32) values; columns >= m keep the bank's earlier contents. It reads the
  latest tile's bank, and starts once that tile is loaded. A quarter-rate format (fp32)
  takes one moving beat every fourth cycle, after three idle ones. Its format may differ
  from the tile's if both run at the same rate (double, single or quarter), both float or
  both int8, and both MX or neither, and neither fp32 nor tf32 unless both are the same
  format (the golden model's :func:`~sim.golden.systolic.schedule` refuses other programs).
* ``TRANSPOSE`` (field ``n``): the transpose pass of the latest tile, which must be K x M
  with ``n <= K`` and not MX. It takes no moving beats: the sequencer makes ``n`` vectors,
  one a cycle, vector j selecting contraction index j (element ``j % 2`` of row ``j // 2``
  for a double-rate tile), and each PE row passes its selected elements' codes down in
  place of a sum (:class:`~hdl.tensor.pe.ProcessingElement`). So beat j on ``out`` is row j
  of the tile, each of its first m columns the element's code, zero-extended, as loaded:
  the output is the M x K transpose, bit for bit, in the tile's own format. PSUM is
  overwritten as by a multiply (columns >= m keep their contents). Its timing is that of
  a single-rate multiply of ``n`` beats.

The MX formats run four products per PE per cycle: an MX word is a quad of elements along K
with the E8M0 scale of their block above them (the instruction set's ``mxfp8_x4`` and
``mxfp4_x4``; :class:`~hdl.tensor.params.SystolicParams` gives the layout), so PE row r
holds contraction indices ``4r .. 4r + 3`` and an MX command's ``k`` counts words (quads):
the stationary scales load with the tile, the moving ones stream with the vectors.

The whole datapath advances on one enable, ``~out.valid | out.ready``, so backpressure on
``out`` stalls it and an idle ``moving`` stream only inserts bubbles. Cycle counts are given
exactly by :func:`sim.golden.systolic.schedule`.
"""

from __future__ import annotations

from amaranth import Array, Cat, ClockSignal, Const, Instance, Module, Mux, ResetSignal, Signal
from amaranth.lib import data, enum, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from .params import SystolicParams
from .pe import ProcessingElement, ctl_layout, pe_ports

__all__ = ["Op", "PsumColumn", "SystolicArray", "SystolicControl", "SystolicParams",
           "SystolicRow", "cmd_layout", "column_ports", "control_ports", "meta_layout",
           "moving_layout", "row_ports", "stationary_layout"]


class Op(enum.Enum, shape=2):
    LOAD = 0
    MULTIPLY = 1
    TRANSPOSE = 2


def cmd_layout(params: SystolicParams) -> data.StructLayout:
    """Payload of the ``cmd`` stream (``fmt``: the input format's code)."""
    return data.StructLayout({
        "op": Op,
        "fmt": params.code_bits,
        "k": params.k_bits,
        "m": params.m_bits,
        "n": params.n_bits,
        "accumulate": 1,
    })


def meta_layout(params: SystolicParams) -> data.StructLayout:
    """What travels with a moving vector to the PSUM columns (``m_left`` counts down one per
    column: column c writes the bank while it is nonzero, i.e. for c < m; ``int``: the sum
    is an int32 one)."""
    return data.StructLayout({
        "valid": 1,
        "index": params.index_bits,
        "accumulate": 1,
        "m_left": params.m_bits,
        "int": 1,
    })


def row_ports(params: SystolicParams) -> dict:
    """Port signature of one PE row (also the port list of its emitted Verilog module)."""
    stat = params.rows * params.beat_columns * params.width
    ctl = ctl_layout(params).size
    return {
        "en": In(1),
        "mov_in": In(params.rows * params.width),
        "mov_out": Out(params.rows * params.width),
        "ctl_in": In(ctl),
        "ctl_out": Out(ctl),
        "mk_in": In(params.k_bits),
        "mk_out": Out(params.k_bits),
        "psum_in": In(32 * params.cols),
        "psum_out": Out(32 * params.cols),
        "stat_in": In(stat),
        "stat_out": Out(stat),
        "wv_in": In(1),
        "wv_out": Out(1),
        "wb_in": In(1),
        "wb_out": Out(1),
        "ws_in": In(params.skip_bits),
        "ws_out": Out(params.skip_bits),
        "wk_in": In(params.k_bits),
        "wk_out": Out(params.k_bits),
        "wd_in": In(1),
        "wd_out": Out(1),
    }


def _mask_word(word, keep0, keep1):
    """``word`` with element 0 (bits 0-7 and 16 up) zeroed unless ``keep0`` and element 1
    (bits 8-15, a double-rate word's second element) unless ``keep1``."""
    if len(word) < 16:
        return Mux(keep0, word, 0)
    parts = [Mux(keep0, word[:8], 0), Mux(keep1, word[8:16], 0)]
    if len(word) > 16:
        parts.append(Mux(keep0, word[16:], 0))
    return Cat(*parts)


def column_ports(params: SystolicParams) -> dict:
    """Port signature of one PSUM column (also the port list of its emitted Verilog module)."""
    return {
        "en": In(1),
        "meta_in": In(meta_layout(params).size),
        "meta_out": Out(meta_layout(params).size),
        "sum_in": In(32),
        "vec_in": In(32 * params.cols),
        "vec_out": Out(32 * params.cols),
    }


def _instance(module_name: str, ports: dict, bind) -> Instance:
    """An ``Instance`` of an emitted module whose ports are ``ports``, connected by ``bind``."""
    kwargs = {"i_clk": ClockSignal(), "i_rst": ResetSignal()}
    for name, member in ports.items():
        direction = "i" if member.flow == In else "o"
        kwargs[f"{direction}_{name}"] = bind(name)
    return Instance(module_name, **kwargs)


def _attach(m: Module, name: str, component, ports: dict, wires: dict) -> None:
    m.submodules[name] = component
    for port, member in ports.items():
        if member.flow == In:
            m.d.comb += getattr(component, port).eq(wires[port])
        else:
            m.d.comb += wires[port].eq(getattr(component, port))


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
        # Contraction indices >= k load as zeros: ``wk`` counts the tile's indices left,
        # two per row for a double-rate tile (``wd``).
        step = Mux(self.wd_in, 2, 1) if p.double_rate else 1
        ctl = data.View(ctl_layout(p), self.ctl_in)
        mstep = Mux(ctl.double, 2, 1) if p.double_rate else 1
        with m.If(self.en):
            m.d.sync += [self.mov_out.eq(self.mov_in[lw:]), self.ctl_out.eq(self.ctl_in),
                         self.stat_out.eq(self.stat_in[ww:]), self.wv_out.eq(self.wv_in),
                         self.wb_out.eq(self.wb_in), self.ws_out.eq(self.ws_in),
                         self.wd_out.eq(self.wd_in)]
            if p.rows > 1:  # else no row follows
                m.d.sync += [self.wk_out.eq(Mux(self.wk_in > step, self.wk_in - step, 0)),
                             self.mk_out.eq(Mux(self.mk_in > mstep, self.mk_in - mstep, 0))]
        keep0 = self.wk_in > 0
        keep1 = Mux(self.wd_in, self.wk_in > 1, keep0) if p.double_rate else keep0
        weights = Cat(*[_mask_word(self.stat_in[j * lw:(j + 1) * lw], keep0, keep1)
                        for j in range(p.beat_columns)])
        mkeep0 = self.mk_in > 0
        mkeep1 = Mux(ctl.double, self.mk_in > 1, mkeep0) if p.double_rate else mkeep0
        chain = {"x": _mask_word(self.mov_in[:lw], mkeep0, mkeep1), "ctl": self.ctl_in,
                 "w": weights,
                 "wv": self.wv_in, "wb": self.wb_in, "ws": self.ws_in}
        widths = {"x": lw, "ctl": ctl_layout(p).size, "w": ww, "wv": 1, "wb": 1,
                  "ws": p.skip_bits}
        for col in range(p.cols):
            wires = {"en": self.en,
                     "psum_in": self.psum_in[32 * col:32 * (col + 1)],
                     "psum_out": self.psum_out[32 * col:32 * (col + 1)]}
            nxt = {}
            for name, value in chain.items():
                wires[f"{name}_in"] = value
                wires[f"{name}_out"] = nxt[name] = Signal(widths[name], name=f"{name}_{col}")
            if self.pe_module is None:
                _attach(m, f"pe_{col}", ProcessingElement(p), pe_ports(p), wires)
            else:
                m.submodules[f"pe_{col}"] = _instance(self.pe_module, pe_ports(p),
                                                      wires.__getitem__)
            chain = nxt
        return m


class PsumColumn(wiring.Component):
    """One column of the PSUM bank with its read-modify-write, chained left to right.

    A vector's metadata and its column sum arrive one cycle later at each column, exactly
    as the sums leave the bottom PE row. Stage A reads the bank at ``index``; stage B writes
    ``sum`` (overwrite) or ``add32(bank, sum)`` (accumulate) where ``m_left`` is nonzero, and
    appends the column's new value to ``vec``, which thereby leaves the last column as one
    aligned row of the bank (the deskew, built from identical columns).
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
        m.submodules.bank = bank = memory.Memory(shape=32, depth=p.bank_depth, init=[])
        wp = bank.write_port()
        rp = bank.read_port(domain="sync", transparent_for=(wp,))
        meta_in = data.View(layout, self.meta_in)
        meta_a = Signal(layout)
        sum_a = Signal(32)
        m.d.comb += [rp.addr.eq(meta_in.index), rp.en.eq(self.en)]
        with m.If(self.en):
            m.d.sync += [meta_a.eq(meta_in), sum_a.eq(self.sum_in)]

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
        meta_out = data.View(layout, self.meta_out)
        m.d.comb += [
            meta_out.valid.eq(meta_a.valid),
            meta_out.index.eq(meta_a.index),
            meta_out.accumulate.eq(meta_a.accumulate),
            meta_out.m_left.eq(Mux(write, meta_a.m_left - 1, 0)),
            meta_out.int.eq(meta_a.int),
        ]
        with m.If(self.en):
            m.d.sync += self.vec_out.eq(Cat(self.vec_in[32:], updated))
        return m


def stationary_layout(params: SystolicParams) -> data.ArrayLayout:
    """Payload of the ``stationary`` stream: ``beat_columns`` columns of ``rows`` words."""
    return data.ArrayLayout(data.ArrayLayout(params.width, params.rows), params.beat_columns)


def moving_layout(params: SystolicParams) -> data.ArrayLayout:
    """Payload of the ``moving`` stream: one column of ``rows`` words."""
    return data.ArrayLayout(params.width, params.rows)


def control_ports(params: SystolicParams) -> dict:
    """Port signature of the sequencer (also the port list of its emitted Verilog module)."""
    w = params.width
    return {
        "cmd": In(stream.Signature(cmd_layout(params))),
        "stationary": In(stream.Signature(stationary_layout(params))),
        "moving": In(stream.Signature(moving_layout(params))),
        "out_valid": Out(1),
        "out_ready": In(1),
        "last_meta": In(meta_layout(params).size),
        "en": Out(1),
        "mov": Out(params.rows * w),
        "ctl": Out(ctl_layout(params).size),
        "mk": Out(params.k_bits),
        "stat": Out(params.rows * params.beat_columns * w),
        "wv": Out(1),
        "wb": Out(1),
        "ws": Out(params.skip_bits),
        "wk": Out(params.k_bits),
        "wd": Out(1),
        "meta": Out(meta_layout(params).size),
    }


class SystolicControl(wiring.Component):
    """The array's sequencer: instruction decode, stationary loading, moving injection.

    Drives the first stage of both waves (``mov`` with its control ``ctl`` and index count
    ``mk``; ``stat`` with
    ``wv``/``wb``/``ws``/``wk``/``wd``), the metadata that reaches the PSUM columns ``rows + 1``
    cycles later (``meta``), and the pipeline enable ``en``; ``last_meta`` (the metadata leaving
    the last PSUM column) becomes ``out_valid``.
    """

    def __init__(self, params: SystolicParams):
        if not isinstance(params, SystolicParams):
            raise TypeError(f"params must be a SystolicParams, not {params!r}")
        self.params = params
        super().__init__(control_ports(params))

    def elaborate(self, platform):
        p = self.params
        m = Module()
        layout = meta_layout(p)
        bc = p.beat_columns
        en = self.en
        m.d.comb += en.eq(~self.out_valid | self.out_ready)

        cur_bank = Signal()
        cur_k = Signal(p.k_bits)
        cur_m = Signal(p.m_bits)
        cur_fmt = Signal(p.code_bits)
        load_run = Signal()
        load_bank = Signal()
        load_k = Signal(p.k_bits)
        load_m = Signal(p.m_bits)
        load_skip = Signal(p.skip_bits)
        load_double = Signal()
        mul_run = Signal()
        mul_bank = Signal()
        mul_k = Signal(p.k_bits)
        mul_m = Signal(p.m_bits)
        mul_count = Signal(p.index_bits)
        mul_last = Signal(p.index_bits)
        mul_acc = Signal()
        mul_wfmt = Signal(p.code_bits)
        mul_xfmt = Signal(p.code_bits)
        mul_double = Signal()
        mul_int = Signal()
        mul_tr = Signal()
        # A quarter-rate multiply waits for its next column (``phase``); without a
        # quarter-rate format no multiply does.
        mul_quarter = Signal(name="mul_quarter") if p.quarter_rate else None
        phase = Signal(2, name="phase") if p.quarter_rate else None

        inject_vector = Signal()
        last_vector = Signal()
        beat = Signal()
        last_beat = Signal()
        load_free = Signal()
        m.d.comb += [
            self.moving.ready.eq(mul_run & ~mul_tr & en
                                 & ((~mul_quarter | (phase == 3)) if p.quarter_rate else 1)),
            inject_vector.eq(Mux(mul_tr, mul_run & en, self.moving.valid & self.moving.ready)),
            last_vector.eq(inject_vector & (mul_count == mul_last)),
            self.stationary.ready.eq(
                load_run & en & (~mul_run | (mul_bank != load_bank) | last_vector)),
            beat.eq(self.stationary.valid & self.stationary.ready),
            last_beat.eq(beat & (load_skip >= load_m - 1)),
            load_free.eq(~load_run | last_beat),
        ]

        cmd = self.cmd.payload
        with m.If(cmd.op == Op.LOAD):
            m.d.comb += self.cmd.ready.eq(load_free)
        with m.Else():
            m.d.comb += self.cmd.ready.eq(load_free & (~mul_run | last_vector))

        # Per-format constants, looked up by code (codes past the list read as zero).
        def table(flags):
            flags = [int(f) for f in flags]
            flags += [0] * ((1 << p.code_bits) - len(flags))
            return Array(Const(f, 1) for f in flags)[cmd.fmt]

        cmd_double = table(p.is_double(f) for f in p.formats)
        cmd_int = table(p.is_int(f) for f in p.formats)
        cmd_quarter = table(p.is_quarter(f) for f in p.formats) if p.quarter_rate else None
        cmd_mx = table(p.is_mx(f) for f in p.formats)
        mul_mx = Signal()

        with m.If(beat):
            m.d.sync += load_skip.eq(load_skip + bc)
            with m.If(last_beat):
                m.d.sync += load_run.eq(0)
        if p.quarter_rate:
            with m.If(inject_vector):
                m.d.sync += phase.eq(0)
            with m.Elif(en & mul_run & (phase != 3)):
                m.d.sync += phase.eq(phase + 1)
        with m.If(inject_vector):
            m.d.sync += mul_count.eq(mul_count + 1)
            with m.If(last_vector):
                m.d.sync += mul_run.eq(0)
        with m.If(self.cmd.valid & self.cmd.ready):
            with m.If(cmd.op == Op.LOAD):
                m.d.sync += [load_run.eq(1), load_bank.eq(~cur_bank), load_k.eq(cmd.k),
                             load_m.eq(cmd.m), load_skip.eq(bc - 1), cur_bank.eq(~cur_bank),
                             cur_k.eq(cmd.k), cur_m.eq(cmd.m), cur_fmt.eq(cmd.fmt),
                             load_double.eq(cmd_double)]
            with m.Elif(cmd.op == Op.MULTIPLY):
                m.d.sync += [mul_run.eq(1), mul_count.eq(0), mul_last.eq(cmd.n - 1),
                             mul_acc.eq(cmd.accumulate), mul_bank.eq(cur_bank),
                             mul_k.eq(cur_k), mul_m.eq(cur_m), mul_wfmt.eq(cur_fmt),
                             mul_xfmt.eq(cmd.fmt), mul_double.eq(cmd_double),
                             mul_int.eq(cmd_int), mul_mx.eq(cmd_mx), mul_tr.eq(0)]
                if p.quarter_rate:
                    m.d.sync += [mul_quarter.eq(cmd_quarter), phase.eq(0)]
            with m.Else():  # TRANSPOSE: the latest tile's rows, in its own format
                m.d.sync += [mul_run.eq(1), mul_count.eq(0), mul_last.eq(cmd.n - 1),
                             mul_acc.eq(0), mul_bank.eq(cur_bank), mul_k.eq(cur_k),
                             mul_m.eq(cur_m), mul_wfmt.eq(cur_fmt), mul_xfmt.eq(cur_fmt),
                             mul_double.eq(load_double), mul_int.eq(0), mul_mx.eq(0),
                             mul_tr.eq(1)]
                if p.quarter_rate:
                    m.d.sync += [mul_quarter.eq(0), phase.eq(0)]

        # Stage 1 of both waves; the metadata waits `rows` more cycles for the bottom row.
        columns = self.stationary.payload
        weights = Cat(*[columns[j][r] for r in range(p.rows) for j in range(bc)])
        ctl = Signal(ctl_layout(p))
        m.d.comb += [ctl.bank.eq(mul_bank), ctl.wfmt.eq(mul_wfmt), ctl.xfmt.eq(mul_xfmt),
                     ctl.double.eq(mul_double), ctl.int.eq(mul_int), ctl.transpose.eq(mul_tr)]
        # A transpose's vector j selects contraction index j: bit 0 of word j, or of a
        # double-rate tile bit 0 (j even) or bit 8 (j odd) of word j // 2.
        select = []
        for r in range(p.rows):
            if p.double_rate:
                even = Mux(mul_double, mul_count == 2 * r, mul_count == r)
                odd = mul_double & (mul_count == 2 * r + 1)
                select.append(Cat(even, Const(0, 7), odd, Const(0, p.width - 9)))
            else:
                select.append(Cat(mul_count == r, Const(0, p.width - 1)))
        selector = Cat(*select)
        if p.has_mx:
            m.d.comb += ctl.mx.eq(mul_mx)
        meta = [Signal(layout, name=f"meta_{j}") for j in range(1, p.rows + 2)]
        with m.If(en):
            m.d.sync += [
                # zeroed by the rows where no vector is
                self.mov.eq(Mux(mul_tr, selector, self.moving.payload)),
                self.ctl.eq(ctl),
                self.mk.eq(Mux(inject_vector, mul_k, 0)),
                self.stat.eq(weights),
                self.wv.eq(beat),
                self.wk.eq(load_k),
                self.wd.eq(load_double),
                self.wb.eq(load_bank),
                self.ws.eq(load_skip),
                meta[0].valid.eq(inject_vector),
                meta[0].index.eq(mul_count),
                meta[0].accumulate.eq(mul_acc),
                meta[0].m_left.eq(mul_m),
                meta[0].int.eq(mul_int),
                self.out_valid.eq(data.View(layout, self.last_meta).valid),
            ]
            m.d.sync += [meta[j].eq(meta[j - 1]) for j in range(1, p.rows + 1)]
        m.d.comb += self.meta.eq(meta[p.rows])
        return m


class SystolicArray(wiring.Component):
    """The tensor engine's systolic array: sequencer, ``rows`` PE rows, ``cols`` PSUM columns.

    See the module docstring for the instruction contract. This is the elaborated (flat)
    form; :mod:`generators.tensor` emits the same structure with each kind of cell emitted
    once as a Verilog module and instantiated. With ``pe_module`` set, the PEs are instances
    of that separately emitted module (as in :class:`SystolicRow`).
    """

    def __init__(self, params: SystolicParams, *, pe_module: str | None = None):
        if not isinstance(params, SystolicParams):
            raise TypeError(f"params must be a SystolicParams, not {params!r}")
        self.params = params
        self.pe_module = pe_module
        super().__init__({
            "cmd": In(stream.Signature(cmd_layout(params))),
            "stationary": In(stream.Signature(stationary_layout(params))),
            "moving": In(stream.Signature(moving_layout(params))),
            "out": Out(stream.Signature(data.ArrayLayout(32, params.cols))),
        })

    def elaborate(self, platform):
        p = self.params
        m = Module()
        m.submodules.control = control = SystolicControl(p)
        for name in ("cmd", "stationary", "moving"):
            wiring.connect(m, wiring.flipped(getattr(self, name)), getattr(control, name))
        m.d.comb += [self.out.valid.eq(control.out_valid), control.out_ready.eq(self.out.ready)]

        psum = Const(0, 32 * p.cols)
        chain = {"mov": control.mov, "ctl": control.ctl, "mk": control.mk, "stat": control.stat,
                 "wv": control.wv, "wb": control.wb, "ws": control.ws, "wk": control.wk,
                 "wd": control.wd}
        ports = row_ports(p)
        for r in range(p.rows):
            wires = {"en": control.en, "psum_in": psum,
                     "psum_out": Signal(32 * p.cols, name=f"psum_{r}")}
            nxt = {}
            for name, value in chain.items():
                wires[f"{name}_in"] = value
                wires[f"{name}_out"] = nxt[name] = Signal(ports[f"{name}_out"].shape,
                                                          name=f"{name}_{r}")
            _attach(m, f"row_{r}", SystolicRow(p, pe_module=self.pe_module), ports, wires)
            psum, chain = wires["psum_out"], nxt

        meta_in, vec_in = control.meta, Const(0, 32 * p.cols)
        for col in range(p.cols):
            wires = {
                "en": control.en,
                "meta_in": meta_in,
                "meta_out": Signal(meta_layout(p).size, name=f"col_meta_{col}"),
                "sum_in": psum[32 * col:32 * (col + 1)],
                "vec_in": vec_in,
                "vec_out": Signal(32 * p.cols, name=f"col_vec_{col}"),
            }
            _attach(m, f"column_{col}", PsumColumn(p), column_ports(p), wires)
            meta_in, vec_in = wires["meta_out"], wires["vec_out"]
        m.d.comb += [control.last_meta.eq(meta_in), self.out.payload.eq(vec_in)]
        return m
