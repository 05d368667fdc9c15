"""Weight-stationary systolic array: the tensor engine's matmul datapath.

``rows`` PE rows hold the contraction (partition) axis K, ``cols`` PE columns the stationary
free axis M. PE (r, c) holds ``stationary[r, c]`` (with double rate: ``stationary[2r + l, c]``
in lane l). A moving vector (one column of the K x N moving tile) enters row r after r cycles of
skew and travels right; partial sums travel down, so column c sums k = 0 .. K-1 in order from
+0.0 and leaves the bottom row as ``dst[c, n]``. Each column's sum then meets its PSUM column,
one cycle after the column to its left, which stores it (overwrite) or adds it to what the bank
holds (accumulate) and appends the new value to the output row passing along the columns, so
the row leaves the last column aligned (the deskew). Each PSUM row written leaves on ``out``.

Structure: :class:`SystolicControl` (sequencer), ``rows`` identical :class:`SystolicRow` (``cols``
:class:`~hdl.tensor.pe.ProcessingElement` each, plus one stage of the input skew) and ``cols``
identical :class:`PsumColumn`, so that a generator can emit each kind of cell once.

Instructions (``cmd`` stream, executed in order):

* ``LOAD`` (LoadStationary, fields ``k``, ``m``): takes ``k`` beats from ``stationary``, beat i
  holding row i of the K x M stationary tile (``cols`` elements; columns >= m are ignored by
  the PSUM write). Contraction indices >= k read as zero. The tile is loaded into shadow
  registers while an earlier multiply still runs, then committed by a token that travels with
  the moving wavefront, so it applies exactly to the multiplies that follow it.
* ``MULTIPLY`` (MultiplyMoving, fields ``n``, ``accumulate``): takes ``n`` beats from
  ``moving``, beat j holding column j of the K x N moving tile (``k_max`` elements, indices
  >= k zeroed), and produces ``n`` beats on ``out``: beat j is PSUM row j after the update,
  ``cols`` fp32 (or int32) values; columns >= m keep the bank's earlier contents.

The whole datapath advances on one enable, ``~out.valid | out.ready``, so backpressure on
``out`` stalls it and an idle ``moving`` stream only inserts bubbles. Cycle counts are given
exactly by :func:`sim.golden.systolic.schedule`.
"""

from __future__ import annotations

from amaranth import Cat, ClockSignal, Const, Instance, Module, Mux, ResetSignal, Signal
from amaranth.lib import data, enum, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from .params import SystolicParams
from .pe import ProcessingElement, pe_ports

__all__ = ["Op", "PsumColumn", "SystolicArray", "SystolicControl", "SystolicParams",
           "SystolicRow", "cmd_layout", "column_ports", "control_ports", "meta_layout",
           "row_ports"]


class Op(enum.Enum, shape=1):
    LOAD = 0
    MULTIPLY = 1


def cmd_layout(params: SystolicParams) -> data.StructLayout:
    """Payload of the ``cmd`` stream."""
    return data.StructLayout({
        "op": Op,
        "k": params.k_bits,
        "m": params.m_bits,
        "n": params.n_bits,
        "accumulate": 1,
    })


def meta_layout(params: SystolicParams) -> data.StructLayout:
    """What travels with a moving vector to the PSUM columns (``m_left`` counts down one per
    column: column c writes the bank while it is nonzero, i.e. for c < m)."""
    return data.StructLayout({
        "valid": 1,
        "index": params.index_bits,
        "accumulate": 1,
        "m_left": params.m_bits,
    })


def row_ports(params: SystolicParams) -> dict:
    """Port signature of one PE row (also the port list of its emitted Verilog module)."""
    return {
        "en": In(1),
        "mov_in": In(params.k_max * params.width),
        "mov_out": Out(params.k_max * params.width),
        "c_in": In(1),
        "c_out": Out(1),
        "psum_in": In(32 * params.cols),
        "psum_out": Out(32 * params.cols),
        "shadow_we": In(params.lanes),
        "shadow_clear": In(1),
        "shadow_data": In(params.width * params.cols),
    }


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
    """``cols`` PEs chained left to right (moving elements and commit token flow right).

    The row takes lanes ``0 .. lanes-1`` of ``mov_in`` (its own contraction indices) and
    passes the vector on, one cycle later and shifted down by one row's lanes, to the next
    row: that is the input skew, built from identical rows. With ``pe_module`` set, the PEs
    are instances of that separately emitted Verilog module (ports :func:`pe_ports`).
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
        lw = p.lanes * p.width
        with m.If(self.en):
            m.d.sync += [self.mov_out.eq(self.mov_in[lw:]), self.c_out.eq(self.c_in)]
        x, c = self.mov_in[:lw], self.c_in
        for col in range(p.cols):
            wires = {
                "en": self.en,
                "x_in": x,
                "x_out": Signal(lw, name=f"x_{col}"),
                "c_in": c,
                "c_out": Signal(name=f"c_{col}"),
                "psum_in": self.psum_in[32 * col:32 * (col + 1)],
                "psum_out": self.psum_out[32 * col:32 * (col + 1)],
                "shadow_we": self.shadow_we,
                "shadow_clear": self.shadow_clear,
                "shadow_data": self.shadow_data[p.width * col:p.width * (col + 1)],
            }
            if self.pe_module is None:
                _attach(m, f"pe_{col}", ProcessingElement(p), pe_ports(p), wires)
            else:
                m.submodules[f"pe_{col}"] = _instance(self.pe_module, pe_ports(p),
                                                      wires.__getitem__)
            x, c = wires["x_out"], wires["c_out"]
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

        if p.is_float:
            from hdl.numerics.fpu import FpAdd32

            m.submodules.add = add = FpAdd32()
            m.d.comb += [add.a.eq(rp.data), add.b.eq(sum_a)]
            total = add.y
        else:
            total = (rp.data + sum_a)[:32]
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
        ]
        with m.If(self.en):
            m.d.sync += self.vec_out.eq(Cat(self.vec_in[32:], updated))
        return m


def control_ports(params: SystolicParams) -> dict:
    """Port signature of the sequencer (also the port list of its emitted Verilog module)."""
    w = params.width
    return {
        "cmd": In(stream.Signature(cmd_layout(params))),
        "stationary": In(stream.Signature(data.ArrayLayout(w, params.cols))),
        "moving": In(stream.Signature(data.ArrayLayout(w, params.k_max))),
        "out_valid": Out(1),
        "out_ready": In(1),
        "last_meta": In(meta_layout(params).size),
        "en": Out(1),
        "mov": Out(params.k_max * w),
        "tok": Out(1),
        "meta": Out(meta_layout(params).size),
        "shadow_we": Out(params.rows * params.lanes),
        "shadow_clear": Out(1),
        "shadow_data": Out(params.cols * w),
    }


class SystolicControl(wiring.Component):
    """The array's sequencer: instruction decode, stationary loading, moving injection.

    Drives the first stage of the moving wavefront (``mov``, the commit token ``tok``), the
    metadata that reaches the PSUM columns ``rows + 1`` cycles later (``meta``), the shadow
    weight writes of every row, and the pipeline enable ``en``; ``last_meta`` (the metadata
    leaving the last PSUM column) becomes ``out_valid``.
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
        depth = p.depth
        en = self.en
        m.d.comb += en.eq(~self.out_valid | self.out_ready)

        load_idle, load_fill, load_pend = 0, 1, 2
        load_state = Signal(2)
        mul_run = Signal()
        k_load = Signal(p.k_bits)
        m_load = Signal(p.m_bits)
        k_act = Signal(p.k_bits)
        m_act = Signal(p.m_bits)
        fill_count = Signal(p.k_bits)
        mul_count = Signal(p.index_bits)
        mul_last = Signal(p.index_bits)
        mul_acc = Signal()

        # Stage (cycles of `en` since injection) of the latest commit token, saturating. A
        # shadow write at the end of this cycle is safe once that token has passed every PE
        # it still has to update: stage >= depth - 1, and past it unless it moves now.
        token_age = Signal(range(depth + 1), init=depth)
        token_clear = Signal()
        m.d.comb += token_clear.eq((token_age >= depth - 1) & ((token_age != depth - 1) | en))

        inject_token = Signal()
        inject_vector = Signal()
        m.d.comb += [
            inject_token.eq((load_state == load_pend) & ~mul_run & en),
            inject_vector.eq(mul_run & self.moving.valid & en),
            self.moving.ready.eq(mul_run & en),
        ]
        with m.If(inject_token):
            m.d.sync += token_age.eq(1)
        with m.Elif(en & (token_age != depth)):
            m.d.sync += token_age.eq(token_age + 1)

        cmd = self.cmd.payload
        with m.If(cmd.op == Op.LOAD):
            m.d.comb += self.cmd.ready.eq(load_state == load_idle)
        with m.Else():
            m.d.comb += self.cmd.ready.eq(
                ~mul_run & ((load_state == load_idle) | inject_token))
        with m.If(self.cmd.valid & self.cmd.ready):
            with m.If(cmd.op == Op.LOAD):
                m.d.sync += [load_state.eq(load_fill), fill_count.eq(0),
                             k_load.eq(cmd.k), m_load.eq(cmd.m)]
            with m.Else():
                m.d.sync += [mul_run.eq(1), mul_count.eq(0), mul_last.eq(cmd.n - 1),
                             mul_acc.eq(cmd.accumulate)]

        fill_we = Signal()
        m.d.comb += [
            self.stationary.ready.eq((load_state == load_fill) & token_clear),
            fill_we.eq(self.stationary.valid & self.stationary.ready),
            self.shadow_we.eq(Cat(*[fill_we & (fill_count == k) for k in range(p.k_max)])),
            self.shadow_clear.eq(fill_we & (fill_count == 0)),
            self.shadow_data.eq(self.stationary.payload),
        ]
        with m.If(fill_we):
            m.d.sync += fill_count.eq(fill_count + 1)
            with m.If(fill_count == k_load - 1):
                m.d.sync += load_state.eq(load_pend)
        with m.If(inject_token):
            m.d.sync += [load_state.eq(load_idle), k_act.eq(k_load), m_act.eq(m_load)]
        with m.If(inject_vector):
            m.d.sync += mul_count.eq(mul_count + 1)
            with m.If(mul_count == mul_last):
                m.d.sync += mul_run.eq(0)

        # Stage 1 of the wavefront; the metadata waits `rows` more cycles for the bottom row.
        masked = Cat(*[Mux(k_act > k, self.moving.payload[k], 0) for k in range(p.k_max)])
        meta = [Signal(layout, name=f"meta_{j}") for j in range(1, p.rows + 2)]
        with m.If(en):
            m.d.sync += [
                self.mov.eq(Mux(inject_vector, masked, 0)),
                self.tok.eq(inject_token),
                meta[0].valid.eq(inject_vector),
                meta[0].index.eq(mul_count),
                meta[0].accumulate.eq(mul_acc),
                meta[0].m_left.eq(m_act),
                self.out_valid.eq(data.View(layout, self.last_meta).valid),
            ]
            m.d.sync += [meta[j].eq(meta[j - 1]) for j in range(1, p.rows + 1)]
        m.d.comb += self.meta.eq(meta[p.rows])
        return m


class SystolicArray(wiring.Component):
    """The tensor engine's systolic array: sequencer, ``rows`` PE rows, ``cols`` PSUM columns.

    See the module docstring for the instruction contract. This is the elaborated (flat)
    form; :mod:`generators.tensor` emits the same structure with each kind of cell emitted
    once as a Verilog module and instantiated.
    """

    def __init__(self, params: SystolicParams):
        if not isinstance(params, SystolicParams):
            raise TypeError(f"params must be a SystolicParams, not {params!r}")
        self.params = params
        w = params.width
        super().__init__({
            "cmd": In(stream.Signature(cmd_layout(params))),
            "stationary": In(stream.Signature(data.ArrayLayout(w, params.cols))),
            "moving": In(stream.Signature(data.ArrayLayout(w, params.k_max))),
            "out": Out(stream.Signature(data.ArrayLayout(32, params.cols))),
        })

    def elaborate(self, platform):
        p = self.params
        m = Module()
        lanes = p.lanes
        m.submodules.control = control = SystolicControl(p)
        for name in ("cmd", "stationary", "moving"):
            wiring.connect(m, wiring.flipped(getattr(self, name)), getattr(control, name))
        m.d.comb += [self.out.valid.eq(control.out_valid), control.out_ready.eq(self.out.ready)]

        psum = Const(0, 32 * p.cols)
        mov_in, c_in = control.mov, control.tok
        for r in range(p.rows):
            wires = {
                "en": control.en,
                "mov_in": mov_in,
                "mov_out": Signal(p.k_max * p.width, name=f"mov_{r}"),
                "c_in": c_in,
                "c_out": Signal(name=f"tok_{r}"),
                "psum_in": psum,
                "psum_out": Signal(32 * p.cols, name=f"psum_{r}"),
                "shadow_we": control.shadow_we[r * lanes:(r + 1) * lanes],
                "shadow_clear": control.shadow_clear,
                "shadow_data": control.shadow_data,
            }
            _attach(m, f"row_{r}", SystolicRow(p), row_ports(p), wires)
            psum, mov_in, c_in = wires["psum_out"], wires["mov_out"], wires["c_out"]

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
