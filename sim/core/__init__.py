"""The NeuronCore simulator: programs of :mod:`hdl.core.isa` on SBUF, PSUM and HBM, timed per
engine and checked against every rule the documents state (:mod:`sim.core.machine`)."""

from .costs import dma_seconds, stream_cycles, tensor_cycles
from .machine import Core, ProgramError, Result
from .program import HbmTensor, Program

__all__ = ["Core", "HbmTensor", "Program", "ProgramError", "Result", "dma_seconds",
           "stream_cycles", "tensor_cycles"]
