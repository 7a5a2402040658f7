"""Builders of synthetic snapshots and a tiny single-cluster loop for the policy tests."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from submarine_elastic.policy import (
    Decision,
    JobMetrics,
    JobView,
    PolicyEngine,
    Snapshot,
    StepTime,
    Throughput,
)


def job(
    job_id: str = "job-a",
    *,
    min_workers: int = 1,
    max_workers: int = 8,
    current: int = 1,
    pending: int = 0,
    elastic: bool = True,
    submitted_at: float = 0.0,
    last_resize_at: float | None = None,
    throughput: Mapping[int, float] | None = None,
    steps: int = 100,
    step_times: Mapping[str, Sequence[float]] | None = None,
    loss: Sequence[float] = (),
    noise: float | None = None,
    batch_size: int | None = None,
    learning_rate: float | None = None,
    remaining: float | None = None,
    instances: Sequence[str] = (),
    step: int = 0,
) -> JobView:
    """A JobView; ``throughput`` maps world size to samples/s, each measured over ``steps`` steps."""
    metrics = JobMetrics(
        step=step,
        throughput={k: Throughput(v, steps) for k, v in (throughput or {}).items()},
        step_times={k: tuple(v) for k, v in (step_times or {}).items()},
        loss_window=tuple(loss),
        gradient_noise_scale=noise,
        batch_size=batch_size,
        learning_rate=learning_rate,
        remaining_samples=remaining,
    )
    return JobView(
        job_id=job_id,
        min_workers=min_workers,
        max_workers=max_workers,
        elastic=elastic,
        current_workers=current,
        pending_workers=pending,
        submitted_at=submitted_at,
        last_resize_at=last_resize_at,
        instances=tuple(instances),
        metrics=metrics,
    )


def snapshot(*jobs: JobView, capacity: int = 8, free: int | None = None, now: float = 1000.0) -> Snapshot:
    """A snapshot; ``free`` defaults to what the jobs leave of ``capacity``."""
    if free is None:
        free = max(0, capacity - sum(j.holding for j in jobs))
    return Snapshot(now=now, capacity=capacity, free=free, jobs=tuple(jobs))


def random_snapshots(seed: int, count: int = 60) -> list[Snapshot]:
    """Varied snapshots: empty ones, waiting jobs, unknown metrics, limits changed under a job, odd noise,
    step times per configuration for some jobs (drawn from their own generator, so the rest stays as it was)."""
    rng = random.Random(seed)
    measured_rng = random.Random(seed + 1)
    out = []
    for i in range(count):
        jobs = []
        for n in range(rng.randint(0, 5)):
            lo = rng.randint(1, 3)
            hi = rng.randint(lo, 8)
            elastic = rng.random() < 0.8
            if not elastic:
                hi = lo
            current = rng.choice([0, lo, hi, rng.randint(0, hi + 2)])
            sizes = rng.sample(range(1, 10), rng.randint(0, 5))
            base = rng.uniform(10, 500)
            throughput = {k: base * k ** rng.uniform(0.2, 1.0) * rng.uniform(0.9, 1.1) for k in sizes}
            names = [f"worker-{w}" for w in range(current)]
            step_times = {
                name: [rng.uniform(0.5, 1.5) * (3 if rng.random() < 0.15 else 1) for _ in range(rng.randint(0, 12))]
                for name in names
            }
            loss = [
                rng.uniform(0.1, 3) if rng.random() < 0.3 else 2.0 / (1 + s * rng.uniform(0, 0.2))
                for s in range(rng.randint(0, 30))
            ]
            jobs.append(
                job(
                    f"job-{n}",
                    min_workers=lo,
                    max_workers=hi,
                    current=current,
                    pending=rng.choice([0, 0, 0, 1]),
                    elastic=elastic,
                    submitted_at=rng.uniform(0, 500),
                    last_resize_at=rng.choice([None, rng.uniform(0, 1000)]),
                    throughput=throughput,
                    steps=rng.choice([0, 5, 100]),
                    step_times=step_times,
                    loss=loss,
                    noise=rng.choice([None, rng.uniform(1, 1e4)]),
                    batch_size=rng.choice([None, 32 * max(1, current)]),
                    learning_rate=rng.choice([None, 0.1]),
                    remaining=rng.choice([None, rng.uniform(0, 1e6)]),
                    instances=names if rng.random() < 0.5 else (),
                    step=rng.randint(0, 10_000),
                )
            )
        jobs = [_with_step_times(view, measured_rng) for view in jobs]
        held = sum(j.holding for j in jobs)
        capacity = rng.randint(0, 24)
        capacity = max(capacity, held) if rng.random() < 0.8 else capacity
        free = rng.randint(0, max(0, capacity - held)) if capacity >= held else 0
        slots = measured_rng.choice([None, 2, 4])
        out.append(Snapshot(now=1000.0 + i, capacity=capacity, free=free, jobs=tuple(jobs), slots_per_node=slots))
    return out


def _with_step_times(view: JobView, rng: random.Random) -> JobView:
    """Half the jobs get step times in a few configurations and a batch range to choose from."""
    if rng.random() < 0.5:
        return view
    configurations = []
    for _ in range(rng.randint(1, 6)):
        workers = rng.randint(1, 8)
        nodes = rng.randint(1, workers)
        local = rng.choice([8.0, 32.0, 100.5, 256.0])
        accum = rng.choice([0, 0, 1, 3])
        seconds = (accum + 1) * (0.01 + local * rng.uniform(1e-4, 1e-3)) + (workers > 1) * rng.uniform(0, 0.3)
        sync = rng.choice([None, seconds * rng.uniform(0, 0.5)])
        configurations.append(StepTime(workers, nodes, local, accum, seconds, sync, rng.choice([0, 10, 100])))
    low = rng.choice([16, 64])
    return replace(
        view,
        metrics=replace(
            view.metrics, configurations=tuple(configurations), resize_cost_s=rng.choice([None, 0.5, 30.0])
        ),
        min_batch_size=low,
        max_batch_size=low * rng.choice([1, 8, 64]),
        max_local_batch=rng.choice([None, 64, 512]),
        requested_workers=rng.choice([None, view.max_workers]),
    )


def apply(view: JobView, decision: Decision | None, now: float) -> JobView:
    """The job after the controller carried out ``decision`` (instantly)."""
    if decision is None or decision.target_workers == view.current_workers:
        return view
    return replace(view, current_workers=decision.target_workers, pending_workers=0, last_resize_at=now)


def run_single_job(
    engine: PolicyEngine,
    start: JobView,
    throughput_at: Callable[[int], float],
    *,
    rounds: int,
    capacity: int = 16,
    steps_per_round: int = 50,
    seconds_per_round: float = 100.0,
) -> list[int]:
    """Run one job for ``rounds`` policy rounds: each round it trains ``steps_per_round`` steps at its
    size (adding them to that size's throughput record), then the engine decides and the decision is
    applied at once. Returns the size after every round."""
    view = start
    measured: dict[int, Throughput] = dict(view.metrics.throughput)
    now = 0.0
    sizes = []
    for _ in range(rounds):
        k = view.current_workers
        done = measured.get(k, Throughput(0.0, 0)).steps
        measured[k] = Throughput(throughput_at(k), done + steps_per_round)
        view = replace(
            view,
            metrics=replace(view.metrics, throughput=dict(measured), step=view.metrics.step + steps_per_round),
        )
        now += seconds_per_round
        snap = Snapshot(now=now, capacity=capacity, free=capacity - view.holding, jobs=(view,))
        decisions = {d.job_id: d for d in engine.decide(snap)}
        view = apply(view, decisions.get(view.job_id), now)
        sizes.append(view.current_workers)
    return sizes
