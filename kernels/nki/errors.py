"""Errors of the NKI front end, each naming the kernel's file and line.

:class:`NkiError` is one of NKI's documented errors (``nki.errors``: the ``err_*`` code and a
message in its words); :class:`NotSupported` is a call or a form that the front end does not
implement yet, naming what it does implement instead. Both are
:class:`~kernels.builder.KernelError`, so a caller that runs kernels catches them as it
catches the kernel library's.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

from kernels.builder import KernelError

__all__ = ["NkiError", "NotSupported", "Unimplemented", "kernel_code", "kernel_line"]

_HERE = str(Path(__file__).resolve().parent)
_PYTHON = tuple({str(Path(p).resolve()) for p in (sys.prefix, sys.base_prefix)})


def kernel_line() -> str:
    """``file:line`` of the innermost frame outside this package: the kernel's own line."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not _ours(name):
            return f"{name}:{frame.f_lineno}"
        frame = frame.f_back
    return "<unknown>:0"


@functools.cache
def _ours(filename: str) -> bool:
    return str(Path(filename).resolve()).startswith(_HERE)


def kernel_code(filename: str) -> bool:
    """Whether ``filename`` holds kernel code: neither this front end nor Python's own (its
    standard library and installed packages)."""
    return not _ours(filename) and not str(Path(filename).resolve()).startswith(_PYTHON)


class NkiError(KernelError):
    """A rule of NKI broken by the kernel: ``file:line: <message> [err_code]``."""

    def __init__(self, message: str, code: str | None = None, where: str | None = None):
        self.where = where or kernel_line()
        self.code = code
        self.detail = message
        super().__init__(f"{self.where}: {message}" + (f" [{code}]" if code else ""))


class NotSupported(NkiError):
    """A call or a form of the NKI interface that trngen does not implement yet."""

    def __init__(self, call: str, supported: str, where: str | None = None):
        super().__init__(f"{call} is not supported yet by trngen's NKI front end; "
                         f"supported: {supported}", None, where)


class Unimplemented:
    """A documented call (``call``, as ``nl.power``) that trngen does not implement: a kernel
    may name or import it, and calling it is refused where the call is made."""

    def __init__(self, call: str, supported: str):
        self.call, self.supported = call, supported
        self.__name__ = self.__qualname__ = call.rsplit(".", 1)[-1]

    def __call__(self, *args, **kwargs):
        raise NotSupported(self.call, self.supported)
