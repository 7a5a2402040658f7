"""Space files (YAML) and point sampling.

A space file::

    name: policies-under-load
    backend: simulator              # or: {type: command, command: "...", timeout_s: 3600, metrics: [wall_s]}
                                    # or: {type: pseudo-cluster, command: "...", timeout_s: 600, ...}
    objective: mean_jct_s           # the metric to optimise
    minimize: true
    sampling: {strategy: factorial} # or: {strategy: random | lhs, samples: 20, seed: 1}
    fixed:                          # settings every point shares
      workload: workload-1
      cluster: 4x4
    parameters:
      policy: [fifo, tiresias, greedy+goodput]
      arrival_scale: {range: [0.25, 1.0], steps: 3, log: true}
      scale_out_cost_s: {range: [0, 30], steps: 3}
      workers: {range: [1, 8], steps: 4, log: true, integer: true}

A parameter is a list of levels, or a range discretised into ``steps`` levels (evenly, or evenly in log
space with ``log: true``; rounded to integers with ``integer: true``). Sampling: ``factorial`` takes every
combination; ``random`` draws ``samples`` points uniformly over the levels; ``lhs`` draws a Latin hypercube
of ``samples`` points (each parameter's levels covered as evenly as ``samples`` allows; of 32 draws, the one
with the most distinct configurations). Both are
deterministic for a ``seed``; a point drawn twice is measured once.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from submarine_elastic.dse.api import Parameter, Point, Space, SpaceError, Strategy, Value

_LHS_DRAWS = 32


class _Range(BaseModel):
    model_config = ConfigDict(extra="forbid")

    range: tuple[float, float]
    steps: int = Field(ge=2)
    log: bool = False
    integer: bool = False

    @model_validator(mode="after")
    def _check(self) -> _Range:
        lo, hi = self.range
        if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
            raise ValueError(f"range must be [low, high] with low < high, got {list(self.range)}")
        if self.log and lo <= 0:
            raise ValueError(f"a log range must be positive, got {list(self.range)}")
        return self

    def levels(self) -> tuple[Value, ...]:
        lo, hi = self.range
        if self.log:
            raw = [
                math.exp(math.log(lo) + i * (math.log(hi) - math.log(lo)) / (self.steps - 1)) for i in range(self.steps)
            ]
        else:
            raw = [lo + i * (hi - lo) / (self.steps - 1) for i in range(self.steps)]
        if self.integer:
            return tuple(dict.fromkeys(round(v) for v in raw))
        return tuple(round(v, 6) for v in raw)


class _Sampling(BaseModel):
    model_config = ConfigDict(extra="forbid")

    strategy: Strategy = Strategy.FACTORIAL
    samples: int | None = Field(default=None, ge=1)
    seed: int = 0


class _Command(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["command"]
    command: str
    timeout_s: float = Field(default=3600.0, gt=0)
    cwd: str | None = None
    metrics: list[str] = ["wall_s"]


class _PseudoCluster(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["pseudo-cluster"]
    command: str = Field(default="{python} examples/train_elastic.py", min_length=1)
    workdir: str | None = None
    timeout_s: float = Field(default=600.0, gt=0)
    loss_window: int = Field(default=10, ge=0)
    worker_resources: str = "memory-mb=1024,vcores=1"
    env: dict[str, str] = {}
    job_name: str = "dse-{point_id}"
    rm_url: str | None = None


class _Simulator(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["simulator"]


class _SpaceFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    backend: (
        Literal["simulator", "pseudo-cluster"]
        | Annotated[_Simulator | _Command | _PseudoCluster, Field(discriminator="type")]
    ) = "simulator"
    objective: str = "mean_jct_s"
    minimize: bool = True
    sampling: _Sampling = _Sampling()
    fixed: dict[str, Value] = {}
    parameters: dict[str, list[Value] | _Range]


def parse_space(data: object, source: str = "<space>") -> Space:
    """Build a :class:`Space` from parsed YAML.

    Raises:
        SpaceError: a key is unknown, missing or has a bad value (the message names the file and key).
    """
    try:
        model = _SpaceFile.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors())
        raise SpaceError(f"{source}: {problems}") from None
    params = tuple(
        Parameter(name, tuple(levels) if isinstance(levels, list) else levels.levels())
        for name, levels in model.parameters.items()
    )
    backend: str
    options: dict[str, Any]
    if isinstance(model.backend, _Command | _PseudoCluster):
        backend, options = model.backend.type, model.backend.model_dump(exclude={"type"})
    elif model.backend == "pseudo-cluster":
        backend, options = "pseudo-cluster", {}
    else:
        backend, options = "simulator", {}
    try:
        return Space(
            name=model.name,
            parameters=params,
            strategy=model.sampling.strategy,
            samples=model.sampling.samples,
            seed=model.sampling.seed,
            fixed=dict(model.fixed),
            backend=backend,
            backend_options=options,
            objective=model.objective,
            minimize=model.minimize,
        )
    except SpaceError as exc:
        raise SpaceError(f"{source}: {exc}") from None


def load_space(path: Path) -> Space:
    """Read and validate a space file.

    Raises:
        SpaceError: the file cannot be read, is not YAML, or is not a valid space.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpaceError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpaceError(f"{path}: not valid YAML: {exc}") from exc
    return parse_space(data, str(path))


def sample_points(space: Space) -> list[Point]:
    """The points of a space, in a deterministic order, each configuration once."""
    params = space.parameters
    if space.strategy is Strategy.FACTORIAL:
        combos: Sequence[tuple[Value, ...]] = list(itertools.product(*(p.levels for p in params)))
    else:
        rng = random.Random(space.seed)
        n = space.samples or 1
        if space.strategy is Strategy.RANDOM:
            combos = [tuple(rng.choice(p.levels) for p in params) for _ in range(n)]
        else:
            # Discrete levels make two rows of a hypercube coincide now and then; of a few draws keep the
            # one with the most distinct configurations (still deterministic for the seed).
            best: list[tuple[Value, ...]] = []
            for _ in range(_LHS_DRAWS):
                columns = []
                for p in params:
                    strata = list(range(n))
                    rng.shuffle(strata)
                    k = len(p.levels)
                    columns.append([p.levels[min(k - 1, int((s + rng.random()) / n * k))] for s in strata])
                draw = list(zip(*columns, strict=True))
                if len(set(draw)) > len(set(best)):
                    best = draw
                if len(set(best)) == n:
                    break
            combos = best
    points: dict[str, Point] = {}
    for combo in combos:
        point = Point({p.name: v for p, v in zip(params, combo, strict=True)}, space.fixed)
        points.setdefault(point.point_id, point)
    return list(points.values())
