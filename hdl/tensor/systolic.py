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

Structure: :class:`~hdl.tensor.sequencer.SystolicControl` (sequencer, with one
:class:`~hdl.tensor.sequencer.SystolicGroup` runner per row group), ``rows`` identical
:class:`~hdl.tensor.datapath.SystolicRow` (``cols`` :class:`~hdl.tensor.pe.ProcessingElement`
each, plus one stage of the input skew) and ``cols`` identical
:class:`~hdl.tensor.datapath.PsumColumn`, so that a generator can emit each kind of cell once;
their ports are in :mod:`hdl.tensor.signatures`.

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

from amaranth import Const, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hdl.emitted import member_ports, place

from .datapath import PsumColumn, SystolicRow
from .params import SystolicParams
from .sequencer import SystolicControl
from .signatures import (
    cmd_layout,
    column_ports,
    moving_signature,
    out_signature,
    row_ports,
    stationary_layout,
)

__all__ = ["SystolicArray", "SystolicParams"]


class SystolicArray(wiring.Component):
    """The tensor engine's systolic array: sequencer, ``rows`` PE rows, ``cols`` PSUM columns.

    See the module docstring for the instruction contract. This is the elaborated (flat)
    form; :mod:`generators.tensor` emits the same structure with each kind of cell emitted
    once as a Verilog module and instantiated. With ``pe_module`` set, the PEs are instances
    of that separately emitted module (as in :class:`~hdl.tensor.datapath.SystolicRow`).
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
            place(m, f"row_{r}", lambda: SystolicRow(p, pe_module=self.pe_module), None,
                  member_ports(ports, wires.__getitem__))
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
            place(m, f"column_{col}", lambda: PsumColumn(p), None,
                  member_ports(column_ports(p), wires.__getitem__))
            meta_in, vec_in = wires["meta_out"], wires["vec_out"]
        m.d.comb += [control.last_meta.eq(meta_in), self.out.payload.eq(vec_in)]
        return m
