"""Processing element of the weight-stationary systolic array.

A PE holds two weight banks of one operand word each. Each enabled cycle it forwards the
moving word, with the control that travels beside it (``ctl``: the bank to read, the weight's
and the moving word's format codes, the double-rate, integer and MX flags), to its right
neighbour, and the partial sum to the PE below::

    psum_out <= add32(psum_in, mul32(w0, x0))                         (one product)
    psum_out <= add32(add32(psum_in, mul32(w0, x0)), mul32(w1, x1))   (double rate)
    psum_out <= add32(add32(add32(add32(psum_in, p0), p1), p2), p3)   (MX, four products)

with ``w`` the weight word of the selected bank and each operand widened exactly to fp32 by
its own format (:class:`~hdl.numerics.fpu.MultiWiden`, the format chosen at run time); with
double rate, element 0 of a word is bits 0-7 and element 1 bits 8-15. An int8 pass computes
``psum_in + w * x`` in wrapping int32. An MX word is a quad (the layout of
:class:`~hdl.tensor.params.SystolicParams`, the instruction set's ``mxfp8_x4`` and
``mxfp4_x4``): element ``i`` in byte ``i`` (mxfp8) or nibble ``i`` (mxfp4), each word's
element ``i`` read by its own format, so an mxfp8 tile may meet an mxfp4 moving word. An MX
pass (``ctl.mx``) reads the E8M0 scales ``sw`` and ``sx`` from bits ``mx_scale_lsb`` up of
the two words, shared by their four elements (one block), and folds them into each product's
exponent (``p_i``: :class:`~hdl.numerics.fpu.FpMulScaled32` of ``w_i`` and ``x_i`` with
``e = sw + sx - 254``, one rounding); a scale of 255 makes the four products the canonical
NaN. The four products add in index order, as :func:`sim.golden.systolic.matmul_mx` sums.

A transpose pass (``ctl.transpose``) multiplies nothing: its moving word selects an element
of the weight (bit 0: element 0, the whole element of a single-rate format; bit 8: element 1
of a double-rate word), and the PE puts that element's code, masked to the weight format's
bits and zero-extended, on ``psum_out`` in place of ``psum_in``; unselected PEs pass
``psum_in`` down. The sequencer selects one row per vector, so the column leaves the bottom
holding one stationary row's element, bit for bit.

Weights arrive on a second wave beside the moving one: a stationary beat carries
``beat_columns`` columns' words (``w``), the bank to write (``wb``) and ``ws``, the hop count
to the last column it serves, one less at each PE. A PE with ``ws < beat_columns`` writes
column slot ``beat_columns - 1 - ws`` of the beat into bank ``wb``; the beat goes no further
than ``ws == 0``. The sequencer fills a bank only after the last moving element that reads it
has been injected, and the two waves cross every PE in the same order, so a new tile loads
while the other bank still multiplies.

In an array split into tiles (``params.ways > 1``) a PE has two more inputs: ``skip``, set
where the moving word's tile does not cover the PE (the PE passes ``psum_in`` down
unchanged), and ``wlo``, which travels with a stationary beat: the PE writes the beat only
where ``wlo <= ws`` (a beat's last slots past its tile's last column write nothing; the row
lets the beat's wave into its PEs only where the tile covers the row).
"""

from __future__ import annotations

from amaranth import Array, Const, Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .params import SystolicParams

__all__ = ["ProcessingElement", "ctl_layout", "pe_ports"]


def ctl_layout(params: SystolicParams) -> data.StructLayout:
    """What travels with a moving word: the weight bank to read (``bank``), the format codes
    of the weight (``wfmt``) and of the moving word (``xfmt``), and whether the pass is
    double-rate (``double``), integer (``int``), a transpose (``transpose``) or, in an array
    with MX formats, block-scaled (``mx``); in a tiled array, ``cols``: the column groups of
    the word's tile (none for a bubble), from which each PE row tells its PEs to pass."""
    fields = {"bank": 1, "wfmt": params.code_bits, "xfmt": params.code_bits, "double": 1,
              "int": 1, "transpose": 1}
    if params.has_mx:
        fields["mx"] = 1
    if params.ways > 1:
        fields["cols"] = params.ways
    return data.StructLayout(fields)


def pe_ports(params: SystolicParams) -> dict:
    """Port signature of a PE (also the port list of its emitted Verilog module)."""
    w = params.width
    ctl = ctl_layout(params).size
    lo = params.beat_columns.bit_length()
    tiled = {"skip": In(1), "wlo_in": In(lo), "wlo_out": Out(lo)} if params.ways > 1 else {}
    return {
        **tiled,
        "en": In(1),
        "x_in": In(w),
        "x_out": Out(w),
        "ctl_in": In(ctl),
        "ctl_out": Out(ctl),
        "psum_in": In(32),
        "psum_out": Out(32),
        "w_in": In(params.beat_columns * w),
        "w_out": Out(params.beat_columns * w),
        "wv_in": In(1),
        "wv_out": Out(1),
        "wb_in": In(1),
        "wb_out": Out(1),
        "ws_in": In(params.skip_bits),
        "ws_out": Out(params.skip_bits),
    }


class ProcessingElement(wiring.Component):
    """One multiply-accumulate cell; see the module docstring for its contract.

    Ports: ``en`` advances both waves (``x``/``ctl``/``psum`` and ``w``/``wv``/``wb``/``ws``);
    ``w_in`` holds slot ``j`` at word ``j``.
    """

    def __init__(self, params: SystolicParams):
        if not isinstance(params, SystolicParams):
            raise TypeError(f"params must be a SystolicParams, not {params!r}")
        self.params = params
        super().__init__(pe_ports(params))

    def _widen(self, m: Module, name: str, bits, code, formats):
        from hdl.numerics.fpu import MultiWiden, MultiWidenParams

        m.submodules[f"widen_{name}"] = widen = MultiWiden(
            MultiWidenParams(formats=formats, width=len(bits)))
        m.d.comb += [widen.x.eq(bits), widen.code.eq(code)]
        return widen.y

    def _element(self, word, code, i: int):
        """The bits of element ``i`` of ``word`` in the format ``code`` selects, in their low
        bits: bits ``8i`` up (element 1 of a double-rate word, byte ``i`` of an mxfp8 quad)
        or ``4i`` up for a 4-bit format (nibble ``i`` of an mxfp4 quad)."""
        if i == 0:
            return word
        nibble = [int(f.bits == 4) for f in self.params.format_list]
        if not any(nibble):
            return word[8 * i:8 * i + 8]
        nibble += [0] * ((1 << self.params.code_bits) - len(nibble))
        return Mux(Array(Const(v, 1) for v in nibble)[code], word[4 * i:4 * i + 8],
                   word[8 * i:8 * i + 8])

    def elaborate(self, platform):
        p = self.params
        m = Module()
        w, bc = p.width, p.beat_columns
        banks = [Signal(w, name=f"bank{b}") for b in range(2)]
        ctl = data.View(ctl_layout(p), self.ctl_in)

        take = Signal()
        m.d.comb += take.eq(self.wv_in & (self.ws_in < bc))
        if p.ways > 1:  # past the loading tile's last column the beat passes by
            m.d.comb += take.eq(self.wv_in & (self.ws_in < bc) & (self.ws_in >= self.wlo_in))
        if bc > 1:
            slot = Signal(range(bc), name="slot")
            m.d.comb += slot.eq(bc - 1 - self.ws_in)
        value = self.w_in.word_select(slot, w) if bc > 1 else self.w_in
        with m.If(self.en & take):
            with m.If(self.wb_in):
                m.d.sync += banks[1].eq(value)
            with m.Else():
                m.d.sync += banks[0].eq(value)

        weight = Signal(w)
        m.d.comb += weight.eq(Mux(ctl.bank, banks[1], banks[0]))
        x = self.x_in
        acc = None
        if p.has_float:
            from hdl.numerics.constants import CANONICAL_NAN32
            from hdl.numerics.fpu import FpAdd32, FpMul32, FpMulScaled32

            every = tuple(f if f.is_float else None for f in p.format_list)
            pairs = tuple(zip(p.formats, p.format_list, strict=True))
            second = tuple(f if n in p.double_rate or p.is_mx(n) else None for n, f in pairs)
            mx_only = tuple(f if p.is_mx(n) else None for n, f in pairs)
            # Multiplier i's formats: 0 every float format, 1 the double-rate ones and MX,
            # 2 and 3 MX alone.
            lanes = ([every] + [second] * (p.lanes > 1) + [mx_only] * (p.lanes - 2))
            if p.has_mx:
                scale = slice(p.mx_scale_lsb, p.mx_scale_lsb + 8)
                sw, sx = weight[scale], x[scale]
                e = Signal(signed(10), name="e")
                m.d.comb += e.eq(Mux(ctl.mx, sw + sx - 254, 0))
                scale_nan = ctl.mx & ((sw == 255) | (sx == 255))
            acc, sums = self.psum_in, []
            for i, formats in enumerate(lanes):
                mul = FpMulScaled32() if p.has_mx else FpMul32()
                m.submodules[f"mul{i}"] = mul
                m.submodules[f"add{i}"] = add = FpAdd32()
                wi, xi = self._element(weight, ctl.wfmt, i), self._element(x, ctl.xfmt, i)
                m.d.comb += [mul.a.eq(self._widen(m, f"w{i}", wi, ctl.wfmt, formats)),
                             mul.b.eq(self._widen(m, f"x{i}", xi, ctl.xfmt, formats))]
                product = mul.y
                if p.has_mx:
                    m.d.comb += mul.e.eq(e)
                    product = Mux(scale_nan, CANONICAL_NAN32, mul.y)
                m.d.comb += [add.a.eq(acc), add.b.eq(product)]
                acc = add.y
                sums.append(acc)
            acc = sums[0]
            if p.double_rate:
                acc = Mux(ctl.double, sums[1], acc)
            if p.has_mx:
                acc = Mux(ctl.mx, sums[-1], acc)
        if p.has_int:
            product = (self.psum_in + weight[:8].as_signed() * x[:8].as_signed())[:32]
            acc = product if acc is None else Mux(ctl.int, product, acc)
        # The transpose pass: the selected element's code, masked to its format's bits.
        masks = [(1 << f.bits) - 1 for f in p.format_list]
        masks += [0] * ((1 << p.code_bits) - len(masks))
        element = weight & Array(Const(mk, w) for mk in masks)[ctl.wfmt]
        selected = x[0]
        if p.double_rate:
            element = Mux(x[8], weight[8:16], element)
            selected = x[0] | x[8]
        acc = Mux(ctl.transpose, Mux(selected, element, self.psum_in), acc)
        if p.ways > 1:  # outside the word's tile the partial sum passes down unchanged
            acc = Mux(self.skip, self.psum_in, acc)

        with m.If(self.en):
            m.d.sync += [
                self.x_out.eq(self.x_in),
                self.ctl_out.eq(self.ctl_in),
                self.psum_out.eq(acc),
                self.w_out.eq(self.w_in),
                self.wv_out.eq(self.wv_in & (self.ws_in != 0)),
                self.wb_out.eq(self.wb_in),
                self.ws_out.eq(self.ws_in - 1),
            ]
            if p.ways > 1:
                m.d.sync += self.wlo_out.eq(self.wlo_in)
        return m
