"""Indirect DMA in the NKI front end: HBM rows named by a tile of indices, read and written
(``t[idx, ...]`` in ``nl.load``, ``nl.store``, ``nisa.dma_copy`` and ``nl.atomic_rmw``), rows
out of the tensor an error or skipped, adding into the destination; NKI kernels of our own
checked against numpy's indexing, bit for bit."""

from __future__ import annotations

import runpy
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import kernels.nki as knki
from hdl.core.isa import AP, DmaCopy, decode, encode, format_instruction, parse
from sim.core import Program
from sim.tb.core import rtl_refusal

HERE = Path(__file__).parent / "nki_kernels"


@pytest.fixture(scope="module")
def k():
    with knki.installed():
        yield runpy.run_path(str(HERE / "indirect.py"))


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
def test_gather(k, dtype, seed):
    rng = np.random.default_rng(seed)
    table = rng.standard_normal((300, 96)).astype(dtype)
    idx = rng.integers(0, 300, 128).astype(np.int32)  # repeats and any order
    assert np.array_equal(k["gather"](table, idx), table[idx])


def test_rows_out_of_the_tensor_are_skipped_or_an_error(k, seed):
    """With ``oob_mode.skip`` the rows past the end stay as they were (the tile's -1, the
    tensor's ones); with ``error`` it is numpy's IndexError, naming the first such row as
    an element of the flattened tensor, as NKI's simulator raises it."""
    table = np.random.default_rng(seed).standard_normal((128, 64)).astype(np.float32)
    got, back = k["strided_rows"](table, 2, False)
    assert np.array_equal(got, table[0:128:2])
    want = np.ones_like(table)
    want[0:128:2] += table[0:128:2]
    assert np.array_equal(back, want)
    got, back = k["strided_rows"](table, 3, True)
    kept = table[0:128:3]  # 43 rows of the 64
    assert np.array_equal(got[:43], kept) and (got[43:] == -1).all()
    want = np.ones_like(table)
    want[0:128:3] += kept
    assert np.array_equal(back, want)
    with pytest.raises(IndexError, match=r"^index 8256 is out of bounds for axis 0 with "
                                         r"size 8192$"):
        k["strided_rows"](table, 3, False)  # row 129 of 128, 64 elements a row


def test_scatter_add_takes_every_repeat(k, seed):
    rng = np.random.default_rng(seed)
    table = rng.standard_normal((64, 32)).astype(np.float32)
    idx = rng.integers(0, 64, (128, 1)).astype(np.int32)
    updates = rng.standard_normal((128, 32)).astype(np.float32)
    want = table.copy()
    for i, r in enumerate(idx[:, 0]):  # in partition order, each sum rounded to fp32
        want[r] = want[r] + updates[i]
    assert np.array_equal(k["scatter_add"](table, idx, updates), want)


def test_an_indirect_copy_is_an_instruction_of_the_isa(k):
    """Its fields encode, decode and print; the core simulator checks its index; the core
    RTL runs indirect and adding copies of every type a DMA adds (tests/test_nki_on_rtl.py,
    the co-simulated program indirect_dmas)."""
    ins = DmaCopy(dst=AP("sbuf", "bf16", 0, 64, 256, ((512, 1),)),
                  src=AP("hbm", "bf16", 0, 64, 4096, ((512, 1),), 1024),
                  index=AP("sbuf", "int32", 0, 64, 0, ((1, 1),)), rows=300, skip=True,
                  add=True)
    assert decode(encode(ins)) == ins and parse(format_instruction(ins)) == ins
    table = np.zeros((300, 16), np.float32)
    idx = np.zeros(128, np.int32)
    tracer, *_ = k["gather"].trace(table, idx)
    program = tracer.program()
    indirect = [i for s in program.streams.values() for i in s
                if isinstance(i, DmaCopy) and i.index is not None]
    assert len(indirect) == 1 and indirect[0].rows == 300
    assert rtl_refusal(Program(streams={"dma0": [ins]}),
                       knki.launch.params_for("trn2", "sim")) is None


def test_an_index_tile_in_the_wrong_type_is_refused(k):
    with pytest.raises(knki.NkiError, match="int32 or uint32 tile"):
        k["gather"](np.zeros((8, 4), np.float32), np.zeros(4, np.float32))


def test_rows_after_an_integer_subscript_under_a_mask(k, seed):
    """``table[b, idx, ...]`` in a loop over ``b``; the mask keeps the first 100 rows, so
    the indices past them (out of the table) are neither read nor checked."""
    rng = np.random.default_rng(seed)
    table = rng.standard_normal((3, 40, 24)).astype(np.float32)
    idx = rng.integers(0, 40, (128, 1)).astype(np.int32)
    idx[100:] = 999
    out = k["batched_rows"](table, idx, 100)
    assert np.array_equal(out[:, :100], table[:, idx[:100, 0]])
