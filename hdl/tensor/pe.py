"""Processing element of the weight-stationary systolic array.

A PE holds one stationary element per lane (two lanes with double-rate FP8) and, each enabled
cycle, forwards the moving element to its right neighbour and the partial sum to the PE below::

    psum_out <= add32(psum_in, mul32(w0, x0))                 (one lane)
    psum_out <= add32(add32(psum_in, mul32(w0, x0)), mul32(w1, x1))   (two lanes)

int8 computes ``psum_in + w * x`` in wrapping int32. Weights are loaded into a shadow register
and copied to the active one when the commit token (``c_in``) passes the PE together with the
moving wavefront, so a new stationary tile takes effect exactly between two moving vectors.
"""

from __future__ import annotations

from amaranth import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .params import SystolicParams

__all__ = ["ProcessingElement", "pe_ports"]


def pe_ports(params: SystolicParams) -> dict:
    """Port signature of a PE (also the port list of its emitted Verilog module)."""
    lw = params.lanes * params.width
    return {
        "en": In(1),
        "x_in": In(lw),
        "x_out": Out(lw),
        "c_in": In(1),
        "c_out": Out(1),
        "psum_in": In(32),
        "psum_out": Out(32),
        "shadow_we": In(params.lanes),
        "shadow_clear": In(1),
        "shadow_data": In(params.width),
    }


class ProcessingElement(wiring.Component):
    """One multiply-accumulate cell; see the module docstring for its contract.

    Ports: ``en`` advances the moving pipeline (``x``, ``c``, ``psum``); ``shadow_we[l]``
    writes ``shadow_data`` into lane ``l`` of the shadow weight, ``shadow_clear`` zeroes the
    lanes not written in the same cycle; ``c_in`` (with ``en``) copies shadow to active.
    """

    def __init__(self, params: SystolicParams):
        if not isinstance(params, SystolicParams):
            raise TypeError(f"params must be a SystolicParams, not {params!r}")
        self.params = params
        super().__init__(pe_ports(params))

    def _widen(self, m: Module, name: str, bits):
        """fp32 bits of an operand (fp32 operands go to the multiplier as they are)."""
        if self.params.width == 32:
            return bits
        from hdl.numerics.fpu import Widen, WidenParams

        m.submodules[f"widen_{name}"] = widen = Widen(WidenParams(fmt=self.params.format))
        m.d.comb += widen.x.eq(bits)
        return widen.y

    def elaborate(self, platform):
        p = self.params
        m = Module()
        w = p.width
        shadow = [Signal(w, name=f"shadow{lane}") for lane in range(p.lanes)]
        active = [Signal(w, name=f"active{lane}") for lane in range(p.lanes)]
        xs = [self.x_in[lane * w:(lane + 1) * w] for lane in range(p.lanes)]

        for lane in range(p.lanes):
            with m.If(self.shadow_we[lane]):
                m.d.sync += shadow[lane].eq(self.shadow_data)
            with m.Elif(self.shadow_clear):
                m.d.sync += shadow[lane].eq(0)

        acc = self.psum_in
        if p.is_float:
            from hdl.numerics.fpu import FpAdd32, FpMul32

            for lane in range(p.lanes):
                m.submodules[f"mul{lane}"] = mul = FpMul32()
                m.submodules[f"add{lane}"] = add = FpAdd32()
                m.d.comb += [
                    mul.a.eq(self._widen(m, f"w{lane}", active[lane])),
                    mul.b.eq(self._widen(m, f"x{lane}", xs[lane])),
                    add.a.eq(acc), add.b.eq(mul.y),
                ]
                acc = add.y
        else:
            for lane in range(p.lanes):
                acc = (acc + active[lane].as_signed() * xs[lane].as_signed())[:32]

        with m.If(self.en):
            m.d.sync += [
                self.x_out.eq(self.x_in),
                self.c_out.eq(self.c_in),
                self.psum_out.eq(acc),
            ]
            with m.If(self.c_in):
                m.d.sync += Cat(*active).eq(Cat(*shadow))
        return m


