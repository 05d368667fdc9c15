"""``nki.typing`` (``nt``): ``nt.tensor[[shape], dtype]`` describes a kernel argument without
data, for launches that only time the kernel (``nki.benchmark``)."""

from __future__ import annotations

from dataclasses import dataclass

from .tracer import isa_dtype, numpy_dtype

__all__ = ["TensorType", "mutable_tensor", "tensor"]


@dataclass(frozen=True)
class TensorType:
    shape: tuple[int, ...]
    dtype: object

    @property
    def isa(self) -> str:
        return isa_dtype(self.dtype)


class tensor:  # noqa: N801 - NKI's name
    """``tensor[[8192, 4096], nl.bfloat16]``: an HBM argument of that shape and type."""

    def __class_getitem__(cls, item) -> TensorType:
        shape, dtype = item
        return TensorType(tuple(int(s) for s in shape), numpy_dtype(isa_dtype(dtype)))


#: ``nt.mutable_tensor``: an argument the kernel writes (NKI 0.2's annotation; the same
#: description here).
mutable_tensor = tensor
