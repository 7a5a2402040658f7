"""PNG plots of simulation results (matplotlib, drawn off-screen; no pyplot state is touched)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure

from submarine_elastic.sim.api import SimResult


def jct_cdf(results: Mapping[str, SimResult], path: Path) -> Path:
    """Empirical CDF of job completion time, one line per policy (log-scaled hours).

    Raises:
        OSError: the file cannot be written.
    """
    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    for name, result in results.items():
        jcts = np.sort([j.jct_s / 3600 for j in result.jobs if j.jct_s is not None])
        if len(jcts):
            ax.step(
                jcts, np.arange(1, len(jcts) + 1) / len(jcts), where="post", label=f"{name} (mean {jcts.mean():.2f} h)"
            )
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (hours)")
    ax.set_ylabel("fraction of jobs")
    ax.set_ylim(0, 1.01)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize="small")
    ax.set_title("JCT CDF")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def utilisation(results: Mapping[str, SimResult], path: Path, total_gpus: int) -> Path:
    """Allocated GPUs as a fraction of the cluster over time, one line per policy.

    Raises:
        OSError: the file cannot be written.
    """
    fig = Figure(figsize=(8, 4.5))
    ax = fig.add_subplot()
    for name, result in results.items():
        if not result.utilisation:
            continue
        t = [u.time_s / 3600 for u in result.utilisation]
        y = [u.allocated_gpus / total_gpus for u in result.utilisation]
        ax.step(t, y, where="post", label=f"{name} (mean {result.summary.mean_utilisation:.0%})", linewidth=1)
    ax.set_xlabel("time (hours)")
    ax.set_ylabel("GPUs allocated")
    ax.set_ylim(0, 1.05)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize="small")
    ax.set_title("Cluster utilisation")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def workers_per_job(result: SimResult, path: Path, bins: int = 400) -> Path:
    """Heat map of each job's workers over time (rows: jobs in arrival order; log colour scale; grey: arrived
    and waiting with no worker; blank: not arrived yet, or done).

    Raises:
        OSError: the file cannot be written.
    """
    names = [j.name for j in result.jobs]
    index = {n: i for i, n in enumerate(names)}
    end = max((j.completion_s or 0.0 for j in result.jobs), default=0.0)
    start = min(j.arrival_s for j in result.jobs)
    edges = np.linspace(start, max(end, start + 1.0), bins + 1)
    grid = np.full((len(names), bins), np.nan)
    for job in result.jobs:
        stop = job.completion_s if job.completion_s is not None else edges[-1]
        grid[index[job.name], (edges[:-1] >= job.arrival_s) & (edges[:-1] < stop)] = 0.5  # waiting: "under"
    changes: dict[str, list[tuple[float, int]]] = {}
    for change in result.allocations:
        changes.setdefault(change.job, []).append((change.time_s, change.workers))
    for name, series in changes.items():
        row = index[name]
        for k, (t0, workers) in enumerate(series):
            t1 = series[k + 1][0] if k + 1 < len(series) else edges[-1]
            mask = (edges[:-1] >= t0) & (edges[:-1] < t1)
            grid[row, mask] = workers if workers else 0.5
    for job in result.jobs:
        if job.completion_s is not None:
            grid[index[job.name], edges[:-1] >= job.completion_s] = np.nan
    fig = Figure(figsize=(9, max(3.0, min(12.0, 0.05 * len(names) + 2))))
    ax = fig.add_subplot()
    cmap = colormaps["viridis"].with_extremes(under="lightgrey", bad="white")
    top = max(2.0, float(np.nanmax(grid)) if np.isfinite(grid).any() else 2.0)
    image = ax.imshow(
        grid,
        aspect="auto",
        interpolation="nearest",
        cmap=cmap,
        norm=LogNorm(vmin=1, vmax=top),
        extent=(edges[0] / 3600, edges[-1] / 3600, len(names), 0),
    )
    ticks = [t for t in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512) if t <= top]
    bar = fig.colorbar(image, ax=ax, label="workers", ticks=ticks, extend="min")
    bar.ax.set_yticklabels([str(t) for t in ticks])
    ax.set_xlabel("time (hours)")
    ax.set_ylabel("job (arrival order)")
    ax.set_title(f"Workers per job: {result.summary.scheduler}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path
