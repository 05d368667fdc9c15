"""Plots of a sweep for an architect: Pareto fronts, per-GEMM roofline, sensitivity.

Every figure is written as PNG and SVG (matplotlib's Agg backend, no display needed).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from sim.system import formulas  # noqa: E402

from . import model  # noqa: E402

#: How each parameter is shown: (scale from SI, name, unit).
DISPLAY = {
    "rows": (1, "array rows", ""), "cols": (1, "array columns", ""),
    "cores": (1, "cores per chip", ""), "clock": (1e-9, "tensor clock", "GHz"),
    "sbuf": (2.0**-20, "SBUF per core", "MiB"),
    "hbm_bandwidth": (1e-12, "HBM bandwidth per chip", "TB/s"),
    "hbm_capacity": (2.0**-30, "HBM capacity per chip", "GiB"),
    "link_bandwidth": (1e-9, "link bandwidth per chip", "GB/s"),
    "chips": (1, "chips per instance", ""), "lnc": (1, "LNC", ""),
    "nodes": (1, "nodes over EFA", ""),
}


def axis_label(name: str) -> str:
    _, label, unit = DISPLAY[name]
    return f"{label} ({unit})" if unit else label


def _save(fig, out: Path, stem: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{stem}.png", out / f"{stem}.svg"]
    fig.savefig(paths[0], dpi=130, bbox_inches="tight")
    fig.savefig(paths[1], bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    return paths


def pareto_mask(cost: np.ndarray, perf: np.ndarray) -> np.ndarray:
    """Points not dominated: no other point has lower-or-equal cost and higher performance."""
    order = np.lexsort((-perf, cost))
    best = -np.inf
    keep = np.zeros(len(cost), bool)
    for i in order:
        if perf[i] > best:
            keep[i] = True
            best = perf[i]
    return keep


def _feasible(table: pd.DataFrame) -> pd.DataFrame:
    ok = table
    for col in ("valid", "fits"):
        if col in ok:
            ok = ok[ok[col]]
    return ok[np.isfinite(ok["tokens_per_second"])]


def _is_base(df: pd.DataFrame, base: model.Base) -> np.ndarray:
    mask = np.ones(len(df), bool)
    for k in model.PARAMS:
        mask &= np.isclose(df[k].to_numpy(), base.values[k], rtol=1e-9)
    return mask


def _colour_parameter(sw) -> str | None:
    if sw.spec.plots.colour is not None:
        return sw.spec.plots.colour
    swept = [k for k, v in sw.grid.items() if len(v) > 1]
    return max(swept, key=lambda k: len(sw.grid[k])) if swept else None


def pareto(table: pd.DataFrame, sw, out: Path, cost: str, label: str,
           stem: str) -> list[Path]:
    """Tokens per second against ``cost``, one panel per workload, front highlighted.

    Points are coloured by the sweep's ``plots.colour`` parameter (default: the swept one with
    the most values): one colour and legend entry per value for up to 8 values, a colour bar
    beyond.
    """
    ok = _feasible(table)
    names = list(dict.fromkeys(str(w) for w in table["workload"]))
    colour = _colour_parameter(sw)
    fig, axes = plt.subplots(1, len(names), figsize=(5.6 * len(names), 4.6), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        df = ok[ok["workload"] == name]
        c, p = df[cost].to_numpy(), df["tokens_per_second"].to_numpy()
        ax.set_title(name)
        ax.set_xlabel(label)
        ax.set_ylabel("throughput (tokens/s)")
        ax.grid(True, which="both", alpha=0.3)
        if not len(df):
            ax.text(0.5, 0.5, "no feasible design point\n(state does not fit HBM)",
                    ha="center", va="center", transform=ax.transAxes)
            continue
        if colour is not None and len(sw.grid[colour]) <= 8:
            scale, short, unit = DISPLAY[colour]
            values = sw.grid[colour]
            # Larger markers first, so that designs with equal results stay visible.
            for i, (value, size) in enumerate(zip(values, np.linspace(70, 16, len(values)),
                                                  strict=True)):
                sel = np.isclose(df[colour].to_numpy(), value)
                if sel.any():
                    ax.scatter(c[sel], p[sel], s=size, color=plt.cm.tab10(i), zorder=2 + i,
                               label=f"{short} = {value * scale:g} {unit}".rstrip()
                               + f" ({sel.sum()})")
        elif colour is not None:
            scale = DISPLAY[colour][0]
            sc = ax.scatter(c, p, s=14, c=df[colour].to_numpy() * scale, cmap="viridis",
                            label=f"design points ({len(df)})")
            fig.colorbar(sc, ax=ax, label=axis_label(colour))
        else:
            ax.scatter(c, p, s=14, color="0.6", label=f"design points ({len(df)})")
        front = pareto_mask(c, p)
        idx = np.argsort(c[front])
        ax.plot(c[front][idx], p[front][idx], "o-", color="tab:red", ms=5, mfc="none",
                label=f"Pareto front ({front.sum()})")
        base = _is_base(df, sw.base)
        if base.any():
            ax.scatter(c[base], p[base], marker="*", s=200, color="tab:red", zorder=5,
                       edgecolor="k", label=f"base ({sw.base.name})")
        if c.max() > 8 * c.min():
            ax.set_xscale("log")
        if p.max() > 8 * p.min():
            ax.set_yscale("log")
        if np.ptp(c) == 0:
            ax.set_xlabel(f"{label}\n(all points equal: fixed by the sweep's constraints)")
        ax.legend(fontsize=8, loc="best")
    fig.suptitle(f"{sw.spec.title or sw.name}: performance against {label.split(' (')[0]}")
    fig.tight_layout()
    return _save(fig, out, stem)


def _label_groups(x: np.ndarray, y: np.ndarray, names, tol: float = 0.2):
    """Names of points that sit on top of each other (log distance below ``tol``) joined."""
    groups: list[tuple[float, float, list[str]]] = []
    for xi, yi, n in zip(x, y, names, strict=True):
        for gx, gy, members in groups:
            if abs(np.log10(xi / gx)) < tol and abs(np.log10(yi / gy)) < tol:
                members.append(n)
                break
        else:
            groups.append((xi, yi, [n]))
    return groups


def roofline(sw, out: Path) -> list[Path]:
    """Each GEMM of each workload at the base design point, against the rank's roofline."""
    works = list(sw.workloads)
    fig, axes = plt.subplots(1, len(works), figsize=(6.0 * len(works), 4.8), squeeze=False)
    v = sw.base.values
    per_rank_bw = v["hbm_bandwidth"] / (v["cores"] / v["lnc"])
    for ax, work in zip(axes[0], works, strict=True):
        d = model.evaluate({}, sw.base, work, detail=True)
        flops = d["gemm_flops"][0]
        seconds = d["gemm_seconds"][0]
        intensity = flops / d["gemm_hbm_bytes"][0]
        achieved = flops / seconds / 1e12
        peak = formulas.peak_flops(v["rows"], v["cols"], v["clock"], sw.base.rate(work.dtype),
                                   v["lnc"]) / 1e12
        x = np.geomspace(max(intensity.min() / 3, 0.1), intensity.max() * 3, 200)
        ax.plot(x, np.minimum(peak, x * per_rank_bw / 1e12), color="k", lw=1.5,
                label=f"roof: {peak:.0f} TFLOP/s, {per_rank_bw / 1e9:.0f} GB/s per rank")
        kinds = {"forward": ("o", "tab:blue"), "dgrad": ("s", "tab:orange"),
                 "wgrad": ("^", "tab:green")}
        for kind, (marker, color) in kinds.items():
            sel = np.array([(n.rsplit(".", 1)[-1] == kind) if kind != "forward"
                            else not n.endswith(("dgrad", "wgrad"))
                            for n in work.gemms.names])
            if sel.any():
                ax.scatter(intensity[sel], achieved[sel], marker=marker, color=color, s=36,
                           label=kind, zorder=4)
        fwd = np.array([not n.endswith(("dgrad", "wgrad")) for n in work.gemms.names])
        groups = _label_groups(intensity[fwd], achieved[fwd],
                               [n for n, f in zip(work.gemms.names, fwd, strict=True) if f])
        for j, (gx, gy, members) in enumerate(groups):
            ax.annotate(", ".join(members), (gx, gy), fontsize=7,
                        xytext=(6, -12 - 9 * (j % 2)), textcoords="offset points")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("arithmetic intensity (FLOP per HBM byte)")
        ax.set_ylabel("achieved throughput per rank (TFLOP/s)")
        ax.set_title(f"{work.name} (tensor {work.tensor})")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.suptitle(f"Roofline per GEMM at the base design point ({sw.base.name}, "
                 f"LNC={v['lnc']:g})")
    fig.tight_layout()
    return _save(fig, out, "roofline")


def sensitivity(sw, out: Path) -> list[Path]:
    """Step time against each swept parameter, one at a time, the others at the base.

    Shown as time per token relative to the base point: for a training step (fixed tokens
    per step) that is the relative step time; for a replicated GEMM list it also counts the
    replicas a change of cores or chips adds.
    """
    swept = [k for k, vals in sw.grid.items() if len(vals) > 1] or list(sw.grid)
    if not swept:
        return []
    cols = min(3, len(swept))
    rows = -(-len(swept) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.8 * cols, 3.8 * rows), squeeze=False)
    for ax, name in zip(axes.flat, swept, strict=False):
        vals = sw.grid[name]
        scale = DISPLAY[name][0]
        for work in sw.workloads:
            base = model.evaluate({}, sw.base, work)["tokens_per_second"][0]
            r = model.evaluate({name: vals}, sw.base, work)
            rel = base / r["tokens_per_second"]
            ok = np.isfinite(rel)
            line, = ax.plot(vals[ok] * scale, rel[ok], "o-", ms=4, label=work.name)
            over = ok & ~r["fits"].astype(bool)
            if over.any():
                ax.scatter(vals[over] * scale, rel[over], s=90, marker="x", zorder=4,
                           color=line.get_color(), label=f"{work.name}: state exceeds HBM")
        ax.axvline(sw.base.values[name] * scale, color="0.5", ls="--", lw=1)
        ax.axhline(1.0, color="0.5", lw=0.8)
        if vals.max() > 8 * vals.min():
            ax.set_xscale("log", base=2)
        if model.PARAMS[name][1] == "count":
            ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        ax.set_xlabel(axis_label(name))
        ax.set_ylabel("time per token / base")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(swept):]:
        ax.remove()
    fig.suptitle("Sensitivity of step time (per token), one parameter at a time, the others "
                 f"at the base (dashed: {sw.base.name})")
    fig.tight_layout()
    return _save(fig, out, "sensitivity")


def draw_all(table: pd.DataFrame, sw, out: Path) -> list[Path]:
    """Every plot of a sweep; the price Pareto front only when the base price is known."""
    out = Path(out)
    paths = []
    if "area" in table and "tokens_per_second" in table and np.isfinite(table["area"]).any():
        paths += pareto(table, sw, out, "area", "area from synthesis (NAND2 equivalents)",
                        "pareto_area")
    elif "pe_total" in table and "tokens_per_second" in table:
        paths += pareto(table, sw, out, "pe_total", "PEs (rows x cols x cores x chips; the "
                        "chip is not synthesised yet)", "pareto_area")
    if "price_per_hour" in table and "tokens_per_second" in table \
            and np.isfinite(table["price_per_hour"]).any():
        paths += pareto(table, sw, out, "price_per_hour", "price (USD/h)", "pareto_price")
    paths += roofline(sw, out)
    paths += sensitivity(sw, out)
    paths += lowered_breakdown(table, out)
    paths += inference_pareto(table, sw, out)
    return paths


def inference_pareto(table: pd.DataFrame, sw, out: Path) -> list[Path]:
    """When the sweep kept the inference metrics: output tokens per second of the instance
    against the time per output token, one panel per model, a colour per serving
    configuration, the front (no other point both faster per token and of more throughput)
    drawn and the base chip's points starred (``pareto_inference``)."""
    if not all(c in table for c in ("infer_tpot", "infer_tokens_per_second")):
        return []
    ok = table[np.isfinite(table["infer_tpot"]) & np.isfinite(table["infer_tokens_per_second"])]
    for flag in ("infer_valid", "infer_fits"):
        if flag in ok:
            ok = ok[ok[flag]]
    models: dict[str, list[str]] = {}
    for w in sw.workloads:
        if w.serving is not None:
            models.setdefault(w.spec.name, []).append(w.name)
    if not models:
        return []
    fig, axes = plt.subplots(1, len(models), figsize=(6.4 * len(models), 4.8), squeeze=False)
    for ax, (name, works) in zip(axes[0], models.items(), strict=True):
        df = ok[ok["workload"].astype(str).isin(works)]
        ax.set_title(name)
        ax.set_xlabel("time per output token (ms)")
        ax.set_ylabel("throughput (output tokens/s per instance)")
        ax.grid(True, which="both", alpha=0.3)
        if not len(df):
            ax.text(0.5, 0.5, "no design point fits", ha="center", va="center",
                    transform=ax.transAxes)
            continue
        x, y = df["infer_tpot"].to_numpy() * 1e3, df["infer_tokens_per_second"].to_numpy()
        names = df["workload"].astype(str).to_numpy()
        for i, w in enumerate(works):
            sel = names == w
            if sel.any():
                ax.scatter(x[sel], y[sel], s=22, color=plt.cm.tab10(i % 10),
                           label=f"{w.removeprefix(name + '-')} ({sel.sum()})")
        front = pareto_mask(x, y)
        order = np.argsort(x[front])
        ax.plot(x[front][order], y[front][order], "o-", color="tab:red", ms=7, mfc="none",
                label=f"Pareto front ({front.sum()})")
        base = _is_base(df, sw.base)
        if base.any():
            ax.scatter(x[base], y[base], marker="*", s=110, facecolor="none", zorder=5,
                       edgecolor="k", label=f"base chip ({sw.base.name})")
        if y.max() > 8 * y.min():
            ax.set_yscale("log")
        ax.legend(fontsize=7, loc="best", title="serving: TP, batch, input x output",
                  title_fontsize=7)
    fig.suptitle(f"{sw.spec.title or sw.name}: throughput against time per output token")
    fig.tight_layout()
    return _save(fig, out, "pareto_inference")


def lowered_breakdown(table: pd.DataFrame, out: Path) -> list[Path]:
    """When the sweep kept the lowered step's parts: a stacked bar of the fastest valid point
    of each workload that fits (``lowered_breakdown``)."""
    from .step import PARTS  # noqa: PLC0415

    cols = [f"lowered_{p}_time" for p in PARTS]
    if not all(c in table for c in (*cols, "lowered_sequences_per_second")):
        return []
    ok = table[np.isfinite(table["lowered_sequences_per_second"])]
    for flag in ("lowered_valid", "lowered_fits"):
        if flag in ok:
            ok = ok[ok[flag]]
    rows = []
    for name, group in ok.groupby("workload", observed=True):
        x = group.loc[group["lowered_sequences_per_second"].idxmax()]
        rows.append((f"{name} (point {int(x['point'])})",
                     {p: float(x[f"lowered_{p}_time"]) for p in PARTS}))
    return step_breakdown(rows, out, "lowered_breakdown") if rows else []


def step_breakdown(rows: list[tuple[str, dict[str, float]]], out: Path, stem: str = "step"
                   ) -> list[Path]:
    """Stacked bars of training-step time by part (``explore.step.PARTS``), one bar per
    ``(label, parts)`` row, in seconds."""
    from .step import PARTS  # noqa: PLC0415

    fig, ax = plt.subplots(figsize=(max(4.0, 0.7 * len(rows) + 3), 5.0))
    bottom = np.zeros(len(rows))
    labels = [label for label, _ in rows]
    for part in PARTS:
        heights = np.array([parts[part] for _, parts in rows])
        ax.bar(labels, heights, bottom=bottom, label=part)
        bottom += heights
    ax.set_ylabel("step time (s)")
    ax.tick_params(axis="x", labelrotation=35)
    for label in ax.get_xticklabels():
        label.set_horizontalalignment("right")
    ax.set_title("Training step time by part")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return _save(fig, out, stem)


def serving_curve(results, out: Path, stem: str = "serve", title: str = "") -> list[Path]:
    """Latency against throughput of serving runs (:class:`explore.serve.ServeResult`, one
    per offered load): P50 and P99 of the time to first token and of the inter-token latency
    against output tokens per second, each point labelled with its load."""
    rows = sorted(results, key=lambda r: r.load)
    x = np.array([r.tokens_per_second for r in rows])
    fig, axes = plt.subplots(1, 2, figsize=(11.0, 4.4))
    unit = "req/s" if rows and rows[0].mode == "rate" else "clients"
    for ax, (name, label) in zip(axes, (("ttft", "time to first token"),
                                        ("itl", "inter-token latency")), strict=True):
        for q, style in (("p50", "o-"), ("p99", "s--")):
            y = np.array([getattr(r, f"{name}_{q}") for r in rows]) * 1e3
            ax.plot(x, y, style, label=f"{q.upper()}")
        for r, xi in zip(rows, x, strict=True):
            ax.annotate(f"{r.load:g}", (xi, getattr(r, f"{name}_p50") * 1e3),
                        textcoords="offset points", xytext=(4, -10), fontsize=7)
        ax.set_xlabel("throughput (output tokens/s)")
        ax.set_ylabel(f"{label} (ms)")
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, title=f"labels: load ({unit})", title_fontsize=7)
    fig.suptitle(title or "Serving: latency against throughput")
    fig.tight_layout()
    return _save(fig, out, stem)
