"""A live replay's figures and picture: per run the mean, median and p95 JCT, makespan and GPU use, every
job's GPUs over time; written as JSON, a Markdown table and a PNG. Every output says "emulated"."""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from submarine_elastic.replay.records import JobRecord, LiveRun

EMULATED_NOTE = (
    "emulated accelerators: step times are the measured GPU profiles'; the ratios hold, absolute times only "
    "on real GPUs"
)


def summary(run: LiveRun) -> dict[str, object]:
    """The run's figures: JCTs of the jobs that finished, makespan, GPU utilisation (ring sizes over the
    cluster's GPUs, from the first arrival to the last job's end), jobs with a problem."""
    jcts = [r.jct_s for r in run.records if r.jct_s is not None and r.state == "SUCCEEDED"]
    ends = [r.last_step_s for r in run.records if r.last_step_s is not None]
    makespan = max(ends) if ends else None
    return {
        "policy": run.policy,
        "jobs": len(run.records),
        "finished": len(jcts),
        "mean_jct_s": _r(statistics.fmean(jcts)) if jcts else None,
        "median_jct_s": _r(statistics.median(jcts)) if jcts else None,
        "p95_jct_s": _r(float(np.percentile(jcts, 95))) if jcts else None,
        "mean_queueing_s": _r(statistics.fmean([r.queueing_s for r in run.records if r.queueing_s is not None]))
        if any(r.queueing_s is not None for r in run.records)
        else None,
        "makespan_s": _r(makespan),
        "gpu_utilisation": _r(utilisation(run, makespan)) if makespan else None,
        "decisions": sum(len(v) for v in run.decisions.values()),
        "suspensions": sum(len(r.stopped_s) for r in run.records),
        "problems": {r.job.name: r.problems for r in run.records if r.problems},
        "wall_s": _r(run.wall_s),
        "accelerators": "emulated",
    }


def utilisation(run: LiveRun, until_s: float) -> float:
    """Mean share of the cluster's GPUs in a ring from 0 to ``until_s``."""
    grid = np.linspace(0.0, until_s, 600)
    used = np.zeros_like(grid)
    for record in run.records:
        used += training(record, grid)
    return float(np.mean(used) / run.plan.gpus)


def training(record: JobRecord, grid: np.ndarray) -> np.ndarray:
    """The job's ring size at each point of ``grid``: 0 before its first step, after its last, and from each
    suspension asked to the first step after its resumption."""
    out = _steps_at(record.ring, grid, record.last_step_s)
    for i, stopped in enumerate(record.stopped_s):
        back = record.resumed_step_s[i] if i < len(record.resumed_step_s) else None
        out = np.where((grid >= stopped) & (grid < (back if back is not None else np.inf)), 0.0, out)
    return out


def _steps_at(series: Sequence[tuple[float, int]], grid: np.ndarray, end: float | None) -> np.ndarray:
    """A step function (value from each point to the next), 0 before the first point and after ``end``."""
    if not series:
        return np.zeros_like(grid)
    times = np.array([t for t, _ in series])
    values = np.array([v for _, v in series], dtype=float)
    index = np.searchsorted(times, grid, side="right") - 1
    out = np.where(index >= 0, values[np.clip(index, 0, None)], 0.0)
    if end is not None:
        out = np.where(grid > end, 0.0, out)
    return out


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def write(runs: Sequence[LiveRun], out: Path, sims: dict[str, float] | None = None) -> dict[str, Path]:
    """``replay.json`` (every run's summary and jobs), ``replay.md`` (the table) and ``replay.png``."""
    out.mkdir(parents=True, exist_ok=True)
    summaries = [summary(run) for run in runs]
    data = {
        "note": EMULATED_NOTE,
        "workload": runs[0].plan.workload if runs else None,
        "time_scale": runs[0].plan.time_scale if runs else None,
        "cluster": f"{runs[0].plan.nodes}x{runs[0].plan.gpus_per_node}" if runs else None,
        "runs": [
            {
                **s,
                "jobs_detail": [r.as_dict() for r in run.records],
                # per job: [time, from workers, to workers, reason] of each controller decision
                "decision_log": {name: [list(d) for d in ds] for name, ds in run.decisions.items()},
            }
            for s, run in zip(summaries, runs, strict=True)
        ],
        "simulated_mean_jct_s": sims or {},
    }
    paths = {"json": out / "replay.json", "md": out / "replay.md", "png": out / "replay.png"}
    paths["json"].write_text(json.dumps(data, indent=2) + "\n")
    paths["md"].write_text(table(summaries, sims) + "\n")
    draw(runs, paths["png"])
    return paths


def table(summaries: Sequence[dict[str, object]], sims: dict[str, float] | None = None) -> str:
    """The runs side by side (ratio: mean JCT over the first run's), in 80 columns."""
    base = summaries[0].get("mean_jct_s") if summaries else None
    lines = [
        f"Live replay ({EMULATED_NOTE}).",
        "",
        "| policy | done | mean JCT | ratio | median | p95 | makespan | GPU use | sim |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        mean = s["mean_jct_s"]
        ratio = f"{mean / base:.3f}" if isinstance(mean, float) and isinstance(base, float) and base else "-"
        sim = (sims or {}).get(str(s["policy"]))
        lines.append(
            f"| {s['policy']} | {s['finished']}/{s['jobs']} | {_s(mean)} | {ratio} | {_s(s['median_jct_s'])} | "
            f"{_s(s['p95_jct_s'])} | {_s(s['makespan_s'])} | {_pct(s['gpu_utilisation'])} | {_s(sim)} |"
        )
    return "\n".join(lines)


def _s(value: object) -> str:
    return f"{value:.0f} s" if isinstance(value, float | int) else "-"


def _pct(value: object) -> str:
    return f"{value:.0%}" if isinstance(value, float) else "-"


def draw(runs: Sequence[LiveRun], path: Path) -> Path:
    """One panel a run: every job's GPUs in its ring over time, stacked, with the GPUs YARN holds for the jobs
    (dashed: held, not training, while a job starts or resizes), arrivals ticked, the elastic run's decisions
    marked (the controller's, or tiresias' suspensions and resumptions); and the jobs finished over time of
    every run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.artist import Artist

    fig, axes = plt.subplots(len(runs) + 1, 1, figsize=(11, 2.6 * (len(runs) + 1)), sharex=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    end = max((r.last_step_s or 0.0 for run in runs for r in run.records), default=1.0) * 1.02
    grid = np.linspace(0.0, end, 1200)
    names = sorted({r.job.name for run in runs for r in run.records})
    color_of = {name: colors[i % len(colors)] for i, name in enumerate(names)}
    for ax, run in zip(axes, runs, strict=False):
        stacks = [training(r, grid) for r in run.records]
        ax.stackplot(grid, stacks, colors=[color_of[r.job.name] for r in run.records], step="post", alpha=0.85)
        held = sum((_steps_at(r.held, grid, r.ended_s) for r in run.records), np.zeros_like(grid))
        ax.step(grid, held, where="post", color="k", linewidth=0.8, linestyle="--", label="held by YARN")
        for r in run.records:
            ax.axvline(r.job.arrival_s, color=color_of[r.job.name], linewidth=0.6, linestyle=":")
        for name, decided in run.decisions.items():
            for when, _old, new, reason in decided:
                color = color_of.get(name, "k")
                ax.plot([when], [run.plan.gpus + 0.3], marker="v", color=color, markersize=5)
                predicted = predicted_speedup(reason)
                label = f"{new}" + (f" ({predicted:.1f}x)" if predicted is not None else "")
                ax.annotate(label, (when, run.plan.gpus + 0.3), textcoords="offset points", xytext=(0, 5),
                            ha="center", fontsize=6, color=color)  # fmt: skip
        s = summary(run)
        ax.set_ylim(0, run.plan.gpus + 1.6)
        ax.set_ylabel("GPUs in a ring")
        ax.set_title(
            f"{run.policy}: mean JCT {_s(s['mean_jct_s'])}, makespan {_s(s['makespan_s'])}, GPU use "
            f"{_pct(s['gpu_utilisation'])}" + (" (▼ a decision: workers, predicted speed-up)" if run.decisions else ""),
            fontsize=10,
        )
        ax.grid(alpha=0.3)
    handles: list[Artist] = [plt.Rectangle((0, 0), 1, 1, color=color_of[n]) for n in names]
    handles.append(plt.Line2D([0], [0], color="k", linewidth=0.8, linestyle="--"))
    axes[0].legend(
        handles, [*names, "held by YARN"], loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, title="jobs"
    )
    ax_done = axes[-1]
    for i, run in enumerate(runs):
        ends = sorted(r.last_step_s for r in run.records if r.last_step_s is not None)
        ax_done.step([0.0, *ends], list(range(len(ends) + 1)), where="post", label=run.policy, color=f"C{i}")
    ax_done.set_ylabel("jobs finished")
    ax_done.set_xlabel("seconds since the replay began (emulated accelerators)")
    ax_done.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, title="runs")
    ax_done.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def predicted_speedup(reason: str) -> float | None:
    """The speed-up a goodput decision predicted at the count it chose (the ``speedup X`` after ``predicted at``
    where the reason has one, else its first), or None where the reason gives none."""
    found = re.search(r"predicted at \d+:[^(]*\(speedup (\d+(?:\.\d+)?)", reason) or re.search(
        r"speedup \(?(\d+(?:\.\d+)?)", reason
    )
    return float(found.group(1)) if found else None
