"""The decode kernels' contracts beyond a relative error: top-k's exact indices and order
under ties, the KV append touching only its positions, and decode attention refusing what it
cannot tile."""

import numpy as np
import pytest

import kernels
from hdl.numerics.dtypes import ML_DTYPES
from sim.core import Core


def _run(params, name, shape, dtype, inputs):
    """``name`` on the given input arrays; the outputs as float64."""
    k = kernels.KERNELS[name]
    program = kernels.build(params, k, shape, dtype).program
    hbm = np.zeros(program.hbm_bytes, dtype=np.uint8)
    for n, x in inputs.items():
        t = program.tensors[n]
        hbm[t.offset: t.offset + t.nbytes] = np.ascontiguousarray(x).view(np.uint8).reshape(-1)
    Core(params).run(program, hbm=hbm)
    return {n: hbm[t.offset: t.offset + t.nbytes].view(ML_DTYPES[t.dtype]).reshape(t.shape)
            .astype(np.float64) for n, t in program.tensors.items()}


@pytest.mark.parametrize("dtype, shape", [("bf16", dict(B=5, V=4500, K=6)),
                                          ("fp32", dict(B=2, V=40, K=40))])
def test_top_k_orders_ties_by_index(trn1, dtype, shape, seed):
    """Logits of a few distinct values, so that every pick is a tie: values descending and,
    among equal values, indices ascending, as numpy's stable sort has them (K = V: every
    index once)."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 4, (shape["B"], shape["V"])).astype(ML_DTYPES[dtype])
    got = _run(trn1, "sample", shape, dtype, {"logits": x})
    order = np.argsort(-x.astype(np.float64), axis=1, kind="stable")[:, :shape["K"]]
    assert np.array_equal(got["indices"], order)
    assert np.array_equal(got["values"], np.take_along_axis(x.astype(np.float64), order, 1))


def test_kv_append_writes_only_its_positions(trn1, seed):
    shape = dict(B=3, KVH=2, D=4, S=7)
    run = kernels.run(trn1, kernels.KERNELS["kv_append"], shape, "fp32", seed=seed)
    k = run.outputs["k_cache"].reshape(3, 2, 4, 7)
    k0 = run.inputs["k_cache"].astype(np.float64).reshape(3, 2, 4, 7)
    positions = kernels.kv_positions(3, 7)
    assert positions == [0, 3, 6]
    changed = np.argwhere((k != k0).any(axis=(1, 2)))
    assert [tuple(c) for c in changed] == list(enumerate(positions))
    assert np.array_equal(k[1, :, :, 3], run.inputs["k_new"][1].reshape(2, 4))


@pytest.mark.parametrize("shape, message", [
    (dict(B=1, H=6, KVH=4, S=8, D=8), "KVH must divide H"),
    (dict(B=1, H=2, KVH=1, S=8, D=129), "D must be at most 128"),
])
def test_decode_attention_refuses(trn1, shape, message):
    with pytest.raises(kernels.KernelError, match=message):
        kernels.build(trn1, kernels.KERNELS["decode_attention"], shape, "bf16")
