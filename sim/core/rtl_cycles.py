"""The core RTL against the simulator (:mod:`hdl.core`, co-simulated by ``sim/tb/core.py``):
the data are equal byte for byte. Per instruction, the RTL's cycles from decode to retirement
against the model's (:mod:`sim.core.machine`), :func:`rtl_cycles`:

* ``MultiplyMoving`` of a format at full rate or above: **exact**. The model's latency (the
  RTL-checked array schedule of :func:`sim.golden.systolic_cycles.cycles`, acceptance to last row)
  plus one, plus :data:`RTL_MULTIPLY_STAGES`, the core's fixed stages around the array.
* ``Transpose`` on the tensor engine: **exact**. The core's load of the ``K x M`` source
  (``M`` columns read one a cycle, each of the ``ceil(M / beat_columns)`` beats handed to
  the array the cycle after its last column), then the array's transpose pass: the model's
  latency (the RTL-checked schedule's, :func:`sim.golden.systolic_cycles.transpose_cycles`,
  the pass's acceptance to its last output beat) plus one, plus
  :data:`RTL_TRANSPOSE_STAGES`.
* Every instruction of the vector, scalar and GpSimd engines: **exact**, the stream rule
  (:func:`hdl.core.timing.instruction_cycles`), which the core's sequencer holds each one's
  retirement to (:class:`hdl.core.timing.StreamRule`). An engine whose own work takes longer
  than the rule breaks it.
* ``LoadStationary``: **exact**. The core reads the ``M`` stationary columns one a cycle and
  hands each of the model's ``load`` beats (``ceil(M / beat_columns)``) to the array the
  cycle after its last column: ``M + load``, plus :data:`RTL_MULTIPLY_STAGES`.
* ``MultiplyMoving`` of a format below full rate: **exact**, the model's latency plus
  :data:`RTL_MULTIPLY_STAGES` (at full rate, one more).
* A double row counts as its array's tile: ``2P`` contraction indices, ``N`` its columns
  (half its free size), as this model times it; the RTL reads both pairs of a column in one
  cycle.
* DMA: not compared. The RTL's AXI port moves four bytes per beat; the model's DMA is the chip's
  fabric, a microsecond of latency and its bandwidth, not a property of the port.
"""

from __future__ import annotations

from hdl.core import isa
from hdl.core.isa import Instruction, LoadStationary, MultiplyMoving, Transpose
from hdl.core.params import CoreParams
from hdl.core.timing import instruction_cycles

from .costs import tensor_cycles, transpose_cycles

__all__ = ["RTL_MULTIPLY_STAGES", "RTL_TRANSPOSE_STAGES", "rtl_cycles"]


#: Cycles of the core RTL around the array's multiply: the sequencer's hand-off and decode,
#: the command, the first SBUF read, the PSUM write after the last row and the retirement.
RTL_MULTIPLY_STAGES = 4
#: Cycles of the core RTL around a transpose's load and pass: a multiply's stages (the load's
#: command and first SBUF read in place of the multiply's) and the pass's own command, issued
#: after the load's last beat.
RTL_TRANSPOSE_STAGES = RTL_MULTIPLY_STAGES + 1


def rtl_cycles(params: CoreParams, kind: str, ins: Instruction) -> int:
    """The core RTL's cycles (decode to retirement) of the compute instruction ``ins`` of an
    engine of ``kind`` (see the module docstring)."""
    src = getattr(ins, "src", None) or getattr(ins, "a", None) or ins.dst
    if isinstance(ins, Transpose) and kind == "tensor":
        k, m = src.partitions, src.free
        load = m + -(-m // params.tensor.beat_columns)
        return int(load + transpose_cycles(params, k, m)["latency"] + 1 + RTL_TRANSPOSE_STAGES)
    if isinstance(ins, MultiplyMoving | LoadStationary):
        # a double row: twice the contraction, half the free axis in columns
        pairs = 2 if ins.double_row else 1
        columns = src.free // pairs
        c = tensor_cycles(params, isa.input_format(ins.src.dtype), pairs * src.partitions,
                          ins.dst.partitions if isinstance(ins, MultiplyMoving) else
                          columns, columns)
        if isinstance(ins, MultiplyMoving):
            full = params.rate(isa.input_format(ins.src.dtype)) >= 1
            return int(c["latency"] + full + RTL_MULTIPLY_STAGES)
        return int(columns + c["load"] + RTL_MULTIPLY_STAGES)
    return instruction_cycles(params, kind, ins)
