"""What a design-space run found: the best configurations, and why (main effects, interactions, correlations).

* **Main effect** of a parameter: the mean objective over all measured points at each of its levels; its
  *spread* (best minus worst level mean) says how much the parameter matters on its own.
* **Interaction** of two parameters: from the table of mean objective per pair of levels, the root mean
  square of what is left after removing each parameter's own effect (cell - row mean - column mean +
  grand mean; two-way ANOVA on cell means). Zero: the parameters act independently.
* **Correlation across** a parameter such as ``workload`` or ``application``: for every two of its levels,
  the Pearson correlation of the objective over the configurations measured at both (same values of every
  other parameter). Near 1: what is good for one workload (or model) is good for the other.

Only points measured ``ok`` with the objective present count.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from submarine_elastic.dse.api import ResultsError, Value


@dataclass(frozen=True)
class LevelMean:
    level: Value
    mean: float
    count: int


@dataclass(frozen=True)
class MainEffect:
    """Mean objective per level of one parameter, in the space's level order."""

    parameter: str
    levels: tuple[LevelMean, ...]
    minimize: bool

    @property
    def spread(self) -> float:
        means = [lv.mean for lv in self.levels]
        return max(means) - min(means) if means else 0.0

    @property
    def best(self) -> LevelMean:
        pick = min if self.minimize else max
        return pick(self.levels, key=lambda lv: lv.mean)

    @property
    def worst(self) -> LevelMean:
        pick = max if self.minimize else min
        return pick(self.levels, key=lambda lv: lv.mean)


@dataclass(frozen=True)
class Interaction:
    """Two parameters' interaction strength and their table of cell means."""

    a: str
    b: str
    strength: float
    a_levels: tuple[Value, ...]
    b_levels: tuple[Value, ...]
    cells: Mapping[tuple[Value, Value], float]


@dataclass(frozen=True)
class Correlation:
    """Pairwise correlation of the objective between the levels of ``across``."""

    across: str
    levels: tuple[Value, ...]
    matrix: tuple[tuple[float, ...], ...]
    matched: int


@dataclass(frozen=True)
class Analysis:
    """Everything the report shows."""

    space: str
    objective: str
    minimize: bool
    parameters: tuple[str, ...]
    measured: int
    failed: int
    grand_mean: float
    best: tuple[Mapping[str, object], ...]
    main_effects: tuple[MainEffect, ...]
    interactions: tuple[Interaction, ...]
    correlation: Correlation | None
    best_per: Mapping[Value, Mapping[str, object]] = field(default_factory=dict)

    @property
    def lead(self) -> MainEffect | None:
        """The knob that matters most: the largest main effect, not counting the parameter correlated across
        (a workload or model is the context a configuration is chosen for, not a choice)."""
        across = self.correlation.across if self.correlation is not None else None
        return next((e for e in self.main_effects if e.parameter != across), None)


def _typed(levels: Sequence[Value]) -> dict[str, Value]:
    return {str(level): level for level in levels}


def analyse(
    record: Mapping[str, object], rows: Sequence[Mapping[str, str]], top: int = 5, across: str | None = None
) -> Analysis:
    """Analyse the rows of a results file (see the module docstring).

    ``across`` names the parameter to correlate across (default: ``workload`` or ``application`` when
    the space varies it).

    Raises:
        ResultsError: no point was measured ok with the objective, or ``across`` is not a parameter.
    """
    levels_of: dict[str, list[Value]] = dict(record["parameters"])  # type: ignore[call-overload]
    params = tuple(levels_of)
    objective = str(record["objective"])
    minimize = bool(record["minimize"])
    typed = {p: _typed(levels_of[p]) for p in params}
    points: list[tuple[dict[str, Value], float, Mapping[str, str]]] = []
    failed = 0
    for row in rows:
        value = row.get(objective, "")
        if row.get("status") != "ok" or value in ("", None):
            failed += row.get("status") != "ok"
            continue
        y = float(value)
        if not math.isfinite(y):
            continue
        points.append(({p: typed[p].get(row[p], row[p]) for p in params}, y, row))
    if not points:
        raise ResultsError(f"no point of space {record.get('name')!r} was measured ok with {objective!r}")
    ys = np.array([y for _, y, _ in points])
    grand = float(ys.mean())

    order = sorted(range(len(points)), key=lambda i: points[i][1], reverse=not minimize)
    best = tuple(
        {**points[i][0], objective: points[i][1], "point_id": points[i][2].get("point_id", "")} for i in order[:top]
    )

    effects = []
    for p in params:
        groups: dict[Value, list[float]] = defaultdict(list)
        for values, y, _ in points:
            groups[values[p]].append(y)
        ordered = [lv for lv in levels_of[p] if lv in groups] + [lv for lv in groups if lv not in levels_of[p]]
        effects.append(
            MainEffect(p, tuple(LevelMean(lv, float(np.mean(groups[lv])), len(groups[lv])) for lv in ordered), minimize)
        )
    effects.sort(key=lambda e: -e.spread)

    interactions = []
    for i, a in enumerate(params):
        for b in params[i + 1 :]:
            interactions.append(_interaction(a, b, points, levels_of))
    interactions.sort(key=lambda x: -x.strength)

    if across is None:
        across = next((p for p in ("workload", "application") if p in params and len(levels_of[p]) > 1), None)
    elif across not in params:
        raise ResultsError(f"cannot correlate across {across!r}: not a parameter of the space ({', '.join(params)})")
    correlation = _correlation(across, points, levels_of) if across else None
    best_per: dict[Value, Mapping[str, object]] = {}
    if across:
        for i in order:
            values = points[i][0]
            best_per.setdefault(values[across], {**values, objective: points[i][1]})
    return Analysis(
        space=str(record.get("name", "")),
        objective=objective,
        minimize=minimize,
        parameters=params,
        measured=len(points),
        failed=failed,
        grand_mean=grand,
        best=best,
        main_effects=tuple(effects),
        interactions=tuple(interactions),
        correlation=correlation,
        best_per=best_per,
    )


def _interaction(
    a: str, b: str, points: Sequence[tuple[dict[str, Value], float, object]], levels_of: Mapping[str, list[Value]]
) -> Interaction:
    cells: dict[tuple[Value, Value], list[float]] = defaultdict(list)
    for values, y, _ in points:
        cells[values[a], values[b]].append(y)
    means = {k: float(np.mean(v)) for k, v in cells.items()}
    a_levels = tuple(lv for lv in levels_of[a] if any(k[0] == lv for k in means))
    b_levels = tuple(lv for lv in levels_of[b] if any(k[1] == lv for k in means))
    row = {la: float(np.mean([m for (x, _), m in means.items() if x == la])) for la in a_levels}
    col = {lb: float(np.mean([m for (_, x), m in means.items() if x == lb])) for lb in b_levels}
    grand = float(np.mean(list(means.values()))) if means else 0.0
    residuals = [m - row[x] - col[y] + grand for (x, y), m in means.items() if x in row and y in col]
    strength = math.sqrt(float(np.mean(np.square(residuals)))) if residuals else 0.0
    return Interaction(a, b, strength, a_levels, b_levels, means)


def _correlation(
    across: str, points: Sequence[tuple[dict[str, Value], float, object]], levels_of: Mapping[str, list[Value]]
) -> Correlation:
    by_level: dict[Value, dict[tuple[tuple[str, Value], ...], float]] = defaultdict(dict)
    for values, y, _ in points:
        key = tuple(sorted((k, v) for k, v in values.items() if k != across))
        by_level[values[across]][key] = y
    levels = tuple(lv for lv in levels_of[across] if lv in by_level)
    matrix = []
    matched = 0
    for la in levels:
        line = []
        for lb in levels:
            common = sorted(set(by_level[la]) & set(by_level[lb]))
            matched = max(matched, len(common)) if la != lb else matched
            xa = np.array([by_level[la][k] for k in common])
            xb = np.array([by_level[lb][k] for k in common])
            if len(common) >= 3 and xa.std() > 0 and xb.std() > 0:
                line.append(float(np.corrcoef(xa, xb)[0, 1]))
            else:
                line.append(1.0 if la == lb else math.nan)
        matrix.append(tuple(line))
    return Correlation(across, levels, tuple(matrix), matched)


# --- writing ---------------------------------------------------------------------------------------


def human(x: object) -> str:
    """A metric for people: thousands separated and no decimals from 1000 on, four significant digits below."""
    if isinstance(x, float):
        return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"
    return str(x)


def write_report(analysis: Analysis, out_dir: Path) -> dict[str, Path]:
    """Write ``report.md`` with ``main_effects.png``, ``interactions.png`` and ``correlations.png``.

    Raises:
        OSError: the files cannot be written.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"report": out_dir / "report.md", "main_effects": _plot_effects(analysis, out_dir / "main_effects.png")}
    if analysis.interactions:
        paths["interactions"] = _plot_interactions(analysis, out_dir / "interactions.png")
    if analysis.correlation is not None:
        paths["correlations"] = _plot_correlation(
            analysis.correlation, analysis.objective, out_dir / "correlations.png"
        )
    paths["report"].write_text(markdown(analysis, {k: v.name for k, v in paths.items()}), encoding="utf-8")
    return paths


def markdown(analysis: Analysis, images: Mapping[str, str] | None = None) -> str:
    """The Markdown report (``images``: file names of the plots beside it, by kind)."""
    a = analysis
    images = images or {}
    goal = "lowest" if a.minimize else "highest"
    lines = [
        f"# Design-space exploration: {a.space}",
        "",
        f"{a.measured} configurations measured ({a.failed} failed); objective **{a.objective}** ({goal} is best), "
        f"mean {human(a.grand_mean)}.",
        "",
        "## Best configurations",
        "",
        "| rank | " + " | ".join(a.parameters) + f" | {a.objective} |",
        "|---:|" + "---|" * len(a.parameters) + "---:|",
    ]
    for i, row in enumerate(a.best, 1):
        lines.append(f"| {i} | " + " | ".join(str(row[p]) for p in a.parameters) + f" | {human(row[a.objective])} |")
    if a.best_per and a.correlation is not None:
        across = a.correlation.across
        others = [p for p in a.parameters if p != across]
        lines += [
            "",
            f"Best per {across}:",
            "",
            f"| {across} | " + " | ".join(others) + f" | {a.objective} |",
            "|---|" + "---|" * len(others) + "---:|",
        ]
        for level, row in a.best_per.items():
            lines.append(f"| {level} | " + " | ".join(str(row[p]) for p in others) + f" | {human(row[a.objective])} |")
    lead = a.lead
    if lead is not None:
        share = lead.spread / abs(a.grand_mean) if a.grand_mean else math.nan
        lines += [
            "",
            "## Why",
            "",
            f"**{lead.parameter}** matters most: {a.objective} averages {human(lead.best.mean)} at "
            f"{lead.parameter}={lead.best.level} against {human(lead.worst.mean)} at "
            f"{lead.parameter}={lead.worst.level} (a spread of {share:.0%} of the mean).",
        ]
        if a.interactions and a.interactions[0].strength > 0:
            x = a.interactions[0]
            lines.append(
                f"The strongest interaction is **{x.a} x {x.b}** (strength {human(x.strength)}): the best {x.a} "
                f"depends on {x.b}, so read their joint table below rather than each main effect alone."
            )
        lines += [
            "",
            "## Main effects",
            "",
            "| parameter | best level | worst level | spread | spread / mean |",
            "|---|---|---|---:|---:|",
        ]
        for e in a.main_effects:
            rel = e.spread / abs(a.grand_mean) if a.grand_mean else math.nan
            lines.append(
                f"| {e.parameter} | {e.best.level} ({human(e.best.mean)}) | {e.worst.level} ({human(e.worst.mean)}) "
                f"| {human(e.spread)} | {rel:.0%} |"
            )
        for e in a.main_effects:
            lines += ["", f"{e.parameter}:", "", "| level | mean | points |", "|---|---:|---:|"]
            lines += [f"| {lv.level} | {human(lv.mean)} | {lv.count} |" for lv in e.levels]
        if "main_effects" in images:
            lines += ["", f"![main effects]({images['main_effects']})"]
    if a.interactions:
        lines += ["", "## Interactions", "", "| parameters | strength |", "|---|---:|"]
        lines += [f"| {x.a} x {x.b} | {human(x.strength)} |" for x in a.interactions[:10]]
        x = a.interactions[0]
        lines += ["", f"{x.a} x {x.b} (mean {a.objective}):", ""]
        lines.append(f"| {x.a} \\ {x.b} | " + " | ".join(str(v) for v in x.b_levels) + " |")
        lines.append("|---|" + "---:|" * len(x.b_levels))
        for la in x.a_levels:
            cells = [human(x.cells[la, lb]) if (la, lb) in x.cells else "" for lb in x.b_levels]
            lines.append(f"| {la} | " + " | ".join(cells) + " |")
        if "interactions" in images:
            lines += ["", f"![interactions]({images['interactions']})"]
    c = a.correlation
    if c is not None:
        lines += [
            "",
            f"## Correlation across {c.across}",
            "",
            f"Pearson correlation of {a.objective} between two {c.across} levels over the configurations measured "
            f"at both (up to {c.matched}).",
            "",
            "| | " + " | ".join(str(v) for v in c.levels) + " |",
            "|---|" + "---:|" * len(c.levels),
        ]
        for lv, line in zip(c.levels, c.matrix, strict=True):
            lines.append(f"| {lv} | " + " | ".join("" if math.isnan(v) else f"{v:.2f}" for v in line) + " |")
        if "correlations" in images:
            lines += ["", f"![correlations]({images['correlations']})"]
    return "\n".join(lines) + "\n"


def _plot_effects(a: Analysis, path: Path) -> Path:
    n = max(1, len(a.main_effects))
    cols = min(3, n)
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(4.2 * cols, 3.2 * rows))
    for i, e in enumerate(a.main_effects):
        ax = fig.add_subplot(rows, cols, i + 1)
        x = np.arange(len(e.levels))
        ax.plot(x, [lv.mean for lv in e.levels], marker="o")
        ax.axhline(a.grand_mean, linestyle="--", color="grey", linewidth=0.8)
        ax.set_xticks(x, [str(lv.level) for lv in e.levels], rotation=30, ha="right", fontsize="small")
        ax.set_title(e.parameter, fontsize="medium")
        ax.set_ylabel(a.objective, fontsize="small")
        ax.grid(True, alpha=0.3)
    fig.suptitle(f"Main effects on {a.objective}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


def _plot_interactions(a: Analysis, path: Path) -> Path:
    shown = a.interactions[:3]
    fig = Figure(figsize=(5 * len(shown), 4))
    for i, x in enumerate(shown):
        ax = fig.add_subplot(1, len(shown), i + 1)
        grid = np.array([[x.cells.get((la, lb), np.nan) for lb in x.b_levels] for la in x.a_levels])
        image = ax.imshow(grid, aspect="auto", cmap="viridis_r" if a.minimize else "viridis")
        ax.set_xticks(range(len(x.b_levels)), [str(v) for v in x.b_levels], rotation=30, ha="right", fontsize="small")
        ax.set_yticks(range(len(x.a_levels)), [str(v) for v in x.a_levels], fontsize="small")
        ax.set_xlabel(x.b)
        ax.set_ylabel(x.a)
        ax.set_title(f"strength {human(x.strength)}", fontsize="small")
        fig.colorbar(image, ax=ax, label=a.objective)
    fig.suptitle("Strongest interactions (mean objective per pair of levels)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


def _plot_correlation(c: Correlation, objective: str, path: Path) -> Path:
    fig = Figure(figsize=(1.2 * len(c.levels) + 3, 1.0 * len(c.levels) + 2.5))
    ax = fig.add_subplot()
    image = ax.imshow(np.array(c.matrix, dtype=float), vmin=-1, vmax=1, cmap="coolwarm")
    labels = [str(v) for v in c.levels]
    ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right")
    ax.set_yticks(range(len(labels)), labels)
    for i, line in enumerate(c.matrix):
        for j, v in enumerate(line):
            if not math.isnan(v):
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize="small")
    fig.colorbar(image, ax=ax, label="Pearson r")
    ax.set_title(f"{objective}: correlation across {c.across}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path
