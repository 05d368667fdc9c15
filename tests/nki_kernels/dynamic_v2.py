"""Loops the engines' sequencers run (nl.dynamic_range, nl.fori_loop, nl.while_loop) and
the registers that bound them, in NKI 0.2's form, for trngen's tests."""

import nki
import nki.isa as nisa
import nki.language as nl


def _register_of(count):
    """A register holding the int32 ``count`` ([1, 1] in HBM), allocated from its copy in
    SBUF (the form that pre-fills it; the kernels below also load registers)."""
    c = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=c, src=count)
    return nisa.register_alloc(c)


@nki.jit
def first_copied(data, ub_input):
    """NKI's nl.fori_loop example: the first ub_input elements of data copied one by one,
    each at the loop register's offset; the rest zero."""
    n = data.shape[1]
    output = nl.ndarray((1, n), dtype=nl.float32, buffer=nl.shared_hbm)
    ub_reg = _register_of(ub_input)
    zeros = nl.zeros((1, n), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=output, src=zeros)
    temp = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)

    def body(i):
        nisa.dma_copy(dst=temp, src=data.ap([[1, 1], [1, 1]], scalar_offset=i,
                                            indirect_dim=1))
        nisa.dma_copy(dst=output.ap([[1, 1], [1, 1]], scalar_offset=i, indirect_dim=1),
                      src=temp)

    nl.fori_loop(0, ub_reg, body)
    return output


@nki.jit
def added_count_times(data, count_input):
    """NKI's nl.while_loop example: val added to an accumulator while the count, decremented
    in SBUF and loaded again each iteration, is nonzero."""
    out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    val = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=val, src=data)
    acc = nl.zeros((1, 1), dtype=nl.float32, buffer=nl.sbuf)
    count_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=count_sb, src=count_input)
    one_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=one_sb, value=1)
    reg = nisa.register_alloc()
    nisa.register_load(reg, count_sb)

    def body(r):
        nisa.tensor_tensor(dst=acc, data1=acc, data2=val, op=nl.add)
        nisa.tensor_tensor(dst=count_sb, data1=count_sb, data2=one_sb, op=nl.subtract)
        nisa.register_load(r, count_sb)
        return r

    nl.while_loop(reg, body)
    nisa.dma_copy(dst=out, src=acc)
    return out


@nki.jit
def blocks_doubled(x, count, loop="dynamic", p=128):
    """The first ``count`` blocks of ``p`` rows of x doubled into out (the rest untouched):
    in an nl.dynamic_range over a register, or for comparison in an nl.sequential_range of
    the same count (``loop="sequential"``, count then a Python int)."""
    blocks = x.shape[0] // p
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    xb = x.reshape((blocks, p, x.shape[1]))
    ob = out.reshape((blocks, p, x.shape[1]))
    pattern = [[x.shape[1], p], [1, x.shape[1]]]
    iterations = nl.dynamic_range(_register_of(count)) if loop == "dynamic" else \
        nl.sequential_range(count)
    for i in iterations:
        t = nl.ndarray((p, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        if loop == "dynamic":
            nisa.dma_copy(dst=t, src=xb.ap(pattern, scalar_offset=i, indirect_dim=0))
        else:
            nisa.dma_copy(dst=t, src=x[i * p:(i + 1) * p, :])
        d = nl.ndarray((p, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=d, data=t, op0=nl.multiply, operand0=2.0)
        if loop == "dynamic":
            nisa.dma_copy(dst=ob.ap(pattern, scalar_offset=i, indirect_dim=0), src=d)
        else:
            nisa.dma_copy(dst=out[i * p:(i + 1) * p, :], src=d)
    return out


@nki.jit
def misuse(x, count, how):
    """Registers used as the hardware cannot use them, each refused."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    if how == "float source":
        f = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=f, src=x[0:1, 0:1])
        nisa.register_load(nisa.register_alloc(), f)
    reg = _register_of(count)
    if how == "python int":
        return x[0:int(reg), :]
    if how == "unset":
        for _ in nl.dynamic_range(nisa.register_alloc()):
            pass
    if how == "changing body":
        for i in nl.dynamic_range(reg):
            nl.ndarray((128, 4 + 4 * i.value), dtype=nl.float32, buffer=nl.sbuf)
    if how == "while returns nothing":
        nl.while_loop(reg, lambda r: None)
    return out


@nki.jit
def counted_by_core_zero(x, count):
    """On an nl.nc(2) grid: core 0 copies ``count`` into a tensor both cores share, the
    cores meet, each loads it into a register (core 1 from what core 0 wrote) and adds its
    half of x into its half of out that many times, the cores meeting in every iteration."""
    out = nl.ndarray(x.shape, x.dtype, nl.shared_hbm)
    shared = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    rows = x.shape[0] // 2
    if i == 0:
        c = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=c, src=count)
        nisa.dma_copy(dst=shared, src=c)
    nisa.core_barrier(shared, (0, 1))
    got = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=got, src=shared)
    reg = nisa.register_alloc()
    nisa.register_load(reg, got)
    t = nl.ndarray((rows, x.shape[1]), x.dtype, nl.sbuf)
    nisa.dma_copy(dst=t, src=x[i * rows:(i + 1) * rows, :])
    acc = nl.zeros((rows, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    for _ in nl.dynamic_range(reg):
        nisa.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl.add)
        nisa.core_barrier(out, (0, 1))
    nisa.dma_copy(dst=out[i * rows:(i + 1) * rows, :], src=acc)
    return out
