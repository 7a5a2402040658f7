"""The goodput job policy and arbiter: a throughput model fitted to a job's own step times, times the
statistical efficiency of its noise scale; workers for the p = -1 power mean of speedups, each resize
charged its cost; the batch and accumulation of the count each job gets."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pytest

from submarine_elastic.policy import (
    Allocation,
    Decision,
    GoodputArbiter,
    GoodputPolicy,
    GreedyPolicy,
    JobMetrics,
    JobView,
    PolicyConfigError,
    PolicyEngine,
    PolicyStateError,
    Request,
    Snapshot,
    StepTime,
)
from submarine_elastic.policy.goodput import MAX_CONFIGURATIONS, estimated_throughput, statistical_efficiency
from submarine_elastic.policy.goodput_model import BATCH_HYSTERESIS, EXPLORE_FACTOR, GoodputModel, ThroughputModel

from ._policy_support import job, snapshot

# one micro-step costs A + B * m seconds; gradients sync in C_NODE (+ D per worker past 2) on one node
A, B, C_NODE, C_NET, D = 0.05, 0.001, 0.02, 0.2, 0.005


def step(k: int, local: float, *, nodes: int = 1, accum: int = 0, net: float = C_NET, split: bool = True) -> StepTime:
    """A StepTime of the module's model (``net``: sync seconds on several nodes)."""
    sync = 0.0 if k == 1 else (C_NODE if nodes == 1 else net) + D * (k - 2)
    seconds = (accum + 1) * (A + B * local) + sync
    return StepTime(k, nodes, local, accum, seconds, sync if split else None, 100)


MEASURED = (step(1, 64), step(1, 256), step(2, 128), step(4, 64), step(8, 64, nodes=2), step(12, 128, nodes=3))
#: the same job on a network as fast as a node's links: it scales across nodes
FAST = tuple(
    replace(
        m, seconds=m.seconds - m.sync_seconds + C_NODE + D * (m.workers - 2), sync_seconds=C_NODE + D * (m.workers - 2)
    )
    if m.nodes > 1
    else m
    for m in MEASURED
)


def goodput_job(
    job_id: str = "job-a",
    *,
    current: int = 4,
    batch: int = 256,
    noise: float | None = 2000.0,
    measured: Sequence[StepTime] = MEASURED,
    max_workers: int = 16,
    submitted_at: float = 0.0,
    batch_range: tuple[int, int] | None = (64, 4096),
    max_local: int | None = 512,
    resize_cost: float | None = None,
) -> JobView:
    return JobView(
        job_id=job_id,
        min_workers=1,
        max_workers=max_workers,
        current_workers=current,
        submitted_at=submitted_at,
        metrics=JobMetrics(
            step=1000,
            gradient_noise_scale=noise,
            batch_size=batch,
            configurations=tuple(measured),
            resize_cost_s=resize_cost,
        ),
        min_batch_size=None if batch_range is None else batch_range[0],
        max_batch_size=None if batch_range is None else batch_range[1],
        max_local_batch=max_local,
    )


def snap(*jobs: JobView, capacity: int = 16, now: float = 10_000.0, slots: int | None = 4) -> Snapshot:
    held = sum(j.holding for j in jobs)
    return Snapshot(now=now, capacity=capacity, free=max(0, capacity - held), jobs=jobs, slots_per_node=slots)


def allocate(arbiter: GoodputArbiter, s: Snapshot) -> dict[str, tuple[int, int | None]]:
    return {job_id: (a.workers, a.batch_size) for job_id, a in allocate_full(arbiter, s).items()}


def allocate_full(arbiter: GoodputArbiter, s: Snapshot) -> dict[str, Allocation]:
    requests = [Request(j, j.max_workers, settled=False, reason="wish") for j in s.jobs]
    return {a.job_id: a for a in arbiter.allocate(s, requests)}


# ------------------------------------------------------------------------------------------- model


def test_the_throughput_model_recovers_compute_sync_and_placement() -> None:
    for split in (True, False):  # sync measured apart, or only whole step times
        measured = [replace(m, sync_seconds=None) if not split else m for m in MEASURED]
        model = ThroughputModel.fit(measured)
        assert model is not None
        assert model.a == pytest.approx(A, rel=1e-6)
        assert model.b == pytest.approx(B, rel=1e-6)
        assert model.c_node == pytest.approx(C_NODE, rel=1e-6)
        assert model.c_net == pytest.approx(C_NET, rel=1e-6)
        predicted = model.step_seconds(np.array([16.0]), np.array([4.0]), np.array([100.0]), np.array([1.0]))
        assert predicted[0] == pytest.approx(step(16, 100, nodes=4, accum=1).seconds, rel=1e-6)
    assert ThroughputModel.fit([]) is None


def test_with_one_micro_batch_measured_larger_ones_are_predicted_faster_per_sample() -> None:
    """One size cannot tell fixed from per-sample compute; the model must not conclude the batch is free of fixed
    cost (then every batch has the same throughput and the smallest always wins on efficiency): half the measured
    compute is taken as fixed, until a second size is measured."""
    for split in (True, False):
        measured = step(1, 100, split=split)
        model = ThroughputModel.fit([measured])
        assert model is not None
        assert model.a == pytest.approx(measured.seconds / 2) and model.b == pytest.approx(measured.seconds / 200)
        one = np.array([1.0])
        per_sample = [
            float(model.step_seconds(one, one, np.array([m]), np.array([0.0]))[0]) / m for m in (50.0, 100.0, 200.0)
        ]
        assert per_sample[2] < 0.8 * per_sample[1]
        # and optimistic the other way: a smaller micro-batch (more workers for a fixed batch) costs its share
        assert per_sample[0] == pytest.approx(per_sample[1])
    # a second size measured: the fit follows the measurements, not the prior
    model = ThroughputModel.fit([step(1, 100), step(1, 200)])
    assert model is not None and model.a == pytest.approx(A) and model.b == pytest.approx(B)


@pytest.mark.parametrize("times", [(0.466, 0.466), (0.5, 0.43), (0.43, 0.5)])
def test_a_batch_split_unevenly_at_one_worker_count_does_not_make_one_worker_look_fast(
    times: tuple[float, float],
) -> None:
    """A global batch of 2048 on 7 workers runs 293 and 292 samples a worker: one size, not a slope fitted
    between two (their times differ by noise alone); and a step at one worker count cannot tell its
    synchronisation from its compute, so none of it is taken as synchronisation. (Fitted least-norm, 96 % of the
    step was synchronisation, and one worker was predicted to run the batch in 17 ms, 14 times the 7-worker rate:
    the policy shrank the job from 7 workers to 1.)"""
    measured = [StepTime(7, 1, 293, 0, times[0], None, 8), StepTime(7, 1, 292, 0, times[1], None, 6)]
    view = goodput_job(current=7, batch=2048, noise=None, measured=measured, batch_range=None, max_local=1024)
    best = GoodputModel(view, measured, 8).best(8)
    rate_at_7 = 2048 / float(np.mean(times))
    assert best.goodput[7] == pytest.approx(rate_at_7, rel=0.05)
    assert best.goodput[1] < best.goodput[7] / 3
    assert best.goodput[1] <= best.goodput[2] <= best.goodput[4] <= best.goodput[7]
    wish = GoodputPolicy().propose(view, snap(view, capacity=8))
    assert wish is None or wish.target_workers >= 7, wish


def test_with_one_micro_batch_measured_the_policy_tries_a_larger_batch() -> None:
    """A noisy job measured at one micro-batch is moved to a larger batch to measure it (with all compute taken
    as per-sample it stayed at the smallest batch the efficiency prefers)."""
    view = goodput_job(current=4, batch=256, noise=5000.0, measured=[step(4, 64)])
    best = GoodputModel(view, view.metrics.configurations, 4).best(4)
    local = best.batch[4] / 4 / (best.accum[4] + 1)
    assert 64 < local <= 64 * EXPLORE_FACTOR


def test_the_best_batch_follows_the_noise_scale() -> None:
    small = GoodputModel(goodput_job(noise=50.0), MEASURED, 4).best(8)
    large = GoodputModel(goodput_job(noise=1e6), MEASURED, 4).best(8)
    assert small.batch[4] < large.batch[4]
    # with little noise large batches waste samples: the best stays near the smallest allowed
    assert small.batch[4] <= 256
    # with a huge noise scale every sample counts: the largest batch the measurements let it try
    assert large.batch[4] >= 1024


def test_the_current_batch_is_kept_unless_another_is_clearly_better() -> None:
    """A noise scale measured anew every few steps must not swing the batch back and forth: at a worker
    count, a batch change needs BATCH_HYSTERESIS more modelled goodput than keeping the current batch."""
    model = GoodputModel(goodput_job(noise=600.0), MEASURED, 4)
    grid = [int(b) for b in model._candidates()]
    rates = {b: _goodput_at(model, b, 4) for b in grid}
    top = max(rates, key=lambda b: rates[b])
    near = [b for b in grid if b != top and rates[b] * (1 + BATCH_HYSTERESIS) >= rates[top]]
    far = [b for b in grid if 0 < rates[b] and rates[b] * (1 + BATCH_HYSTERESIS) < rates[top]]
    assert near and far
    for current in near:
        kept = GoodputModel(goodput_job(noise=600.0, batch=current), MEASURED, 4).best(4)
        assert int(kept.batch[4]) == current
    for current in far:
        moved = GoodputModel(goodput_job(noise=600.0, batch=current), MEASURED, 4).best(4)
        assert int(moved.batch[4]) == top


def _goodput_at(model: GoodputModel, batch: int, k: int) -> float:
    """The model's goodput of global batch ``batch`` at ``k`` workers (0 where it does not trust it)."""
    per_worker = batch / k
    accum = max(np.ceil(per_worker / 512 - 1e-9) - 1, 0.0)  # goodput_job's max_local
    local = np.array([[per_worker / (accum + 1)]])
    if not model._trusted(local).all():
        return 0.0
    assert model.throughput is not None
    seconds = model.throughput.step_seconds(
        np.array([[float(k)]]), model.nodes_for(np.array([[float(k)]])), local, np.array([[accum]])
    )
    return float(batch / seconds[0, 0] * model.efficiency(np.array([float(batch)]))[0])


def test_accumulation_reaches_a_batch_beyond_what_a_worker_fits() -> None:
    best = GoodputModel(goodput_job(noise=1e6, max_local=64, batch_range=(64, 1024)), MEASURED, 4).best(4)
    # four workers of at most 64 samples: a larger batch amortises the synchronisation over micro-batches
    assert best.batch[4] / 4 / (best.accum[4] + 1) <= 64
    assert best.accum[4] >= 1


def test_without_a_noise_scale_or_a_batch_range_the_batch_stays() -> None:
    for view in (goodput_job(noise=None), goodput_job(batch_range=None)):
        best = GoodputModel(view, MEASURED, 4).best(8)
        assert set(best.batch[1:].tolist()) == {256}


# ---------------------------------------------------------------------------------------- arbiter


def test_the_power_mean_shares_the_cluster_between_alike_jobs() -> None:
    a = goodput_job("job-a", current=12, measured=FAST, noise=1e5)
    b = goodput_job("job-b", current=4, measured=FAST, noise=1e5)
    counts = allocate(GoodputArbiter(resize_cost_s=0, hysteresis=0), snap(a, b))
    assert counts["job-a"][0] == counts["job-b"][0] == 8


def test_a_waiting_job_starts_by_taking_from_the_running_one() -> None:
    a = goodput_job("job-a", current=16)
    b = goodput_job("job-b", current=0, measured=())
    counts = allocate(GoodputArbiter(), snap(a, b))
    assert counts["job-b"][0] >= 1
    assert counts["job-a"][0] + counts["job-b"][0] <= 16


def test_a_resize_is_charged_its_cost() -> None:
    a = goodput_job("job-a", current=12, submitted_at=9000.0, measured=FAST, noise=1e5)
    b = goodput_job("job-b", current=4, submitted_at=9000.0, measured=FAST, noise=1e5)
    cheap = allocate(GoodputArbiter(resize_cost_s=0.5, hysteresis=0), snap(a, b))
    assert cheap["job-a"][0] < 12
    # the same move costs 30 s of a job 1000 s old: not worth it
    dear = allocate(GoodputArbiter(resize_cost_s=300, hysteresis=0), snap(a, b))
    assert dear.get("job-a", (12, None))[0] == 12 and dear.get("job-b", (4, None))[0] == 4
    # the jobs' measured cost is used when the arbiter is given none
    dear_a, dear_b = (replace(v, metrics=replace(v.metrics, resize_cost_s=300.0)) for v in (a, b))
    kept = allocate(GoodputArbiter(hysteresis=0), snap(dear_a, dear_b))
    assert {job_id: workers for job_id, (workers, _) in kept.items()} == {"job-a": 12, "job-b": 4}


def test_placement_counts_where_the_measurements_show_it_matters() -> None:
    slow_net = [step(1, 64), step(1, 256), step(2, 64), step(4, 64), step(8, 64, nodes=2, net=2.0)]
    fast_net = [step(1, 64), step(1, 256), step(2, 64), step(4, 64), step(8, 64, nodes=2, net=C_NODE)]
    lone = {"noise": 1e6, "current": 4, "max_workers": 8}
    slow = allocate(
        GoodputArbiter(resize_cost_s=0, hysteresis=0), snap(goodput_job(measured=slow_net, **lone), capacity=8)
    )
    fast = allocate(
        GoodputArbiter(resize_cost_s=0, hysteresis=0), snap(goodput_job(measured=fast_net, **lone), capacity=8)
    )
    assert slow.get("job-a", (4, None))[0] == 4  # crossing nodes costs more than it brings
    assert fast["job-a"][0] == 8


def test_the_arbiter_places_jobs_from_the_measured_placement_speedups() -> None:
    """A job spread over two nodes runs at its measured speed there, not at the packed speed its count would
    have: where the network is slow the arbiter moves it onto one node (a change charged like a resize), and
    gives every count with the nodes to pack it on."""
    slow_net = [step(1, 64), step(1, 256), step(2, 64), step(4, 64), step(4, 64, nodes=2, net=2.0)]
    spread = replace(goodput_job(measured=slow_net, noise=1e6, current=4, max_workers=4), placement=(2, 2))
    s = snap(spread, capacity=4)
    (moved,) = GoodputArbiter(resize_cost_s=1, hysteresis=0).allocate(s, [Request(spread, 4, False, "wish")])
    assert (moved.workers, moved.nodes) == (4, 1)
    assert moved.reason.startswith("goodput: moves its 4 workers from 2 nodes to 1, speedup ")
    # the same move costs a job about to end most of what it has left: not worth it
    near_end = replace(spread, metrics=replace(spread.metrics, remaining_samples=1.0))
    dear = GoodputArbiter(resize_cost_s=50, hysteresis=0).allocate(s, [Request(near_end, 4, False, "wish")])
    assert [a.nodes for a in dear] in ([], [None])
    # a settled job is not moved
    settled = GoodputArbiter(resize_cost_s=1, hysteresis=0).allocate(s, [Request(spread, 4, True, "cooldown")])
    assert [a.nodes for a in settled] in ([], [None])
    grown = allocate_full(GoodputArbiter(resize_cost_s=0), snap(goodput_job(current=2, measured=FAST), capacity=16))
    assert (grown["job-a"].workers, grown["job-a"].nodes) == (16, 4)


def test_counts_pack_on_nodes_a_divisor_of_a_node_or_whole_nodes() -> None:
    """Three of four slots of a node would leave one no job of two fits: with 4 slots a node, a job gets 1, 2, 4
    or a multiple of 4 workers (or what it holds and its limits)."""
    one = goodput_job(current=2, measured=FAST, noise=1e6)
    for capacity, expected in ((3, 2), (7, 4), (11, 8), (15, 12)):
        assert allocate(GoodputArbiter(resize_cost_s=0), snap(one, capacity=capacity)).get("job-a", (2,))[0] == expected
    assert allocate(GoodputArbiter(resize_cost_s=0), snap(one, capacity=7, slots=None))["job-a"][0] == 7


def test_a_job_that_asks_for_a_count_that_does_not_pack_may_get_the_next_one_that_does() -> None:
    """Asked for 7 with 4 slots a node, a job at 4 that is predicted faster at 8 gets 8: rounded down to 4, the
    count it holds, it would never grow however many slots are free."""
    a = goodput_job(current=4, measured=FAST, noise=1e6)
    s = snap(a, capacity=16)
    (given,) = GoodputArbiter(resize_cost_s=0).allocate(s, [Request(a, 7, settled=False, reason="wish")])
    assert (given.workers, given.nodes) == (8, 2), given
    # Asked for what it holds, it keeps it.
    kept = GoodputArbiter(resize_cost_s=0).allocate(s, [Request(a, 4, settled=False, reason="wish")])
    assert all(k.workers == 4 for k in kept), kept


def test_a_job_grows_at_most_the_explore_factor_past_what_was_measured() -> None:
    measured = [step(1, 64), step(1, 128), step(2, 64)]
    counts = allocate(GoodputArbiter(resize_cost_s=0), snap(goodput_job(current=2, measured=measured), capacity=64))
    assert counts["job-a"][0] == 4  # measured at 2 at most: tried at twice that, not more
    fresh = allocate(GoodputArbiter(), snap(goodput_job(current=0, measured=()), capacity=64, slots=4))
    assert fresh["job-a"][0] == 4  # one node before anything is measured


def test_a_job_explores_at_most_once_per_interval() -> None:
    """Once a job ran in a configuration outside what it had been measured at, it is given no other such
    configuration (more workers, another micro-batch) until explore_interval_s has passed."""
    arbiter = GoodputArbiter(resize_cost_s=0, explore_interval_s=300)
    first = [step(1, 64), step(2, 64)]
    assert allocate(arbiter, snap(goodput_job(current=2, measured=first), capacity=64, now=1000.0))["job-a"][0] == 4
    explored = [*first, step(4, 64)]  # measured at 4 from the next round
    view = goodput_job(current=4, batch=256, measured=explored)
    for now in (1060.0, 1200.0, 1299.0):
        assert allocate(arbiter, snap(view, capacity=64, now=now)).get("job-a", (4, None))[0] == 4
        best = GoodputModel(view, explored, 4, explore=False).best(4)
        assert best.batch[4] / 4 / (best.accum[4] + 1) == 64  # the micro-batch it was measured at
    assert allocate(arbiter, snap(view, capacity=64, now=1360.0))["job-a"][0] == 8
    state = json.loads(json.dumps(arbiter.state_dict()))
    assert state["explored"] == {"job-a": 1060.0}


def test_the_arbiter_gives_the_batch_of_the_count_it_gives_and_the_engine_applies_it() -> None:
    a = goodput_job("job-a", current=16, noise=1e6)
    b = goodput_job("job-b", current=0, noise=1e6, submitted_at=9990.0)
    engine = PolicyEngine(GoodputPolicy(), GoodputArbiter(), cooldown_s=0)
    decisions = {d.job_id: d for d in engine.decide(snap(a, b))}
    assert engine.last_refusals == ()
    shrunk = decisions["job-a"]
    expected = GoodputModel(a, MEASURED, 4).best(16)
    assert shrunk.target_workers < 16
    assert shrunk.batch_size == int(expected.batch[shrunk.target_workers])
    assert shrunk.accum_steps == int(expected.accum[shrunk.target_workers])
    assert "goodput" in shrunk.reason and "batch" in shrunk.reason


def test_a_batch_change_alone_is_a_decision() -> None:
    a = goodput_job("job-a", current=8, batch=64, noise=1e6)
    engine = PolicyEngine(GoodputPolicy(), GoodputArbiter(), cooldown_s=0)
    (decision,) = engine.decide(snap(a, capacity=8))
    assert decision.target_workers == 8
    assert decision.batch_size is not None and decision.batch_size > 64


def test_a_job_that_keeps_its_count_keeps_the_batch_of_that_count() -> None:
    """The job policy's batch is chosen for the count it asks for; where the arbiter keeps the count, the batch
    of that count stays (the job policy's batch would be applied, then undone the next round)."""
    probe = goodput_job("job-a", current=4)
    kept = int(GoodputModel(probe, MEASURED, 4).best(16).batch[4])
    a = goodput_job("job-a", current=4, batch=kept)
    s = snap(a, capacity=4)
    wish = GoodputPolicy().propose(a, s)
    assert wish is not None and wish.target_workers > 4 and wish.batch_size not in (None, kept)
    engine = PolicyEngine(GoodputPolicy(), GoodputArbiter(), cooldown_s=0)
    assert list(engine.decide(s)) == []
    assert engine.last_refusals == ()


def test_without_step_times_it_falls_back_to_throughput_by_world_size() -> None:
    a = job("job-a", current=2, throughput={1: 100.0, 2: 200.0})
    b = job("job-b", min_workers=2, current=2, throughput={1: 100.0, 2: 110.0})
    assert estimated_throughput(a, 4) == 400.0 and statistical_efficiency(a, 4) == 1.0
    decisions = PolicyEngine(GreedyPolicy(), GoodputArbiter(), cooldown_s=60).decide(snapshot(a, b, capacity=8))
    assert {d.job_id: d.target_workers for d in decisions} == {"job-a": 6}
    assert all(d.batch_size is None for d in decisions)


def test_history_is_kept_bounded_and_survives_a_restart() -> None:
    arbiter = GoodputArbiter()
    view = goodput_job(measured=[step(1, 10.0 + i) for i in range(MAX_CONFIGURATIONS + 5)])
    s = snap(view)
    first = allocate(arbiter, s)
    state = json.loads(json.dumps(arbiter.state_dict()))
    assert len(state["history"]["job-a"]) == MAX_CONFIGURATIONS
    restarted = GoodputArbiter()
    restarted.load_state_dict(state)
    bare = replace(view, metrics=replace(view.metrics, configurations=()))
    assert allocate(restarted, snap(bare)) == first
    with pytest.raises(PolicyStateError):
        GoodputArbiter().load_state_dict({"version": 1, "history": {"job-a": [[1, 2]]}})
    with pytest.raises(PolicyStateError, match="explored must be a mapping"):
        GoodputArbiter().load_state_dict({"version": 2, "history": {}, "explored": [1]})
    older = GoodputArbiter()  # a state written before exploration was recorded
    older.load_state_dict({"version": 1, "history": state["history"]})
    assert allocate(older, snap(bare)) == first


def test_the_job_policy_asks_for_its_best_speedup_within_the_cap() -> None:
    measured = [step(1, 64), step(1, 128), step(2, 64)]
    decision = GoodputPolicy().propose(goodput_job(current=2, measured=measured), snap())
    assert isinstance(decision, Decision)
    assert decision.target_workers == 4
    assert "until measured there" in decision.reason


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"resize_cost_s": -1}, "resize_cost_s must be >= 0.0, got -1"),
        ({"hysteresis": 1.0}, "hysteresis must be < 1.0, got 1.0"),
        ({"min_horizon_s": 0}, "min_horizon_s must be > 0.0, got 0"),
        ({"initial_workers": 0}, "initial_workers must be an int >= 1, got 0"),
        ({"explore_interval_s": -1}, "explore_interval_s must be >= 0.0, got -1"),
    ],
)
def test_rejects_bad_parameters(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(PolicyConfigError, match=message):
        GoodputArbiter(**kwargs)  # type: ignore[arg-type]


def test_step_time_rejects_what_cannot_be_measured() -> None:
    from submarine_elastic.policy import InvalidSnapshotError

    with pytest.raises(InvalidSnapshotError, match=r"StepTime.nodes \(3\) exceeds its workers \(2\)"):
        StepTime(2, 3, 64, 0, 1.0)
    with pytest.raises(InvalidSnapshotError, match="sync_seconds .* exceeds the step's seconds"):
        StepTime(2, 1, 64, 0, 1.0, 2.0)
    with pytest.raises(InvalidSnapshotError, match="min_batch_size and max_batch_size come together"):
        JobView("job-a", 1, 4, min_batch_size=8)


# ------------------------------------------------------------------------- sound live decisions


def _two_counts(ratio: float) -> tuple[StepTime, ...]:
    """Global batch 64 measured at 1 worker (640 samples/s) and at 2 (``ratio`` times as fast)."""
    return (StepTime(1, 1, 64, 0, 0.1, None, 100), StepTime(2, 1, 32, 0, 64 / (640 * ratio), None, 100))


def test_a_job_shrinks_for_its_own_sake_only_on_what_it_measured_there_and_says_the_figures() -> None:
    slower = (StepTime(1, 1, 32, 0, 0.1, None, 100), StepTime(2, 1, 32, 0, 0.25, None, 100))
    measured = goodput_job("job-a", current=2, batch=64, noise=None, measured=slower, batch_range=None, max_workers=4)
    wish = GoodputPolicy().propose(measured, snap(measured, capacity=4))
    assert wish is not None and wish.target_workers == 1
    assert wish.reason.startswith("goodput: fewer workers are as fast: predicted at 1: 427 useful samples/s"), wish
    assert "(speedup 1.00); measured at 2 workers 256 samples/s (250 ms a step of 64), at best 256 useful there " in (
        wish.reason
    )

    # Holding 3, measured at 1 and 4 only: 3 is predicted slower than 1, but nothing was measured at 3.
    unmeasured = (StepTime(1, 1, 32, 0, 0.1, None, 100), StepTime(4, 1, 32, 0, 0.5, None, 100))
    held = goodput_job("job-b", current=3, batch=96, noise=None, measured=unmeasured, batch_range=None, max_workers=4)
    wish = GoodputPolicy().propose(held, snap(held, capacity=4))
    assert wish is not None and wish.target_workers == 3 and wish.batch_size is None
    assert wish.reason.startswith("goodput: keeps 3 workers until measured there"), wish.reason


def test_a_job_the_arbiter_shrinks_for_its_own_sake_gets_the_measured_figures_whatever_its_policy_asked() -> None:
    """Its policy held at 2 (say by the reversal hysteresis), the arbiter still gives it 1 where 2 measured slower:
    the reason gives the measurement, not the policy's hold."""
    slower = (StepTime(1, 1, 32, 0, 0.1, None, 100), StepTime(2, 1, 32, 0, 0.25, None, 100))
    a = goodput_job("job-a", current=2, batch=64, noise=None, measured=slower, batch_range=None, max_workers=4)
    s = snap(a, capacity=4)
    held = Request(a, 2, settled=False, reason="hysteresis: 2 -> 1 would reverse the last change; 20s left")
    (given,) = GoodputArbiter().allocate(s, [held])
    assert given.workers == 1
    assert "; goodput: fewer workers are as fast: predicted at 1:" in given.reason and "hysteresis" not in given.reason


def test_a_job_shrunk_for_another_says_for_which() -> None:
    a = goodput_job("job-a", current=8)
    b = replace(goodput_job("job-b", current=0, submitted_at=9_000.0), min_workers=2)
    given = allocate_full(GoodputArbiter(), snap(a, b, capacity=8))
    assert given["job-a"].workers < 8 and given["job-b"].workers >= 2
    assert given["job-a"].reason.endswith("; for job-b"), given["job-a"].reason


@pytest.mark.parametrize("ratio", [1.05, 1.1])
def test_no_job_stays_at_its_minimum_beside_free_slots_where_more_workers_are_predicted_faster(
    ratio: float, caplog: pytest.LogCaptureFixture
) -> None:
    """A gain below the hysteresis but above the resize's cost: between jobs the hysteresis holds the count (against
    churn), but slots no job takes are given."""
    a = goodput_job("job-a", current=1, batch=64, noise=None, measured=_two_counts(ratio), batch_range=None)
    a = replace(a, max_workers=2)
    arbiter = GoodputArbiter()
    assert ratio * (1 - arbiter.hysteresis) < 1.0  # the hysteresis alone would keep it at 1
    given = allocate_full(arbiter, snap(a, capacity=4))
    assert given["job-a"].workers == 2, given
    assert f"speedup {ratio:.2f}" in given["job-a"].reason
    # With the slot taken it stays: no job is shrunk or held for it.
    assert allocate_full(arbiter, snap(a, capacity=1)) == {}
    # Slower at 2: it stays at 1 beside the free slots, and the log says what its model predicts (once).
    slower = replace(a, metrics=replace(a.metrics, configurations=_two_counts(0.9)))
    with caplog.at_level(logging.INFO, logger="submarine_elastic.policy.goodput"):
        assert allocate_full(arbiter, snap(slower, capacity=4)) == {}
        assert allocate_full(arbiter, snap(slower, capacity=4)) == {}
    assert [r.getMessage() for r in caplog.records] == [
        "goodput: job-a stays at its minimum of 1 beside 3 free slots: speedup 1.00 there, at most 0.90 predicted "
        "at 2, a resize needs more than 1.00"
    ]


@pytest.mark.parametrize("ratio", [1.05, 1.1])
def test_a_job_above_its_minimum_grows_into_free_slots_where_more_workers_are_predicted_faster(ratio: float) -> None:
    """Not only a job at its minimum: a job at 2 workers measured ``ratio`` times as fast at 4 gets 2 free slots,
    though the gain is below the hysteresis that holds counts between jobs."""
    measured = (StepTime(2, 1, 32, 0, 0.1, None, 100), StepTime(4, 1, 16, 0, 0.1 / ratio, None, 100))
    a = goodput_job("job-a", current=2, batch=64, noise=None, measured=measured, batch_range=None, max_workers=4)
    arbiter = GoodputArbiter()
    assert ratio * (1 - arbiter.hysteresis) < 1.0  # the hysteresis alone would keep it at 2
    given = allocate_full(arbiter, snap(a, capacity=8))
    assert given["job-a"].workers == 4, given
    # With the slots taken by another job it stays at 2.
    assert allocate_full(arbiter, snap(a, capacity=2)) == {}


def test_the_engine_keeps_a_job_at_its_minimum_only_where_more_workers_are_not_predicted_faster() -> None:
    a = replace(
        goodput_job("job-a", current=1, batch=64, noise=None, measured=_two_counts(1.1), batch_range=None),
        max_workers=2,
    )
    (decision,) = PolicyEngine(GoodputPolicy(), GoodputArbiter(), cooldown_s=0).decide(snap(a, capacity=4))
    assert decision.target_workers == 2 and "1.10" in decision.reason, decision


@pytest.mark.parametrize(("ratio", "shrinks"), [(0.97, False), (0.9, True)])
def test_a_job_shrinks_for_its_own_sake_only_by_the_margin_it_would_grow_back_by(ratio: float, shrinks: bool) -> None:
    """Fewer workers for the job's own sake only where they are predicted faster by the resize's cost over its
    horizon (30 s in 600 s here: 5 %), the margin a job at its minimum grows by: a job is not shrunk for a gain
    it would not be grown back for."""
    a = goodput_job("job-a", current=2, batch=64, noise=None, measured=_two_counts(ratio), batch_range=None)
    a = replace(a, max_workers=2, submitted_at=9_900.0)
    policy = GoodputArbiter()
    wish = policy.propose(a, snap(a, capacity=4))
    assert wish is not None and wish.target_workers == (1 if shrinks else 2), wish
    decisions = PolicyEngine(policy, GoodputArbiter(), cooldown_s=0).decide(snap(a, capacity=4))
    if shrinks:
        assert [d.target_workers for d in decisions] == [1] and "fewer workers are as fast" in decisions[0].reason
    else:
        assert decisions == [], decisions
        assert "predicted faster by less than a resize costs" in wish.reason, wish
