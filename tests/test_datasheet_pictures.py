"""The datasheet's pictures: drawn from the spec and the system model, linked from both
datasheets, and shown by a browser (headless Chromium) with no console error."""

import os
import re
import shutil
from pathlib import Path

import pytest

from generators.chip import generate_chip
from specs.loader import load_document

CHROMIUM = ("chromium", "chromium-browser", "google-chrome")


@pytest.fixture(scope="module")
def trn2(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("chip") / "trn2"
    generate_chip(load_document("trn2"), out, "sim", units=["link"])
    return out


def test_pictures_are_drawn_from_the_spec(trn2):
    block = (trn2 / "figures" / "block.svg").read_text()
    # trn2: 8 NeuronCore-v3, 4 HBM3 stacks, 4 NeuronLink ports (specs/chips/trn2.yaml).
    assert len(re.findall(r">NeuronCore-v3 \d<", block)) == 8
    assert len(re.findall(r">stack \d<", block)) == 4
    assert "NeuronLink-v3: 4 ports" in block and "128 x 128 PEs" in block
    topo = (trn2 / "figures" / "topology.svg").read_text()
    # trn2.48xlarge: a 4 x 4 torus, every chip linked to 4 neighbours: 16 x 4 / 2 = 32 links.
    assert "16 chips, 32 links (torus 4 x 4)" in topo
    assert len(re.findall(r"<(?:line|path) [^>]*stroke='#(?:1b7f99|c0392b)'", topo)) == 32
    roof = (trn2 / "figures" / "roofline.svg").read_text()
    # bf16: 8 cores x 128 x 128 PEs x 2 FLOP x 2.4 GHz = 629 TFLOP/s; ridge at / 2.9 TB/s.
    assert "bf16: 629 TFLOP/s, ridge at 217 FLOP/B" in roof
    core = (trn2 / "figures" / "core.svg").read_text()
    # trn2's core: 28 MiB of SBUF and 2 MiB of PSUM over 128 partitions (NKI3) are 224 KiB
    # (57344 32-bit words) and 16 KiB each; a row holds one word of every partition; 16 DMA
    # queues; 96 GiB of HBM (TRN2) take 37 address bits.
    assert "128 x 224 KiB: 57344 rows of 4096 bits" in core
    assert "8 banks, 128 x 16 KiB: 4096 rows of 4096 bits" in core
    assert "16 sequencers (dma0 .. dma15)" in core and ">128 partitions<" in core
    assert "37-bit addresses, 32-bit data, 96 GiB of memory" in core


def test_both_datasheets_show_the_same_files(trn2):
    md = (trn2 / "datasheet.md").read_text()
    html = (trn2 / "datasheet.html").read_text()
    files = sorted(p.relative_to(trn2).as_posix() for p in (trn2 / "figures").glob("*.svg"))
    assert files == ["figures/block.svg", "figures/core.svg", "figures/roofline.svg",
                     "figures/topology.svg"]
    assert sorted(re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)) == files
    assert sorted(re.findall(r'<img src="([^"]+)"', html)) == files


def _browser() -> str | None:
    return next((p for p in map(shutil.which, CHROMIUM) if p), None)


def render(page_path: Path) -> tuple[list[str], list[tuple[str, int, int]]]:
    """Console errors and (src, width, height) of each image of a page in headless
    Chromium."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_browser(), args=["--no-sandbox"])
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(page_path.resolve().as_uri(), wait_until="load")
            images = page.eval_on_selector_all(
                "img", "els => els.map(e => [e.getAttribute('src'), e.naturalWidth, "
                       "e.naturalHeight])")
        finally:
            browser.close()
    return errors, [tuple(i) for i in images]


@pytest.fixture
def chromium():
    if _browser() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed, and CI must have it")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    pytest.importorskip("playwright")


def test_html_datasheet_renders_in_chromium(trn2, chromium):
    errors, images = render(trn2 / "datasheet.html")
    assert errors == []
    assert [src for src, _, _ in images] == ["figures/block.svg", "figures/topology.svg",
                                             "figures/roofline.svg", "figures/core.svg"]
    assert all(w > 0 and h > 0 for _, w, h in images), images


def test_render_sees_a_missing_picture(tmp_path, chromium):
    page = tmp_path / "page.html"
    page.write_text('<!DOCTYPE html><html><body><img src="missing.svg"></body></html>')
    errors, images = render(page)
    assert images == [("missing.svg", 0, 0)]
    assert errors  # the failed load is reported on the console


def test_core_table_shows_its_memories_and_engines():
    """The datasheet's core table at both scales: trn2's 28 MiB SBUF and 2 MiB PSUM over
    128 partitions (NKI3), 8 PSUM banks; its simulation scale from chip.sim."""
    from generators.units import core_datasheet
    from specs.loader import load

    spec = load("trn2")
    [table] = core_datasheet(spec)
    rows = {row[0]: row[1:] for row in table["rows"]}
    assert table["columns"] == ["part", "full scale", "simulation scale"]
    assert rows["SBUF"][0].startswith(f"128 partitions x {28 * 2**20 // 128} B: one memory of "
                                      f"{28 * 2**20 // 128 // 4} rows x 4096 bits")
    assert rows["PSUM"][0].startswith(f"128 partitions x {2 * 2**20 // 128} B in 8 banks")
    sim = spec.sim
    assert rows["SBUF"][1].startswith(f"{sim.partitions} partitions x "
                                      f"{sim.sbuf_partition_bytes} B")
    assert rows["DMA"][0].startswith("16 queues on one AXI4 manager port, 37-bit addresses")
    assert rows["Engines"][0].endswith("and DMA, over 128 partitions")
