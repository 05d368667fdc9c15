"""The NeuronCore simulator: programs of :mod:`hdl.core.isa` on SBUF, PSUM and HBM, timed per
engine (:mod:`sim.core.machine`) and checked against every rule the documents state
(:mod:`sim.core.rules`)."""

from .costs import dma_seconds, stream_cycles, tensor_cycles
from .machine import Core, Result
from .program import HbmTensor, Program
from .rules import ProgramError

__all__ = ["Core", "HbmTensor", "Program", "ProgramError", "Result", "dma_seconds",
           "stream_cycles", "tensor_cycles"]
