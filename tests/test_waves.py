"""`gen sim --waves`: a waveform of the run, scoped to the unit, that a viewer opens.

The file is read back with pywellen (the reader of the Surfer viewer): the bench's toplevel
module is the only top scope, every port of its emitted Verilog is a signal in it, and its clock
toggles. The unit is the link port (its bench's toplevel, ``link_loopback``: a transmitter and a
receiver through a lossy channel), the quickest of the units' benches on Icarus.
"""

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from generators.cli import main
from sim.tb.runner import skip_unless_available

pywellen = pytest.importorskip("pywellen")


def ports(verilog: str, module: str) -> set[str]:
    """Port names of ``module`` in the Verilog text, from its header and declarations."""
    body = verilog[verilog.index(f"module {module}("):]
    body = body[:body.index("endmodule")]
    return set(re.findall(r"^\s*(?:input|output|inout)\s+(?:wire\s+|reg\s+)?(?:\[[^\]]+\]\s*)?"
                          r"(\\?\S+?)\s*;", body, flags=re.M))


@pytest.mark.cocotb
def test_sim_waves_hold_the_units_ports(seed):
    skip_unless_available("icarus")
    result = CliRunner().invoke(main, ["sim", "trn2", "--unit", "link", "--sim", "icarus",
                                       "--seed", str(seed), "--waves"])
    assert result.exit_code == 0, result.output
    paths = re.findall(r"^\s+waves: (.+)$", result.output, flags=re.M)
    assert len(paths) == 1, result.output
    path = Path(paths[0])
    assert path.suffix == ".fst" and path.stat().st_size > 0

    expected = ports((path.parents[1] / "link_loopback.v").read_text(), "link_loopback")
    assert {"clk", "rst"} <= expected
    wave = pywellen.Waveform(str(path))
    assert wave.file_format == "FST"
    scopes = list(wave.scopes())
    assert [s.name for s in scopes] == ["link_loopback"]
    signals = {v.name: v for v in scopes[0].vars()}
    assert expected <= set(signals), expected - set(signals)
    clk = signals["clk"].signal
    assert {clk.value_at(t) for t in range(0, 100_000, 1_000)} == {0, 1}
