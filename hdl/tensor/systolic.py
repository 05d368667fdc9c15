"""Weight-stationary systolic array: the tensor engine's matmul datapath.

``rows`` PE rows hold the contraction (partition) axis K, ``cols`` PE columns the stationary
free axis M. PE (r, c) holds ``stationary[r, c]`` (with double rate: ``stationary[2r + l, c]``
in lane l). A moving vector (one column of the K x N moving tile) enters row r after r cycles of
skew and travels right; partial sums travel down, so column c sums k = 0 .. K-1 in order from
+0.0 and leaves the bottom row as ``dst[c, n]``. The columns are deskewed and then written to
the PSUM bank: stored as is (overwrite) or added to what the bank holds (accumulate). Each
PSUM row written also leaves on ``out``.

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

__all__ = ["Op", "SystolicArray", "SystolicParams", "SystolicRow", "cmd_layout", "row_ports"]


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


def _meta_layout(params: SystolicParams) -> data.StructLayout:
    return data.StructLayout({
        "valid": 1,        # a moving vector
        "token": 1,        # a stationary commit token
        "index": params.index_bits,
        "accumulate": 1,
        "m": params.m_bits,
    })


def row_ports(params: SystolicParams) -> dict:
    """Port signature of one PE row (also the port list of its emitted Verilog module)."""
    return {
        "en": In(1),
        "x_in": In(params.lanes * params.width),
        "c_in": In(1),
        "psum_in": In(32 * params.cols),
        "psum_out": Out(32 * params.cols),
        "shadow_we": In(params.lanes),
        "shadow_clear": In(1),
        "shadow_data": In(params.width * params.cols),
    }


def _instance(module_name: str, ports: dict, bind) -> Instance:
    """An ``Instance`` of an emitted module whose ports are ``ports``, connected by ``bind``."""
    kwargs = {"i_clk": ClockSignal(), "i_rst": ResetSignal()}
    for name, member in ports.items():
        direction = "i" if member.flow == In else "o"
        kwargs[f"{direction}_{name}"] = bind(name)
    return Instance(module_name, **kwargs)


class SystolicRow(wiring.Component):
    """``cols`` PEs chained left to right (moving elements and commit token flow right).

    With ``pe_module`` set, the PEs are instances of that separately emitted Verilog module
    (ports as :func:`hdl.tensor.pe.pe_ports`) instead of elaborated submodules.
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
        x, c = self.x_in, self.c_in
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
                m.submodules[f"pe_{col}"] = pe = ProcessingElement(p)
                for name, member in pe_ports(p).items():
                    if member.flow == In:
                        m.d.comb += getattr(pe, name).eq(wires[name])
                    else:
                        m.d.comb += wires[name].eq(getattr(pe, name))
            else:
                m.submodules[f"pe_{col}"] = _instance(self.pe_module, pe_ports(p),
                                                      wires.__getitem__)
            x, c = wires["x_out"], wires["c_out"]
        return m


class SystolicArray(wiring.Component):
    """The tensor engine's systolic array with its sequencer and PSUM bank.

    See the module docstring for the instruction contract. ``row_module`` (and ``pe_module``,
    used when rows are elaborated here) select hierarchical emission: the rows become
    instances of a separately emitted Verilog module with the ports of :func:`row_ports`.
    """

    def __init__(self, params: SystolicParams, *, row_module: str | None = None,
                 pe_module: str | None = None):
        if not isinstance(params, SystolicParams):
            raise TypeError(f"params must be a SystolicParams, not {params!r}")
        self.params = params
        self.row_module = row_module
        self.pe_module = pe_module
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
        lanes, lw = p.lanes, p.lanes * p.width
        meta_layout = _meta_layout(p)
        depth = p.depth

        en = Signal()
        m.d.comb += en.eq(~self.out.valid | self.out.ready)

        # Vector/token pipeline: meta[j] describes what entered j cycles (of `en`) ago.
        meta = [None] + [Signal(meta_layout, name=f"meta_{j}") for j in range(1, depth + 1)]

        # ---- sequencer -----------------------------------------------------------------------
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

        # A shadow write at the end of this cycle is safe once every earlier commit token has
        # passed the PEs it still has to copy in.
        token_clear = Signal()
        late = [meta[j].token for j in range(1, depth - 1)]
        last = meta[depth - 1].token if depth >= 2 else Const(0)
        m.d.comb += token_clear.eq(~Cat(*late).any() & (en | ~last))

        inject_token = Signal()
        inject_vector = Signal()
        m.d.comb += [
            inject_token.eq((load_state == load_pend) & ~mul_run & en),
            inject_vector.eq(mul_run & self.moving.valid & en),
            self.moving.ready.eq(mul_run & en),
        ]

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

        with m.If(en):
            m.d.sync += [
                meta[1].valid.eq(inject_vector),
                meta[1].token.eq(inject_token),
                meta[1].index.eq(mul_count),
                meta[1].accumulate.eq(mul_acc),
                meta[1].m.eq(m_act),
            ]
            m.d.sync += [meta[j].eq(meta[j - 1]) for j in range(2, depth + 1)]

        # ---- input skew: row r sees a vector r cycles after row 0 -----------------------------
        row_x, row_c = [], []
        for r in range(p.rows):
            x_chain = [Signal(lw, name=f"skew_x_{r}_{j}") for j in range(r + 1)]
            c_chain = [Signal(name=f"skew_c_{r}_{j}") for j in range(r + 1)]
            lane_bits = []
            for lane in range(lanes):
                k = r * lanes + lane
                lane_bits.append(Mux(k_act > k, self.moving.payload[k], 0))
            with m.If(en):
                m.d.sync += [
                    x_chain[0].eq(Mux(inject_vector, Cat(*lane_bits), 0)),
                    c_chain[0].eq(inject_token),
                ]
                m.d.sync += [x_chain[j].eq(x_chain[j - 1]) for j in range(1, r + 1)]
                m.d.sync += [c_chain[j].eq(c_chain[j - 1]) for j in range(1, r + 1)]
            row_x.append(x_chain[r])
            row_c.append(c_chain[r])

        # ---- PE rows -------------------------------------------------------------------------
        psum = Const(0, 32 * p.cols)
        for r in range(p.rows):
            wires = {
                "en": en,
                "x_in": row_x[r],
                "c_in": row_c[r],
                "psum_in": psum,
                "psum_out": Signal(32 * p.cols, name=f"psum_{r}"),
                "shadow_we": Cat(*[fill_we & (fill_count == r * lanes + lane)
                                   for lane in range(lanes)]),
                "shadow_clear": fill_we & (fill_count == 0),
                "shadow_data": self.stationary.payload.as_value(),
            }
            if self.row_module is None:
                m.submodules[f"row_{r}"] = row = SystolicRow(p, pe_module=self.pe_module)
                for name, member in row_ports(p).items():
                    if member.flow == In:
                        m.d.comb += getattr(row, name).eq(wires[name])
                    else:
                        m.d.comb += wires[name].eq(getattr(row, name))
            else:
                m.submodules[f"row_{r}"] = _instance(self.row_module, row_ports(p),
                                                     wires.__getitem__)
            psum = wires["psum_out"]

        # ---- deskew: column c waits cols - 1 - c cycles --------------------------------------
        sums = []
        for col in range(p.cols):
            value = psum[32 * col:32 * (col + 1)]
            for j in range(p.cols - 1 - col):
                reg = Signal(32, name=f"deskew_{col}_{j}")
                with m.If(en):
                    m.d.sync += reg.eq(value)
                value = reg
            sums.append(value)

        # ---- PSUM bank: read at stage `depth`, update and write one stage later ---------------
        m.submodules.psum = bank = memory.Memory(shape=32 * p.cols, depth=p.moving_max, init=[])
        wp = bank.write_port()
        rp = bank.read_port(domain="sync", transparent_for=(wp,))
        stage = Signal(meta_layout)
        stage_sum = Signal(32 * p.cols)
        m.d.comb += [rp.addr.eq(meta[depth].index), rp.en.eq(en)]
        with m.If(en):
            m.d.sync += [stage.eq(meta[depth]), stage_sum.eq(Cat(*sums))]

        updated = []
        for col in range(p.cols):
            old = rp.data[32 * col:32 * (col + 1)]
            new = stage_sum[32 * col:32 * (col + 1)]
            if p.is_float:
                from hdl.numerics.fpu import FpAdd32

                m.submodules[f"psum_add_{col}"] = add = FpAdd32()
                m.d.comb += [add.a.eq(old), add.b.eq(new)]
                total = add.y
            else:
                total = (old + new)[:32]
            updated.append(Mux(stage.m > col, Mux(stage.accumulate, total, new), old))
        m.d.comb += [
            wp.addr.eq(stage.index),
            wp.data.eq(Cat(*updated)),
            wp.en.eq(en & stage.valid),
        ]
        with m.If(en):
            m.d.sync += [
                self.out.valid.eq(stage.valid),
                self.out.payload.eq(Cat(*updated)),
            ]
        return m
