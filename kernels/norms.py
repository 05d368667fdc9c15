"""Row-wise kernels on ``x[R, C]``: rows on partitions (tiles of 128), columns on the free
axis (a norm of a few rows spreads each row over several partitions). Softmax, RMSNorm,
LayerNorm, residual add, gradient accumulation and an Adam step."""

from __future__ import annotations

from hdl.core.isa import (
    FREE_MAX,
    Activation,
    DmaCopy,
    Iota,
    LoadStationary,
    Memset,
    MultiplyMoving,
    TensorCopy,
    TensorReduce,
    TensorScalar,
    TensorTensor,
)
from hdl.vector.ops import Reduce, VectorOp

from .builder import Builder, KernelError, itemsize, psum_columns

__all__ = ["RowBuffers", "adam", "broadcast_row", "grad_accumulate", "layernorm", "load_rows",
           "residual_add", "rmsnorm", "row_tiles", "softmax"]


def row_tiles(b: Builder, r: int, c: int, dtype: str) -> list[tuple[int, int]]:
    """(first row, rows) of each row tile of a row-wise kernel on ``[r, c]`` of ``dtype``, a
    tile one partition a row; a :class:`KernelError` unless ``r`` and ``c`` are positive,
    ``c`` fits one SBUF tile's free size and ``dtype`` is fp32 or bf16."""
    for name, v in (("R", r), ("C", c)):
        if not isinstance(v, int) or v < 1:
            raise KernelError(f"{name} must be a positive integer, not {v!r}")
    if c > FREE_MAX["sbuf"]:
        raise KernelError(f"C must be at most {FREE_MAX['sbuf']} (one SBUF tile's free size), "
                          f"not {c}")
    if dtype not in ("fp32", "bf16"):
        raise KernelError(f"dtype must be fp32 or bf16, not {dtype!r}")
    p = b.params.partitions
    return [(o, min(p, r - o)) for o in range(0, r, p)]


class RowBuffers:
    """The SBUF of a row-wise kernel's double buffer, two halves (``h``) for alternate row
    tiles: ``io[name][h]``, a ``c``-column tile of ``dtype`` per HBM tensor in ``names`` (the
    loads and the stores); ``work[h][slot]``, ``slots`` fp32 work tiles; ``cols[h][i]``, eight
    fp32 columns (per-row scalars). ``free[h]`` is the event after which half ``h`` may be
    written again (None at first)."""

    def __init__(self, b: Builder, c: int, dtype: str, names: tuple[str, ...], slots: int):
        self.b, self.c, self.dtype = b, c, dtype
        self.es = itemsize(dtype)
        self.io = {n: [b.sbuf(c * self.es, n) for _ in range(2)] for n in names}
        self.work = [[b.sbuf(c * 4, "work") for _ in range(slots)] for _ in range(2)]
        self.cols = [[b.sbuf(4, "column") for _ in range(8)] for _ in range(2)]
        self.free: list = [None, None]

    def tile(self, base: int, rows: int, dtype: str = "fp32"):
        """The ``rows`` x ``c`` tile of ``dtype`` at SBUF address ``base``."""
        return self.b.tile("sbuf", dtype, base, rows, ((self.c, 1),))

    def col(self, half: int, i: int, rows: int):
        """Column ``i`` of half ``half``, ``rows`` partitions deep."""
        return self.b.column(self.cols[half][i], rows)


def load_rows(b: Builder, q: str, t, r0: int, rows: int, dst) -> None:
    """DMA rows ``r0 .. r0 + rows`` of the HBM tensor ``t`` into ``dst`` on queue ``q``."""
    b.emit(q, DmaCopy(dst=dst, src=t.ap((r0, r0 + rows))))


#: Columns per pass of the element-wise kernels (residual add, gradient accumulation, Adam):
#: 2,048 fp32 keep their double-buffered tiles within any generation's SBUF.
_ELEMENTWISE_COLUMNS = 2048


class _Flat:
    """The passes of an element-wise kernel over ``[r, c]``, whose rows need not be whole:
    the ``r * c`` elements in order over every partition, ``L = r * c // partitions`` a
    partition, in passes of up to :data:`_ELEMENTWISE_COLUMNS` columns, and the last
    ``r * c % partitions`` elements one a partition; so a short tensor (a decode step's
    few rows) still streams on all the vector engine's lanes."""

    def __init__(self, r: int, c: int, partitions: int):
        total = r * c
        self.per = total // partitions
        self.width = max(1, min(self.per, _ELEMENTWISE_COLUMNS))
        # (first element, partitions, partition stride in elements, columns)
        self.pieces = [(c0, partitions, self.per, min(self.width, self.per - c0))
                       for c0 in range(0, self.per, self.width)]
        if total % partitions:
            self.pieces.append((self.per * partitions, total % partitions, 1, 1))

    @staticmethod
    def ap(b: Builder, t, piece):
        """The HBM access pattern of ``piece`` in the tensor ``t``."""
        first, parts, stride, cols = piece
        es = itemsize(t.dtype)
        return b.tile("hbm", t.dtype, t.offset + first * es, parts, ((cols, 1),),
                      pstride=stride * es)


def softmax(b: Builder, r: int, c: int, dtype: str = "fp32") -> None:
    """``out = exp(x - max) / sum(exp(x - max))`` per row: max-reduce (vector), exp with
    bias -max and a running sum (scalar), reciprocal (scalar), scale (vector)."""
    tiles = row_tiles(b, r, c, dtype)
    x, out = b.hbm("x", (r, c), dtype), b.hbm("out", (r, c), dtype)
    w = RowBuffers(b, c, dtype, ("x", "out"), 1)
    exp, recip = b.function("exp"), b.function("reciprocal")
    for i, (r0, rows) in enumerate(tiles):
        h = i % 2
        b.wait("dma0", w.free[h])
        xin = w.tile(w.io["x"][h], rows, dtype)
        load_rows(b, "dma0", x, r0, rows, xin)
        b.wait("vector", b.signal("dma0"))
        mx, neg, total, inv = (w.col(h, j, rows) for j in range(4))
        b.emit("vector", TensorReduce(dst=mx, src=xin, reduce=Reduce.MAX))
        b.emit("vector", TensorScalar(dst=neg, src=mx, op0=VectorOp.MULTIPLY, imm0=-1.0))
        b.wait("scalar", b.signal("vector"))
        e = w.tile(w.work[h][0], rows)
        b.emit("scalar", Activation(dst=e, src=xin, func=exp, bias=neg, reduce_dst=total))
        b.emit("scalar", Activation(dst=inv, src=total, func=recip))
        b.wait("vector", b.signal("scalar"))
        y = w.tile(w.io["out"][h], rows, dtype)
        b.emit("vector", TensorScalar(dst=y, src=e, op0=VectorOp.MULTIPLY, operand0=inv))
        b.wait("dma1", b.signal("vector"))
        b.emit("dma1", DmaCopy(dst=out.ap((r0, r0 + rows)), src=y))
        w.free[h] = b.signal("dma1")


def broadcast_row(b: Builder, q: str, t, rows: int, dst) -> None:
    """Row vector ``t[1, C]`` into every partition of ``dst`` (a partition stride of 0)."""
    src = t.ap((0, 1))
    b.emit(q, DmaCopy(dst=dst, src=src.__class__(src.space, src.dtype, 0, rows, src.offset,
                                                 src.dims, 0)))


def _normalise(b: Builder, x, y, res, neg, rstd, gamma, beta, loaded=()) -> None:
    """On the vector engine, ``res = (x - mean) * rstd * gamma + beta``: ``y = (x + neg) *
    rstd`` in one two-operation pass (``neg`` = -mean; None for RMSNorm, ``y = x * rstd``),
    then, after the events ``loaded`` (gamma's and beta's), ``y * gamma`` and, with
    ``beta``, ``+ beta`` into ``res``."""
    b.emit("vector", TensorScalar(dst=y, src=x, op0=VectorOp.MULTIPLY, operand0=rstd)
           if neg is None else
           TensorScalar(dst=y, src=x, op0=VectorOp.ADD, operand0=neg, op1=VectorOp.MULTIPLY,
                        operand1=rstd))
    b.wait("vector", *loaded)
    if beta is None:
        b.emit("vector", TensorTensor(dst=res, a=y, b=gamma, op=VectorOp.MULTIPLY))
        return
    b.emit("vector", TensorTensor(dst=y, a=y, b=gamma, op=VectorOp.MULTIPLY))
    b.emit("vector", TensorTensor(dst=res, a=y, b=beta, op=VectorOp.ADD))


def _spread(p, r: int, c: int) -> int:
    """Partitions a row of a norm over ``[r, c]`` spreads over (1: a row a partition): where
    a tile of a row a partition would leave three lanes in four idle, the most that divide
    ``c`` into pieces no shorter than an instruction streams in its least interval, within
    the array's rows and columns (whose matmuls sum a row's pieces and hand the row's
    statistics back to them). Fewer than four pieces a row do not repay those matmuls."""
    lanes = min(p.partitions, p.rows, p.cols)
    floor = p.min_interval * p.vector_elements
    fits = [k for k in range(4, lanes // r + 1) if c % k == 0 and c // k >= floor]
    return max(fits, default=1)


def _norm_spread(b: Builder, r: int, c: int, dtype: str, centre: bool, eps: float,
                 k: int) -> None:
    """The norm of a few rows, each spread over ``k`` partitions of ``w = c / k`` columns (a
    row's piece ``j`` on partition ``row * k + j``, so that ``x`` and ``out`` move as one
    block): each partition's sums on the scalar engine; a row's totals by an fp32 matmul
    with ``S[p, i] = 1`` where partition ``p`` holds a piece of row ``i``, and handed back
    to its pieces by one with ``S^T``; gamma and beta loaded once as ``[k, w]`` and copied
    to every row's pieces by a matmul with ``[I_k ... I_k]``. LayerNorm centres first (two
    rounds: the mean, then the squares about it)."""
    n, w = r * k, c // k
    es = itemsize(dtype)
    x, out = b.hbm("x", (r, c), dtype), b.hbm("out", (r, c), dtype)
    gamma = b.hbm("gamma", (1, c), "fp32")
    beta = b.hbm("beta", (1, c), "fp32") if centre else None
    identity, square, rsqrt = (b.function(f) for f in ("identity", "square", "rsqrt"))

    def sb(nbytes, what):
        return b.sbuf(nbytes, what)

    def tile(base, parts, cols, dt="fp32"):
        return b.tile("sbuf", dt, base, parts, ((cols, 1),))

    def flat(t, rows, cols):  # an HBM tensor as [rows, cols], rows one after another
        return b.tile("hbm", t.dtype, t.offset, rows, ((cols, 1),),
                      pstride=cols * itemsize(t.dtype))

    xs, y, res = sb(w * es, "x pieces"), sb(w * 4, "y"), sb(w * es, "out pieces")
    scratch = sb(max(w, n) * 4, "scratch")  # also a comparison of S^T's n columns
    consts = {name: sb(w * 4, name) for name in (("gamma", "beta") if centre else ("gamma",))}
    rows_k = {name: sb(w * 4, name + " rows") for name in consts}
    sums, row_cols, eps_col = sb(8, "piece sums"), sb(4, "row statistics"), sb(4, "eps")
    s_mat, st_mat = sb(r * 4, "S"), sb(n * 4, "S^T")
    eye, rep = sb(k * 4, "I"), sb(n * 4, "[I ... I]")
    stats_ps, consts_ps = b.psum_banks(2, "row sums and statistics")
    bank = psum_columns(b.params)

    b.emit("dma0", DmaCopy(dst=tile(xs, n, w, dtype), src=flat(x, n, w)))
    for q, name in zip(("dma2", "dma3"), consts, strict=False):
        t = gamma if name == "gamma" else beta
        b.emit(q, DmaCopy(dst=tile(rows_k[name], k, w), src=flat(t, k, w)))
    # S, S^T and [I ... I] from GpSimd's iota: v = p - k i (S), q - k i (S^T), q - j (I)
    for base, parts, cols, pstep, step in ((s_mat, n, r, 1, -k), (st_mat, r, n, -k, 1),
                                           (eye, k, k, -1, 1)):
        b.emit("gpsimd", Iota(dst=tile(base, parts, cols), pstep=pstep, step=step))
    b.emit("gpsimd", Memset(dst=tile(eps_col, n, 1), value=eps))
    b.wait("vector", b.signal("gpsimd"))
    for base, parts, cols in ((s_mat, n, r), (st_mat, r, n)):  # 0 <= v < k
        m = tile(base, parts, cols)
        b.emit("vector", TensorScalar(dst=tile(scratch, parts, cols), src=m,
                                      op0=VectorOp.LESS, imm0=float(k)))
        b.emit("vector", TensorScalar(dst=m, src=m, op0=VectorOp.GREATER_EQUAL, imm0=0.0))
        b.emit("vector", TensorTensor(dst=m, a=m, b=tile(scratch, parts, cols),
                                      op=VectorOp.MULTIPLY))
    b.emit("vector", TensorScalar(dst=tile(eye, k, k), src=tile(eye, k, k),
                                  op0=VectorOp.IS_EQUAL, imm0=0.0))
    b.emit("vector", TensorCopy(dst=b.tile("sbuf", "fp32", rep, k, ((r, k), (k, 1))),
                                src=b.tile("sbuf", "fp32", eye, k, ((r, 0), (k, 1)))))
    made = b.signal("vector")

    # gamma and beta to every row's pieces: [I ... I]^T @ [k, w], a PSUM bank at a time
    b.wait("tensor", made, *(b.signal(q) for q in ("dma2", "dma3")[:len(consts)]))
    b.emit("tensor", LoadStationary(src=tile(rep, k, n)))
    copies = []
    for name in consts:
        for c0 in range(0, w, bank):
            cw = min(bank, w - c0)
            b.emit("tensor", MultiplyMoving(dst=b.tile("psum", "fp32", consts_ps, n, ((cw, 1),)),
                                            src=tile(rows_k[name] + c0 * 4, k, cw)))
            b.wait("vector", b.signal("tensor"))
            b.emit("vector", TensorCopy(dst=tile(consts[name] + c0 * 4, n, cw),
                                        src=b.tile("psum", "fp32", consts_ps, n, ((cw, 1),))))
            copies.append(b.signal("vector"))
            b.wait("tensor", copies[-1])

    def col(base, parts, j=0):
        return b.column(base + 4 * j, parts)

    def through(mat: int, parts: int, cols: int, column: int):
        """``mat`` ([parts, cols], stationary) times the fp32 column at ``column`` (the
        scalar engine's last), into PSUM [cols, 1]: with ``S`` each row's total of its
        pieces' sums, with ``S^T`` a row's statistic at each of its pieces."""
        b.wait("tensor", b.signal("scalar"))
        b.emit("tensor", LoadStationary(src=tile(mat, parts, cols)))
        b.emit("tensor", MultiplyMoving(dst=b.tile("psum", "fp32", stats_ps, cols, ((1, 1),)),
                                        src=tile(column, parts, 1)))
        return b.signal("tensor")

    def row_totals():
        return through(s_mat, n, r, sums)

    def hand_back():
        return through(st_mat, r, n, row_cols)

    xt = tile(xs, n, w, dtype)
    b.wait("scalar", b.signal("dma0"), made)
    neg = None
    if centre:  # the mean first: each piece's sum, the row's total, -mean back to the pieces
        b.emit("scalar", Activation(dst=tile(scratch, n, w), src=xt, func=identity,
                                    reduce_dst=col(sums, n)))
        totals = row_totals()
        b.wait("scalar", totals)
        b.emit("scalar", Activation(dst=col(row_cols, r), func=identity, scale=-1 / c,
                                    src=b.tile("psum", "fp32", stats_ps, r, ((1, 1),))))
        back = hand_back()
        b.wait("scalar", back)
        neg = col(sums, n, 1)
        b.emit("scalar", Activation(dst=neg, func=identity,
                                    src=b.tile("psum", "fp32", stats_ps, n, ((1, 1),))))
    b.emit("scalar", Activation(dst=tile(scratch, n, w), src=xt, func=square, bias=neg,
                                reduce_dst=col(sums, n)))
    totals = row_totals()
    b.wait("scalar", totals)
    b.emit("scalar", Activation(dst=col(row_cols, r), func=rsqrt, scale=1 / c,
                                bias=col(eps_col, r),
                                src=b.tile("psum", "fp32", stats_ps, r, ((1, 1),))))
    back = hand_back()
    b.wait("vector", back, *copies)
    rstd = col(scratch, n)  # the row's rstd at each piece, out of PSUM
    b.emit("vector", TensorCopy(dst=rstd, src=b.tile("psum", "fp32", stats_ps, n, ((1, 1),))))
    out_t = tile(res, n, w, dtype)
    _normalise(b, xt, tile(y, n, w), out_t, neg, rstd, tile(consts["gamma"], n, w),
               tile(consts["beta"], n, w) if centre else None)
    b.wait("dma1", b.signal("vector"))
    b.emit("dma1", DmaCopy(dst=flat(out, n, w), src=out_t))


def _norm(b: Builder, r: int, c: int, dtype: str, centre: bool, eps: float) -> None:
    tiles = row_tiles(b, r, c, dtype)
    k = _spread(b.params, r, c)
    if k > 1:
        _norm_spread(b, r, c, dtype, centre, eps, k)
        return
    x, out = b.hbm("x", (r, c), dtype), b.hbm("out", (r, c), dtype)
    gamma = b.hbm("gamma", (1, c), "fp32")
    beta = b.hbm("beta", (1, c), "fp32") if centre else None
    w = RowBuffers(b, c, dtype, ("x", "out"), 2)
    g_base = b.sbuf(c * 4, "gamma")
    be_base = b.sbuf(c * 4, "beta") if centre else 0
    eps_col = b.column(b.sbuf(4, "eps"), tiles[0][1])
    rsqrt, identity, square = (b.function(f) for f in ("rsqrt", "identity", "square"))
    b.emit("gpsimd", Memset(dst=eps_col, value=eps))
    b.wait("scalar", b.signal("gpsimd"))
    consts = []
    for i, (r0, rows) in enumerate(tiles):
        h = i % 2
        b.wait("dma0", w.free[h])
        xin = w.tile(w.io["x"][h], rows, dtype)
        load_rows(b, "dma0", x, r0, rows, xin)
        if i == 0:  # gamma and beta broadcast to a tile's rows on queues of their own,
            # after the first rows
            broadcast_row(b, "dma2", gamma, rows,
                          b.tile("sbuf", "fp32", g_base, rows, ((c, 1),)))
            consts.append(b.signal("dma2"))
            if centre:
                broadcast_row(b, "dma3", beta, rows,
                              b.tile("sbuf", "fp32", be_base, rows, ((c, 1),)))
                consts.append(b.signal("dma3"))
        # the statistics on the scalar engine, its sums beside the functions it applies
        # (their values land in a scratch tile): sum x, -mean, sum (x - mean)^2, rstd; the
        # vector engine then makes y = (x - mean) * rstd in one pass
        s1, neg, s2, rstd = (w.col(h, j, rows) for j in range(4))
        scratch = w.tile(w.work[h][0], rows)
        b.wait("scalar", b.signal("dma0"))
        if centre:
            b.emit("scalar", Activation(dst=scratch, src=xin, func=identity, reduce_dst=s1))
            b.emit("scalar", Activation(dst=neg, src=s1, func=identity, scale=-1 / c))
        b.emit("scalar", Activation(dst=scratch, src=xin, func=square, reduce_dst=s2,
                                    bias=neg if centre else None))
        b.emit("scalar", Activation(dst=rstd, src=s2, func=rsqrt, scale=1 / c,
                                    bias=b.column(eps_col.offset, rows)))
        b.wait("vector", b.signal("scalar"))
        res = w.tile(w.io["out"][h], rows, dtype)
        # the first rows' y is made while gamma and beta load
        _normalise(b, xin, w.tile(w.work[h][1], rows), res, neg if centre else None, rstd,
                   b.tile("sbuf", "fp32", g_base, rows, ((c, 1),)),
                   b.tile("sbuf", "fp32", be_base, rows, ((c, 1),)) if centre else None,
                   consts if i == 0 else ())
        b.wait("dma1", b.signal("vector"))
        b.emit("dma1", DmaCopy(dst=out.ap((r0, r0 + rows)), src=res))
        w.free[h] = b.signal("dma1")


def rmsnorm(b: Builder, r: int, c: int, dtype: str = "fp32", eps: float = 1e-6) -> None:
    """``out = x / sqrt(mean(x^2) + eps) * gamma`` per row."""
    _norm(b, r, c, dtype, False, eps)


def layernorm(b: Builder, r: int, c: int, dtype: str = "fp32", eps: float = 1e-5) -> None:
    """``out = (x - mean) / sqrt(var + eps) * gamma + beta`` per row."""
    _norm(b, r, c, dtype, True, eps)


def residual_add(b: Builder, r: int, c: int, dtype: str = "fp32") -> None:
    """``out = x + y``, loads on two queues, the add on the vector engine."""
    row_tiles(b, r, c, dtype)
    x, y = b.hbm("x", (r, c), dtype), b.hbm("y", (r, c), dtype)
    out = b.hbm("out", (r, c), dtype)
    f = _Flat(r, c, b.params.partitions)
    w = RowBuffers(b, f.width, dtype, ("x", "y", "out"), 0)
    for i, piece in enumerate(f.pieces):
        h = i % 2
        rows, cw = piece[1], piece[3]
        xa, ya, oa = (b.tile("sbuf", dtype, w.io[n][h], rows, ((cw, 1),))
                      for n in ("x", "y", "out"))
        b.wait("dma0", w.free[h])
        b.emit("dma0", DmaCopy(dst=xa, src=f.ap(b, x, piece)))
        b.wait("dma2", w.free[h])
        b.emit("dma2", DmaCopy(dst=ya, src=f.ap(b, y, piece)))
        b.wait("vector", b.signal("dma0"), b.signal("dma2"))
        b.emit("vector", TensorTensor(dst=oa, a=xa, b=ya, op=VectorOp.ADD))
        b.wait("dma1", b.signal("vector"))
        b.emit("dma1", DmaCopy(dst=f.ap(b, out, piece), src=oa))
        w.free[h] = b.signal("dma1")


def grad_accumulate(b: Builder, r: int, c: int, dtype: str = "bf16") -> None:
    """``acc_out = acc + grad``: one micro-batch's gradient (``dtype``) added to the fp32
    accumulator of gradient accumulation, loads on two queues, the add on the vector engine
    (which reads either format and computes in fp32)."""
    row_tiles(b, r, c, dtype)
    acc, grad = b.hbm("acc", (r, c), "fp32"), b.hbm("grad", (r, c), dtype)
    out = b.hbm("acc_out", (r, c), "fp32")
    f = _Flat(r, c, b.params.partitions)
    w = RowBuffers(b, f.width, "fp32", ("acc",), 0)
    g_io = [b.sbuf(f.width * itemsize(dtype), "grad") for _ in range(2)]
    for i, piece in enumerate(f.pieces):
        h = i % 2
        rows, cw = piece[1], piece[3]
        aa = b.tile("sbuf", "fp32", w.io["acc"][h], rows, ((cw, 1),))
        ga = b.tile("sbuf", dtype, g_io[h], rows, ((cw, 1),))
        b.wait("dma0", w.free[h])
        b.emit("dma0", DmaCopy(dst=aa, src=f.ap(b, acc, piece)))
        b.wait("dma2", w.free[h])
        b.emit("dma2", DmaCopy(dst=ga, src=f.ap(b, grad, piece)))
        b.wait("vector", b.signal("dma0"), b.signal("dma2"))
        b.emit("vector", TensorTensor(dst=aa, a=aa, b=ga, op=VectorOp.ADD))
        b.wait("dma1", b.signal("vector"))
        b.emit("dma1", DmaCopy(dst=f.ap(b, out, piece), src=aa))
        w.free[h] = b.signal("dma1")


#: Adam's hyper-parameters as the kernel bakes them in (step 1).
ADAM = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "step": 1}


def adam(b: Builder, r: int, c: int, dtype: str = "fp32") -> None:
    """One Adam step on fp32 ``param``, ``m``, ``v`` given ``grad`` (all ``[R, C]``):
    ``m = b1 m + (1 - b1) g``, ``v = b2 v + (1 - b2) g^2``,
    ``param -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)``; the hyper-parameters
    are :data:`ADAM`."""
    if dtype != "fp32":
        raise KernelError(f"dtype must be fp32 (optimizer state), not {dtype!r}")
    row_tiles(b, r, c, dtype)
    h_ = ADAM
    b1, b2, t = h_["beta1"], h_["beta2"], h_["step"]
    names = ("param", "grad", "m", "v")
    t_in = {n: b.hbm(n, (r, c), "fp32") for n in names}
    t_out = {n: b.hbm(n + "_out", (r, c), "fp32") for n in ("param", "m", "v")}
    f = _Flat(r, c, b.params.partitions)
    w = RowBuffers(b, f.width, "fp32", names, 2)
    sqrt, recip = b.function("sqrt"), b.function("reciprocal")
    for i, piece in enumerate(f.pieces):
        h = i % 2
        rows, cw = piece[1], piece[3]

        def tile(base, rows=rows, cw=cw):
            return b.tile("sbuf", "fp32", base, rows, ((cw, 1),))

        a = {n: tile(w.io[n][h]) for n in names}
        for j, n in enumerate(names):
            q = f"dma{j % 2 * 2}"
            b.wait(q, w.free[h])
            b.emit(q, DmaCopy(dst=a[n], src=f.ap(b, t_in[n], piece)))
        b.wait("vector", b.signal("dma0"), b.signal("dma2"))
        tmp, den = tile(w.work[h][0]), tile(w.work[h][1])
        g, m, v, prm = a["grad"], a["m"], a["v"], a["param"]
        b.emit("vector", TensorScalar(dst=m, src=m, op0=VectorOp.MULTIPLY, imm0=b1))
        b.emit("vector", TensorScalar(dst=tmp, src=g, op0=VectorOp.MULTIPLY, imm0=1 - b1))
        b.emit("vector", TensorTensor(dst=m, a=m, b=tmp, op=VectorOp.ADD))
        b.emit("vector", TensorScalar(dst=v, src=v, op0=VectorOp.MULTIPLY, imm0=b2))
        b.emit("vector", TensorTensor(dst=tmp, a=g, b=g, op=VectorOp.MULTIPLY))
        b.emit("vector", TensorScalar(dst=tmp, src=tmp, op0=VectorOp.MULTIPLY, imm0=1 - b2))
        b.emit("vector", TensorTensor(dst=v, a=v, b=tmp, op=VectorOp.ADD))
        b.wait("scalar", b.signal("vector"))
        b.emit("scalar", Activation(dst=den, src=v, func=sqrt, scale=1 / (1 - b2 ** t)))
        b.wait("vector", b.signal("scalar"))
        b.emit("vector", TensorScalar(dst=den, src=den, op0=VectorOp.ADD, imm0=h_["eps"]))
        b.wait("scalar", b.signal("vector"))
        b.emit("scalar", Activation(dst=den, src=den, func=recip))
        b.wait("vector", b.signal("scalar"))
        b.emit("vector", TensorTensor(dst=tmp, a=m, b=den, op=VectorOp.MULTIPLY))
        b.emit("vector", TensorScalar(dst=tmp, src=tmp, op0=VectorOp.MULTIPLY,
                                      imm0=-h_["lr"] / (1 - b1 ** t)))
        b.emit("vector", TensorTensor(dst=prm, a=prm, b=tmp, op=VectorOp.ADD))
        b.wait("dma1", b.signal("vector"))
        for n in ("param", "m", "v"):
            b.emit("dma1", DmaCopy(dst=f.ap(b, t_out[n], piece), src=a[n]))
        w.free[h] = b.signal("dma1")
