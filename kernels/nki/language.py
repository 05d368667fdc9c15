"""``nki.language`` (``nl``): tensors, memory, indexing, iteration and the ``nl`` compute calls,
lowered to :mod:`.lower` as NKI documents (``nl.matmul`` to a transpose where needed and
``nc_matmul``, ``nl.exp`` and the other functions to ``activation``, arithmetic to
``tensor_tensor`` / ``tensor_scalar``, ``nl.sum`` / ``max`` / ``min`` / ``mean`` to
``tensor_reduce``). A name this module does not define raises
:class:`~kernels.nki.errors.NotSupported`.
"""

from __future__ import annotations

import builtins
import contextlib
import math
import os

import ml_dtypes
import numpy as np

from hdl.core.isa import TensorScalar, TensorTensor
from hdl.vector.ops import VectorOp

from . import lower
from .compiler import Placement
from .errors import NkiError, NotSupported, Unimplemented
from .tracer import (
    FLOATS,
    TF32,
    AffineLoop,
    DSlice,
    DynamicLoop,
    Index,
    Placed,
    Register,
    SequentialLoop,
    View,
    current,
    dropped,
    isa_dtype,
    numpy_dtype,
    promote,
)

# --- types and constants ------------------------------------------------------------------
float32 = numpy_dtype("fp32")
bfloat16 = numpy_dtype("bf16")
float16 = numpy_dtype("fp16")
float8_e4m3 = numpy_dtype("fp8_e4m3")
float8_e5m2 = numpy_dtype("fp8_e5m2")
float8_e4m3fn = numpy_dtype("fp8_e4m3fn")
tfloat32 = TF32
int8 = numpy_dtype("int8")
int32 = numpy_dtype("int32")
uint8 = numpy_dtype("uint8")
uint32 = numpy_dtype("uint32")
uint16 = numpy_dtype("uint16")
float8_e4m3fn_x4 = numpy_dtype("mxfp8_x4")
float4_e2m1fn_x4 = numpy_dtype("mxfp4_x4")
float8_e5m2_x4 = numpy_dtype("mxfp8_e5m2_x4")
float8_e8m0fnu = ml_dtypes.float8_e8m0fnu
#: NKI documents int16; the core's engines have no 16-bit integer: named (nki-library's
#: allocator compares types with it), a tensor of it refused
int16 = np.dtype(np.int16)


class NKIObject:
    """The base of a kernel's own classes (NKI 0.2), which NKI documents as working like
    dataclasses: a subclass's public class attributes (not methods, nor mutable containers)
    are its fields, annotated or not, so ``@dataclass`` gives them keyword arguments; the
    base's constructor sets the keywords it is given."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        notes = dict(cls.__dict__.get("__annotations__", {}))
        for name, value in cls.__dict__.items():
            if name.startswith("_") or name in notes or callable(value) \
                    or isinstance(value, (property, staticmethod, classmethod, list, dict,
                                          set)):
                continue
            notes[name] = object
        cls.__annotations__ = notes

    def __init__(self, **kwargs):
        for name, value in kwargs.items():
            setattr(self, name, value)


class fp32:  # noqa: N801 - NKI's name
    """FP32 constants: ``fp32.min`` is the most negative finite float32."""

    min = float(np.finfo(np.float32).min)


def finfo(dtype):
    """The limits of a floating-point type, as ``numpy.finfo`` gives them (``nl.finfo``;
    ``nl.finfo(dt).min`` is the most negative finite value of ``dt``, bfloat16 and the fp8
    types included)."""
    name = isa_dtype(dtype)
    if name == "tf32":
        raise NotSupported("nl.finfo(tfloat32)", "float32, bfloat16, float16, the fp8 types")
    return ml_dtypes.finfo(numpy_dtype(name))


class _ChipSizes(type):
    """The sizes of ``nl.tile_size`` that are the target chip's memories (NKI 0.2), read
    from the core's parameters while a kernel is traced."""

    @staticmethod
    def _params(name: str):
        return current(f"nl.tile_size.{name}").params

    @property
    def psum_num_banks(cls) -> int:
        return cls._params("psum_num_banks").psum_banks

    @property
    def sbuf_size_bytes(cls) -> int:
        p = cls._params("sbuf_size_bytes")
        return p.partitions * p.sbuf_bytes

    @property
    def sbuf_fmax_bytes(cls) -> int:
        return cls._params("sbuf_fmax_bytes").sbuf_bytes

    @property
    def sbuf_fmax(cls) -> int:
        return cls._params("sbuf_fmax").sbuf_bytes // 4

    @property
    def total_available_sbuf_size(cls) -> int:  # per partition, as NKI documents it
        return cls._params("total_available_sbuf_size").sbuf_bytes

    def __getattr__(cls, name):
        if name in ("psum_min_align", "sbuf_min_align"):
            raise NotSupported(f"nl.tile_size.{name}", "the tile sizes pmax, psum_fmax, "
                               "psum_bank_fmax(_bytes), psum_num_banks, sbuf_size_bytes, "
                               "sbuf_fmax(_bytes), total_available_sbuf_size, "
                               "gemm_stationary_fmax, gemm_moving_fmax, bn_stats_fmax")
        raise AttributeError(f"type object 'tile_size' has no attribute {name!r}")


class tile_size(metaclass=_ChipSizes):  # noqa: N801 - NKI's name
    """NKI's tile limits [nki.language]: 128 partitions; stationary free size 128, moving
    512; a PSUM bank 2 KiB per partition (512 fp32); bn_stats 512; and the target chip's
    memories (:class:`_ChipSizes`)."""

    pmax = 128
    gemm_stationary_fmax = 128
    gemm_moving_fmax = 512
    psum_fmax = 512
    psum_bank_fmax = 512
    psum_bank_fmax_bytes = 2048
    bn_stats_fmax = 512


def static_cast(input_data, dtype):
    """A host scalar or array cast to ``dtype`` (``nl.static_cast``), rounding to nearest even
    as numpy and ml_dtypes cast; for a tile in a kernel, ``nl.copy(x, dtype=)`` casts."""
    if isinstance(input_data, View):
        raise NotSupported("nl.static_cast of a tile", "nl.copy(x, dtype=...) to cast a tile")
    name = isa_dtype(dtype)
    if name == "tf32":
        raise NotSupported("nl.static_cast to tfloat32", "float32, or a cast in the kernel")
    out = np.asarray(input_data).astype(numpy_dtype(name))
    return out if out.ndim else out[()]


#: NKI's boolean type: a byte, 0 or 1 (stored as uint8)
bool_ = np.dtype(np.bool_)
#: the type of NKI's tensors, for annotations and isinstance
NkiTensor = View
bypass = lower.bypass


@contextlib.contextmanager
def no_reorder():
    """NKI's region whose instructions run in program order: trngen issues each engine's
    and queue's instructions in program order throughout, so the region changes nothing."""
    current("no_reorder")
    yield


class _Buffer(str):
    """A memory name as NKI's buffer markers are given (``nl.sbuf`` ...)."""


sbuf = _Buffer("sbuf")
psum = _Buffer("psum")
hbm = _Buffer("hbm")
shared_hbm = _Buffer("shared_hbm")
private_hbm = _Buffer("private_hbm")
_HBM = ("hbm", "shared_hbm", "private_hbm")


def is_hbm(buffer) -> bool:
    """Whether ``buffer`` (``nl.hbm``, ``shared_hbm``, ``private_hbm``, ...) is an HBM one."""
    return buffer in _HBM


def is_sbuf(buffer) -> bool:
    return buffer == "sbuf"


def is_psum(buffer) -> bool:
    return buffer == "psum"


def is_on_chip(buffer) -> bool:
    """Whether ``buffer`` is SBUF or PSUM."""
    return buffer in ("sbuf", "psum")


class par_dim:  # noqa: N801 - NKI's name
    """Marks the partition dimension of an on-chip tensor's shape."""

    def __init__(self, size):
        self.size = int(size)

    def __index__(self):
        return self.size

    def __int__(self):
        return self.size


# --- tensors ------------------------------------------------------------------------------

def ndarray(shape, dtype, buffer=None, name: str = "", **kwargs) -> View:
    t = current("ndarray")
    t.commit()
    # nki-samples' kernels pass lazy_initialization=False (fill where the tensor is made):
    # the tracer fills a tensor where nl.full/zeros is called, lazily or not
    kwargs.pop("lazy_initialization", None)
    address = kwargs.pop("address", None)
    _no_options("ndarray", kwargs)
    dt = isa_dtype(dtype)
    buf = "sbuf" if buffer is None else str(buffer)
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    if buf in _HBM:
        v = t.hbm(name or "out", tuple(int(s) for s in shape), dt,
                  shared=buf == "shared_hbm")
        if buf != "shared_hbm":  # each core's own
            t.private.append((v.buf.offset, v.buf.offset + v.buf.nbytes))
        return v
    if buf not in ("sbuf", "psum"):
        raise NotSupported(f"buffer {buffer!r}", "sbuf, psum, hbm, shared_hbm, private_hbm")
    marks = [i for i, s in enumerate(shape) if isinstance(s, par_dim)]
    if len(marks) > 1:
        raise NkiError("a tensor has one partition dimension (nl.par_dim)")
    if address is not None and not t.auto_alloc:
        return t.placed(buf, tuple(int(s) for s in shape), dt, name or buf, 0,
                        _at_address(t, buf, address), traced_once=False)
    if isinstance(buffer, Placement) and not t.auto_alloc:
        return t.placed(buf, tuple(int(s) for s in shape), dt, name or buf,
                        marks[0] if marks else 0, buffer.func)
    if buf == "psum" and marks and marks[0] > 0:  # NKI allocates PSUM block by block
        return t.blocked(buf, tuple(int(s) for s in shape), dt, name or buf, marks[0])
    return t.on_chip(buf, tuple(int(s) for s in shape), dt, name or buf,
                     marks[0] if marks else 0)


def _at_address(t, buf: str, address):
    """NKI 0.2's placement ``address=(partition, byte)``: in PSUM the byte counts across
    the banks (bank ``byte // bank bytes``)."""
    try:
        part, byte = (int(a) for a in address)
    except (TypeError, ValueError) as e:
        raise NkiError(f"ndarray(address=) takes (partition, byte), not {address!r}") from e
    if buf == "psum":
        bank, byte = divmod(byte, t.params.psum_bank_bytes)
        return lambda idx, pdim_size, fdim_size: (bank, part, byte)
    return lambda idx, pdim_size, fdim_size: (part, byte)


def shared_constant(constant, dtype=None, **kwargs) -> View:
    """An HBM tensor holding ``constant`` (an array, or the path of a ``.npy`` file as NKI
    0.2 takes it; cast to ``dtype``), written into HBM before a numeric launch runs."""
    _no_options("shared_constant", kwargs)
    t = current("shared_constant")
    t.commit()
    if isinstance(constant, (str, os.PathLike)):
        try:
            constant = np.load(constant, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise NkiError(f"shared_constant: {os.fspath(constant)} is not a readable .npy "
                           f"file ({e})") from None
    data = np.asarray(constant)
    return t.constant(data, isa_dtype(dtype if dtype is not None else data.dtype))


def zeros(shape, dtype, buffer=None, name: str = "", **kwargs) -> View:
    return full(shape, 0.0, dtype, buffer=buffer, name=name, **kwargs)


def ones(shape, dtype, buffer=None, name: str = "", **kwargs) -> View:
    return full(shape, 1.0, dtype, buffer=buffer, name=name, **kwargs)


def full(shape, fill_value, dtype, buffer=None, name: str = "", **kwargs) -> View:
    v = ndarray(shape, dtype, buffer=buffer, name=name, **kwargs)
    if isinstance(v, Placed):  # each tile filled before its first use
        v.fill = float(fill_value)
        return v
    if v.buf.space == "hbm":
        raise NkiError("an HBM tensor cannot be created with an initial value",
                       "err_hbm_tensor_with_init_value_not_supported")
    current("full").initialise(v, float(fill_value))
    return v


def zeros_like(a: View, dtype=None, buffer=None, name: str = "", **kwargs) -> View:
    return zeros(a.shape, dtype or a.dtype, buffer=buffer or a.buffer, name=name, **kwargs)


def empty_like(a: View, dtype=None, buffer=None, name: str = "", **kwargs) -> View:
    return ndarray(a.shape, dtype or a.dtype, buffer=buffer or a.buffer, name=name, **kwargs)


def _no_options(call: str, kwargs: dict) -> None:
    """Refuse the options of ``call`` trngen does not implement; ``name=`` (a label in
    NKI's profiles) passes."""
    bad = [k for k in kwargs if k != "name"]
    if bad:
        raise NotSupported(f"{call}({', '.join(f'{k}=' for k in bad)})",
                           f"{call} without these options")


# --- indexing and iteration ---------------------------------------------------------------

def arange(*args) -> Index:
    r = range(*(int(a) for a in args))
    return Index(0, 1, len(r), r.start, r.step)


class _Grid(tuple):
    @property
    def p(self):
        return self[0]

    @property
    def x(self):
        return self[1]

    @property
    def y(self):
        return self[2]

    @property
    def z(self):
        return self[3]


class _MGrid:
    def __getitem__(self, key) -> _Grid:
        key = key if isinstance(key, tuple) else (key,)
        out = []
        for axis, k in enumerate(key):
            if not isinstance(k, slice):
                raise NotSupported("nl.mgrid with a non-slice", "nl.mgrid[a:b, c:d, ...]")
            r = range(k.start or 0, k.stop, k.step or 1)
            out.append(Index(axis, len(key), len(r), r.start, r.step))
        return _Grid(out)


mgrid = _MGrid()


def ds(start, size) -> DSlice:
    return DSlice(int(start), int(size))


def affine_range(*args, **kwargs) -> AffineLoop:
    """Iterations without loop-carried dependences: traced in order, and the program lets
    them overlap wherever their tensors allow; two iterations that write the same elements
    (other than by accumulating) are NKI's error."""
    return AffineLoop(range(*(int(a) for a in args)))


def sequential_range(*args, **kwargs) -> SequentialLoop:
    """Iterations in order: the dependences through their tensors order them."""
    return SequentialLoop(range(*(int(a) for a in args)))


def static_range(*args) -> range:
    return range(*(int(a) for a in args))


def _bound(v, call: str) -> int:
    return v.known(call) if isinstance(v, Register) else int(v)


def dynamic_range(start, stop=None, step=1) -> DynamicLoop:
    """A loop the engines' sequencers run (:class:`~kernels.nki.tracer.DynamicLoop`): its
    bounds integers or registers, ``step`` a positive integer; each iteration's value is a
    register."""
    call = "nl.dynamic_range"
    if isinstance(step, Register) or int(step) < 1:
        raise NkiError(f"{call}: step must be a positive integer known when the kernel is "
                       f"built, not {step!r}")
    if stop is None:
        start, stop = 0, start
    return DynamicLoop(range(_bound(start, call), _bound(stop, call), int(step)))


def fori_loop(lower, upper, body_fun, step=1) -> None:
    """``body_fun(i)`` for ``i`` from ``lower`` to ``upper`` (exclusive) by ``step``, a
    :func:`dynamic_range` whose iteration register is passed by value."""
    for i in dynamic_range(lower, upper, step):
        body_fun(i)


def while_loop(init, body_fun) -> None:
    """While the condition register is nonzero, ``body_fun`` of its value; the register the
    body returns is the next condition (checked before each iteration)."""
    if not isinstance(init, Register):
        raise NkiError(f"nl.while_loop: init must be a register, not {type(init).__name__}")
    cond = [init]

    def iterations():  # the next exists while the condition the body returned holds
        n = 0
        while cond[0].known("nl.while_loop"):
            yield n
            n += 1

    for _ in DynamicLoop(iterations()):
        nxt = body_fun(Register(cond[0].value))
        if not isinstance(nxt, Register):
            raise NkiError(f"nl.while_loop: the body must return the condition register, "
                           f"not {type(nxt).__name__}")
        cond[0] = nxt


class SpmdDim:
    """A dimension of an SPMD launch grid made of factors (size, on cores), outermost first:
    ``nl.nc(2)`` is one factor of two physical cores, ``nl.nc(2) * 2`` (``nl.spmd_dim(
    nl.nc(2), 2)``) puts the core outermost (instances 0, 1 on core 0), ``2 * nl.nc(2)``
    (``nl.spmd_dim(2, nl.nc(2))``) innermost (instances 0, 2 on core 0)."""

    def __init__(self, factors):
        self.factors = tuple(factors)

    @staticmethod
    def of(x) -> SpmdDim:
        return x if isinstance(x, SpmdDim) else SpmdDim([(int(x), False)])

    @property
    def size(self) -> int:
        return math.prod(n for n, _ in self.factors)

    @property
    def cores(self) -> int:
        return math.prod(n for n, c in self.factors if c)

    def core(self, index: int) -> int:
        """The physical core of instance ``index`` along this dimension."""
        core, scale = 0, 1
        for n, on_cores in reversed(self.factors):
            index, digit = divmod(index, n)
            if on_cores:
                core += digit * scale
                scale *= n
        return core

    def __mul__(self, other):
        return SpmdDim(self.factors + SpmdDim.of(other).factors)

    def __rmul__(self, other):
        return SpmdDim(SpmdDim.of(other).factors + self.factors)


def nc(n) -> SpmdDim:
    """A launch-grid dimension spread over ``n`` physical NeuronCores of a logical core."""
    return SpmdDim([(int(n), True)])


def spmd_dim(*dims) -> SpmdDim:
    """A launch-grid dimension made of ``dims``, outermost first (numbers and ``nl.nc``)."""
    out = SpmdDim(())
    for d in dims:
        out = out * d
    return out


def _grid_axis(call: str, t, axis) -> int:
    """``axis`` as an axis of the launch grid of ``t``, else NKI's error for ``call``."""
    axis = int(axis)
    if not 0 <= axis < len(t.grid):
        raise NkiError(f"{call}({axis}) of a launch grid of {len(t.grid)} dimensions (a "
                       f"kernel that asks for a grid is launched on one: kernel[1] for one "
                       f"program)")
    return axis


def program_id(axis=0) -> int:
    t = current("program_id")
    return t.program_id[_grid_axis("program_id", t, axis)]


def num_programs(axes=None):
    t = current("num_programs")
    if axes is None:
        return int(np.prod(t.grid)) if t.grid else 1
    if isinstance(axes, (tuple, list)):
        return tuple(t.grid[_grid_axis("num_programs", t, a)] for a in axes)
    return t.grid[_grid_axis("num_programs", t, axes)]


def program_ndim() -> int:
    return len(current("program_ndim").grid)


# --- memory -------------------------------------------------------------------------------

def load(src, *, mask=None, dtype=None, **kwargs) -> View:
    """A DMA from HBM into a new SBUF tile (then a cast on the vector engine if ``dtype``
    differs)."""
    t = current("load")
    t.commit()
    _no_options("load", kwargs)
    if not isinstance(src, View):
        raise NkiError("operand 'src' of 'load' must be an HBM tensor")
    t.ap(src, "load", "src", ("hbm",)) if src.buf.space != "hbm" else None
    if src.ndim == 0:  # one element, as a [1, 1] tile
        src = src.reshape((1, 1))
    s = src.cut(mask)
    if not dropped(mask):  # a load the mask drops reads nothing
        s.check_bounds()
    want = isa_dtype(dtype) if dtype is not None else src.dt

    def make(out: View, _):
        if out.dt == s.dt:
            t.dma(out, s, "load")
            return
        tmp = t.tile(s.shape, s.dt)
        make(tmp, None)
        lower.tensor_copy(tmp, dst=out, call="load")

    fresh = t.tile(src.shape, want, "sbuf", "tile")
    return t.pend(fresh, make, "dma" if want == src.dt else "compute", mask)


def load_transpose2d(src, *, mask=None, dtype=None, **kwargs) -> View:
    """``src`` [F, P] loaded as a [P, F] tile (a strided DMA)."""
    if not isinstance(src, View) or src.ndim != 2:
        raise NkiError("load_transpose2d takes a 2-dimensional HBM tensor")
    return load(src.permuted((1, 0)), mask=mask, dtype=dtype, **kwargs)


def store(dst, value, *, mask=None, **kwargs) -> None:
    """A DMA of ``value`` into HBM ``dst``; a PSUM tile, a number or another format passes
    through an SBUF tile of ``dst``'s format first."""
    t = current("store")
    t.commit()
    _no_options("store", kwargs)
    if not isinstance(dst, View) or dst.buf.space != "hbm":
        raise NkiError(f"Expected operand 'dst' of 'store' to be in address space 'hbm', "
                       f"but got a tile in '{getattr(dst, 'buffer', type(dst).__name__)}' "
                       f"instead.", "err_unsupported_memory")
    if dropped(mask):
        return
    d = dst.cut(mask)
    if not isinstance(value, View):
        tile_ = t.tile(dst.shape, dst.dt)
        t.memset(tile_, float(value), "gpsimd", "store")
        value = tile_
    v = value.cut(mask)
    if v.buf.space == "hbm":
        raise NkiError("Expected operand 'value' of 'store' to be in address space "
                       "'psum|sbuf', but got a tile in 'hbm' instead.", "err_unsupported_memory")
    if v.buf.space == "psum" or v.dt != dst.dt:
        tmp = t.tile(v.shape, dst.dt)
        lower.tensor_copy(v, dst=tmp, call="store")
        v = tmp
    t.dma(d, v, "store")


def atomic_rmw(dst, value, op, *, mask=None, **kwargs) -> None:
    """``dst = op(dst, value)`` in HBM (rows as a tile of indices names them, or as
    sliced): a DMA that adds ``value`` into ``dst`` (``op`` np.add or nl.add)."""
    _no_options("atomic_rmw", kwargs)
    lower.dma_copy(dst, value, mask=mask, rmw_op=op, call="atomic_rmw")


def copy(src, *, mask=None, dtype=None, **kwargs) -> View:
    _no_options("copy", kwargs)
    return lower.tensor_copy(src, mask=mask, dtype=dtype, call="copy")


def device_print(prefix, x, *, mask=None, **kwargs) -> None:
    """Print ``prefix`` and the value ``x`` has here when a numeric launch has run: a DMA
    copies ``x`` to an HBM tensor of its own at this point of the program (in a timing-only
    launch nothing is printed, the copy still runs)."""
    t = current("device_print")
    t.commit()
    _no_options("device_print", kwargs)
    if not isinstance(x, View):
        raise NkiError(f"operand 'x' of 'device_print' must be a tile, not {type(x).__name__}")
    if dropped(mask):
        return
    x = x.cut(mask)
    copy = t.hbm("device_print", x.shape, x.dt)
    lower.dma_copy(copy, x, call="device_print")
    t.prints.append((str(prefix), copy))


def broadcast_to(src: View, shape, **kwargs) -> View:
    """``src.broadcast_to(shape)``."""
    _no_options("broadcast_to", kwargs)
    if not isinstance(src, View):
        raise NkiError(f"operand 'src' of 'broadcast_to' must be a tile, not "
                       f"{type(src).__name__}")
    return src.broadcast_to(shape)


def copy_into(dst: View, src: View) -> None:
    """``dst[...] = src`` between two tiles (a DMA where one is in HBM)."""
    if dst.buf.space == "hbm" or src.buf.space == "hbm":
        lower.dma_copy(dst, src, call="assignment")
        return
    lower.tensor_copy(src, dst=dst, call="assignment")


# --- compute ------------------------------------------------------------------------------

def matmul(x, y, *, transpose_x=False, mask=None, **kwargs) -> View:
    """``x @ y`` (``x.T @ y`` with ``transpose_x``): ``nc_matmul(x, y)``, or for
    ``transpose_x=False`` ``nc_matmul(transpose(x), y)`` with the transpose copied to SBUF.
    Operands of two types meet in the one both promote to (as numpy promotes: fp32 over
    bf16), the other cast to it first, since the array multiplies one format."""
    _no_options("matmul", kwargs)
    if not transpose_x:
        xt = lower.nc_transpose(x, mask=mask, call="matmul")
        x = lower.tensor_copy(xt, call="matmul")
    if isinstance(x, View) and isinstance(y, View) and x.dt != y.dt:
        dt = numpy_dtype(promote(x.dt, y.dt))
        x, y = (lower.tensor_copy(v, dtype=dt, call="matmul") if v.dtype != dt else v
                for v in (x, y))
    return lower.nc_matmul(x, y, mask=mask, call="matmul")


def transpose(x, *, dtype=None, mask=None, **kwargs) -> View:
    _no_options("transpose", kwargs)
    if isinstance(x, View) and x.ndim > 2:
        raise NkiError(f"parameter 'x{list(x.shape)}' of 'transpose' exceed max supported "
                       f"number of dimensions of 2", "err_exceed_max_supported_dimension")
    return lower.nc_transpose(x, mask=mask, dtype=dtype, call="transpose")


def _binary(call: str, op: VectorOp, x, y, dtype, mask) -> View:
    t = current(call)
    t.commit()
    xs, ys = isinstance(x, View), isinstance(y, View)
    if not xs and not ys:
        raise NkiError(f"'{call}' needs at least one tile")
    if not xs:  # number op tile
        if op in lower.COMMUTATIVE:
            return _binary(call, op, y, x, dtype, mask)
        if op == VectorOp.SUBTRACT:  # c - y = (y * -1) + c
            return lower.tensor_scalar(y, np.multiply, -1.0, op1=np.add, operand1=float(x),
                                       dtype=dtype or _with_scalar(y.dt, x), mask=mask,
                                       call=call)
        raise NotSupported(f"a number as the first operand of '{call}'",
                           "a tile first, or the commutative operators")
    if not ys:
        return lower.tensor_scalar(x, op, float(y), dtype=dtype or _with_scalar(x.dt, y),
                                   mask=mask, call=call)
    if x.ndim + y.ndim == 3:  # a tile of one value per partition against a 2-D one
        x, y = x.as_column(), y.as_column()
    common = _broadcast_shape(x.shape, y.shape) if x.shape != y.shape else None
    if common is not None and x.shape[0] != y.shape[0]:
        # a one-partition operand broadcast over the partitions first, as NKI broadcasts
        # the partition dimension (on the tensor engine, as broadcast_to)
        if x.shape[0] == 1:
            x = x.broadcast_to((common[0],) + x.shape[1:])
        else:
            y = y.broadcast_to((common[0],) + y.shape[1:])
        common = _broadcast_shape(x.shape, y.shape) if x.shape != y.shape else None
    xf = math.prod(x.shape[1:]) if x.ndim > 1 else 1
    yf = math.prod(y.shape[1:]) if y.ndim > 1 else 1
    if xf == yf and common is None:
        return lower.tensor_tensor(x, y, op, dtype=dtype, mask=mask, call=call)
    if yf == 1:  # one value per partition: a tensor_scalar
        return lower.tensor_scalar(x, op, y, dtype=dtype or promote(x.dt, y.dt),
                                   mask=mask, call=call)
    if xf == 1:
        if op in lower.COMMUTATIVE:
            return lower.tensor_scalar(y, op, x, dtype=dtype or promote(x.dt, y.dt),
                                       mask=mask, call=call)
        if op == VectorOp.SUBTRACT:
            return lower.tensor_scalar(y, np.multiply, -1.0, op1=np.add, operand1=x,
                                       dtype=dtype or promote(x.dt, y.dt), mask=mask,
                                       call=call)
    if common is not None:  # numpy's broadcasting of free dimensions
        return lower.tensor_tensor(x.broadcast_to(common), y.broadcast_to(common), op,
                                   dtype=dtype, mask=mask, call=call)
    raise NotSupported(f"'{call}' of shapes {list(x.shape)} and {list(y.shape)}",
                       "equal shapes, [P, 1] against [P, ...], or shapes of one rank that "
                       "broadcast")


def _with_scalar(dt: str, value) -> str:
    """The type of a tile of ``dt`` and a number, as NKI promotes them: the number weakly
    typed (a bool uint8, an integer int32, anything else float32), a float type over an
    integer one, the wider of two of a kind."""
    weak = "uint8" if isinstance(value, (bool, np.bool_)) else \
        "int32" if isinstance(value, (int, np.integer)) else "fp32"
    if dt in FLOATS and weak not in FLOATS:
        return dt
    if weak in FLOATS and dt not in FLOATS:
        return weak
    return promote(dt, weak)


def _is_integer(v) -> bool:
    """Whether ``v``, a tile or a number, is of an integer type."""
    if isinstance(v, View):
        return v.dt not in FLOATS
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _broadcast_shape(a: tuple, b: tuple) -> tuple | None:
    """The common shape of two tiles of one rank that broadcast as numpy's (each dimension
    equal, or one of them 1); None if they do not. A one-partition tile broadcast across
    partitions is copied there by the tensor engine (``broadcast_to``), free dimensions of
    size 1 are read with a stride of 0."""
    if len(a) != len(b) or not a:
        return None
    if any(m != n and 1 not in (m, n) for m, n in zip(a, b, strict=True)):
        return None
    return tuple(m if n == 1 else n for m, n in zip(a, b, strict=True))


def _binary_fn(name: str, op: VectorOp):
    def fn(x, y, *, dtype=None, mask=None, **kwargs):
        _no_options(name, kwargs)
        return _binary(name, op, x, y, dtype, mask)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"``{name}(x, y)`` element by element on the vector engine."
    lower.VECTOR_OPS[fn] = op
    return fn


add = _binary_fn("add", VectorOp.ADD)
subtract = _binary_fn("subtract", VectorOp.SUBTRACT)
multiply = _binary_fn("multiply", VectorOp.MULTIPLY)
maximum = _binary_fn("maximum", VectorOp.MAX)
minimum = _binary_fn("minimum", VectorOp.MIN)
equal = _binary_fn("equal", VectorOp.IS_EQUAL)
not_equal = _binary_fn("not_equal", VectorOp.NOT_EQUAL)
greater = _binary_fn("greater", VectorOp.GREATER)
greater_equal = _binary_fn("greater_equal", VectorOp.GREATER_EQUAL)
less = _binary_fn("less", VectorOp.LESS)
less_equal = _binary_fn("less_equal", VectorOp.LESS_EQUAL)
bitwise_and = _binary_fn("bitwise_and", VectorOp.BITWISE_AND)
bitwise_or = _binary_fn("bitwise_or", VectorOp.BITWISE_OR)
bitwise_xor = _binary_fn("bitwise_xor", VectorOp.BITWISE_XOR)
left_shift = _binary_fn("left_shift", VectorOp.LEFT_SHIFT)
right_shift = _binary_fn("right_shift", VectorOp.RIGHT_SHIFT)
abs_max = _binary_fn("abs_max", VectorOp.ABS_MAX)
abs_min = _binary_fn("abs_min", VectorOp.ABS_MIN)
power = _binary_fn("power", VectorOp.POWER)
power.__doc__ = "``power(x, y)``, ``x`` raised to ``y`` element by element, on GpSimd."


def where(condition, x, y, *, dtype=None, mask=None, **kwargs) -> View:
    """``x`` where ``condition`` is nonzero, else ``y`` (``nl.where``; each a tile or, ``x``
    or ``y``, a number; free dimensions broadcast as numpy's). The ISA has no select: as
    :func:`~kernels.nki.lower.affine_select` does it, on the vector engine, the condition
    becomes ``s`` = +inf where true and -inf where false; ``lo = min(-s, y)``,
    ``hi = max(s, y)``; the result ``min(max(x, lo), hi)``: ``x`` where true and ``y``
    where false, exactly for numbers and infinities, except that a NaN of either operand
    comes out where it is not chosen too and a -0.0 of ``y`` as +0.0."""
    _no_options("where", kwargs)
    call = "where"
    if not isinstance(condition, View):
        raise NkiError(f"operand 'condition' of '{call}' must be a tile, not "
                       f"{type(condition).__name__}")
    true = np.not_equal
    if not isinstance(x, View) and isinstance(y, View):  # y where the condition is 0
        x, y, true = y, x, np.equal
    out_dt = dtype if dtype is not None else (
        promote(x.dt, y.dt) if isinstance(x, View) and isinstance(y, View)
        else x.dt if isinstance(x, View) else float32)
    s = lower.tensor_scalar(condition, true, 0.0, op1=np.multiply, operand1=2.0,
                            dtype=float32, call=call)
    s = lower.tensor_scalar(s, np.subtract, 1.0, op1=np.multiply, operand1=math.inf,
                            dtype=float32, call=call)
    if isinstance(y, View):
        lo = _binary(call, VectorOp.MIN,
                     lower.tensor_scalar(s, np.multiply, -1.0, dtype=float32, call=call), y,
                     float32, None)
    else:
        lo = lower.tensor_scalar(s, np.multiply, -1.0, op1=np.minimum, operand1=float(y),
                                 dtype=float32, call=call)
    m = _binary(call, VectorOp.MAX, x, lo, float32, None)
    hi = _binary(call, VectorOp.MAX, s, y, float32, None)
    return _binary(call, VectorOp.MIN, m, hi, out_dt, mask)


def divide(x, y, *, dtype=None, mask=None, **kwargs) -> View:
    """``x / y``: by a number, a multiplication by its reciprocal; by a tile, the scalar
    engine's reciprocal of ``y`` and a multiplication. A true division, as numpy's: of two
    integer operands, float32."""
    _no_options("divide", kwargs)
    if dtype is None and builtins.all(_is_integer(v) for v in (x, y)):
        dtype = float32
    if not isinstance(y, View):
        return _binary("divide", VectorOp.MULTIPLY, x, 1.0 / float(y), dtype, mask)
    r = lower.activation("reciprocal", y, mask=mask, dtype=float32, call="divide")
    return _binary("divide", VectorOp.MULTIPLY, x, r, dtype or promote(
        x.dt if isinstance(x, View) else "fp32", y.dt), mask)


def tan(x, *, dtype=None, mask=None, **kwargs) -> View:
    """``tan(x) = sin(x) / cos(x)``: the scalar engine's sine and cosine (their arguments
    reduced exactly, so the quotient keeps its relative error next to the poles and zeros)
    and :func:`divide`. NKI's table of Scalar Engine functions has no tangent."""
    _no_options("tan", kwargs)
    s = lower.activation("sin", x, mask=mask, dtype=float32, call="tan")
    c = lower.activation("cos", x, mask=mask, dtype=float32, call="tan")
    return divide(s, c, dtype=dtype or x.dtype, mask=mask)


def negative(x, *, dtype=None, mask=None, **kwargs) -> View:
    _no_options("negative", kwargs)
    return lower.tensor_scalar(x, np.multiply, -1.0, dtype=dtype, mask=mask, call="negative")


def abs(x, *, dtype=None, mask=None, **kwargs) -> View:  # noqa: A001 - NKI's name
    """``|x|`` on the vector engine (its ABS operator)."""
    _no_options("abs", kwargs)
    t = current("abs")
    t.commit()
    whole, x = x, x.cut(mask)
    src = t.ap(x, "abs", "x")
    out_dt = isa_dtype(dtype) if dtype is not None else x.dt

    def make(out, _):
        out_ap = t.ap(out, "abs", "dst")
        t.emit("vector", TensorScalar(dst=out_ap, src=src, op0=VectorOp.ABS),
               reads=[(x, src)], writes=[(out, out_ap)])

    return t.pend(t.tile(whole.shape, out_dt), make, "compute", mask)


def square(x, *, dtype=None, mask=None, **kwargs) -> View:
    """``x * x`` on the vector engine (exact in fp32)."""
    _no_options("square", kwargs)
    t = current("square")
    t.commit()
    whole, x = x, x.cut(mask)
    src = t.ap(x, "square", "x")
    out_dt = isa_dtype(dtype) if dtype is not None else x.dt

    def make(out, _):
        out_ap = t.ap(out, "square", "dst")
        t.emit("vector", TensorTensor(dst=out_ap, a=src, b=src, op=VectorOp.MULTIPLY),
               reads=[(x, src)], writes=[(out, out_ap)])

    return t.pend(t.tile(whole.shape, out_dt), make, "compute", mask)


def _unary_fn(name: str, func: str):
    def fn(x, *, dtype=None, mask=None, **kwargs):
        _no_options(name, kwargs)
        if isinstance(x, View) and x.buf.space == "hbm":  # named as NKI names it: 'x'
            current(name).ap(x, name, "x")
        return lower.activation(func, x, mask=mask, dtype=dtype, call=name)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"``{name}(x)`` on the scalar engine (its {func} function)."
    lower.ACTIVATIONS[fn] = func
    return fn


exp = _unary_fn("exp", "exp")
log = _unary_fn("log", "log")
sqrt = _unary_fn("sqrt", "sqrt")
rsqrt = _unary_fn("rsqrt", "rsqrt")
tanh = _unary_fn("tanh", "tanh")
sigmoid = _unary_fn("sigmoid", "sigmoid")
relu = _unary_fn("relu", "relu")
gelu = _unary_fn("gelu", "gelu")
gelu_apprx_tanh = _unary_fn("gelu_apprx_tanh", "gelu_tanh")
silu = _unary_fn("silu", "silu")
softplus = _unary_fn("softplus", "softplus")
erf = _unary_fn("erf", "erf")
mish = _unary_fn("mish", "mish")
sin = _unary_fn("sin", "sin")
cos = _unary_fn("cos", "cos")
arctan = _unary_fn("arctan", "arctan")
gelu_apprx_sigmoid = _unary_fn("gelu_apprx_sigmoid", "gelu_sigmoid")
gelu_apprx_sigmoid_dx = _unary_fn("gelu_apprx_sigmoid_dx", "gelu_sigmoid_dx")
silu_dx = _unary_fn("silu_dx", "silu_dx")
gelu_dx = _unary_fn("gelu_dx", "gelu_dx")
erf_dx = _unary_fn("erf_dx", "erf_dx")
reciprocal = _unary_fn("reciprocal", "reciprocal")
lower.ACTIVATIONS[copy] = "identity"
lower.ACTIVATIONS[abs] = "abs"
lower.ACTIVATIONS[square] = "square"


def prelu(x, *args, **kwargs):
    """NKI's parametric ReLU, an ``op`` of :func:`~kernels.nki.isa_dst.activate2` with its
    ``relu_param`` (the slope below zero); not a call of its own."""
    raise NkiError("nl.prelu is an activation op: pass it as op= of nisa.activate2 with "
                   "relu_param=")


lower.UNARY_OPS[abs] = VectorOp.ABS
lower.UNARY_OPS[square] = VectorOp.SQUARE
lower.UNARY_OPS[reciprocal] = VectorOp.RECIPROCAL  # the vector engine's [NKI engine selection]
lower.UNARY_OPS[rsqrt] = VectorOp.RSQRT  # GpSimd's
lower.UNARY_OPS[relu] = VectorOp.MAX  # max(x, 0): a unary operator's operand is 0


def _reduce_fn(name: str, op):
    def fn(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):
        _no_options(name, kwargs)
        return lower.tensor_reduce(op, x, axis, mask=mask, dtype=dtype, keepdims=keepdims,
                                   call=name)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"``{name}`` along the free axes on the vector engine."
    return fn


sum = _reduce_fn("sum", np.add)  # noqa: A001 - NKI's names
max = _reduce_fn("max", np.maximum)  # noqa: A001
min = _reduce_fn("min", np.minimum)  # noqa: A001
prod = _reduce_fn("prod", np.multiply)
lower.VECTOR_OPS[sum] = VectorOp.ADD
lower.VECTOR_OPS[max] = VectorOp.MAX
lower.VECTOR_OPS[min] = VectorOp.MIN


def mean(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs) -> View:
    """The sum along the axes ``axis`` times 1 / the number of elements summed."""
    _no_options("mean", kwargs)
    s = lower.tensor_reduce(np.add, x, axis, mask=mask, dtype=float32, keepdims=keepdims,
                            call="mean")
    axes = {int(a) % x.ndim for a in (axis if isinstance(axis, (list, tuple)) else (axis,))}
    n = math.prod(x.cut(mask).shape[a] for a in axes)
    return lower.tensor_scalar(s, np.multiply, 1.0 / n, dtype=dtype or x.dtype,
                               mask=lower.rows_of(mask), call="mean")


def loop_reduce(x, op, loop_indices, *, dtype=None, mask=None, **kwargs):
    """``dst = op(x, dst)`` into the tile the result is assigned to (``t[...] =
    nl.loop_reduce(...)``), a TensorTensor on the vector engine; ``loop_indices`` names
    the loops the reduction runs over, which the trace does not need."""
    _no_options("loop_reduce", kwargs)
    t = current("loop_reduce")
    t.commit()
    if not isinstance(x, View):
        raise NkiError(f"operand 'x' of 'loop_reduce' must be a tile, not {type(x).__name__}")
    x = x.cut(mask)
    fresh = t.tile(x.shape, isa_dtype(dtype) if dtype is not None else x.dt)
    own = fresh.buf  # the buffer alone: a reference to the view would make it no temporary

    def make(out: View, _):
        if out.buf is own:
            raise NotSupported("nl.loop_reduce whose result is not assigned into a tile",
                               "t[...] = nl.loop_reduce(x, op, loop_indices) (t also the "
                               "right-hand operand of op)")
        lower.tensor_tensor(x, out, op, dtype=out.dtype, dst=out, call="loop_reduce")

    return t.pend(fresh, make, "compute", None)


def add_into(dst: View, a: View, b) -> None:
    """``dst = a + b`` (``dst += b``) on the vector engine."""
    if isinstance(b, View):
        xf = math.prod(a.shape[1:]) if a.ndim > 1 else 1
        yf = math.prod(b.shape[1:]) if b.ndim > 1 else 1
        if xf == yf:
            lower.tensor_tensor(a, b, np.add, dst=dst, call="+=")
            return
        lower.tensor_scalar(a, np.add, b, dst=dst, call="+=")
        return
    lower.tensor_scalar(a, np.add, float(b), dst=dst, call="+=")


# --- calls the engines have no one operation for, made of others ---------------------------

def rand(shape, dtype=float32, **kwargs) -> View:
    """A tile of numbers uniform in [0, 1), drawn on the vector engine from its generators
    (the unit's that stochastic rounding draws from)."""
    _no_options("rand", kwargs)
    return lower.rand(shape, dtype, call="rand")


def dropout(x, rate, *, dtype=None, mask=None, **kwargs) -> View:
    """``x`` with each element zeroed with probability ``rate`` (a number or one per
    partition), on the vector engine (NKI's ``nisa.dropout``)."""
    _no_options("dropout", kwargs)
    return lower.dropout(x, rate, mask=mask, dtype=dtype)


def gather_flattened(data, indices, *, mask=None, dtype=None, **kwargs) -> View:
    """Each partition's elements of ``data`` (free dimensions flattened) at the uint32
    ``indices``, on GpSimd."""
    _no_options("gather_flattened", kwargs)
    return lower.gather_flattened(data, indices, mask=mask, dtype=dtype)


def _nearest_int(call: str, x: View) -> View:
    """``x`` to the nearest integer, ties to even, as an int32 tile (the engines' cast)."""
    return lower.tensor_copy(x, dtype=int32, call=call)


def floor(x, *, dtype=None, mask=None, **kwargs) -> View:
    """The largest integer at most ``x``: ``r`` = the nearest integer, then
    ``r - (r > x)`` on the vector engine; exact for ``|x| < 2**31`` (a NaN gives 0)."""
    _no_options("floor", kwargs)
    r = _nearest_int("floor", x)
    up = _binary("floor", VectorOp.GREATER, r, x, float32, None)
    return _binary("floor", VectorOp.SUBTRACT, r, up, dtype or x.dtype, mask)


def ceil(x, *, dtype=None, mask=None, **kwargs) -> View:
    """The smallest integer at least ``x``: ``r + (r < x)``, ``r`` the nearest integer;
    exact for ``|x| < 2**31`` (a NaN gives 0)."""
    _no_options("ceil", kwargs)
    r = _nearest_int("ceil", x)
    down = _binary("ceil", VectorOp.LESS, r, x, float32, None)
    return _binary("ceil", VectorOp.ADD, r, down, dtype or x.dtype, mask)


def sign(x, *, dtype=None, mask=None, **kwargs) -> View:
    """``(x > 0) - (x < 0)``: -1, 0 or 1 (a NaN gives 0)."""
    _no_options("sign", kwargs)
    pos = lower.tensor_scalar(x, np.greater, 0.0, dtype=float32, call="sign")
    neg = lower.tensor_scalar(x, np.less, 0.0, dtype=float32, call="sign")
    return _binary("sign", VectorOp.SUBTRACT, pos, neg, dtype or x.dtype, mask)


def trunc(x, *, dtype=None, mask=None, **kwargs) -> View:
    """``x`` without its fraction: ``sign(x) * floor(|x|)``."""
    _no_options("trunc", kwargs)
    whole = floor(abs(x, dtype=float32), dtype=float32)
    return _binary("trunc", VectorOp.MULTIPLY, whole, sign(x, dtype=float32),
                   dtype or x.dtype, mask)


def mod(x, y, dtype=None, mask=None, **kwargs) -> View:
    """``x mod y`` with the sign of the divisor, as numpy's: ``m = x - floor(x * (1 / y)) *
    y``, then ``y`` taken off or added once where the reciprocal's rounding left ``m``
    outside ``[0, y)`` (``(y, 0]`` for a negative ``y``); ``y`` a number."""
    _no_options("mod", kwargs)
    return _modulo("mod", x, y, dtype, mask)


def fmod(x, y, dtype=None, mask=None, **kwargs) -> View:
    """``x mod y`` with the sign of the dividend, as numpy's ``fmod``:
    ``sign(x) * mod(|x|, |y|)``; ``y`` a number."""
    _no_options("fmod", kwargs)
    if isinstance(y, View):
        raise NotSupported("nl.fmod by a tile", "nl.fmod by a number")
    m = _modulo("fmod", abs(x, dtype=float32), builtins.abs(float(y)), float32, None)
    return _binary("fmod", VectorOp.MULTIPLY, m, sign(x, dtype=float32), dtype or x.dtype,
                   mask)


def _modulo(call: str, x: View, y, dtype, mask) -> View:
    if isinstance(y, View) or not isinstance(x, View):
        raise NotSupported(f"nl.{call} of these operands", f"nl.{call}(tile, number)")
    y = float(y)
    if y == 0:
        raise NkiError(f"'{call}' by zero")
    q = floor(lower.tensor_scalar(x, np.multiply, 1.0 / y, dtype=float32, call=call),
              dtype=float32)
    m = _binary(call, VectorOp.SUBTRACT, x,
                lower.tensor_scalar(q, np.multiply, y, dtype=float32, call=call), float32,
                None)
    over, under = (np.greater_equal, np.less) if y > 0 else (np.less_equal, np.greater)
    m = _binary(call, VectorOp.SUBTRACT, m, lower.tensor_scalar(
        m, over, y, op1=np.multiply, operand1=y, dtype=float32, call=call), float32, None)
    return _binary(call, VectorOp.ADD, m, lower.tensor_scalar(
        m, under, 0.0, op1=np.multiply, operand1=y, dtype=float32, call=call),
        dtype or x.dtype, mask)


def _logical_fn(name: str, op: VectorOp):
    def fn(x, y, *, dtype=uint8, mask=None, **kwargs):
        _no_options(name, kwargs)
        return _binary(name, op, x, y, dtype, mask)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"``{name}(x, y)`` of the operands' truths (nonzero, a NaN included), 1 or "
                  f"0, on the vector engine (booleans as uint8 unless ``dtype`` says).")
    lower.VECTOR_OPS[fn] = op
    return fn


logical_and = _logical_fn("logical_and", VectorOp.LOGICAL_AND)
logical_or = _logical_fn("logical_or", VectorOp.LOGICAL_OR)
logical_xor = _logical_fn("logical_xor", VectorOp.LOGICAL_XOR)


def logical_not(x, *, dtype=uint8, mask=None, **kwargs) -> View:
    """1 where ``x`` is zero, else 0 (booleans as uint8)."""
    _no_options("logical_not", kwargs)
    return lower.tensor_scalar(x, np.equal, 0.0, dtype=dtype, mask=mask, call="logical_not")


def all(x, axis, *, dtype=None, mask=None, **kwargs) -> View:  # noqa: A001 - NKI's name
    """1 where every element along the free axes ``axis`` is nonzero (a NaN is), else 0: no
    element equal to zero, the maximum of the zeros' indicator negated."""
    _no_options("all", kwargs)
    zero = lower.tensor_scalar(x, np.equal, 0.0, dtype=float32, mask=mask, call="all")
    any_zero = lower.tensor_reduce(np.maximum, zero, axis, mask=mask, dtype=float32,
                                   call="all")
    return lower.tensor_scalar(any_zero, np.equal, 0.0, dtype=dtype or x.dtype,
                               mask=lower.rows_of(mask), call="all")


def invert(x, *, dtype=None, mask=None, **kwargs) -> View:
    """``~x`` of an int32 or uint32 tile: its word XOR all ones."""
    _no_options("invert", kwargs)
    if not isinstance(x, View) or x.dt not in ("int32", "uint32"):
        raise NotSupported(f"nl.invert of {getattr(x, 'dt', type(x).__name__)}",
                           "nl.invert of an int32 or uint32 tile")
    return _binary("invert", VectorOp.BITWISE_XOR, x, -1 if x.dt == "int32" else 0xFFFFFFFF,
                   dtype, mask)


def expand_dims(data, axis) -> View:
    """``data`` with axes of size 1 after its last (NKI adds them there only)."""
    axes = sorted(int(a) for a in (axis if isinstance(axis, (list, tuple)) else (axis,)))
    if axes != list(range(data.ndim, data.ndim + len(axes))):
        raise NotSupported(f"nl.expand_dims at axis {axis} of a {data.ndim}-dimensional tile",
                           "new axes after the last")
    return data.reshape(tuple(data.shape) + (1,) * len(axes))


def shared_identity_matrix(n, dtype=uint8, **kwargs) -> View:
    """An ``n`` x ``n`` identity matrix: in HBM (``nl.shared_constant``) as NKI 0.1 has it,
    loaded into an SBUF tile as NKI 0.2 documents it."""
    _no_options("shared_identity_matrix", kwargs)
    eye = shared_constant(np.identity(int(n)), dtype=dtype)
    return load(eye) if current("shared_identity_matrix").generation == 2 else eye


def _last_axes(call: str, x: View, axis) -> tuple[int, ...]:
    axes = tuple(sorted(int(a) % x.ndim for a in (axis if isinstance(axis, (list, tuple))
                                                  else (axis,))))
    if axes != tuple(range(1, x.ndim)):
        raise NotSupported(f"nl.{call} along axis {axis} of a {x.ndim}-dimensional tile",
                           f"nl.{call} along every free axis")
    return axes


def var(x, axis, *, dtype=None, mask=None, **kwargs) -> View:
    """The variance along the free axes, as numpy's: the mean of ``(x - mean(x))**2``."""
    _no_options("var", kwargs)
    axes = _last_axes("var", x, axis)
    m = mean(x, axes, dtype=float32, mask=mask, keepdims=True).reshape((x.shape[0], 1))
    flat = x if x.ndim == 2 else x.reshape((x.shape[0], math.prod(x.shape[1:])))
    d = _binary("var", VectorOp.SUBTRACT, flat, m, float32, mask)
    return mean(square(d), 1, dtype=dtype or x.dtype)


def softmax(x, axis, *, dtype=None, compute_dtype=None, mask=None, **kwargs) -> View:
    """``exp(x - max) / sum(exp(x - max))`` along the free axes: the maximum on the vector
    engine, the exponential with the maximum as its bias and the row sum as its reduction
    on the scalar engine, the reciprocal there, and a multiply on the vector engine."""
    _no_options("softmax", kwargs)
    _last_axes("softmax", x, axis)
    if x.ndim != 2:
        raise NotSupported(f"nl.softmax of a {x.ndim}-dimensional tile",
                           "nl.softmax of a [P, F] tile")
    out_dt = dtype or compute_dtype or x.dtype
    top = lower.tensor_reduce(np.maximum, x, 1, mask=mask, dtype=float32, negate=True,
                              keepdims=True, call="softmax")
    total = ndarray((x.shape[0], 1), dtype=float32, buffer=sbuf)
    e = lower.activation("exp", x, bias=top, reduce_op=np.add, reduce_res=total, mask=mask,
                         dtype=float32, call="softmax")
    r = lower.activation("reciprocal", total, dtype=float32, call="softmax")
    return _binary("softmax", VectorOp.MULTIPLY, e, r, out_dt, mask)


def rms_norm(x, w, axis, n, epsilon=1e-06, *, dtype=None, compute_dtype=None, mask=None,
             **kwargs) -> View:
    """``x / sqrt(sum(x**2) / n + epsilon) * w`` along the free axis of a [P, F] tile:
    the squares and their sum on the scalar engine, ``1 / n`` and ``epsilon`` by the vector
    engine, the reciprocal square root on the scalar engine, two multiplies (``w`` of
    [1, F] broadcast over the partitions)."""
    _no_options("rms_norm", kwargs)
    _last_axes("rms_norm", x, axis)
    if x.ndim != 2:
        raise NotSupported(f"nl.rms_norm of a {x.ndim}-dimensional tile",
                           "nl.rms_norm of a [P, F] tile")
    total = ndarray((x.shape[0], 1), dtype=float32, buffer=sbuf)
    lower.activation("square", x, reduce_op=np.add, reduce_res=total, mask=mask,
                     dtype=float32, call="rms_norm")
    ms = lower.tensor_scalar(total, np.multiply, 1.0 / float(n), op1=np.add,
                             operand1=float(epsilon), dtype=float32, call="rms_norm")
    r = lower.activation("rsqrt", ms, dtype=float32, call="rms_norm")
    y = _binary("rms_norm", VectorOp.MULTIPLY, x, r, float32, mask)
    return _binary("rms_norm", VectorOp.MULTIPLY, y, w, dtype or compute_dtype or x.dtype,
                   mask)


_SUPPORTED = ("ndarray shared_constant zeros ones full zeros_like empty_like par_dim sbuf psum hbm "
              "shared_hbm private_hbm arange mgrid ds affine_range sequential_range "
              "dynamic_range fori_loop while_loop static_range static_cast spmd_dim nc "
              "is_hbm is_sbuf is_psum is_on_chip program_id num_programs program_ndim "
              "load load_transpose2d broadcast_to device_print atomic_rmw "
              "store copy matmul transpose add subtract multiply divide maximum minimum "
              "the comparisons bitwise_and/or/xor left_shift right_shift abs_max abs_min power "
              "negative abs square exp log sqrt rsqrt "
              "where tanh sigmoid relu gelu gelu_apprx_tanh gelu_apprx_sigmoid(_dx) silu "
              "silu_dx gelu_dx softplus erf erf_dx mish sin cos tan "
              "arctan reciprocal sum max min prod mean var all softmax rms_norm floor ceil "
              "trunc sign prelu (activate2's op) "
              "mod fmod logical_and/or/xor/not invert expand_dims shared_identity_matrix "
              "rand dropout gather_flattened "
              "loop_reduce tile_size fp32 finfo and the dtypes")


#: Calls NKI 0.2 documents (``nki.language`` at aws-neuron-sdk 81ce03ae) that this front end
#: does not implement: a kernel may name them (a module-level table of functions) and runs
#: while it does not call them.
_DOCUMENTED = frozenset(("random_seed",))


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    if name in _DOCUMENTED:
        return Unimplemented(f"nl.{name}", _SUPPORTED)
    raise NotSupported(f"nl.{name}", _SUPPORTED)

