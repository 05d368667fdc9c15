"""Running sweeps: Parquet table, resume after an interruption, Dask gives the same table."""

import json

import pandas as pd
import pytest

from explore import model, run, workloads

SWEEP = """sweep:
  name: small
  base: trn2.48xlarge
  parameters:
    rows: [64, 128, 256]
    cols: [64, 128]
    clock: [2.0 GHz, 2.4 GHz]
  workloads: [llama2-7b, dit-xl-block]
  metrics: [valid, step_time, utilisation, tokens_per_second, pe_total, price_per_hour, fits]
  price: {base: 40 USD/h}
  execution: {chunk_size: 5}
"""


@pytest.fixture
def sweep_file(tmp_path):
    f = tmp_path / "small.yaml"
    f.write_text(SWEEP)
    return f


def test_table_has_one_row_per_point_and_workload(sweep_file, tmp_path):
    out = tmp_path / "out"
    summary = run.explore(sweep_file, out, progress=False)
    table = pd.read_parquet(out / "results.parquet")
    assert summary["points"] == 12 and summary["rows"] == 24 == len(table)
    assert summary["chunks"] == {"total": 6, "computed": 6, "skipped": 0}
    assert summary["mode"] == "in-process"
    assert list(table.columns) == ["point", "workload", *model.PARAMS, "valid", "step_time",
                                   "utilisation", "tokens_per_second", "pe_total",
                                   "price_per_hour", "fits"]
    assert sorted(set(table["workload"])) == ["dit-xl-block", "llama2-7b"]
    assert table.groupby("workload", observed=True)["point"].apply(list).map(sorted).map(
        lambda x: x == list(range(12))).all()
    # The row of the base design point is the model evaluated there.
    row = table[(table["workload"] == "llama2-7b") & (table["rows"] == 128)
                & (table["cols"] == 128) & (table["clock"] == 2.4e9)]
    expect = model.evaluate({}, model.base_from_spec("trn2.48xlarge"),
                            workloads.load("llama2-7b"))
    assert row["step_time"].item() == expect["step_time"][0]
    # The best point of each workload is the fastest one whose state fits.
    best = summary["best"]
    assert set(best) == {"dit-xl-block", "llama2-7b"}
    fastest = table[table["workload"] == "llama2-7b"]["tokens_per_second"].max()
    assert best["llama2-7b"]["tokens_per_second"] == fastest
    assert json.loads((out / "summary.json").read_text())["rows"] == 24
    names = sorted(p.name for p in (out / "plots").iterdir())
    assert names == sorted(f"{s}.{e}" for s in ("pareto_area", "pareto_price", "roofline",
                                                   "sensitivity") for e in ("png", "svg"))
    assert (out / "plots" / "roofline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_interrupted_sweep_resumes_without_recomputing(sweep_file, tmp_path, monkeypatch):
    out = tmp_path / "out"
    calls = []
    real = run.evaluate_chunk

    def failing(values, base, work, metrics, first):
        if len(calls) == 4:
            raise KeyboardInterrupt
        calls.append((work.name, first))
        return real(values, base, work, metrics, first)

    monkeypatch.setattr(run, "evaluate_chunk", failing)
    with pytest.raises(KeyboardInterrupt):
        run.explore(sweep_file, out, progress=False, plot=False)
    assert len(list((out / "parts").glob("*.parquet"))) == 4
    assert not list((out / "parts").glob(".*"))          # no half-written part

    done = list(calls)
    calls.clear()
    monkeypatch.setattr(run, "evaluate_chunk", lambda *a: calls.append(a[2].name) or real(*a))
    summary = run.explore(sweep_file, out, progress=False, plot=False)
    assert summary["chunks"] == {"total": 6, "computed": 2, "skipped": 4}
    assert len(calls) == 2 and len(done) == 4
    again = run.explore(sweep_file, out, progress=False, plot=False)
    assert again["chunks"]["computed"] == 0 and len(calls) == 2

    fresh = run.explore(sweep_file, tmp_path / "fresh", progress=False, plot=False)
    pd.testing.assert_frame_equal(pd.read_parquet(summary["table"]),
                                  pd.read_parquet(fresh["table"]))


def test_dask_scheduler_gives_the_same_table(sweep_file, tmp_path):
    from distributed import LocalCluster

    local = run.explore(sweep_file, tmp_path / "local", progress=False, plot=False)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster:
        remote = run.explore(sweep_file, tmp_path / "dask", scheduler=cluster.scheduler_address,
                             progress=False, plot=False)
    assert remote["mode"] == f"dask:{cluster.scheduler_address}"
    assert remote["chunks"]["computed"] == 6
    pd.testing.assert_frame_equal(pd.read_parquet(local["table"]),
                                  pd.read_parquet(remote["table"]))


def test_local_dask_cluster_workers_write_the_same_parts(sweep_file, tmp_path):
    sweep_file.write_text(SWEEP.replace("{chunk_size: 5}", "{chunk_size: 5, workers: 1}"))
    local = run.explore(sweep_file, tmp_path / "local", progress=False, plot=False)
    dask = run.explore(sweep_file, tmp_path / "dask", progress=False, plot=False, dask=True)
    assert dask["mode"] == "dask:local" and dask["chunks"]["computed"] == 6
    assert sorted(p.name for p in (tmp_path / "dask" / "parts").iterdir()) == \
        sorted(p.name for p in (tmp_path / "local" / "parts").iterdir())
    pd.testing.assert_frame_equal(pd.read_parquet(local["table"]),
                                  pd.read_parquet(dask["table"]))


def test_torn_or_wrong_parts_are_computed_again(sweep_file, tmp_path, monkeypatch):
    out = tmp_path / "out"
    first = run.explore(sweep_file, out, progress=False, plot=False)
    parts = sorted((out / "parts").glob("*.parquet"))
    torn, short, stray = parts[0], parts[1], out / "parts" / ".x.parquet.999999999.tmp"
    torn.write_bytes(torn.read_bytes()[:-40])              # a write cut off before its footer
    pd.read_parquet(short).iloc[:1].to_parquet(short, index=False)   # too few rows
    stray.write_bytes(b"PAR1")                               # a temporary part of a dead run
    calls = []
    real = run.evaluate_chunk
    monkeypatch.setattr(run, "evaluate_chunk", lambda *a: calls.append(a[4]) or real(*a))
    again = run.explore(sweep_file, out, progress=False, plot=False)
    assert again["chunks"] == {"total": 6, "computed": 2, "skipped": 4} and len(calls) == 2
    assert not stray.exists()
    pd.testing.assert_frame_equal(pd.read_parquet(first["table"]),
                                  pd.read_parquet(again["table"]))


def test_too_large_a_sweep_is_refused_before_allocation(tmp_path):
    from explore import sweep
    from specs.errors import SpecError

    f = tmp_path / "huge.yaml"
    f.write_text(SWEEP.replace("cols: [64, 128]", "cols: {start: 1, stop: 1000000, step: 1}")
                 .replace("clock: [2.0 GHz, 2.4 GHz]",
                          "clock: {start: 1 GHz, stop: 3 GHz, step: 1 Hz}"))
    with pytest.raises(SpecError, match=r"huge\.yaml:5:5: sweep\.parameters: expected at most "
                                        r"10,000,000 design points \(execution\.max_points, or "
                                        r"--max-points\), found 6,000,000,003,000,000 \(3 rows x "
                                        r"1,000,000 cols x 2,000,000,001 clock\)"):
        sweep.load(f)
    with pytest.raises(SpecError, match=r"expected at most 5 design points .* found 12 "):
        run.explore(sweep_file_with(tmp_path, SWEEP), tmp_path / "o", max_points=5)
    f.write_text(SWEEP.replace("{chunk_size: 5}", "{chunk_size: 5, max_points: 11}"))
    with pytest.raises(SpecError, match=r"expected at most 11 design points"):
        sweep.load(f)
    assert sweep.load(f, max_points=12).points()[0]["rows"].size == 12
    assert not (tmp_path / "o").exists()


def sweep_file_with(tmp_path, text):
    f = tmp_path / "s.yaml"
    f.write_text(text)
    return f


def test_sigkill_mid_sweep_loses_nothing(tmp_path, monkeypatch):
    """`gen explore` killed with SIGKILL while it writes parts: every part left is whole, the
    next run computes only the missing chunks, and the table equals an uninterrupted run's."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    import pyarrow.parquet as pq

    sweep = tmp_path / "long.yaml"
    sweep.write_text(SWEEP.replace("rows: [64, 128, 256]", "rows: [32, 64, 128, 256, 512]")
                     .replace("cols: [64, 128]", "cols: [32, 64, 128, 256]")
                     .replace("clock: [2.0 GHz, 2.4 GHz]",
                              "clock: {start: 1.4 GHz, stop: 3.2 GHz, num: 10}")
                     .replace("{chunk_size: 5}", "{chunk_size: 2}"))
    out = tmp_path / "out"
    repo = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(repo))
    proc = subprocess.Popen([sys.executable, "-m", "generators.cli", "explore", str(sweep),
                             "-o", str(out)], env=env, cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    parts = out / "parts"
    deadline = time.monotonic() + 300
    while len(list(parts.glob("*.parquet"))) < 20:
        assert proc.poll() is None, "the sweep ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    left = sorted(parts.glob("*.parquet"))
    total = 200                                       # 200 points x 2 workloads / 2 per chunk
    assert 20 <= len(left) < total
    for part in left:                                 # whole: footer and all rows readable
        assert pq.read_table(part).num_rows > 0

    calls = []
    real = run.evaluate_chunk
    monkeypatch.setattr(run, "evaluate_chunk", lambda *a: calls.append(a[4]) or real(*a))
    resumed = run.explore(sweep, out, progress=False, plot=False)
    assert resumed["chunks"] == {"total": total, "computed": total - len(left),
                                 "skipped": len(left)}
    assert len(calls) == total - len(left)
    assert not [p for p in parts.iterdir() if p.name.startswith(".")]
    fresh = run.explore(sweep, tmp_path / "fresh", progress=False, plot=False)
    pd.testing.assert_frame_equal(pd.read_parquet(resumed["table"]),
                                  pd.read_parquet(fresh["table"]))
