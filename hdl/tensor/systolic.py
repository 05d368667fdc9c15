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

Structure: :class:`SystolicControl` (sequencer, with one :class:`SystolicGroup` runner per
row group), ``rows`` identical :class:`SystolicRow` (``cols``
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
  format (the golden model's :func:`~sim.golden.systolic_cycles.schedule` refuses other programs).
* ``TRANSPOSE`` (field ``n``): the transpose pass of the latest tile, which must be K x M
  with ``n <= K`` and not MX. It takes no moving beats: the sequencer makes ``n`` vectors,
  one a cycle, vector j selecting contraction index j (element ``j % 2`` of row ``j // 2``
  for a double-rate tile), and each PE row passes its selected elements' codes down in
  place of a sum (:class:`~hdl.tensor.pe.ProcessingElement`). So beat j on ``out`` is row j
  of the tile, each of its first m columns the element's code, zero-extended, as loaded:
  the output is the M x K transpose, bit for bit, in the tile's own format. PSUM is
  overwritten as by a multiply (columns >= m keep their contents). Its timing is that of
  a single-rate multiply of ``n`` beats.

Tile positions (an array whose ``params.tiles`` splits it, ``ways = max(tiles)``): the
array is ``ways x ways`` groups of ``rows / ways`` PE rows by ``cols / ways`` PE columns. A
``LOAD`` names the tile's position (``row``, ``col``) and size (``rows``, ``cols``), in
groups; its words sit at the tile's own PE rows of each beat (the other rows' words are
ignored) and its columns fill PE columns from the tile's first on. In every group pair of
the tile it fills the bank that the latest tile of its first group pair does not use. A
``MULTIPLY`` names a position where a tile is loaded and runs on that tile: it takes its
vectors from the ``moving`` words of the tile's row groups (``moving`` has a ``valid`` and a
``ready`` per row group; a multiply over several row groups takes their words together) and
gives its beats on the column groups of the tile (``out`` has a ``valid`` per column group:
beat j holds PSUM row j of those groups' columns, the tile's ``m`` columns updated from its
first). A ``TRANSPOSE`` runs on the latest tile. Multiplies on disjoint row groups and
disjoint column groups run at once; loads take turns on the one load path, each behind the
multiplies that read the bank it fills in its groups. An untiled array (``ways = 1``) is
the whole array at position (0, 0), its commands without the position fields.

The MX formats run four products per PE per cycle: an MX word is a quad of elements along K
with the E8M0 scale of their block above them (the instruction set's ``mxfp8_x4`` and
``mxfp4_x4``; :class:`~hdl.tensor.params.SystolicParams` gives the layout), so PE row r
holds contraction indices ``4r .. 4r + 3`` and an MX command's ``k`` counts words (quads):
the stationary scales load with the tile, the moving ones stream with the vectors.

The whole datapath advances on one enable, ``~out.valid | out.ready``, so backpressure on
``out`` stalls it and an idle ``moving`` stream only inserts bubbles. Cycle counts are given
exactly by :func:`sim.golden.systolic_cycles.schedule`.
"""

from __future__ import annotations

from amaranth import Array, Cat, ClockSignal, Const, Instance, Module, Mux, ResetSignal, Signal
from amaranth.lib import data, enum, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for

from .params import SystolicParams
from .pe import ProcessingElement, ctl_layout, pe_ports

__all__ = ["Op", "PsumColumn", "SystolicArray", "SystolicControl", "SystolicGroup",
           "SystolicParams", "SystolicRow", "cmd_layout", "column_ports", "control_ports",
           "group_ports", "group_stream", "job_layout", "meta_layout", "moving_layout",
           "moving_signature", "out_signature", "row_ports", "stationary_layout"]


class Op(enum.Enum, shape=2):
    LOAD = 0
    MULTIPLY = 1
    TRANSPOSE = 2


def cmd_layout(params: SystolicParams) -> data.StructLayout:
    """Payload of the ``cmd`` stream (``fmt``: the input format's code). A tiled array's
    commands also name a tile position, ``row`` and ``col`` in groups (``rows / ways`` PE
    rows, ``cols / ways`` PE columns), and a LOAD the tile's size in groups, ``rows`` and
    ``cols``."""
    fields = {
        "op": Op,
        "fmt": params.code_bits,
        "k": params.k_bits,
        "m": params.m_bits,
        "n": params.n_bits,
        "accumulate": 1,
    }
    if params.ways > 1:
        fields.update({"row": params.group_bits, "col": params.group_bits,
                       "rows": params.size_bits, "cols": params.size_bits})
    return data.StructLayout(fields)


def meta_layout(params: SystolicParams) -> data.StructLayout:
    """What travels with a moving vector to the PSUM columns (``m_left`` counts down one per
    column: column c writes the bank while it is nonzero, i.e. for c < m; ``int``: the sum
    is an int32 one, on an array with int8 only: elsewhere it would be a constant 0 carried
    through every stage of the pipeline). A tiled array carries one per column group."""
    return data.StructLayout({
        "valid": 1,
        "index": params.index_bits,
        "accumulate": 1,
        "m_left": params.m_bits,
        **({"int": 1} if params.has_int else {}),
    })


def _wlo_bits(params: SystolicParams) -> int:
    return params.beat_columns.bit_length()


def row_ports(params: SystolicParams) -> dict:
    """Port signature of one PE row (also the port list of its emitted Verilog module)."""
    stat = params.rows * params.beat_columns * params.width
    ctl = ctl_layout(params).size
    w = params.ways
    ports = {
        "en": In(1),
        "mov_in": In(params.rows * params.width),
        "mov_out": Out(params.rows * params.width),
        "ctl_in": In(w * ctl),
        "ctl_out": Out(w * ctl),
        "mk_in": In(w * params.k_bits),
        "mk_out": Out(w * params.k_bits),
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
        "wk_in": In(params.wk_bits),
        "wk_out": Out(params.wk_bits),
        "wd_in": In(1),
        "wd_out": Out(1),
    }
    if w > 1:
        ports.update({"wr_in": In(w), "wr_out": Out(w), "wlo_in": In(_wlo_bits(params)),
                      "wlo_out": Out(_wlo_bits(params)), "last": In(1)})
    return ports


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


def column_ports(params: SystolicParams) -> dict:
    """Port signature of one PSUM column (also the port list of its emitted Verilog module)."""
    w = params.ways
    ports = {
        "en": In(1),
        "meta_in": In(w * meta_layout(params).size),
        "meta_out": Out(w * meta_layout(params).size),
        "sum_in": In(32),
        "vec_in": In(32 * params.cols),
        "vec_out": Out(32 * params.cols),
    }
    if w > 1:
        ports["last"] = In(1)
    return ports


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
            widths["wlo"] = _wlo_bits(p)
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
            if self.pe_module is None:
                _attach(m, f"pe_{col}", ProcessingElement(p), ports, wires)
            else:
                m.submodules[f"pe_{col}"] = _instance(self.pe_module, ports, wires.__getitem__)
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


def stationary_layout(params: SystolicParams) -> data.ArrayLayout:
    """Payload of the ``stationary`` stream: ``beat_columns`` columns of ``rows`` words."""
    return data.ArrayLayout(data.ArrayLayout(params.width, params.rows), params.beat_columns)


def moving_layout(params: SystolicParams) -> data.ArrayLayout:
    """Payload of the ``moving`` stream: one column of ``rows`` words."""
    return data.ArrayLayout(params.width, params.rows)


def group_stream(shape, valid: int, ready: int):
    """A stream whose ``valid`` and ``ready`` have one bit per group: a plain
    :class:`~amaranth.lib.stream.Signature` for one group."""
    if valid == ready == 1:
        return stream.Signature(shape)
    return wiring.Signature({"payload": Out(shape), "valid": Out(valid), "ready": In(ready)})


def moving_signature(params: SystolicParams):
    """The ``moving`` stream: ``rows`` words, a ``valid`` and a ``ready`` per row group (the
    words of row group g are its vector; a multiply over several row groups takes their
    words together)."""
    return group_stream(moving_layout(params), params.ways, params.ways)


def out_signature(params: SystolicParams):
    """The ``out`` stream: ``cols`` words, a ``valid`` per column group, one ``ready``."""
    return group_stream(data.ArrayLayout(32, params.cols), params.ways, 1)


def job_layout(params: SystolicParams) -> data.StructLayout:
    """A multiply or transpose as one row group's runner holds it: ``last`` the index of
    its last vector, ``rows`` and ``cols`` the masks of its tile's groups, ``base`` the
    contraction indices of the tile above this row group, ``primary`` this group is the
    tile's first (its runner gives the vectors' PSUM metadata), ``c0`` the tile's first
    column group; the rest as the PE's control."""
    fields = {"tr": 1, "last": params.index_bits, "acc": 1, "bank": 1, "k": params.k_bits,
              "m": params.m_bits, "wfmt": params.code_bits, "xfmt": params.code_bits,
              "double": 1, "int": 1, "mx": 1, "quarter": 1, "rows": params.ways,
              "cols": params.ways, "base": bits_for(2 * params.rows), "primary": 1,
              "c0": params.group_bits}
    return data.StructLayout(fields)


def group_ports(params: SystolicParams) -> dict:
    """Port signature of one row group's runner (also its emitted Verilog module's)."""
    w = params.ways
    meta = meta_layout(params).size
    return {
        "en": In(1),
        "valid": In(w),
        "payload": In(params.group_rows * params.width),
        "ready": Out(1),
        "start": In(1),
        "job_in": In(job_layout(params).size),
        "job": Out(job_layout(params).size),
        "run": Out(1),
        "inject": Out(1),
        "last": Out(1),
        "index": Out(params.index_bits),
        "mov": Out(params.group_rows * params.width),
        "ctl": Out(ctl_layout(params).size),
        "mk": Out(params.k_bits),
        "meta_in": In(meta),
        "meta_out": Out(meta),
    }


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


def control_ports(params: SystolicParams) -> dict:
    """Port signature of the sequencer (also the port list of its emitted Verilog module)."""
    w, ways = params.width, params.ways
    ports = {
        "cmd": In(stream.Signature(cmd_layout(params))),
        "stationary": In(stream.Signature(stationary_layout(params))),
        "moving": In(moving_signature(params)),
        "out_valid": Out(ways),
        "out_ready": In(1),
        "last_meta": In(ways * meta_layout(params).size),
        "en": Out(1),
        "mov": Out(params.rows * w),
        "ctl": Out(ways * ctl_layout(params).size),
        "mk": Out(ways * params.k_bits),
        "stat": Out(params.rows * params.beat_columns * w),
        "wv": Out(1),
        "wb": Out(1),
        "ws": Out(params.skip_bits),
        "wk": Out(params.wk_bits),
        "wd": Out(1),
        "meta": Out(ways * meta_layout(params).size),
    }
    if ways > 1:
        ports.update({"wr": Out(ways), "wlo": Out(_wlo_bits(params))})
    return ports


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
            if self.group_module is None:
                _attach(m, f"group_{g}", SystolicGroup(p), ports, wires)
            else:
                m.submodules[f"group_{g}"] = _instance(self.group_module, ports,
                                                       wires.__getitem__)
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
            "moving": In(moving_signature(params)),
            "out": Out(out_signature(params)),
        })

    def elaborate(self, platform):
        p = self.params
        m = Module()
        tiled = p.ways > 1
        m.submodules.control = control = SystolicControl(p)
        for name in ("cmd", "stationary", "moving"):
            wiring.connect(m, wiring.flipped(getattr(self, name)), getattr(control, name))
        m.d.comb += [self.out.valid.eq(control.out_valid), control.out_ready.eq(self.out.ready)]

        psum = Const(0, 32 * p.cols)
        chain = {"mov": control.mov, "ctl": control.ctl, "mk": control.mk, "stat": control.stat,
                 "wv": control.wv, "wb": control.wb, "ws": control.ws, "wk": control.wk,
                 "wd": control.wd}
        if tiled:
            chain.update({"wr": control.wr, "wlo": control.wlo})
        ports = row_ports(p)
        for r in range(p.rows):
            wires = {"en": control.en, "psum_in": psum,
                     "psum_out": Signal(32 * p.cols, name=f"psum_{r}")}
            if tiled:
                wires["last"] = Const(int(r % p.group_rows == p.group_rows - 1), 1)
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
                "meta_out": Signal(len(control.meta), name=f"col_meta_{col}"),
                "sum_in": psum[32 * col:32 * (col + 1)],
                "vec_in": vec_in,
                "vec_out": Signal(32 * p.cols, name=f"col_vec_{col}"),
            }
            if tiled:
                wires["last"] = Const(int(col % p.group_cols == p.group_cols - 1), 1)
            _attach(m, f"column_{col}", PsumColumn(p), column_ports(p), wires)
            meta_in, vec_in = wires["meta_out"], wires["vec_out"]
        m.d.comb += [control.last_meta.eq(meta_in), self.out.payload.eq(vec_in)]
        return m
