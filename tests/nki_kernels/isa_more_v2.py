"""iota and affine_select in NKI 0.2's form (dst first, access patterns), for trngen's
tests."""

from dataclasses import dataclass

import nki
import nki.isa as nisa
import nki.language as nl
import nki.typing as nt
import numpy as np
from nki.isa import constants, register_alloc


@nki.jit
def iota_pattern():
    out = nl.ndarray((128, 64), dtype=nl.int32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 64), dtype=nl.int32, buffer=nl.sbuf)
    nisa.iota(t, [[-1, 64]], offset=3, channel_multiplier=2)
    nisa.dma_copy(out, t)
    return out


@nki.jit
def causal(x, fill):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    r = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, x)
    nisa.affine_select(r, [[-1, 128]], 1, t, fill, cmp_op=nl.greater_equal)
    nisa.dma_copy(out, r)
    return out


@nki.jit
def predicated(pred, x, y, reverse):
    """sample_idioms.predicated in NKI 0.2's form."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    dst = nl.load(y)
    nisa.tensor_copy_predicated(dst, nl.load(x), nl.load(pred), reverse_pred=reverse)
    nl.store(out, dst)
    return out


@nki.jit
def transposed_by_dma(x):
    """sample_idioms.transposed_by_dma in NKI 0.2's form."""
    out = nl.ndarray((x.shape[1], x.shape[0]), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((x.shape[1], x.shape[0]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(t, x)
    nl.store(out, t)
    return out


@nki.jit
def selected_with_row_max(pred, x, fill):
    """sample_idioms.selected_with_row_max in NKI 0.2's form."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    best = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    dst = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    res = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.select_reduce(dst, nl.load(pred), nl.load(x), nl.load(fill),
                       reduce_cmd=nisa.reduce_cmd.reset_reduce, reduce_res=res,
                       reduce_op=nl.max)
    nl.store(out, dst)
    nl.store(best, res)
    return out, best


@nki.jit
def shuffled(x, keep_half):
    """isa_more.shuffled in NKI 0.2's form."""
    rotated = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    spread = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    a = nl.load(x)
    nisa.nc_stream_shuffle(a, a, [(i - 1) % 32 for i in range(32)])
    nl.store(rotated, a)
    b = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(b, -1)
    mask = [255 if keep_half and i % 2 else 0 for i in range(32)]
    nisa.nc_stream_shuffle(b[0:32, :], nl.load(x[0:1, :]), mask)
    nl.store(spread, b)
    return rotated, spread


@nki.jit
def through_patterns(x):
    """x [R, C] in HBM read transposed by an access pattern ([[1, C], [C, R]]: out[c, r] =
    x[r, c]) into SBUF, then its every second column from column 1 by a pattern over the
    tile ([[C', P], [2, C' // 2]] from offset 1), copied on the scalar engine."""
    r, c = x.shape
    out = nl.ndarray((c, r // 2), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((c, r), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x.ap(pattern=[[1, c], [c, r]]))
    odd = nl.ndarray((c, r // 2), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=odd, src=t.ap(pattern=[[r, c], [2, r // 2]], offset=1),
                     engine=nisa.scalar_engine)
    nisa.dma_copy(dst=out, src=odd)
    return out


class Tiles(nl.NKIObject):
    """A kernel's own class (NKI 0.2's NKIObject): rows a tile."""

    def __init__(self, rows):
        self.rows = rows


#: a table of documented calls this front end does not implement, made at import (and
#: nisa.register_alloc imported above, as nki-library's MoE modules import it)
UNCALLED = {"swish": nl.gelu_apprx_sigmoid, "random_seed": nl.random_seed,
            "register_alloc": register_alloc}


@nki.jit
def transposed_by_matmul(x, into=nl.float32):
    """x [P, N] transposed by nc_matmul with is_transpose (moving an identity) into PSUM of
    type ``into``."""
    p, n = x.shape
    out = nl.ndarray((n, p), dtype=into, buffer=nl.shared_hbm)
    t = nl.ndarray((p, n), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    eye = nl.ndarray((p, p), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=eye, src=nl.shared_identity_matrix(p, dtype=x.dtype))
    acc = nl.ndarray((n, p), dtype=into, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=t, moving=eye, is_transpose=True)
    res = nl.ndarray((n, p), dtype=into, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=out, src=res)
    return out


@nki.jit
def calls_random_seed(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    UNCALLED["random_seed"](t)
    nl.store(out, t)
    return out


@nki.jit
def past_its_storage(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x.ap(pattern=[[x.shape[1], x.shape[0]], [1, x.shape[1]]],
                                  offset=1))
    nisa.dma_copy(dst=out, src=t)
    return out


def typed(dt: nki.dtype = nl.float32) -> nki.dtype:
    """A helper annotated with nki.dtype, as aws-neuron/nki-library's are (the annotation is
    evaluated where the module defines it)."""
    return dt


@nki.jit
def gathered_by_pattern(data, indices):
    """Rows of ``data`` named by ``indices`` (one a partition), gathered by an access
    pattern with a vector offset, and scattered back into a copy of ``data`` in reverse."""
    p, f = indices.shape[0], data.shape[1]
    out = nl.ndarray((p, f), dtype=data.dtype, buffer=nl.shared_hbm)
    idx = nl.ndarray((p, 1), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=indices)
    rows = nl.ndarray((p, f), dtype=data.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=rows, src=data.ap(pattern=[[f, p], [1, f]], vector_offset=idx,
                                        indirect_dim=0))
    nisa.dma_copy(dst=out, src=rows)
    return out


@nki.jit
def element_at(data, column):
    """Row 3's element at the column partition 5 of an [8, 1] tile holds (a scalar offset
    along dimension 1, read by the DMA from a partition no engine could start at)."""
    out = nl.ndarray((1, 1), dtype=data.dtype, buffer=nl.shared_hbm)
    c = nl.ndarray((8, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=c, src=column)
    t = nl.ndarray((1, 1), dtype=data.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=data.ap(pattern=[[data.shape[1], 1], [1, 1]],
                                     offset=3 * data.shape[1],
                                     scalar_offset=c.ap(pattern=[[1, 1], [1, 1]], offset=5),
                                     indirect_dim=1))
    nisa.dma_copy(dst=out, src=t)
    return out


@nki.jit
def placed_by_address(x):
    """Tiles placed by address (NKI 0.2's direct allocation) in a loop that unrolls: each
    iteration's own tile at its own byte (kept to the end, read after the loop), and PSUM at
    bank 2's byte 0."""
    p, f = x.shape
    out = nl.ndarray((3, p, f), dtype=x.dtype, buffer=nl.shared_hbm)
    tiles = []
    for i in nl.affine_range(3):
        t = nl.ndarray((p, f), dtype=x.dtype, buffer=nl.sbuf, address=(0, 1024 + i * 4 * f))
        nisa.dma_copy(dst=t, src=x)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=float(i))
        tiles.append(t)
    acc = nl.ndarray((p, f), dtype=nl.float32, buffer=nl.psum, address=(0, 2 * 2048))
    nisa.tensor_copy(dst=acc, src=tiles[0])
    nisa.tensor_copy(dst=tiles[0], src=acc)
    for i in range(3):
        nisa.dma_copy(dst=out[i], src=tiles[i])
    return out


@nki.jit
def iota_any_pattern():
    """iota with steps that are not row-major (a repeat of step 0 outermost, as
    nki-library's cascaded_max has), returned as a reshape of the whole output."""
    out = nl.ndarray((4, 30), dtype=nl.int32, buffer=nl.shared_hbm)
    t = nl.ndarray((4, 30), dtype=nl.int32, buffer=nl.sbuf)
    nisa.iota(t, [[0, 2], [7, 3], [-2, 5]], offset=1, channel_multiplier=100)
    nisa.dma_copy(out, t)
    return out.reshape((4, 2, 3, 5))


@nki.jit
def abs_max_rows(x):
    """|x| by tensor_scalar's unary abs (operand 0), with each row's largest into a column,
    as nki-library's rmsnorm_quant takes its row scales."""
    p, f = x.shape
    out = nl.ndarray((p, f + 1), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((p, f), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    a = nl.ndarray((p, f), dtype=nl.float32, buffer=nl.sbuf)
    m = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar_reduce(dst=a, data=t, op0=nl.abs, operand0=0.0, reduce_op=nl.maximum,
                              reduce_res=m)
    nisa.dma_copy(dst=out[:, 0:f], src=a)
    nisa.dma_copy(dst=out[:, f:f + 1], src=m)
    return out


@nki.jit
def bytes_as_fp8(x):
    """Each fp32 of a [P, 1] column read as its four fp8_e4m3 bytes by .ap(dtype=), as
    rmsnorm_quant stores its scales beside fp8 rows."""
    p = x.shape[0]
    out = nl.ndarray((p, 4), dtype=nl.float8_e4m3, buffer=nl.shared_hbm)
    t = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.dma_copy(dst=out, src=t.ap(pattern=[[4, p], [1, 4]], dtype=nl.float8_e4m3))
    return out


@nki.jit
def barrier_and_names(x: nt.mutable_tensor, table, use_past_tile=False):
    """NKI 0.2's names a library kernel uses on one core: core_barrier, the perf and DGE
    modes (also from nki.isa.constants), a constant from a .npy file; an .ap past its tile
    built and not used."""
    p, f = x.shape
    out = nl.ndarray((p, f), dtype=x.dtype, buffer=nl.shared_hbm)
    c = nl.shared_constant(table)
    t = nl.ndarray((p, f), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x, dge_mode=nisa.dge_mode.none)
    past = t.ap(pattern=[[f, p], [1, f]], offset=f)  # one partition past the tile
    u = nl.ndarray((p, f), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=u, src=c, dge_mode=constants.dge_mode.none)
    nisa.tensor_tensor(dst=t, data1=past if use_past_tile else t, data2=u, op=nl.add)
    assert nisa.matmul_perf_mode.double_row is constants.matmul_perf_mode.double_row
    nisa.dma_copy(dst=out, src=t)
    nisa.core_barrier(out, (0, 1))
    return out


@nki.jit
def gathered_in_partitions(x, idx):
    """nc_n_gather: each partition's elements of x ([P, 4, 8] flattened) at its indices."""
    out = nl.ndarray(idx.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    i = nl.ndarray(idx.shape, dtype=idx.dtype, buffer=nl.sbuf)
    g = nl.ndarray(idx.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.dma_copy(dst=i, src=idx)
    nisa.nc_n_gather(dst=g, data=t, indices=i)
    nisa.dma_copy(dst=out, src=g)
    return out


@nki.jit
def one_element(x):
    """An element of HBM into element [0, 0] of a zeroed column by dma_copy (attention_cte
    loads its sink so)."""
    out = nl.ndarray((16, 1), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((16, 1), dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(t, 0.0)
    nisa.dma_copy(dst=t[0, 0], src=x[1, 0])
    nisa.dma_copy(dst=out, src=t)
    return out


@nki.jit
def staged_on_one_core(x, shared_too=False):
    """On an nl.nc(2) grid: core 0 transposes its 32 rows on chip (staged through an HBM
    tensor of its own), core 1 copies its rows as they are; with ``shared_too`` core 0 also
    makes a shared_hbm tensor core 1 does not."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    t = nl.ndarray((32, 32), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[i * 32:(i + 1) * 32, :])
    if i == 0:
        u = nl.ndarray((32, 32), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_transpose(dst=u, src=t)
        t = u
        if shared_too:
            extra = nl.ndarray((32, 32), dtype=x.dtype, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=extra, src=t)
    nisa.dma_copy(dst=out[i * 32:(i + 1) * 32, :], src=t)
    return out


#: What :func:`chip_sizes` read of nl.tile_size in its last trace.
SIZES = {}


@nki.jit
def chip_sizes(x):
    """Reads nl.tile_size's sizes of the target chip's memories while it is traced."""
    SIZES.update({name: getattr(nl.tile_size, name) for name in (
        "pmax", "psum_bank_fmax", "psum_num_banks", "sbuf_size_bytes", "sbuf_fmax",
        "sbuf_fmax_bytes", "total_available_sbuf_size")})
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=x)
    return out


@nki.jit
def cast_by_dma(x):
    """fp32 from HBM into a bf16 tile and an int32 tile by dma_copy (a cast through fp32),
    each back out as fp32."""
    p, f = x.shape
    out = nl.ndarray((2, p, f), dtype=nl.float32, buffer=nl.shared_hbm)
    half = nl.ndarray((p, f), dtype=nl.bfloat16, buffer=nl.sbuf)
    whole = nl.ndarray((p, f), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=half, src=x)
    nisa.dma_copy(dst=whole, src=x)
    nisa.dma_copy(dst=out[0], src=half)
    nisa.dma_copy(dst=out[1], src=whole)
    return out


@nki.jit
def groups_at_one_bank(a, b):
    """attention_cte's PSUM: a tensor per group at one address (made before the loop),
    each group's two matmuls into it with the accumulate flag left to the compiler, the sum
    copied out; the next group's first matmul starts its own sum."""
    k, m = a.shape
    groups = b.shape[0]
    out = nl.ndarray((groups, m, b.shape[2]), dtype=nl.float32, buffer=nl.shared_hbm)
    st = nl.ndarray((k, m), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=st, src=a)
    psums = [nl.ndarray((m, b.shape[2]), dtype=nl.float32, buffer=nl.psum, address=(0, 4 * 2048))
             for _ in range(groups)]
    for g in range(groups):
        mv = nl.ndarray((k, b.shape[2]), dtype=b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=mv, src=b[g])
        nisa.nc_matmul(psums[g], st, mv)
        nisa.nc_matmul(psums[g], st, mv)
        res = nl.ndarray((m, b.shape[2]), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=psums[g])
        nisa.dma_copy(dst=out[g], src=res)
    return out


@dataclass
class Section(nl.NKIObject):
    """Unannotated fields, as nki-library's classes have them."""

    index = None
    offset = 0


@nki.jit
def gathered_past_storage(data, indices):
    """A row gather whose rows start one element in: the last row would run past the
    tensor."""
    p, f = indices.shape[0], data.shape[1]
    idx = nl.ndarray((p, 1), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=indices)
    rows = nl.ndarray((p, f), dtype=data.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=rows, src=data.ap(pattern=[[f, p], [1, f]], offset=1,
                                        vector_offset=idx, indirect_dim=0))
    return rows


@nki.jit
def identity_in_sbuf(x):
    """nl.shared_identity_matrix as NKI 0.2 has it, a tile in SBUF (an engine copies it)."""
    p = x.shape[0]
    out = nl.ndarray((p, p), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((p, p), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=t, src=nl.shared_identity_matrix(p, dtype=nl.float32))
    nisa.dma_copy(dst=out, src=t)
    return out


@nki.jit
def optional_bias(x, with_bias):
    """x, plus 1 where an optional on-chip tile exists (``if tile:``, as NKI 0.2 tests an
    optional tensor)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    bias = None
    if with_bias:
        bias = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=bias, value=1.0)
    if bias:
        nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=bias)
    nisa.dma_copy(dst=out, src=t)
    return out


@nki.jit
def sharded_copy(x, gather=False):
    """x copied by the programs of axis 0 of its launch grid, a share of the rows each (as
    aws-neuron/nki-library shards over nl.num_programs(0)); with ``gather``, an all-gather
    of nki.collectives, which a launch on one chip does not run. NKI 0.2's nl.ndarray takes
    its buffer as a positional argument."""
    import nki.collectives as ncc

    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    n, i = nl.num_programs(0), nl.program_id(0)
    rows = x.shape[0] // n
    t = nl.ndarray((rows, x.shape[1]), x.dtype, nl.sbuf)  # NKI 0.2: buffer positional
    nisa.dma_copy(dst=t, src=x[i * rows:(i + 1) * rows, :])
    if gather:
        ncc.all_gather(srcs=[x], dsts=[out], replica_group=ncc.ReplicaGroup([[0, 1]]),
                       collective_dim=0)
    nisa.dma_copy(dst=out[i * rows:(i + 1) * rows, :], src=t)
    return out


@nki.jit
def rows_at_run_time(a, start):
    """A[start:start + 128, 0:256] of a [512, 512] tensor, ``start`` a value in SBUF: a
    pattern of 128 partitions moved by one run-time index along dimension 0."""
    out = nl.ndarray((128, 256), dtype=a.dtype, buffer=nl.shared_hbm)
    at = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=at, value=start)
    nisa.dma_copy(dst=out, src=a.ap(pattern=[[512, 128], [1, 256]], offset=0,
                                    scalar_offset=at, indirect_dim=0))
    return out


@nki.jit
def columns_written_at_run_time(x, column, skip=False):
    """x [16, 8] written into columns column .. column + 7 of a [16, 64] tensor of zeros,
    ``column`` read from SBUF: a scatter of 16 partitions moved along dimension 1."""
    out = nl.ndarray((16, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    zeros = nl.ndarray((16, 64), dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=zeros, value=0.0)
    nisa.dma_copy(dst=out, src=zeros)
    at = nl.ndarray((2, 1), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.memset(dst=at, value=column)
    t = nl.ndarray((16, 8), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.dma_copy(dst=out.ap(pattern=[[64, 16], [1, 8]], offset=0,
                             scalar_offset=at[1:2, :], indirect_dim=1),
                  src=t, oob_mode=nisa.oob_mode.skip if skip else nisa.oob_mode.error)
    return out


@nki.jit
def view_methods(x, hbm3, table, rows):
    """NKI 0.2's view methods on a [128, 24] tile of ``x``, a [4, 128, 8] HBM tensor and a
    [64, 8] table gathered at ``rows`` ([16, 1] int32): each result a slot of ``out``.
    ``select`` at a run-time index reads through a DMA in HBM, through a dynamic copy on
    chip."""
    t = nl.ndarray((128, 24), x.dtype, nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    assert t.strides == (24, 1) and t.offset == 0 and t.size == 128 * 24
    assert t[:, 8:].offset == 8 and t[2:4, :].offset == 48
    assert t.get_pattern() == [[24, 128], [1, 24]] and t.is_contiguous()
    assert not t[:, ::2].is_contiguous() and not t.is_indirect()
    assert hbm3.strides == (1024, 8, 1) and hbm3[1].offset == 1024
    out = nl.ndarray((9, 128, 24), x.dtype, nl.shared_hbm)
    slots = [nl.ndarray((128, 24), x.dtype, nl.sbuf) for _ in range(9)]
    # split and reorder: (128, 4, 6) -> (128, 6, 4), by hand and by rearrange
    nisa.tensor_copy(dst=slots[0].reshape_dim(1, (6, 4)),
                     src=t.reshape_dim(1, (4, -1)).permute((0, 2, 1)))
    nisa.tensor_copy(dst=slots[1].reshape_dim(1, (6, 4)),
                     src=t.rearrange(("b", ("h", "w")), ("b", "w", "h"), {"h": 4}))
    # a column broadcast along a new dimension, merged back
    col = t.slice(1, 0, 6)
    wide = col.expand_dim(1).broadcast(1, 4)
    assert wide.shape == (128, 4, 6) and wide.strides[1] == 0
    nisa.tensor_copy(dst=slots[2].reshape_dim(1, (4, 6)), src=wide)
    nisa.tensor_copy(dst=slots[3], src=t.reshape_dim(1, (2, 12)).flatten_dims(1, 2))
    nisa.tensor_copy(dst=slots[4].slice(1, 0, 8), src=t.slice(1, 8, 24, 2))
    nisa.memset(dst=slots[4].slice(1, 8, 24), value=0.0)
    # the HBM tensor's block 2, at a static and a run-time index
    nisa.memset(dst=slots[5], value=0.0)
    nisa.dma_copy(dst=slots[5].slice(1, 0, 8), src=hbm3.select(0, 2))
    at = nl.ndarray((1, 1), nl.int32, nl.sbuf)
    nisa.memset(dst=at, value=3)
    picked = hbm3.select(0, at)
    assert picked.shape == (128, 8) and picked.is_indirect()
    nisa.memset(dst=slots[6], value=0.0)
    nisa.dma_copy(dst=slots[6].slice(1, 0, 8), src=picked)
    # rows of a table gathered by a tile of indices
    nisa.memset(dst=slots[7], value=0.0)
    idx = nl.ndarray((16, 1), nl.int32, nl.sbuf)
    nisa.dma_copy(dst=idx, src=rows)
    nisa.dma_copy(dst=slots[7][0:16, 0:8], src=table.vector_select(0, idx))
    # a tile's block of 6 at a run-time index (an engine's copy that reads it)
    nisa.memset(dst=slots[8], value=0.0)
    nisa.tensor_copy(dst=slots[8].slice(1, 0, 6), src=t.reshape_dim(1, (4, 6)).select(1, at))
    for i in range(9):
        nisa.dma_copy(dst=out[i], src=slots[i])
    return out


@nki.jit
def gathered_locally(x, index, per, valid):
    """nisa.local_gather in NKI 0.2's form (dst first), as isa_more.py's in 0.1's."""
    out = nl.ndarray((x.shape[0], valid, per), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, x.dtype, nl.sbuf)
    i = nl.ndarray(index.shape, index.dtype, nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.dma_copy(dst=i, src=index)
    g = nl.ndarray((x.shape[0], valid * per), x.dtype, nl.sbuf)
    nisa.local_gather(dst=g, src_buffer=t, index=i, num_elem_per_idx=per,
                      num_valid_indices=valid)
    nisa.dma_copy(dst=out.reshape((x.shape[0], valid * per)), src=g)
    return out


@nki.jit
def calls_topk(x):
    """nisa.topk, documented, not implemented: refused where it is called."""
    out = nl.ndarray(x.shape, x.dtype, nl.shared_hbm)
    assert nisa.get_nc_sub_version() == 0
    t = nl.ndarray(x.shape, x.dtype, nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.topk(t, t, t, 8)
    nisa.dma_copy(dst=out, src=t)
    return out


@nki.jit
def bypassed(x):
    """tensor_scalar with nl.bypass as either stage, inside nl.no_reorder(): x + 2, x * 3
    and x as it is."""
    out = nl.ndarray((3,) + x.shape, x.dtype, nl.shared_hbm)
    t = nl.ndarray(x.shape, x.dtype, nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    r = [nl.ndarray(x.shape, x.dtype, nl.sbuf) for _ in range(3)]
    with nl.no_reorder():
        nisa.tensor_scalar(dst=r[0], data=t, op0=nl.add, operand0=2.0, op1=nl.bypass)
        nisa.tensor_scalar(dst=r[1], data=t, op0=nl.bypass, operand0=0.0, op1=nl.multiply,
                           operand1=3.0)
        nisa.tensor_scalar(dst=r[2], data=t, op0=nl.bypass, operand0=0.0)
    assert isinstance(t, nl.NkiTensor) and nl.bool_ == np.bool_
    for i in range(3):
        nisa.dma_copy(dst=out[i], src=r[i])
    return out


@nki.jit
def halves_then_barrier(x, barrier=True):
    """Each core of an nl.nc(2) grid copies its half of x's rows into out, both meet at
    nisa.core_barrier over out (with ``barrier``), then each reads the other's half back
    into out2 (it is there only after the barrier)."""
    out = nl.ndarray(x.shape, x.dtype, nl.shared_hbm)
    out2 = nl.ndarray(x.shape, x.dtype, nl.shared_hbm)
    n, i = nl.num_programs(0), nl.program_id(0)
    rows = x.shape[0] // n
    t = nl.ndarray((rows, x.shape[1]), x.dtype, nl.sbuf)
    nisa.dma_copy(dst=t, src=x[i * rows:(i + 1) * rows, :])
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
    nisa.dma_copy(dst=out[i * rows:(i + 1) * rows, :], src=t)
    if barrier:
        nisa.core_barrier(out, (0, 1))
    u = nl.ndarray((rows, x.shape[1]), x.dtype, nl.sbuf)
    other = 1 - i
    nisa.dma_copy(dst=u, src=out[other * rows:(other + 1) * rows, :])
    nisa.dma_copy(dst=out2[other * rows:(other + 1) * rows, :], src=u)
    return out, out2


@nki.jit
def halves_exchanged(x, by_gpsimd=False):
    """Each core of an nl.nc(2) grid squares its half of x's rows in SBUF and sends it to
    the other (nisa.sendrecv), which adds what it receives to its own: out's two halves
    are x_0^2 + x_1^2 and x_1^2 + x_0^2 (as in nki-library's indexed_flatten)."""
    out = nl.ndarray((x.shape[0] // 2, 2 * x.shape[1]), x.dtype, nl.shared_hbm)
    i = nl.program_id(0)
    rows = x.shape[0] // 2
    t = nl.ndarray((rows, x.shape[1]), x.dtype, nl.sbuf)
    nisa.dma_copy(dst=t, src=x[i * rows:(i + 1) * rows, :])
    nisa.activation(dst=t, op=nl.square, data=t)
    got = nl.ndarray((rows, x.shape[1]), x.dtype, nl.sbuf)
    nisa.sendrecv(src=t, dst=got, send_to_rank=1 - i, recv_from_rank=1 - i, pipe_id=0,
                  dma_engine=nisa.dma_engine.gpsimd_dma if by_gpsimd else nisa.dma_engine.dma)
    nisa.tensor_tensor(dst=t, data1=t, data2=got, op=nl.add)
    nisa.dma_copy(dst=out[:, i * x.shape[1]:(i + 1) * x.shape[1]], src=t)
    return out


@nki.jit
def nonzeros(x, offset):
    """nisa.nonzero_with_count of x [P, T] into [P, T + 1] (every other partition of the
    result zero from a memset first)."""
    p, t = x.shape
    out = nl.ndarray((p, t + 1), nl.int32, nl.shared_hbm)
    s = nl.ndarray((p, t), x.dtype, nl.sbuf)
    nisa.dma_copy(dst=s, src=x)
    d = nl.ndarray((p, t + 1), nl.int32, nl.sbuf)
    nisa.memset(dst=d, value=0)
    nisa.nonzero_with_count(dst=d, src=s, index_offset=offset, padding_val=-7)
    nisa.dma_copy(dst=out, src=d)
    return out


@nki.jit
def summed_by_dma(a, b, c):
    """nisa.dma_compute: a + b + c from HBM into an SBUF tile of bf16 (in fp32, one cast),
    a + b into HBM, and the tile added into itself with b (the read-modify-write form)."""
    p, f = a.shape
    out = nl.ndarray((3, p, f), nl.float32, nl.shared_hbm)
    t = nl.ndarray((p, f), nl.bfloat16, nl.sbuf)
    nisa.dma_compute(dst=t, srcs=[a, b, c], reduce_op=nl.add)
    nisa.dma_copy(dst=out[0], src=t)
    nisa.dma_compute(dst=out[1], srcs=[a, b], reduce_op=np.add, scales=[1.0, 1.0])
    u = nl.ndarray((p, f), nl.float32, nl.sbuf)
    nisa.dma_copy(dst=u, src=a)
    nisa.dma_compute(dst=u, srcs=[u, b], reduce_op=nl.add)
    nisa.dma_copy(dst=out[2], src=u)
    return out


@nki.jit
def mx_product(st_q, st_s, mv_q, mv_s, plain=False, dtype=nl.float32, twice=False):
    """nisa.nc_matmul_mx: stationary [P, M] and moving [P, N] MX quads, their E8M0 scales in
    HBM a row per group of 8 partitions ([P / 8, M], [P / 8, N]), spread into SBUF to the
    first four partitions of each quadrant (NKI's layout); the product in PSUM of ``dtype``
    (fp32 or, NeuronCore-v4, bf16), ``twice``: the product added onto itself (a second
    multiply accumulating). ``plain``: the quads through nc_matmul, without scales."""
    p, m = st_q.shape
    n = mv_q.shape[1]
    out = nl.ndarray((m, n), dtype=dtype, buffer=nl.shared_hbm)
    a = nl.ndarray((p, m), dtype=st_q.dtype, buffer=nl.sbuf)
    b = nl.ndarray((p, n), dtype=mv_q.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=st_q)
    nisa.dma_copy(dst=b, src=mv_q)
    sa = nl.ndarray((p, m), dtype=nl.float8_e8m0fnu, buffer=nl.sbuf)
    sb = nl.ndarray((p, n), dtype=nl.float8_e8m0fnu, buffer=nl.sbuf)
    nisa.memset(dst=sa, value=0)
    nisa.memset(dst=sb, value=0)
    for g in range(p // 8):
        row = 32 * (g // 4) + g % 4
        nisa.dma_copy(dst=sa[row:row + 1, :], src=st_s[g:g + 1, :])
        nisa.dma_copy(dst=sb[row:row + 1, :], src=mv_s[g:g + 1, :])
    ps = nl.ndarray((m, n), dtype=dtype, buffer=nl.psum)
    if plain:
        nisa.nc_matmul(ps, a, b)
    else:
        nisa.nc_matmul_mx(ps, a, b, sa, sb)
        if twice:
            nisa.nc_matmul_mx(ps, a, b, sa, sb, accumulate=True)
    r = nl.ndarray((m, n), dtype=dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=r, src=ps)
    nisa.dma_copy(dst=out, src=r)
    return out


@nki.jit
def quantized_on_device(x, dtype=nl.float8_e4m3fn_x4, at=0):
    """nisa.quantize_mx: x [P, 4F] (bf16) into MXFP8 quads [P, F] of ``dtype`` and their E8M0
    scales (the groups' partitions, from partition ``at`` of a [P, F] tile, the rest zero),
    both returned."""
    p, f4 = x.shape
    q_out = nl.ndarray((p, f4 // 4), dtype=dtype, buffer=nl.shared_hbm)
    s_out = nl.ndarray((p, f4 // 4), dtype=nl.uint8, buffer=nl.shared_hbm)
    t = nl.ndarray((p, f4), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    q = nl.ndarray((p, f4 // 4), dtype=dtype, buffer=nl.sbuf)
    s = nl.ndarray((p, f4 // 4), dtype=nl.float8_e8m0fnu, buffer=nl.sbuf)
    nisa.memset(dst=s, value=0)
    nisa.quantize_mx(dst=q, src=t, dst_scale=s[at:, :])
    nisa.dma_copy(dst=q_out, src=q)
    nisa.dma_copy(dst=s_out, src=s)
    return q_out, s_out


@nki.jit
def all_nonzero(x):
    """nl.all along a tile's free axes: each partition's 1 or 0."""
    out = nl.ndarray((x.shape[0],), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.dma_copy(dst=out, src=nl.all(t, axis=(1, 2)))
    return out


@nki.jit
def divided(a, b):
    """nl.divide of two tiles (integers: a true division, in float32) and of a tile by a
    number."""
    ta, tb = _in_sbuf(a, b)
    return _to_hbm(nl.divide(ta, tb)), _to_hbm(nl.divide(ta, 4))


def _to_hbm(t):
    """A shared HBM tensor holding the SBUF tile ``t``."""
    out = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def _in_sbuf(*tensors):
    """Each tensor copied into an SBUF tile of its shape."""
    tiles = []
    for x in tensors:
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        tiles.append(t)
    return tiles


@nki.jit
def placed_sums(x, w):
    """Two PSUM tensors the kernel places at one address: the first [M, N], w's product,
    read by the vector engine; then the second [M, N / 2], two products of w's first half
    with ``accumulate`` left to the compiler (NKI 0.2: the first write overwrites, later ones
    add), so twice that product."""
    m, n = x.shape[1], w.shape[1]
    a, b = _in_sbuf(x, w)
    outs = []
    for times, cols in ((1, n), (2, n // 2)):
        ps = nl.ndarray((m, cols), dtype=nl.float32, buffer=nl.psum, address=(0, 0))
        for _ in range(times):
            nisa.nc_matmul(ps, a, b[:, :cols])
        r = nl.ndarray((m, cols), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=r, src=ps)
        outs.append(_to_hbm(r))
    return tuple(outs)


@nki.jit
def placed_after_the_compilers(x, w):
    """Eight products in PSUM tensors the compiler places, live at once (all eight banks),
    summed; then a ninth in a tile the kernel places at bank 0, added: a placed tile holds
    its bank only while it lives, and its write waits for the reads of the tensor the
    compiler put there before it."""
    m, n = x.shape[1], w.shape[1]
    a, b = _in_sbuf(x, w)
    products = [nl.ndarray((m, n), dtype=nl.float32, buffer=nl.psum) for _ in range(8)]
    for ps in products:
        nisa.nc_matmul(ps, a, b)
    total = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=total, src=products[0])
    for ps in products[1:]:
        nisa.tensor_tensor(dst=total, data1=total, data2=ps, op=nl.add)
    late = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.psum, address=(0, 0))
    nisa.nc_matmul(late, a, b)
    nisa.tensor_tensor(dst=total, data1=total, data2=late, op=nl.add)
    return _to_hbm(total)


@nki.jit
def derivative_activations(x):
    """nisa.activation with nl.silu_dx, nl.gelu_apprx_sigmoid and nl.gelu_apprx_sigmoid_dx
    (the Scalar Engine functions NKI lists for MoE backward passes), each into its output."""
    outs = []
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    for op in (nl.silu_dx, nl.gelu_apprx_sigmoid, nl.gelu_apprx_sigmoid_dx):
        r = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=r, op=op, data=t)
        out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=r)
        outs.append(out)
    return tuple(outs)


@nki.jit
def private_across_a_barrier(x):
    """Each core of an nl.nc(2) grid keeps its half of x, scaled by its core's number plus
    one, in a tensor of its own (nl.private_hbm), meets the other at a barrier, then reads
    its own back into its half of out."""
    out = nl.ndarray(x.shape, x.dtype, nl.shared_hbm)
    i = nl.program_id(0)
    rows = x.shape[0] // 2
    mine = nl.ndarray((rows, x.shape[1]), x.dtype, nl.private_hbm)
    t = nl.ndarray((rows, x.shape[1]), x.dtype, nl.sbuf)
    nisa.dma_copy(dst=t, src=x[i * rows:(i + 1) * rows, :])
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=float(i + 1))
    nisa.dma_copy(dst=mine, src=t)
    nisa.core_barrier(out, (0, 1))
    u = nl.ndarray((rows, x.shape[1]), x.dtype, nl.sbuf)
    nisa.dma_copy(dst=u, src=mine)
    nisa.dma_copy(dst=out[i * rows:(i + 1) * rows, :], src=u)
    return out


@nki.jit
def products_summed(x, w, count):
    """In an nl.dynamic_range of ``count`` iterations (a [1, 1] int32 in HBM), ten products
    of x and w, each into a PSUM tensor of its own (a bank each, ten banks in all where PSUM
    has eight), added into a sum in SBUF: count x 10 x (x^T w)."""
    m, n = x.shape[1], w.shape[1]
    a, b, c = _in_sbuf(x, w, count)
    total = nl.zeros((m, n), dtype=nl.float32, buffer=nl.sbuf)
    for _ in nl.dynamic_range(nisa.register_alloc(c)):
        for _ in range(10):
            ps = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(ps, a, b)
            nisa.tensor_tensor(dst=total, data1=total, data2=ps, op=nl.add)
    return _to_hbm(total)


@nki.jit
def row_at_an_index(x, where):
    """On an nl.nc(2) grid, no meeting: core 0 writes x's row 0 into out at the row
    ``where`` names (a DMA at a run-time index), core 1 writes x's row 1 at out's row 0."""
    out = nl.ndarray((4, x.shape[1]), x.dtype, nl.shared_hbm)
    t = nl.ndarray((1, x.shape[1]), x.dtype, nl.sbuf)
    if nl.program_id(0) == 0:
        (at,) = _in_sbuf(where)
        nisa.dma_copy(dst=t, src=x[0:1, :])
        nisa.dma_copy(dst=out.ap([[x.shape[1], 1], [1, x.shape[1]]], scalar_offset=at,
                                 indirect_dim=0), src=t)
    else:
        nisa.dma_copy(dst=t, src=x[1:2, :])
        nisa.dma_copy(dst=out[0:1, :], src=t)
    return out


@nki.jit
def wide_product(x, w):
    """nc_matmul of a moving tile of w's N columns into a bf16 PSUM tile, copied out."""
    m, n = x.shape[1], w.shape[1]
    a, b = _in_sbuf(x, w)
    ps = nl.ndarray((m, n), dtype=nl.bfloat16, buffer=nl.psum)
    nisa.nc_matmul(ps, a, b)
    r = nl.ndarray((m, n), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.tensor_copy(dst=r, src=ps)
    return _to_hbm(r)


@nki.jit
def alu_ops(x, y, ints, counts):
    """The ALU operators beyond arithmetic: tensor_tensor's logical_and/or/xor of two fp32
    tiles, left_shift and right_shift of int32 words by uint32 counts (a tile) and by 3
    (tensor_scalar)."""
    logic = [nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm) for _ in range(3)]
    shifted = [nl.ndarray(ints.shape, dtype=nl.int32, buffer=nl.shared_hbm) for _ in range(4)]
    a, b = nl.load(x), nl.load(y)
    words, by = nl.load(ints), nl.load(counts)
    for out, op in zip(logic, (nl.logical_and, nl.logical_or, nl.logical_xor), strict=True):
        t = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=t, data1=a, data2=b, op=op)
        nl.store(out, t)
    for out, op in zip(shifted[:2], (nl.left_shift, nl.right_shift), strict=True):
        t = nl.ndarray(ints.shape, dtype=nl.int32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=t, data1=words, data2=by, op=op)
        nl.store(out, t)
    for out, op in zip(shifted[2:], (nl.left_shift, nl.right_shift), strict=True):
        t = nl.ndarray(ints.shape, dtype=nl.int32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=t, data=words, op0=op, operand0=3)
        nl.store(out, t)
    return (*logic, *shifted)


@nki.jit
def by_magnitude(x, y):
    """nl.abs_max and nl.abs_min of two tiles (NeuronCore-v4 on)."""
    big = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    small = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    a, b = nl.load(x), nl.load(y)
    nl.store(big, nl.abs_max(a, b))
    nl.store(small, nl.abs_min(a, b))
    return big, small


@nki.jit
def mx_zero_padded(q, rows, value=0.0):
    """A tile of MX quads zeroed by nisa.memset (NKI: value 0 only for x4 types), then its
    first ``rows`` partitions loaded from ``q``, written back whole."""
    out = nl.ndarray(q.shape, dtype=q.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(q.shape, dtype=q.dtype, buffer=nl.sbuf)
    nisa.memset(dst=t, value=value)
    nisa.dma_copy(dst=t[:rows, :], src=q[:rows, :])
    nisa.dma_copy(dst=out, src=t)
    return out


@nki.jit
def no_first_operation(x, op1=None, operand1=None):
    """nisa.tensor_scalar with op0 None (nki-library's clamps when no limit is given): only
    ``op1`` with ``operand1``, or, with neither, a copy."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    r = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(r, t, op0=None, operand0=None, op1=op1, operand1=operand1)
    nisa.dma_copy(dst=out, src=r)
    return out


@nki.jit
def reductions_beyond_sums(x, words, op, negate=False, axis=1):
    """nisa.tensor_reduce with the operators NKI allows beyond add, max and min: of ``x``
    (fp32) for the arithmetic and logical ones, of ``words`` (int32) for the bitwise ones,
    along ``axis`` (the free axes of a [P, F] or [P, A, B] tensor, or one of the latter's)."""
    src = words if op in (nl.bitwise_and, nl.bitwise_or, nl.bitwise_xor) else x
    p = src.shape[0]
    kept = src.shape[1] if axis == 2 else 1
    out = nl.ndarray((p, kept), dtype=src.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=src)
    r = nl.ndarray((p, kept), dtype=src.dtype, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=r, op=op, data=t, axis=axis, negate=negate)
    nisa.dma_copy(dst=out, src=r)
    return out


@nki.jit
def product_along(x, axis):
    """nl.prod of ``x`` along ``axis``, kept as size-one dimensions."""
    t = nl.load(x)
    r = nl.prod(t, axis=axis, keepdims=True)
    out = nl.ndarray(r.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, r)
    return out


@nki.jit
def gaussian_derivatives_and_tangent(x):
    """nisa.activation with nl.gelu_dx and nl.erf_dx (Scalar Engine functions of NKI's table)
    and nl.tan (composed), each into its output."""
    t = nl.load(x)
    outs = []
    for op in (nl.gelu_dx, nl.erf_dx):
        r = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=r, op=op, data=t)
        outs.append(r)
    outs.append(nl.tan(t, dtype=nl.float32))
    return tuple(_to_hbm(r) for r in outs)


@nki.jit
def exponentials(x, m):
    """nisa.exponential (NeuronCore-v4's vector engine): exp(x - m) with m a tile, the row
    sums from zero (reset_reduce); exp(x - 2) added onto them (reduce); exp(x) into bf16
    with sums from 5 (load_reduce)."""
    t = nl.load(x)
    top = nl.load(m)
    outs, sums = [], []
    for dt, max_value, cmd, init in (
            (nl.float32, top, nisa.reduce_cmd.reset_reduce, 0.0),
            (nl.float32, 2.0, nisa.reduce_cmd.reduce, 0.0),
            (nl.bfloat16, 0.0, nisa.reduce_cmd.load_reduce, 5.0)):
        r = nl.ndarray(x.shape, dtype=dt, buffer=nl.sbuf)
        s = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.exponential(dst=r, src=t, max_value=max_value, reduce_res=s, reduce_cmd=cmd,
                         reduce_init=init)
        outs.append(r)
        sums.append(s)
    return tuple(_to_hbm(r) for r in outs + sums)


@nki.jit
def uniforms(lo, hi):
    """nisa.rand2 (NeuronCore-v4): [128, 512] uniform in [-2, 3] into fp32; in [lo, hi] of
    each partition (two tiles); in [lo, 4] (a tile and a number) into bf16."""
    low, high = nl.load(lo), nl.load(hi)
    outs = []
    for dt, a, b in ((nl.float32, -2.0, 3.0), (nl.float32, low, high),
                     (nl.bfloat16, low, 4.0)):
        r = nl.ndarray((128, 512), dtype=dt, buffer=nl.sbuf)
        nisa.rand2(dst=r, min=a, max=b)
        outs.append(r)
    return tuple(_to_hbm(r) for r in outs)


@nki.jit
def powers(x, y, engine=nisa.engine.unknown):
    """nl.power of two tiles and of a tile and a number; nisa.tensor_tensor's op nl.power
    into bf16 (on ``engine``)."""
    a, b = nl.load(x), nl.load(y)
    r3 = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=r3, data1=a, data2=b, op=nl.power, engine=engine)
    return tuple(_to_hbm(r) for r in (nl.power(a, b), nl.power(a, 2.0), r3))


@nki.jit
def unary_operators(x, engine=nisa.engine.unknown):
    """tensor_scalar's unary operators NKI's table lists beside abs and square: rsqrt (on
    ``engine``), relu, and a reciprocal followed by a multiply."""
    t = nl.load(x)
    outs = [nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf) for _ in range(3)]
    nisa.tensor_scalar(dst=outs[0], data=t, op0=nl.rsqrt, operand0=0.0, engine=engine)
    nisa.tensor_scalar(dst=outs[1], data=t, op0=nl.relu, operand0=None)
    nisa.tensor_scalar(dst=outs[2], data=t, op0=nl.reciprocal, operand0=0.0,
                       op1=nl.multiply, operand1=3.0)
    return tuple(_to_hbm(r) for r in outs)


@nki.jit
def prelus(x, b, slope):
    """nisa.activate2 with nl.prelu: of x * 0.5 + b (its multiply-add stage) with a slope of
    0.1 and the row sums; of x with one slope a partition."""
    t, bias, s = nl.load(x), nl.load(b), nl.load(slope)
    first = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    sums = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activate2(dst=first, op=nl.prelu, data=t, imm0=0.5, imm1=bias, op0=nl.multiply,
                   op1=nl.add, relu_param=0.1, reduce_op=nl.add, reduce_res=sums,
                   reduce_cmd=nisa.reduce_cmd.reset_reduce)
    second = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.activate2(dst=second, op=nl.prelu, data=t, imm0=0.0, imm1=0.0, op0=nl.bypass,
                   op1=nl.bypass, relu_param=s)
    return tuple(_to_hbm(r) for r in (first, sums, second))


@nki.jit
def activated_after_a_stage(x, b, relu=0.0):
    """nisa.activate2 (NeuronCore-v4): exp(x * 0.5 + b) (the Activation's own scale and
    bias), tanh(2 - x) (a reversed subtraction: a TensorScalar first) and x + b (the bias
    alone, identity) with the row sums of the last."""
    t = nl.load(x)
    bias = nl.load(b)
    outs = []
    for op, imm0, imm1, op0, op1, reverse0 in (
            (nl.exp, 0.5, bias, nl.multiply, nl.add, False),
            (nl.tanh, 2.0, 0.0, nl.subtract, nl.bypass, True),
            (nl.copy, bias, 0.0, nl.add, nl.bypass, False)):
        r = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        sums = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activate2(dst=r, op=op, data=t, imm0=imm0, imm1=imm1, op0=op0, op1=op1,
                       reverse0=reverse0, relu_param=relu, reduce_op=nl.add, reduce_res=sums,
                       reduce_cmd=nisa.reduce_cmd.reset_reduce)
        outs.append(r)
    outs.append(sums)
    return tuple(_to_hbm(r) for r in outs)
