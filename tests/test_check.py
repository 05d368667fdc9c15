"""`gen check` rows: claims beside derived figures, and the known contradictions surfaced.

Expected differences are written out by hand from the published figures.
"""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from generators.cli.checkreport import render, to_table
from sim.system.check import FIELDS, VERDICTS, check

GiB = 2**30
TRN2_BF16_CHIP = 8 * 128 * 128 * 2 * 2.4e9  # 629.1456 TFLOPS


@pytest.fixture(scope="module")
def reports():
    reps, status = check(["trn2", "trn1.32xlarge", "trn2.48xlarge", "trn2-ultraserver"])
    assert status == 0
    return {r.spec: r for r in reps}


def find(report, level, quantity, source, spec=None):
    found = [r for r in report.rows if (r.level, r.quantity, r.source) == (level, quantity,
                                                                           source)
             and (spec is None or r.spec == spec)]
    assert found, f"no row {level} {quantity} {source}"
    return found


def one(report, level, quantity, source, spec=None):
    (row,) = find(report, level, quantity, source, spec)
    return row


# --- the contradictions ------------------------------------------------------------------

@pytest.mark.parametrize("source", ["ART-DE", "ART-FR"])
def test_trn2_hbm_32gb_disagrees(reports, source):
    row = one(reports["trn2"], "chip", "memory.capacity", source)
    assert row.verdict == "disagrees"
    assert row.difference == pytest.approx((96 * GiB - 32e9) / 32e9)


def test_trn2_hbm_96gib_and_1_5tb_per_16_chips_agree(reports):
    assert one(reports["trn2"], "chip", "memory.capacity", "TRN2").verdict == "agrees"
    inst = reports["trn2.48xlarge"]
    assert one(inst, "instance", "memory.capacity", "TRN2I").verdict == "agrees"
    row = one(inst, "instance", "memory.capacity", "ART-EN")
    assert row.verdict == "agrees"
    assert row.difference == pytest.approx((16 * 96 * GiB - 1.5 * 2**40) / (1.5 * 2**40))


def test_trn2_667_against_629(reports):
    (row,) = [r for r in find(reports["trn2"], "chip", "compute.bf16", "TRN2")]
    assert row.verdict == "disagrees"
    assert row.difference == pytest.approx((TRN2_BF16_CHIP - 667e12) / 667e12)  # -5.7 %
    assert row.text("derived") == "629.15 TFLOPS"


@pytest.mark.parametrize(("source", "claimed"), [("ART-DE", 6.4e15), ("ART-FR", 6.4e15),
                                                 ("TRN2I", 10.7e15)])
def test_trn2_48xlarge_compute(reports, source, claimed):
    row = one(reports["trn2.48xlarge"], "instance", "compute.bf16", source)
    assert row.verdict == "disagrees"
    assert row.difference == pytest.approx((16 * TRN2_BF16_CHIP - claimed) / claimed)


@pytest.mark.parametrize(("quantity", "source", "derived", "claimed"), [
    ("compute.bf16", "ART-DE", 64 * TRN2_BF16_CHIP, 25.6e15),
    ("compute.bf16", "ART-FR", 64 * TRN2_BF16_CHIP, 25.6e15),
    ("compute.bf16", "TRN2I", 64 * TRN2_BF16_CHIP, 42.8e15),
    ("compute.fp8", "TRN2I", 64 * 2 * TRN2_BF16_CHIP, 83.2e15),
    ("compute.fp8_sparse", "PRESS-SPARSE", 64 * 4 * TRN2_BF16_CHIP, 83.2e15),
])
def test_ultraserver_compute_disagrees(reports, quantity, source, derived, claimed):
    row = one(reports["trn2-ultraserver"], "server", quantity, source)
    assert row.verdict == "disagrees"
    assert row.difference == pytest.approx((derived - claimed) / claimed)


@pytest.mark.parametrize(("quantity", "source"), [
    ("efa.bandwidth", "TRN2I"), ("efa.bandwidth", "ART-EN"),      # 4 x 3.2 Tbps = 12.8
    ("memory.capacity", "TRN2I"), ("memory.capacity", "ART-EN"),  # 64 x 96 GiB = 6 TiB
    ("memory.capacity", "ART-DE"), ("chips", "TRN2I"), ("memory.bandwidth", "TRN2I"),
])
def test_ultraserver_agrees(reports, quantity, source):
    row = one(reports["trn2-ultraserver"], "server", quantity, source)
    assert row.verdict == "agrees"
    assert row.difference == pytest.approx(0, abs=1e-9)


def test_trn1_32xlarge_rows(reports):
    rep = reports["trn1.32xlarge"]
    row = one(rep, "instance", "compute.bf16", "TRN1I")
    assert row.verdict == "disagrees"
    assert row.difference == pytest.approx((16 * 2 * 128 * 128 * 2 * 2.8e9 - 3040e12) / 3040e12)
    for quantity in ("memory.capacity", "memory.bandwidth", "efa.bandwidth", "chips"):
        assert one(rep, "instance", quantity, "TRN1I").verdict == "agrees"
    # Per core, the NKI guide's 92 TFLOPS is within 2 % of 128 x 128 x 2 x 2.8 GHz.
    assert one(rep, "core", "compute.bf16", "NKI2").verdict == "agrees"


def test_link_bandwidth_claims_meet_the_chip_their_spec_describes(reports):
    rep = reports["trn2.48xlarge"]
    # The chip page's own claims meet the chip as it specifies itself (1.28 TB/s) ...
    assert one(rep, "chip", "neuronlink.bandwidth", "TRN2", spec="trn2").verdict == "agrees"
    vendor = one(rep, "chip", "neuronlink.bandwidth", "TRN2I", spec="trn2")
    assert vendor.verdict == "disagrees"
    assert vendor.difference == pytest.approx((1.28e12 - 1024e9) / 1024e9)
    # ... the instance's claim about its chips meets the chips as the instance joins them.
    inst = one(rep, "chip", "neuronlink.bandwidth", "TRN2I", spec="trn2.48xlarge")
    assert inst.verdict == "agrees"


# --- row structure -----------------------------------------------------------------------

def test_system_rows_cover_every_level(reports):
    levels = {r.level for r in reports["trn2-ultraserver"].rows}
    assert levels == {"core", "chip", "instance", "server"}


def test_non_derived_claims_are_not_modelled(reports):
    for row in find(reports["trn2"], "chip", "process", "ART-DE"):
        assert row.verdict == "not modelled"
        assert row.derived is None and row.difference is None
        assert row.text("claimed") == "5 nm"


def test_unclaimed_figures_are_derived_rows(reports):
    rep = reports["trn2.48xlarge"]
    row = one(rep, "instance", "collective.all_reduce", None)
    assert row.verdict == "derived" and row.claimed is None
    claimed = {(r.level, r.quantity) for r in rep.rows if r.verdict != "derived"}
    for r in rep.rows:
        if r.verdict == "derived":
            assert (r.level, r.quantity) not in claimed


def test_verdicts_only_from_the_list(reports):
    for rep in reports.values():
        assert {r.verdict for r in rep.rows} <= set(VERDICTS)


def test_claim_of_a_format_the_chip_lacks_is_not_modelled(tmp_path):
    (tmp_path / "toy.yaml").write_text(
        "extends: trn2\nchip:\n  name: toy\n  title: Toy\n  claims:\n"
        "    - {quantity: compute.int8, value: 1 POPS, source: TRN2}\n"
        "    - {quantity: compute.bf16, value: 629 TFLOPS, source: TRN2}\n")
    (rep,), status = check([str(tmp_path / "toy.yaml")], strict=True)
    assert status == 0
    assert one(rep, "chip", "compute.int8", "TRN2").verdict == "not modelled"
    row = one(rep, "chip", "compute.bf16", "TRN2")
    assert row.verdict == "agrees"
    assert row.difference == pytest.approx((TRN2_BF16_CHIP - 629e12) / 629e12)


def test_strict_status():
    assert check(["trn2"], strict=False)[1] == 0
    assert check(["trn2"], strict=True)[1] == 1


# --- renderers ---------------------------------------------------------------------------

def test_json_rows_carry_exactly_the_fields(reports):
    data = json.loads(render([reports["trn2.48xlarge"]], "json"))
    assert [d["spec"] for d in data] == ["trn2.48xlarge"]
    rows = data[0]["rows"]
    assert len(rows) == len(reports["trn2.48xlarge"].rows)
    for row in rows:
        assert tuple(row) == FIELDS
    bf16 = [r for r in rows if (r["level"], r["quantity"], r["source"])
            == ("instance", "compute.bf16", "ART-DE")]
    assert bf16 == [{"level": "instance", "quantity": "compute.bf16",
                     "derived": "10.066 PFLOPS", "claimed": "6.4 PFLOPS", "source": "ART-DE",
                     "difference": pytest.approx((16 * TRN2_BF16_CHIP - 6.4e15) / 6.4e15),
                     "verdict": "disagrees"}]


def test_markdown(reports):
    text = render([reports["trn2"]], "md")
    assert "| level | quantity | derived | claimed | source | difference | verdict |" in text
    assert ("| chip | memory.capacity | 103.08 GB | 32 GB | ART-DE | +222.1% | **disagrees** |"
            in text)
    assert "- **ART-DE**: AWS Trainium (encyclopedia-style article, German)" in text
    table = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(table) == 1 + len(reports["trn2"].rows)


def test_html(reports):
    text = render([reports["trn2"]], "html")
    assert text.startswith("<!DOCTYPE html>")
    assert text.count('<tr class="disagrees"') == reports["trn2"].count("disagrees")
    assert "<td class=\"source\">ART-DE</td>" in text


def test_rich_table(reports):
    out = io.StringIO()
    to_table([reports["trn2"]], Console(file=out, width=200, color_system=None))
    text = out.getvalue()
    assert "memory.capacity" in text and "disagrees" in text
    assert f"{reports['trn2'].count('agrees')} agrees" in text


def test_render_rejects_unknown_format(reports):
    with pytest.raises(ValueError, match="fmt must be one of json, md, html, not 'xml'"):
        render([reports["trn2"]], "xml")
