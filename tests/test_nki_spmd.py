"""SPMD launches of NKI kernels: nl.nc / nl.spmd_dim spreading a grid over the physical
cores of a logical core (trn2's LNC 2), nl.num_programs, and nki.profile's Perfetto trace."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import numpy as np
import pytest

import kernels
import kernels.nki as knki

HERE = Path(__file__).parent / "nki_kernels"


@pytest.fixture(scope="module")
def k():
    with knki.installed():
        yield runpy.run_path(str(HERE / "elementwise.py"))


def _inputs():
    rng = np.random.default_rng(11)
    return (rng.standard_normal((512, 256)).astype(np.float32),
            rng.standard_normal((512, 256)).astype(np.float32))


def test_core_of_each_instance_as_nki_documents(k):
    """The assignments of NKI's own example (nki.language.nc): nl.nc(2) * 2 puts instances
    0, 1 on core 0 and 2, 3 on core 1; 2 * nl.nc(2) puts 0, 2 on core 0 and 1, 3 on core 1."""
    nl = knki.language
    outer = k["spmd_grid_add"][nl.spmd_dim(nl.nc(2), 2), 2]
    inner = k["spmd_grid_add"][2 * nl.nc(2), 2]
    assert [outer._core((i, j)) for i in range(4) for j in range(2)] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [inner._core((i, j)) for i in range(4) for j in range(2)] == [0, 0, 1, 1, 0, 0, 1, 1]
    assert outer.sizes == inner.sizes == (4, 2)


@pytest.mark.parametrize("grid", ["outer", "inner"])
def test_nc2_on_trn2_splits_the_grid_over_two_cores(k, grid):
    nl = knki.language
    a, b = _inputs()
    dim = nl.nc(2) * 2 if grid == "outer" else 2 * nl.nc(2)
    out = k["spmd_grid_add"][dim, 2](a, b, platform_target="trn2")
    assert np.abs(out - (a.astype(np.float64) + b)).max() <= \
        kernels.TOLERANCE["fp32"] * np.abs(a.astype(np.float64) + b).max()
    two = knki.SESSION.launches[-1]
    k["spmd_grid_add"][4, 2](a, b, platform_target="trn2")
    one = knki.SESSION.launches[-1]
    assert two.cores == 2 and one.cores == 1
    assert two.result.dma_bytes * 2 == one.result.dma_bytes
    assert two.result.time < one.result.time


def test_nc2_needs_a_logical_core_of_two(k):
    nl = knki.language
    a, b = _inputs()
    with pytest.raises(knki.NkiError, match="needs a logical core of 2 NeuronCores; trn1"):
        k["spmd_add"][nl.nc(2) * 2](a, b, platform_target="trn1")


def test_profile_writes_a_perfetto_trace(k, tmp_path):
    a, b = _inputs()
    kernel = knki.profile(k["spmd_add"].func, working_directory=str(tmp_path),
                          save_trace_name="add.ntff")
    assert kernel[4](a, b) is None
    events = json.loads((tmp_path / "add.json").read_text())["traceEvents"]
    names = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert any(n.startswith("dma") for n in names) and "vector" in names
    assert any(e.get("ph") == "X" for e in events)
    with pytest.raises(knki.NkiError, match="exists"):
        kernel[4](a, b)
