"""The patches of Amaranth's internals that `gen chip` elaborates with
(generators/amaranth_internals.py): each writes the text Amaranth's public path writes, on
the simulation-scale NeuronCore and on a full-scale unit, restores Amaranth's definitions
after it, and is left out (with one warning) on a release it was not verified on.
``uninitialised_memories``, which changes the text by design, is simulated
(sim/tb/uninitialised_memory.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from amaranth.back import verilog
from amaranth.hdl import _nir

from generators import amaranth_internals as internals
from hdl.core.core import NeuronCore
from hdl.link.link import LinkPort
from hdl.numerics.fpu import FpAdd32
from hdl.params import core_params, link_params
from sim.tb.runner import run_verilog
from sim.tb.uninitialised_memory import TOPLEVEL, Sram
from specs.loader import load

REPO = Path(__file__).resolve().parents[1]


def _core_top():
    return NeuronCore(core_params(load("trn2"), "sim"))


def _link_full():
    return LinkPort(link_params(load("trn2"), "full"))


DESIGNS = {"core_sim": _core_top, "link_port_full": _link_full, "fp32_adder": FpAdd32}


def _text(make) -> str:
    return verilog.convert(make(), name="top", emit_src=False)


@pytest.fixture(scope="module")
def public():
    """Each design's Verilog through Amaranth's public path."""
    return {}


@pytest.mark.slow
@pytest.mark.parametrize("patch", ["lean_netlists", "unchecked_comb_cycles"])
@pytest.mark.parametrize("design", list(DESIGNS))
def test_a_patch_writes_the_public_paths_verilog(patch, design, public):
    assert internals.patched("amaranth"), "these tests run on a verified release"
    if design not in public:
        public[design] = _text(DESIGNS[design])
    with getattr(internals, patch)():
        text = _text(DESIGNS[design])
    assert text == public[design]


def _definitions():
    return [_nir.Value.__dict__["__new__"], _nir.Net.__dict__["from_cell"],
            _nir.Netlist.__dict__["resolve_value"], _nir.Netlist.__dict__["check_comb_cycles"]]


@pytest.mark.parametrize("patch", ["lean_netlists", "unchecked_comb_cycles"])
def test_a_patch_restores_amaranth(patch):
    before = _definitions()
    with pytest.raises(RuntimeError), getattr(internals, patch)():
        assert _definitions() != before
        raise RuntimeError
    assert _definitions() == before
    with pytest.raises(AssertionError):  # the checks are Amaranth's again
        _nir.Value(["not a net"])


def test_an_unverified_release_takes_the_public_path_and_says_so_once(monkeypatch, capsys):
    monkeypatch.setitem(internals.VERIFIED, "amaranth", ("0.0.1",))
    monkeypatch.setattr(internals, "_warned", set())
    before = _definitions()
    with internals.lean_netlists(), internals.unchecked_comb_cycles():
        assert _definitions() == before  # nothing patched
        text = _text(FpAdd32)
    with internals.lean_netlists():
        pass
    assert text == _text(FpAdd32)
    err = capsys.readouterr().err
    assert err.count("amaranth 0.5") == 1 and "public path" in err and "0.0.1" in err


#: Amaranth's Verilog of the designs named in argv (of :data:`DESIGNS`, or "small"): through
#: its child process of Yosys, then twice through the Yosys run in the process (run apart: a
#: process that has run WebAssembly cannot fork afterwards), as a JSON list per design; {}
#: when Amaranth takes a Yosys from the path.
YOSYS_HERE = """
import json, sys
from amaranth import Module, Signal
from amaranth._toolchain.yosys import _BuiltinYosys, find_yosys
from amaranth.back import verilog
from generators.amaranth_internals import yosys_in_process
from tests.test_amaranth_internals import DESIGNS

def small():
    m = Module()
    a, b, sel = Signal(8), Signal(8), Signal()
    count, out = Signal(8), Signal(8)
    m.d.sync += count.eq(count + a)
    with m.If(sel):
        m.d.comb += out.eq(count ^ b)
    with m.Else():
        m.d.comb += out.eq(~b)
    return verilog.convert(m, ports=[a, b, sel, out], emit_src=False)

def text(name):
    if name == "small":
        return small()
    return verilog.convert(DESIGNS[name](), name="top", emit_src=False)

texts = {}
if find_yosys(lambda found: True) is _BuiltinYosys:
    for name in sys.argv[1:]:
        texts[name] = [text(name)]
    with yosys_in_process():
        for name in sys.argv[1:]:
            texts[name] += [text(name)] * (2 if name == "small" else 1)
print(json.dumps(texts))
"""


@pytest.mark.slow
def test_yosys_run_in_process_writes_what_its_child_process_writes():
    """`gen chip`'s workers run Amaranth's bundled Yosys inside themselves; the Verilog is
    what Amaranth's own child process of that Yosys writes, run after run (Yosys's internal
    names count from the same start each time), on a small design, the simulation-scale
    core and a full-scale unit."""
    names = ["small", "core_sim", "link_port_full"]
    run = subprocess.run([sys.executable, "-c", YOSYS_HERE, *names], cwd=REPO,
                         capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(REPO)), check=True)
    texts = json.loads(run.stdout.splitlines()[-1])
    if not texts:
        pytest.skip("Amaranth uses a Yosys found on the path, which runs as it always does")
    assert "$auto$" in texts["small"][0]
    for name in names:
        child, *here = texts[name]
        assert here == [child] * len(here), name


def _has_initial_image(text: str) -> bool:
    return re.search(r"^\s*initial begin", text, re.M) is not None


def test_an_uninitialised_memory_works_as_an_sram(sim, tmp_path):
    with internals.uninitialised_memories():
        text = verilog.convert(Sram(), name=TOPLEVEL, emit_src=False)
    public = verilog.convert(Sram(), name=TOPLEVEL, emit_src=False)
    assert _has_initial_image(public)
    assert _has_initial_image(text) != internals.patched("amaranth")
    result = run_verilog(text, TOPLEVEL, "sim.tb.uninitialised_memory", sim,
                         testcase="write_then_read", build_root=tmp_path)
    assert result.ok, result
