"""Access patterns in hardware: the decoded layout of :data:`hdl.core.isa.AP_FIELDS` and a
walker that steps through a pattern's elements in the order of the core simulator.

Order: the partition axis (``row``) outermost, then the free dimensions outermost first; an
absent free dimension (size 0 in the word) counts as size 1. The walker keeps one element
base per dimension and adds strides, so it needs no multiplier.
"""

from amaranth.hdl import Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from hdl.core.isa import AP_FIELDS, DTYPES, SPACES

__all__ = ["AP_LAYOUT", "ApWalker", "SPACE", "dtype_shift"]

#: The access-pattern sub-word as a struct, least significant field first.
AP_LAYOUT = data.StructLayout({name: signed(bits) if sgn else unsigned(bits)
                               for name, bits, sgn in AP_FIELDS})
#: Space codes of the word.
SPACE = {name: code for code, name in enumerate(SPACES)}
_BYTE_BITS = 48
_ELEMENT_BITS = 44

def dtype_shift(dtype):
    """log2 of the element size of a dtype code (combinational)."""
    out = 0
    for code, size in sorted(DTYPES.values()):
        out = Mux(dtype == code, size.bit_length() - 1, out)
    return out

class ApWalker(wiring.Component):
    """Steps through the elements of the access pattern ``ap``.

    ``start`` (one cycle) restarts at element 0 of row 0; ``step`` moves to the next element.
    ``byte`` is the current element's byte address: ``offset + row * pstride + e * size``
    for ``e`` the element's offset in elements; ``row`` the partition (row) within the
    pattern; ``row_last`` marks the last element of a row, ``last`` the last of the pattern.
    ``ap`` must hold from ``start`` to the last step.
    """

    ap: In(AP_LAYOUT)
    start: In(1)
    step: In(1)
    row: Out(8)
    byte: Out(signed(_BYTE_BITS))
    row_last: Out(1)
    last: Out(1)

    def elaborate(self, platform):
        m = Module()
        ap = self.ap
        n = [Mux(getattr(ap, f"n{i}") == 0, 1, getattr(ap, f"n{i}")) for i in range(3)]
        s = [getattr(ap, f"s{i}") for i in range(3)]
        c = [Signal(16, name=f"c{i}") for i in range(3)]
        e0, e1, e = (Signal(signed(_ELEMENT_BITS), name=nm) for nm in ("e0", "e1", "e"))
        rowbase = Signal(signed(_BYTE_BITS))
        at_end = [c[i] == n[i] - 1 for i in range(3)]
        m.d.comb += [
            self.byte.eq(ap.offset + rowbase + (e << dtype_shift(ap.dtype))),
            self.row_last.eq(at_end[0] & at_end[1] & at_end[2]),
            self.last.eq(self.row_last & (self.row == ap.partitions - 1)),
        ]
        with m.If(self.start):
            m.d.sync += [x.eq(0) for x in (*c, e0, e1, e, rowbase, self.row)]
        with m.Elif(self.step):
            with m.If(~at_end[2]):
                m.d.sync += [c[2].eq(c[2] + 1), e.eq(e + s[2])]
            with m.Elif(~at_end[1]):
                m.d.sync += [c[1].eq(c[1] + 1), c[2].eq(0), e1.eq(e1 + s[1]),
                             e.eq(e1 + s[1])]
            with m.Elif(~at_end[0]):
                m.d.sync += [c[0].eq(c[0] + 1), c[1].eq(0), c[2].eq(0), e0.eq(e0 + s[0]),
                             e1.eq(e0 + s[0]), e.eq(e0 + s[0])]
            with m.Else():
                m.d.sync += [x.eq(0) for x in (*c, e0, e1, e)]
                m.d.sync += [self.row.eq(self.row + 1), rowbase.eq(rowbase + ap.pstride)]
        return m
