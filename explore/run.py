"""Run a sweep: in-process, on a local Dask cluster, or on an existing Dask scheduler.

The design points of a sweep are cut into chunks of ``execution.chunk_size``; each chunk and
workload is one task whose result is one Parquet part under ``OUT/parts/``, named by a hash of
everything that determines it (the base spec, the workload, the model version and the chunk's
points). A part that already exists is not recomputed, so an interrupted sweep resumes where it
stopped and a sweep re-run with more points computes only the new chunks. Parts are written
atomically (a temporary file renamed into place), and an existing part is trusted only when it
opens and holds the rows and columns its chunk must have; any other is computed again.

When all parts are there they are joined into ``OUT/results.parquet`` (one row per design point
x workload: ``point``, ``workload``, the parameters in SI units, the metrics) and the plots are
drawn into ``OUT/plots/``.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from specs.console import console as whole_console
from specs.files import remove_stale_temporaries, replace_atomically
from specs.loader import load_document

from . import infer_sweep, model, step_sweep
from . import sweep as sweeps
from .workloads import Workload

#: Changes whenever the model's formulas change, so that stale parts are not reused.
MODEL_VERSION = "explore-model-6"


def evaluate_chunk(values: dict[str, np.ndarray], base: model.Base, work: Workload,
                   metrics: list[str], first_point: int) -> pd.DataFrame:
    """The table of one chunk: one row per design point, parameters then metrics.

    ``values`` holds the swept parameters; the others take the base value.
    """
    out = model.evaluate(values, base, work)
    size = len(out["step_time"])
    lowered = [m for m in metrics if m in step_sweep.SWEEP_METRICS]
    if lowered:
        full = {k: np.broadcast_to(np.asarray(values.get(k, base.values[k]), float), (size,))
                for k in model.PARAMS}
        out.update(step_sweep.evaluate_sweep(full, base, work, lowered))
    inference = [m for m in metrics if m in infer_sweep.SWEEP_METRICS]
    if inference:
        full = {k: np.broadcast_to(np.asarray(values.get(k, base.values[k]), float), (size,))
                for k in model.PARAMS}
        out.update(infer_sweep.evaluate_sweep(full, base, work, inference))
    cols = {"point": np.arange(first_point, first_point + size, dtype=np.int64),
            "workload": pd.Categorical([work.name] * size)}
    cols.update({k: np.broadcast_to(np.asarray(values.get(k, base.values[k]), float), (size,))
                 for k in model.PARAMS})
    for name in metrics:
        a = np.asarray(out[name])
        flag = name in ("valid", "fits", "lowered_valid", "lowered_fits", *infer_sweep.FLAGS)
        cols[name] = a.astype(bool) if flag else a.astype(float)
    return pd.DataFrame(cols)


def chunk_to_file(values: dict[str, np.ndarray], base: model.Base, work: Workload,
                  metrics: list[str], first_point: int, path: Path) -> int:
    """Evaluate one chunk and write its part (on a worker that shares the file system)."""
    df = evaluate_chunk(values, base, work, metrics, first_point)
    _write(df, Path(path))
    return len(df)


def chunk_key(sweep_digest: str, work_index: int, values: dict[str, np.ndarray],
              first_point: int) -> str:
    h = hashlib.sha256()
    h.update(f"{MODEL_VERSION}|{sweep_digest}|{work_index}|{first_point}".encode())
    for k in model.PARAMS:
        h.update(k.encode())
        h.update(np.ascontiguousarray(values[k], dtype=np.float64).tobytes())
    return h.hexdigest()[:24]


def _write(df: pd.DataFrame, path: Path) -> None:
    replace_atomically(path, lambda tmp: df.to_parquet(tmp, index=False))


def _progress(console: Console, enabled: bool) -> Progress:
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                    MofNCompleteColumn(), TextColumn("chunks"),
                    TextColumn("{task.fields[rate]}"), TimeElapsedColumn(),
                    TimeRemainingColumn(), console=console, disable=not enabled)


def part_is_whole(path: Path, rows: int, columns: list[str]) -> bool:
    """Whether the Parquet part at ``path`` can be trusted: it opens (footer and metadata
    intact), holds ``rows`` rows with exactly ``columns``, and every column chunk reads."""
    import pyarrow
    import pyarrow.parquet as pq

    try:
        part = pq.ParquetFile(path)
        if part.metadata.num_rows != rows or part.schema_arrow.names != columns:
            return False
        part.read()
    except (OSError, ValueError, pyarrow.ArrowException):
        return False
    return True


def explore(sweep_path, out_dir, scheduler: str | None = None, *, progress: bool = True,
            dask: bool | None = None, plot: bool = True, max_points: int | None = None) -> dict:
    """Run the sweep ``sweep_path`` into ``out_dir``; return a summary.

    Parameters
    ----------
    sweep_path
        A sweep file or the name of a bundled sweep.
    out_dir
        Where ``parts/``, ``results.parquet``, ``summary.json`` and ``plots/`` go.
    scheduler
        Address of a running Dask scheduler (``"tcp://host:8786"``); the sweep's chunks run
        on its workers. Without it, sweeps of at least ``execution.dask_threshold`` points x
        workloads start a ``distributed.LocalCluster`` of ``execution.workers`` processes, and
        smaller ones run in this process.
    dask
        Force (True) or forbid (False) a local Dask cluster regardless of the threshold.
    max_points
        Largest sweep accepted (default: the sweep's ``execution.max_points``).

    Returns
    -------
    dict
        ``sweep``, ``base``, ``points``, ``dropped``, ``rows``, ``chunks`` (total, computed,
        skipped), ``mode``, ``seconds``, ``points_per_second``, ``table``, ``plots``,
        ``compute_seconds`` (the chunks alone, without cluster start-up, loading, joining and
        plotting) and ``best`` (per workload, the design point of the highest tokens per second
        among the valid points whose state fits).
    """
    start = time.perf_counter()
    sw = sweeps.load(sweep_path, max_points=max_points)
    out = Path(out_dir)
    parts_dir = out / "parts"
    parts_dir.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(parts_dir)
    points, dropped = sw.points()
    size = len(points["rows"])
    chunk = sw.spec.execution.chunk_size
    digest = sw.digest()
    tasks = []
    for wi, work in enumerate(sw.workloads):
        for first in range(0, size, chunk):
            values = {k: a[first:first + chunk] for k, a in points.items()}
            key = chunk_key(digest, wi, values, first)
            values = {k: values[k] for k in sw.grid}     # only the swept ones travel
            path = parts_dir / f"{sw.name}-{work.name}-{key}.parquet"
            tasks.append((path, values, wi, first))
    columns = ["point", "workload", *model.PARAMS, *sw.spec.metrics]
    todo = [t for t in tasks
            if not (t[0].exists() and part_is_whole(t[0], min(chunk, size - t[3]), columns))]
    work_items = size * len(sw.workloads)
    if scheduler is not None:
        mode = f"dask:{scheduler}"
    elif dask if dask is not None else work_items >= sw.spec.execution.dask_threshold:
        mode = "dask:local"
    else:
        mode = "in-process"
    console = whole_console(stderr=True)
    computed_points = sum(_count(t[1], size) for t in todo)
    t0 = time.perf_counter()
    with _progress(console, progress) as bar:
        task = bar.add_task(escape(f"{sw.name} ({mode})"), total=len(tasks),
                            completed=len(tasks) - len(todo), rate="")
        if todo and mode == "in-process":
            for path, values, wi, first in todo:
                df = evaluate_chunk(values, sw.base, sw.workloads[wi], sw.spec.metrics, first)
                _write(df, path)
                _advance(bar, task, _count(values, size), t0)
            compute_seconds = time.perf_counter() - t0
        elif todo:
            compute_seconds = _run_dask(todo, sw, scheduler, bar, task)
        else:
            compute_seconds = 0.0
    table = pd.concat([pd.read_parquet(t[0]) for t in tasks], ignore_index=True) if tasks \
        else pd.DataFrame()
    table_path = out / "results.parquet"
    _write(table, table_path)
    drawn = []
    if plot and size:
        from . import plots  # matplotlib only where plots are drawn, not on the workers
        drawn = [str(p) for p in plots.draw_all(table, sw, out / "plots")]
    summary = {
        "sweep": sw.name, "title": sw.spec.title, "base": sw.base.name,
        "points": size, "dropped": dropped, "workloads": [w.name for w in sw.workloads],
        "rows": len(table),
        "chunks": {"total": len(tasks), "computed": len(todo), "skipped": len(tasks) - len(todo)},
        "mode": mode, "seconds": time.perf_counter() - start,
        "compute_seconds": compute_seconds,
        "points_per_second": computed_points / compute_seconds if computed_points else None,
        "table": str(table_path), "plots": drawn, "best": best_points(table),
        "area": _area_source(sw.base),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=float) + "\n")
    return summary


def _count(values: dict[str, np.ndarray], default: int) -> int:
    return len(next(iter(values.values()))) if values else default


def _advance(bar: Progress, task, points: int, t0: float) -> None:
    done = bar.tasks[task].fields.get("points", 0) + points
    rate = done / max(time.perf_counter() - t0, 1e-9)
    bar.update(task, advance=1, points=done, rate=f"{rate:,.0f} points/s")


def _run_dask(todo, sw: sweeps.Sweep, scheduler: str | None, bar: Progress, task) -> float:
    """Run the chunks on Dask; return the seconds from the first submission to the last part
    (cluster start-up left out)."""
    from distributed import Client, LocalCluster, as_completed

    cluster = None
    if scheduler is None:
        cluster = LocalCluster(n_workers=sw.spec.execution.workers, threads_per_worker=1,
                               processes=True, dashboard_address=None)
        client = Client(cluster)
    else:
        client = Client(scheduler)
    try:
        # Import the model on every worker before the clock starts (a worker's first task
        # would otherwise pay for it).
        client.run(importlib.import_module, "explore.run")
        base = client.scatter(sw.base, broadcast=True)
        works = [client.scatter(w, broadcast=True) for w in sw.workloads]
        futures = {}
        t0 = time.perf_counter()
        for path, values, wi, first in todo:
            args = (values, base, works[wi], sw.spec.metrics, first)
            if cluster is not None:      # local workers write their parts themselves
                fut = client.submit(chunk_to_file, *args, str(path), key=f"explore-{path.stem}")
            else:                        # remote workers may not share our file system
                fut = client.submit(evaluate_chunk, *args, key=f"explore-{path.stem}")
            futures[fut] = (path, _count(values, 1))
        for fut in as_completed(futures):
            path, n = futures[fut]
            result = fut.result()
            if cluster is None:
                _write(result, path)
            _advance(bar, task, n, t0)
        return time.perf_counter() - t0
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _area_source(base: model.Base) -> str:
    if base.area is not None:
        return "from synthesis"
    chip = model.chip_document(load_document(base.spec_file)).spec.name
    return f"not known: {chip} is not synthesised yet (gen chip {chip} --area)"


def best_points(table: pd.DataFrame) -> dict:
    """Per workload, the parameters and metrics of the fastest feasible design point."""
    best = {}
    if table.empty or "tokens_per_second" not in table:
        return best
    ok = table
    for col in ("valid", "fits"):
        if col in ok:
            ok = ok[ok[col]]
    for name, group in ok.groupby("workload", observed=True):
        row = group.loc[group["tokens_per_second"].idxmax()]
        best[str(name)] = {k: (v.item() if hasattr(v, "item") else v)
                           for k, v in row.items() if k != "workload"}
    return best
