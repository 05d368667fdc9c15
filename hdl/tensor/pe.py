"""Processing element of the weight-stationary systolic array.

A PE holds two weight banks of one stationary element per lane (two lanes with double-rate
FP8). Each enabled cycle it forwards the moving element, with the bank select ``s`` that
travels beside it, to its right neighbour, and the partial sum to the PE below::

    psum_out <= add32(psum_in, mul32(w0, x0))                 (one lane)
    psum_out <= add32(add32(psum_in, mul32(w0, x0)), mul32(w1, x1))   (two lanes)

with ``w`` the weights of bank ``s_in``; int8 computes ``psum_in + w * x`` in wrapping int32.

Weights arrive on a second wave beside the moving one: a stationary beat carries
``beat_columns`` columns' weights (``w``, each column's lanes), the bank to write (``wb``) and
``ws``, the hop count to the last column it serves, one less at each PE. A PE with
``ws < beat_columns`` writes column slot ``beat_columns - 1 - ws`` of the beat into bank
``wb``; the beat goes no further than ``ws == 0``. The sequencer fills a bank only after the
last moving element that reads it has been injected, and the two waves cross every PE in the
same order, so a new tile loads while the other bank still multiplies.
"""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .params import SystolicParams

__all__ = ["ProcessingElement", "pe_ports"]


def pe_ports(params: SystolicParams) -> dict:
    """Port signature of a PE (also the port list of its emitted Verilog module)."""
    lw = params.lanes * params.width
    ww = params.beat_columns * lw
    return {
        "en": In(1),
        "x_in": In(lw),
        "x_out": Out(lw),
        "s_in": In(1),
        "s_out": Out(1),
        "psum_in": In(32),
        "psum_out": Out(32),
        "w_in": In(ww),
        "w_out": Out(ww),
        "wv_in": In(1),
        "wv_out": Out(1),
        "wb_in": In(1),
        "wb_out": Out(1),
        "ws_in": In(params.skip_bits),
        "ws_out": Out(params.skip_bits),
    }


class ProcessingElement(wiring.Component):
    """One multiply-accumulate cell; see the module docstring for its contract.

    Ports: ``en`` advances both waves (``x``/``s``/``psum`` and ``w``/``wv``/``wb``/``ws``);
    ``w_in`` holds slot ``j`` of lane ``l`` at element ``l * beat_columns + j``.
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
        w, bc = p.width, p.beat_columns
        banks = [[Signal(w, name=f"bank{b}_{lane}") for lane in range(p.lanes)]
                 for b in range(2)]
        xs = [self.x_in[lane * w:(lane + 1) * w] for lane in range(p.lanes)]

        take = Signal()
        m.d.comb += take.eq(self.wv_in & (self.ws_in < bc))
        if bc > 1:
            slot = Signal(range(bc), name="slot")
            m.d.comb += slot.eq(bc - 1 - self.ws_in)
        with m.If(self.en & take):
            for lane in range(p.lanes):
                chunk = self.w_in[lane * bc * w:(lane + 1) * bc * w]
                value = chunk.word_select(slot, w) if bc > 1 else chunk
                with m.If(self.wb_in):
                    m.d.sync += banks[1][lane].eq(value)
                with m.Else():
                    m.d.sync += banks[0][lane].eq(value)

        weights = [Mux(self.s_in, banks[1][lane], banks[0][lane]) for lane in range(p.lanes)]
        acc = self.psum_in
        if p.is_float:
            from hdl.numerics.fpu import FpAdd32, FpMul32

            for lane in range(p.lanes):
                m.submodules[f"mul{lane}"] = mul = FpMul32()
                m.submodules[f"add{lane}"] = add = FpAdd32()
                m.d.comb += [
                    mul.a.eq(self._widen(m, f"w{lane}", weights[lane])),
                    mul.b.eq(self._widen(m, f"x{lane}", xs[lane])),
                    add.a.eq(acc), add.b.eq(mul.y),
                ]
                acc = add.y
        else:
            for lane in range(p.lanes):
                acc = (acc + weights[lane].as_signed() * xs[lane].as_signed())[:32]

        with m.If(self.en):
            m.d.sync += [
                self.x_out.eq(self.x_in),
                self.s_out.eq(self.s_in),
                self.psum_out.eq(acc),
                self.w_out.eq(self.w_in),
                self.wv_out.eq(self.wv_in & (self.ws_in != 0)),
                self.wb_out.eq(self.wb_in),
                self.ws_out.eq(self.ws_in - 1),
            ]
        return m
