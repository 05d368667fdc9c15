"""The `gen` command line on the bundled specs."""

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from generators.cli import main
from hdl.core import core, tensor


def run(*args, cwd=None):
    runner = CliRunner()
    if cwd is None:
        return runner.invoke(main, list(args))
    old = os.getcwd()
    os.chdir(cwd)
    try:
        return runner.invoke(main, list(args))
    finally:
        os.chdir(old)


def test_list_names_every_bundled_spec():
    result = run("list")
    assert result.exit_code == 0
    for name in ("trn1", "trn2", "trn3", "inf1", "inf2", "trn2-ultraserver"):
        assert name in result.output


def test_show_resolves_inheritance_with_units():
    result = run("show", "trn3")
    assert result.exit_code == 0, result.output
    assert "capacity: 144 GiB" in result.output
    assert "rows: 128" in result.output  # inherited from trn1 through trn2


def test_diff_trn1_trn2():
    result = run("diff", "trn1", "trn2")
    assert result.exit_code == 0, result.output
    assert "core.tensor.clock" in result.output and "2.8 GHz" in result.output
    assert "2.4 GHz" in result.output


def test_diff_refuses_mixed_kinds():
    result = run("diff", "trn1", "trn2.48xlarge")
    assert result.exit_code == 2
    assert "same kind" in result.stderr


def test_schema_is_json():
    result = run("schema")
    assert result.exit_code == 0
    assert json.loads(result.output)["title"] == "trngen spec"


def test_chip_writes_manifest_and_datasheets(tmp_path):
    out = tmp_path / "trn2"
    result = run("chip", "trn2.yaml", "-o", str(out), "--scale", "sim")
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["spec"] == "trn2" and len(manifest["spec_sha256"]) == 64
    listed = {f["path"] for f in manifest["files"]}
    assert {"datasheet.md", "datasheet.html"} <= listed
    for entry in manifest["files"]:
        assert (out / entry["path"]).stat().st_size == entry["bytes"]
    md = (out / "datasheet.md").read_text()
    assert "Trainium2" in md and "667 TFLOPS" in md and "ART-DE" in md


def test_chip_default_output_is_build_dir(tmp_path):
    result = run("chip", "inf1", "--scale", "sim", cwd=tmp_path)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "build" / "inf1" / "manifest.json").is_file()


def test_chip_output_is_deterministic(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert run("chip", "trn1", "-o", str(a), "--scale", "sim").exit_code == 0
    assert run("chip", "trn1", "-o", str(b), "--scale", "sim").exit_code == 0
    files_a = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    files_b = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert files_a == files_b
    for rel in files_a:
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel


def test_chip_unchanged_output_is_not_rewritten(tmp_path):
    out = tmp_path / "x"
    assert run("chip", "trn1", "-o", str(out), "--scale", "sim").exit_code == 0
    stamp = (out / "manifest.json").stat().st_mtime_ns
    result = run("chip", "trn1", "-o", str(out), "--scale", "sim")
    assert "unchanged" in result.output
    assert (out / "manifest.json").stat().st_mtime_ns == stamp


def test_chip_refuses_system_spec(tmp_path):
    result = run("chip", "trn2.48xlarge", "-o", str(tmp_path / "o"))
    assert result.exit_code == 2
    assert "expected a chip spec" in result.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("name", ["trn2", "specs/chips/trn2.yaml"])
def test_chip_finds_spec_from_repo_root(name, tmp_path):
    repo = Path(__file__).resolve().parents[1]
    result = run("chip", name, "-o", str(tmp_path / "o"), "--scale", "sim", cwd=repo)
    assert result.exit_code == 0, result.output


def test_chip_full_scale_trn2(tmp_path):
    """The main job: every unit at the spec's full scale, 128 x 128 arrays included."""
    repo = Path(__file__).resolve().parents[1]
    out = tmp_path / "trn2"
    result = run("chip", "trn2.yaml", "-o", str(out), cwd=repo)
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["scale"] == "full"
    rtl = {f["path"] for f in manifest["files"] if f["path"].startswith("rtl/")}
    assert "rtl/tensor_pe.v" in rtl and "rtl/vector_lane.v" in rtl
    assert "not emitted" not in result.output
    # The core instantiates the chip's tensor array, not one of its own: its tensor files are
    # the engine's own modules alone.
    assert {"rtl/neuron_core.v", "rtl/neuron_core.f", "rtl/neuron_core.vlt",
            "rtl/neuron_core.core"} <= rtl
    assert {p for p in rtl if p.startswith("rtl/neuron_core_tensor")} == {
        f"rtl/{m}.v" for m in (core.TENSOR_MODULE, tensor.SLICE_MODULE, tensor.COLUMN_MODULE)}
    core_files = (out / "rtl" / "neuron_core.f").read_text().split()
    assert "tensor.v" in core_files and "tensor_row.v" in core_files
    assert not any(p.startswith("rtl/tensor_bf16") for p in rtl)  # one engine, every format
    top = (out / "rtl" / "tensor.v").read_text()
    assert "localparam ROWS = 128;" in top and "localparam COLS = 128;" in top
    assert "fp8_e4m3, fp8_e5m2, cfp8_e4m3_b7, bf16, fp16, tf32, fp32" in top
    listed = (out / "rtl" / "files.f").read_text().split()
    assert all((out / "rtl" / name).is_file() for name in listed)


def test_sim_refuses_unknown_unit():
    result = run("sim", "trn2", "--unit", "tensr")
    assert result.exit_code == 2 and "expected a unit, found 'tensr'" in result.stderr


def test_sim_lists_only_simulated_units():
    result = run("sim", "trn2", "--unit", "formats")
    assert result.exit_code == 2
    assert "(legal: core, link, scalar, tensor, vector, all)" in result.stderr
