# amaranth: UnusedElaboratable=no
# (Amaranth's documented lint option: the elaboratables made here for their signatures are
# emitted apart, as modules of their own, and never elaborated where they are made.)
"""The core's tensor engine: the multi-format systolic array fed from SBUF (or PSUM) through
the access patterns of ``LoadStationary``, ``MultiplyMoving`` and ``Transpose``, its results
written to PSUM.

The array is an instance of the emitted array module (:func:`hdl.tensor.structural.array_instance`,
the circuit of :class:`hdl.tensor.systolic.SystolicArray`), the very module `gen chip` writes
for the tensor unit, so that the core does not elaborate its rows x cols cells again; the
PSUM accumulation's fp32 adders are instances of the shared adder module (``numerics_add32``,
:data:`~hdl.vector.lanes.FP_MODULES`).

Per instruction: decode, hand the array its command (format code, ``k`` the source's
partitions, ``m`` or ``n`` its free size (a double row, below: twice the partitions, half the
free size), and on a tiled array the tile: its position
``row``, ``col`` in groups, from the instruction's, and a load's size in groups by the
array's rule, :meth:`~hdl.tensor.params.SystolicParams.tile_groups`, the rule by which the
core simulator places it), then

* ``LoadStationary``: every cycle the next element of ``src`` (one stationary column, K x M
  tile) is read from all partitions at once; its partitions ``src.partition + i`` become the
  words of the tile's PE rows ``row + i`` (with a double-rate format row ``row + i`` takes
  partitions ``2i`` and ``2i + 1`` in its low two bytes, or in a double row partition ``i``'s
  pairs 0 and 1, see below; a tf32 element, whose 19-bit code
  is the top of its 32-bit word, is shifted down to the low bits the array reads; an MX quad
  is the word's low bits and its block's E8M0 scale goes above it, see below);
  ``beat_columns`` columns make one beat. The instruction retires when the array has taken
  the last beat.
* ``MultiplyMoving``: likewise one moving column per cycle into the array, at the rows of
  the tile at its position; each row the array puts out (moving column ``j``, valid on the
  tile's column groups) is written to ``dst``'s element ``j``: array column ``c`` into
  partition ``c``, for the partitions of ``dst``, which start at the tile's column (the
  simulator's rule: array column ``col + j`` sums into partition ``col + j``). The array
  overwrites its own PSUM bank, and with ``accumulate`` the engine reads the core's PSUM
  word first and writes ``add32(psum, sum)`` (an int32 sum for integer formats), which is
  the golden model's accumulation (:func:`sim.golden.systolic.matmul`). One result row per
  cycle: its PSUM read with the row, the write the cycle after.
* ``Transpose`` (its ``dst`` and ``src`` where a multiply's are): a load of ``src`` as above,
  the tile taking the whole array at position (0, 0) as the simulator places it, then the
  array's transpose pass of the tile's ``K`` rows (``TRANSPOSE``, ``n = K``, commanded after
  the load's last beat). Its beat ``j``, row ``j`` of the tile, is ``dst``'s element ``j``:
  array column ``c``'s code, as loaded, into partition ``c``, in ``dst``'s own type (the
  source's, as the simulator requires): at the element's byte in its word with that
  element's byte enables, a tf32 code shifted back up to the top of its word. Nothing is
  accumulated and PSUM is not read. Like the simulator's, the pass replaces every tile.

An MX tile (``mxfp8_x4``, ``mxfp4_x4``) comes with its ``scale`` operand, and the engine
reads it with the tile: a second SBUF read of every partition in the same cycle as the
tile's (the ``s`` port, the scale's element ``j`` with the tile's element ``j``, walked by
its own access pattern), so an MX instruction takes the cycles of any other. The tile's row
``i`` carries the byte of partition ``scale.partition + mx_scale_partition(i // 8)`` at
bits :attr:`~hdl.tensor.params.SystolicParams.mx_scale_lsb` up (scale groups count from the
tile's first row), as the array takes it and as the core simulator reads the scales
(``mx_tile`` of :mod:`sim.core.data`).

A double row (``double_row``, a double-rate format: fp8; ``src`` is ``[P, 2, free]``, its
outermost free dimension the pair axis) uses the same second read: ``r`` walks ``src`` with
the pair axis at index 0 (pair 0), ``s`` the same pattern the pair axis's stride further
(pair 1), in step, so each cycle reads one column of both pairs and a double row takes the
cycles of a plain fp8 instruction of its columns. The tile's row ``i`` carries partition
``src.partition + i``'s pair 0 element in bits 0-7 and its pair 1 element in bits 8-15: the
array's contraction indices ``2i`` and ``2i + 1``, which are ``i`` and ``P + i`` of the
contraction (:func:`~hdl.core.isa.double_row_order`), as the core simulator orders them
(``tensor_codes`` of :mod:`sim.core.data`). The array takes ``k = 2P`` indices and the
tile the whole width (:meth:`~hdl.tensor.params.SystolicParams.tile_groups`). The second
port reads SBUF alone, so a double row's ``src`` is in SBUF.

The engine runs one instruction at a time: a multiply retires after its last PSUM write,
before the next instruction is decoded, so multiplies on disjoint tiles do not overlap here
(the array and the simulator's sequencer would let them). What this datapath runs
(:func:`supported` says why not otherwise): ``LoadStationary``, ``MultiplyMoving`` and
``Transpose`` of the array's formats with round-to-nearest-even, a double row's ``src`` in
SBUF, no transpose of an MX tile (nor does the array have one).
"""

from __future__ import annotations

from collections.abc import Callable

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from hdl.core.access import AP_LAYOUT, SPACE, ApWalker, dtype_shift
from hdl.core.engines import DATA_BITS, engine_ports, pick, read_step
from hdl.core.isa import (
    DTYPES,
    MX_DTYPES,
    MX_GROUP_PARTITIONS,
    TF32_SHIFT,
    WORD_BITS,
    Instruction,
    LoadStationary,
    MultiplyMoving,
    Transpose,
    field_positions,
    input_format,
    mx_scale_partition,
)
from hdl.emitted import module_text
from hdl.numerics.fpu import FpAdd32
from hdl.tensor.signatures import Op
from hdl.tensor.structural import UNIT_TOP, array_instance
from hdl.vector.lanes import FP_MODULES, add_lane

__all__ = ["COLUMN_MODULE", "SLICE_MODULE", "TENSOR_OPS", "TensorColumn", "TensorEngine",
           "TensorSlice", "second_read", "supported"]

TENSOR_OPS = (LoadStationary, MultiplyMoving, Transpose)
#: The modules of one partition's share of the engine (:class:`TensorSlice`) and of one
#: column's PSUM accumulation (:class:`TensorColumn`).
SLICE_MODULE = "neuron_core_tensor_slice"
COLUMN_MODULE = "neuron_core_tensor_column"


def supported(ins: Instruction, formats: tuple[str, ...]) -> str | None:
    """Why the core's tensor engine, whose array takes ``formats``, cannot run ``ins``
    (None: it can)."""
    if not isinstance(ins, TENSOR_OPS):
        return f"the tensor engine runs {', '.join(c.__name__ for c in TENSOR_OPS)}"
    if ins.src.dtype in MX_DTYPES and isinstance(ins, Transpose):
        return "the array has no transpose of an MX tile"
    if getattr(ins, "double_row", False) and ins.src.space != "sbuf":
        return ("a double row's src must be in SBUF: its pair 1 comes through the engine's "
                "second read port, which reads SBUF alone")
    if input_format(ins.src.dtype) not in formats or ins.src.dtype not in DTYPES:
        usable = [d for f in formats if (d := _dtype(f)) in DTYPES]
        return f"src must be one of {', '.join(usable)}, not {ins.src.dtype}"
    if isinstance(ins, MultiplyMoving) and ins.dst.dtype not in ("fp32", "int32"):
        return (f"the engine's PSUM adders write fp32 and int32 words, not {ins.dst.dtype} "
                f"(NeuronCore-v4's bf16 PSUM destination is not built)")
    return None


def second_read(array) -> bool:
    """Whether the tensor engine of ``array`` (:class:`~hdl.tensor.params.SystolicParams`)
    has the second SBUF read port ``s``: for MX scales and for a double row's pair 1."""
    return array.has_mx or bool(array.double_rate)


def _dtype(fmt: str) -> str:
    """The instruction set's element type of the array's format ``fmt``: an MX format's quad
    type, any other format itself."""
    return next((d for d, f in MX_DTYPES.items() if f == fmt), fmt)


def _rows_port(partitions: int):
    return In(DATA_BITS * (partitions // min(32, partitions)))


class TensorSlice(wiring.Component):
    """One partition's share of a tensor engine of ``partitions`` partitions, the engine's
    partition ``index``, emitted once as :data:`SLICE_MODULE` and instantiated per partition.

    ``element`` is the partition's element of ``src`` rotated to the tile's first partition
    (``r_rows``: the candidate words ``r_data[(index + k * chunk) % partitions]``,
    ``src_first``, as :func:`~hdl.core.engines.pick` selects), shifted down by its byte
    ``shift`` and masked to the element's bits (``mask``); ``w_part`` whether the partition
    is in ``dst`` (``d_first``, ``d_count``). With ``pair`` (an engine of a double-rate array)
    ``pair1`` is the byte of the second read (``s_rows``, the same rotation, its byte
    ``s_shift``): a double row's pair 1 element."""

    def __init__(self, partitions: int, pair: bool = False):
        self.partitions, self.chunk, self.pair = partitions, min(32, partitions), pair
        part = AP_LAYOUT.members["partition"]
        members = {"index": In(range(partitions)), "r_rows": _rows_port(partitions),
                   "src_first": In(part), "d_first": In(part),
                   "d_count": In(AP_LAYOUT.members["partitions"]), "shift": In(2),
                   "mask": In(32), "element": Out(32), "w_part": Out(1)}
        if pair:
            members.update({"s_rows": _rows_port(partitions), "s_shift": In(2),
                            "pair1": Out(8)})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        row = pick(self.r_rows, self.src_first, self.chunk)
        m.d.comb += [self.element.eq((row >> (self.shift * 8)) & self.mask),
                     self.w_part.eq((self.d_first <= self.index)
                                    & (self.index < self.d_first + self.d_count))]
        if self.pair:
            second = pick(self.s_rows, self.src_first, self.chunk)
            m.d.comb += self.pair1.eq(second >> (self.s_shift * 8))
        return m


class TensorColumn(wiring.Component):
    """One column's PSUM accumulation in a tensor engine whose array has float formats
    (``has_float``) and integer ones (``has_int``), emitted once as :data:`COLUMN_MODULE` and
    instantiated per column: ``total`` is the array's column sum ``column_sum``, or with
    ``accumulate`` the PSUM word ``old`` (the column's own partition's) plus it: fp32 (the
    scalar engine's adder module), or int32 when ``integer``."""

    def __init__(self, has_float: bool, has_int: bool):
        self.has_float, self.has_int = has_float, has_int
        members = {"old": In(32), "column_sum": In(32), "accumulate": In(1),
                   "total": Out(32)}
        if has_float and has_int:
            members["integer"] = In(1)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        old = self.old
        summed = (old + self.column_sum)[:32]
        if self.has_float:
            y = Signal(32)
            add_lane(m, "acc", None, FP_MODULES["add"], {"a": old, "b": self.column_sum},
                     {"y": y}, clocked=False)
            summed = Mux(self.integer, summed, y) if self.has_int else y
        m.d.comb += self.total.eq(Mux(self.accumulate, summed, self.column_sum))
        return m


class TensorEngine(wiring.Component):
    """The tensor engine of a core of ``partitions`` partitions with the array of
    ``array`` (:class:`~hdl.tensor.params.SystolicParams`), whose formats are the core's
    ``formats`` in the same order (the instruction set's names); ``words`` is the depth of
    the deeper of SBUF and PSUM in 32-bit words. With MX or double-rate formats it has a
    third read port, ``s`` (:func:`second_read`), for the scale operand and a double row's
    pair 1 (SBUF only: it has no ``s_psum``)."""

    def __init__(self, partitions: int, array, formats: tuple[str, ...], words: int):
        if array.cols > partitions or array.rows > partitions:
            raise ValueError(f"the array ({array.rows} x {array.cols}) must fit the core's "
                             f"{partitions} partitions")
        if len(formats) != len(array.formats):
            raise ValueError(f"formats must name the array's {len(array.formats)} formats, "
                             f"not {formats!r}")
        self.partitions, self.array, self.formats = partitions, array, formats
        n = partitions
        ports = engine_ports(("r", "q", "s") if second_read(array) else ("r", "q"), n, words)
        ports.pop("s_psum", None)  # the scale is in SBUF
        super().__init__(ports)
        self.unit = array_instance(array, UNIT_TOP)

    def modules(self) -> dict[str, Callable[[], str]]:
        """The modules this engine instantiates (:data:`hdl.emitted.Modules`): the array's
        and, for a float array, the fp32 adder of the PSUM accumulation (the scalar engine's
        module: one definition in the core), its column and its partition slice."""
        a = self.array
        modules = self.unit.modules()
        if a.has_float:
            modules[FP_MODULES["add"]] = lambda: module_text(FpAdd32(), FP_MODULES["add"],
                                                             no_inline=False)
        modules[COLUMN_MODULE] = lambda: module_text(TensorColumn(a.has_float, a.has_int),
                                                     COLUMN_MODULE)
        modules[SLICE_MODULE] = lambda: module_text(
            TensorSlice(self.partitions, bool(a.double_rate)), SLICE_MODULE)
        return modules

    def elaborate(self, platform):
        m = Module()
        n, a = self.partitions, self.array
        chunk = min(32, n)
        m.submodules.array = array = self.unit
        word = Signal(WORD_BITS)
        opcode = word[:8]
        is_load = opcode == LoadStationary.OPCODE
        # a Transpose's dst and src sit where a MultiplyMoving's do; it has no other field
        is_tr = opcode == Transpose.OPCODE
        tr_cmd = Signal()  # the transpose pass's command, after the transpose's load

        def bits(cls, name):
            pos, width, _ = field_positions(cls)[name]
            return word[pos:pos + width]

        def field(cls, name):
            return data.View(AP_LAYOUT, bits(cls, name))

        src = Signal(AP_LAYOUT)
        dst = field(MultiplyMoving, "dst")
        accumulate = word[field_positions(MultiplyMoving)["accumulate"][0]] & ~is_tr
        m.d.comb += src.eq(Mux(is_load, field(LoadStationary, "src").as_value(),
                               field(MultiplyMoving, "src").as_value()))

        # the source's format: its code in the array, double rate, integer, MX
        code, double, integer, mx = 0, 0, 0, 0
        for index, name in enumerate(self.formats):
            if _dtype(name) not in DTYPES:
                continue
            hit = src.dtype == DTYPES[_dtype(name)][0]
            code = Mux(hit, index, code)
            double = Mux(hit, int(a.is_double(a.formats[index])), double)
            integer = Mux(hit, int(a.is_int(a.formats[index])), integer)
            mx = Mux(hit, int(a.is_mx(a.formats[index])), mx)
        free = 1
        for i in range(3):
            size = getattr(src, f"n{i}")
            free = free * Mux(size == 0, 1, size)
        # a double row: the pair axis (src's outermost free dimension, size 2) makes each
        # partition two contraction indices, the columns the rest of the free axis
        drow, contraction, columns = False, src.partitions, free
        if a.double_rate:
            drow = Signal()
            m.d.comb += drow.eq(Mux(is_load, bits(LoadStationary, "double_row"),
                                    bits(MultiplyMoving, "double_row") & ~is_tr))
            inner = Mux(src.n1 == 0, 1, src.n1) * Mux(src.n2 == 0, 1, src.n2)
            contraction = Mux(drow, src.partitions << 1, contraction)
            columns = Mux(drow, inner, free)

        # a Transpose: a load of src, then the pass of its partitions (the tile's rows)
        cmd = array.cmd.payload
        op = Mux(tr_cmd, Op.TRANSPOSE, Mux(is_load | is_tr, Op.LOAD, Op.MULTIPLY))
        m.d.comb += [cmd.op.eq(op), cmd.fmt.eq(code), cmd.k.eq(contraction),
                     cmd.m.eq(columns), cmd.n.eq(Mux(tr_cmd, src.partitions, columns)),
                     cmd.accumulate.eq(0)]

        def group(name, size):  # the instruction's tile position in groups of ``size``
            at = Mux(is_load, bits(LoadStationary, name), bits(MultiplyMoving, name))
            return Mux(is_tr, 0, sum(at >= g * size for g in range(1, a.ways)))

        tile_row = Signal(range(a.ways))
        m.d.comb += tile_row.eq(group("row", a.group_rows))
        if a.ways > 1:  # the tile: its position, a load's size by the array's rule (a
            # transpose's tile takes the whole array, as the simulator places it)
            rows, cols = a.tile_groups(src.partitions, free, drow)
            m.d.comb += [cmd.row.eq(tile_row), cmd.col.eq(group("col", a.group_cols)),
                         cmd.rows.eq(Mux(is_tr, a.ways, rows)),
                         cmd.cols.eq(Mux(is_tr, a.ways, cols))]

        m.submodules.ws = ws = ApWalker()
        m.submodules.wd = wd = ApWalker()
        start = Signal()
        read, pair1 = src, None
        if a.double_rate:  # a double row reads pair 0 on ``r``, pair 1 on ``s``
            read, pair1 = Signal(AP_LAYOUT), Signal(AP_LAYOUT)
            # pair 1 lies the pair axis's stride further (in bytes: the formats are 8-bit)
            m.d.comb += [read.eq(src), pair1.eq(src), pair1.n0.eq(1),
                         pair1.offset.eq(src.offset + src.s0)]
            with m.If(drow):
                m.d.comb += read.n0.eq(1)
        m.d.comb += [ws.ap.eq(read), wd.ap.eq(dst), ws.start.eq(start), wd.start.eq(start)]
        if second_read(a):
            scale, s_shift = self._second_read(m, word, start, ws, mx, drow, pair1)

        # the read side: one column of the source per cycle, as the array's row words
        s1_valid, s1_last, sent, shift = Signal(), Signal(), Signal(), Signal(2)
        item_bits = 8 << dtype_shift(src.dtype)
        mask = Signal(32)
        m.d.comb += mask.eq((1 << item_bits) - 1)
        # every partition's share (TensorSlice) and every column's accumulation (TensorColumn)
        ways = [k * chunk for k in range(n // chunk)]
        staged = Signal(data.ArrayLayout(32, a.cols))
        totals = [Signal(32, name=f"column{c}_total") for c in range(a.cols)]
        elements, w_part, pair1s = [], [], []
        for p in range(n):
            outputs = {"element": Signal(32, name=f"slice{p}_element"),
                       "w_part": Signal(name=f"slice{p}_w_part")}
            inputs = {"index": Const(p, range(n)),
                      "r_rows": Cat(*[self.r_data[(p + k) % n] for k in ways]),
                      "src_first": src.partition, "d_first": dst.partition,
                      "d_count": dst.partitions, "shift": shift, "mask": mask}
            if a.double_rate:
                outputs["pair1"] = Signal(8, name=f"slice{p}_pair1")
                inputs.update({"s_rows": Cat(*[self.s_data[(p + k) % n] for k in ways]),
                               "s_shift": s_shift})
            add_lane(m, f"slice{p}", None, SLICE_MODULE, inputs, outputs, clocked=False)
            elements.append(outputs["element"])
            w_part.append(outputs["w_part"])
            pair1s.append(outputs.get("pair1"))
        for c in range(a.cols):  # array column c sums into partition c
            inputs = {"old": self.q_data[c], "column_sum": staged[c],
                      "accumulate": accumulate}
            if a.has_float and a.has_int:
                inputs["integer"] = integer
            add_lane(m, f"column{c}", None, COLUMN_MODULE, inputs, {"total": totals[c]},
                     clocked=False)

        tf32 = src.dtype == DTYPES["tf32"][0] if "tf32" in self.formats else 0

        def element(i):
            if i >= n:
                return Const(0, 32)
            return Mux(tf32, elements[i] >> TF32_SHIFT, elements[i])

        def fit(value):
            return value[:a.width] if len(value) >= a.width else Cat(
                value, Const(0, a.width - len(value)))

        # the tile's words, i from its first row, at PE rows ``row + i`` (the array takes
        # the words of the tile's rows; the other rows' are ignored)
        moving = Signal(data.ArrayLayout(a.width, a.rows))
        words = Cat(*[fit(element(r)) for r in range(a.rows)])
        if a.double_rate:  # partitions 2r, 2r + 1; a double row's partition r, pairs 0, 1
            pairs = Cat(*[fit(Cat(element(2 * r)[:8], element(2 * r + 1)[:8]))
                          for r in range(a.rows)])
            double_rows = Cat(*[fit(Cat(element(r)[:8], pair1s[r])) for r in range(a.rows)])
            words = Mux(double, Mux(drow, double_rows, pairs), words)
        if a.has_mx:  # scale groups count from the tile's first row
            scales = self._scales(scale, s_shift)
            lsb = a.mx_scale_lsb
            quads = Cat(*[fit(Cat(element(r)[:lsb], scales[r // MX_GROUP_PARTITIONS]))
                          for r in range(a.rows)])
            words = Mux(mx, quads, words)
        packed = Signal(data.ArrayLayout(a.width, a.rows))
        m.d.comb += packed.eq(words)
        placed = packed.as_value()
        for g in range(1, a.ways):
            at = (a.rows - g * a.group_rows) * a.width
            placed = Mux(tile_row == g, Cat(packed.as_value()[at:], packed.as_value()[:at]),
                         placed)
        m.d.comb += moving.eq(placed)
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
        # a transpose writes dst's own type: each column's code (a tf32 one back at the top
        # of its word) at the element's byte ``w_shift`` of its word, that element's bytes
        w_shift = Signal(2)
        dst_mask = (1 << (1 << dtype_shift(dst.dtype))) - 1
        codes = [Mux(tf32, staged[c] << TF32_SHIFT, staged[c]) for c in range(a.cols)]
        transposed = Cat(*[(code << (w_shift * 8))[:32] for code in codes])
        m.d.comb += [self.q_addr.eq(wd.byte[2:]), self.q_psum.eq(1),
                     self.w_addr.eq(w_at), self.w_psum.eq(dst.space == SPACE["psum"]),
                     self.w_be.eq(Mux(w_valid, Mux(is_tr, dst_mask << w_shift, 0xF), 0)),
                     self.w_part.eq(Cat(*w_part)),
                     self.w_data.eq(Cat(Mux(is_tr, transposed, Cat(*totals)),
                                        Const(0, 32 * (n - a.cols))))]
        m.d.sync += w_valid.eq(0)

        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.issue):
                    m.d.sync += word.eq(self.word)
                    m.next = "CMD"
            with m.State("CMD"):
                m.d.comb += [array.cmd.valid.eq(1), start.eq(1)]
                m.d.sync += [sent.eq(0), s1_valid.eq(0), slot.eq(0), beat_valid.eq(0)]
                with m.If(array.cmd.ready & (is_load | is_tr)):
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
                    with m.If(beat_last & is_tr):
                        m.next = "TRANSPOSE_CMD"
                    with m.Elif(beat_last):
                        m.d.comb += self.done.eq(1)
                        m.next = "IDLE"
            with m.State("TRANSPOSE_CMD"):
                m.d.comb += [array.cmd.valid.eq(1), tr_cmd.eq(1)]
                with m.If(array.cmd.ready):
                    m.next = "TRANSPOSE"
            with m.State("TRANSPOSE"):
                # the pass's beat j is the tile's row j: dst's element j, one per cycle
                m.d.comb += array.out.ready.eq(1)
                with m.If(array.out.valid.any()):
                    m.d.comb += wd.step.eq(1)
                    m.d.sync += [w_valid.eq(1), w_last.eq(wd.row_last), w_at.eq(wd.byte[2:]),
                                 w_shift.eq(wd.byte[:2]), staged.eq(array.out.payload)]
                with m.If(w_valid & w_last):
                    m.d.comb += self.done.eq(1)
                    m.next = "IDLE"
            with m.State("MULTIPLY"):
                # The words go to every row group; the tile's take them (the other groups
                # run nothing), and its column groups give the output.
                m.d.comb += [array.moving.valid.eq(s1_valid.replicate(a.ways)),
                             array.out.ready.eq(1)]
                read_step(m, ~s1_valid | array.moving.ready.any(), self.r_en, ws, sent,
                          s1_valid, s1_last, shift)
                with m.If(array.out.valid.any()):
                    m.d.comb += [self.q_en.eq(1), wd.step.eq(1)]
                    m.d.sync += [w_valid.eq(1), w_last.eq(wd.row_last), w_at.eq(wd.byte[2:]),
                                 staged.eq(array.out.payload)]
                with m.If(w_valid & w_last):
                    m.d.comb += self.done.eq(1)
                    m.next = "IDLE"
        return m

    def _second_read(self, m, word, start, ws: ApWalker, mx, drow, pair1):
        """The ``s`` port: it reads whenever the source is read (``r_en``) for an MX source
        (``mx``: the scale operand's element, the instruction's ``scale``) or a double row
        (``drow``: pair 1's element, the access pattern ``pair1``), its walker stepping
        with the source's. Returns the scale operand's access pattern (None without MX
        formats) and the byte of the element read, the cycle its data arrives. ``word`` is
        the instruction's."""
        a = self.array
        m.submodules.wsc = wsc = ApWalker()
        scale, ap, use = None, pair1, drow
        if a.has_mx:
            is_load = word[:8] == LoadStationary.OPCODE

            def field(cls):
                pos, bits, _ = field_positions(cls)["scale"]
                return data.View(AP_LAYOUT, word[pos:pos + bits])

            scale = Signal(AP_LAYOUT)
            m.d.comb += scale.eq(Mux(is_load, field(LoadStationary).as_value(),
                                     field(MultiplyMoving).as_value()))
            ap, use = scale, mx
            if pair1 is not None:
                ap, use = Mux(mx, scale.as_value(), pair1.as_value()), mx | drow
        shift = Signal(2)
        m.d.comb += [wsc.ap.eq(ap), wsc.start.eq(start), wsc.step.eq(ws.step),
                     self.s_addr.eq(wsc.byte[2:]), self.s_en.eq(self.r_en & use)]
        with m.If(ws.step):
            m.d.sync += shift.eq(wsc.byte[:2])
        return scale, shift

    def _scales(self, scale, shift) -> list:
        """The scale operand's bytes of the element the ``r`` port reads, one per scale
        group of the array's rows, the cycle its data arrives (``s_data``, the byte
        ``shift``): group ``g`` takes partition ``scale.partition +
        mx_scale_partition(g)`` (a multiple of the partition-start chunk plus a constant: a
        pick among the rotations' candidates), then the element's byte."""
        n, a = self.partitions, self.array
        chunk = min(32, n)
        out = []
        for g in range(-(-a.rows // MX_GROUP_PARTITIONS)):
            at = mx_scale_partition(g)
            rows = Cat(*[self.s_data[(at + k * chunk) % n] for k in range(n // chunk)])
            out.append((pick(rows, scale.partition, chunk) >> (shift * 8))[:8])
        return out
