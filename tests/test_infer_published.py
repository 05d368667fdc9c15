"""Published inference rows beyond the anchors (explore/published/inference.csv) predicted by
`gen infer`: the figures within tolerance today are asserted against the published values;
every other figure is a known gap pinned to this tree's prediction in
tests/infer_published_gaps.json (regenerate it with
``python benchmarks/infer_published.py --write-gaps`` when a cost change moves predictions)."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from explore import infer_published as ip
from explore.infer import InferError
from generators.cli import main

ROWS = ip.load_rows()
PINS = json.loads((Path(__file__).parent / "infer_published_gaps.json").read_text())
WITHIN = [tuple(k.rsplit("/", 1)) for k in PINS["within"]]
GAPS = {tuple(k.rsplit("/", 1)): tuple(v) for k, v in PINS["gaps"].items()}
BY_KEY = {r.key: r for r in ROWS}


@pytest.fixture(scope="module")
def predicted():
    compared, points = ip.compare(ROWS)
    return {(c.key, c.figure): c for c in compared}, points


def test_rows_name_known_sources_and_their_commit():
    from specs.loader import sources

    assert {r.source for r in ROWS} <= set(sources())
    for r in ROWS:
        assert r.csv.startswith("about-neuron/benchmarks/") and r.csv.endswith(".csv"), r.key
        assert len(r.commit) == 40 and int(r.commit, 16) >= 0, r.key
        assert r.published, r.key


def test_every_figure_run_is_either_within_or_a_known_gap():
    run = {(r.key, f) for r in ROWS if not r.skipped for f in r.published}
    assert set(WITHIN) | set(GAPS) == run
    assert not set(WITHIN) & set(GAPS)


@pytest.mark.parametrize("key, figure", WITHIN)
def test_published_within_tolerance(predicted, key, figure):
    published = BY_KEY[key].published[figure]
    assert predicted[0][(key, figure)].predicted == pytest.approx(
        published, rel=ip.tolerance(figure))


@pytest.mark.parametrize("key, figure", sorted(GAPS))
def test_known_gaps_are_as_listed(predicted, key, figure):
    # the list states what the tree predicts: a figure that moved is a list to regenerate
    expected, published = GAPS[(key, figure)]
    assert published == pytest.approx(BY_KEY[key].published[figure], rel=1e-12)
    assert predicted[0][(key, figure)].predicted == pytest.approx(expected, rel=0.05)


def test_a_row_through_the_command_line_is_the_same_prediction(predicted):
    row = BY_KEY["inf2.48xlarge-llama2-13b-b8-128-3968"]
    args = row.command().removeprefix("gen ").split()
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    js = json.loads(result.output)
    for figure, (_, _, field) in ip.FIGURES.items():
        if figure in row.published:
            assert js[field] == pytest.approx(predicted[1][row.key][field], rel=1e-9)


def test_bad_rows_file_is_one_line(tmp_path):
    bad = tmp_path / "rows.csv"
    bad.write_text("key,source\nx,y\n")
    with pytest.raises(InferError, match=r"rows.csv: expected the columns .*batch"):
        ip.load_rows(bad)


def test_transformers_neuronx_rows_take_its_default_buckets(tmp_path):
    # [TNX-GUIDE]: token generation at the powers of two from 128 up to the sequence length,
    # the last bucket the sequence length; context encoding at half of each
    tnx = ip.Compilation.transformers_neuronx(1152)
    assert tnx.decode_buckets == (128, 256, 512, 1024, 1152)
    assert tnx.context_buckets == (64, 128, 256, 512, 576)
    assert ip.Compilation.transformers_neuronx(128).decode_buckets == (128,)
    row = BY_KEY["trn1.32xlarge-llama3-70b-b1-128-1024"]
    assert row.compiled == tnx and "--decode-buckets 128,256,512,1024,1152" in row.command()
    assert BY_KEY["inf2.xlarge-bert-base-b1-128"].compiled == ip.AS_GIVEN
    # the library's buckets from Neuron 2.18 on: an earlier row runs at its own lengths
    lines = ip.ROWS.read_text().splitlines()
    head = lines[0].split(",")
    earlier = lines[0] + "\n" + next(
        line for line in lines[1:] if line.startswith(row.key + ",")).replace(
        ",2.18.1,", ",2.17.0,") + "\n"
    (tmp_path / "rows.csv").write_text(earlier)
    (got,) = ip.load_rows(tmp_path / "rows.csv")
    assert head.index("neuron_version") < head.index("sequence") and got.compiled == ip.AS_GIVEN
