"""Convergence policy: a plateaued loss gives workers back down to the minimum, with hysteresis."""

from __future__ import annotations

import pytest

from submarine_elastic.policy import ConvergencePolicy, PolicyConfigError, PolicyEngine, PolicyStateError
from submarine_elastic.policy.convergence import relative_improvement

from ._policy_support import job, snapshot

FALLING = [2.0 * 0.97**i for i in range(20)]  # about 26 % better over the second half
FLAT = [0.5 + 0.001 * ((i * 3) % 4) for i in range(20)]  # noise of 0.6 %, no trend


def test_falling_loss_keeps_the_workers() -> None:
    view = job(current=6, min_workers=2, loss=FALLING)
    assert ConvergencePolicy().propose(view, snapshot(view)) is None


def test_plateaued_loss_shrinks_to_the_minimum() -> None:
    view = job(current=6, min_workers=2, loss=FLAT)
    decision = ConvergencePolicy(window=20, tolerance=0.01).propose(view, snapshot(view))
    assert decision is not None
    assert decision.target_workers == 2
    assert decision.reason.startswith("loss plateaued: ")
    assert decision.reason.endswith("over the last 20 windows (tolerance 1.00%): back to its minimum of 2")


def test_plateau_through_the_engine() -> None:
    engine = PolicyEngine(ConvergencePolicy(), cooldown_s=60)
    (decision,) = engine.decide(snapshot(job(current=6, min_workers=2, loss=FLAT, last_resize_at=0.0), now=500.0))
    assert (decision.job_id, decision.target_workers) == ("job-a", 2)


def test_only_the_last_window_counts() -> None:
    view = job(current=4, loss=FALLING + FLAT)
    assert ConvergencePolicy(window=20).propose(view, snapshot(view)) is not None
    assert ConvergencePolicy(window=40).propose(view, snapshot(view)) is None


def test_too_short_a_window_gives_no_opinion() -> None:
    view = job(current=4, loss=FLAT[:19])
    assert ConvergencePolicy(window=20).propose(view, snapshot(view)) is None


def test_a_wobbling_plateau_stays_converged_until_the_loss_really_falls() -> None:
    policy = ConvergencePolicy(window=4, tolerance=0.01, resume_tolerance=0.05)
    plateau = job(current=4, loss=[1.0, 1.0, 1.0, 1.0])
    assert policy.propose(plateau, snapshot(plateau)) is not None
    wobble = job(current=1, loss=[1.0, 1.0, 0.97, 0.97])  # 3 %: above tolerance, below resume_tolerance
    decision = policy.propose(wobble, snapshot(wobble))
    assert decision is not None and decision.target_workers == 1
    assert ConvergencePolicy(window=4, tolerance=0.01).propose(wobble, snapshot(wobble)) is None
    learning = job(current=1, loss=[1.0, 1.0, 0.9, 0.9])  # 10 %
    assert policy.propose(learning, snapshot(learning)) is None
    assert policy.state_dict() == {"converged": []}


def test_state_survives_a_restart_and_forgets_finished_jobs() -> None:
    policy = ConvergencePolicy(window=4)
    plateau = job(current=4, loss=[1.0] * 4)
    policy.propose(plateau, snapshot(plateau))
    restarted = ConvergencePolicy(window=4)
    restarted.load_state_dict(policy.state_dict())
    assert restarted.state_dict() == {"converged": ["job-a"]}
    restarted.after_train("job-a", snapshot())
    assert restarted.state_dict() == {"converged": []}
    with pytest.raises(PolicyStateError):
        restarted.load_state_dict({"converged": "job-a"})


def test_relative_improvement_uses_medians_of_the_halves() -> None:
    assert relative_improvement((4.0, 100.0, 4.0, 2.0, 2.0, 2.0)) == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"window": 3}, "window must be an int >= 4, got 3"),
        ({"tolerance": -0.1}, "tolerance must be >= 0.0, got -0.1"),
        ({"tolerance": 0.1, "resume_tolerance": 0.05}, r"resume_tolerance \(0.05\) must be >= tolerance \(0.1\)"),
    ],
)
def test_rejects_bad_parameters(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(PolicyConfigError, match=message):
        ConvergencePolicy(**kwargs)  # type: ignore[arg-type]
