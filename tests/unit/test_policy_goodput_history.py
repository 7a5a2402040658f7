"""The goodput policy's step-time history as a unit: merging, the per-job bound, exploration times, state."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from submarine_elastic.policy import PolicyStateError, StepTime
from submarine_elastic.policy.goodput_history import MAX_CONFIGURATIONS, StepHistory

from .test_policy_goodput import goodput_job


def step(workers: int, local: float = 64.0, seconds: float = 1.0) -> StepTime:
    return StepTime(workers, 1, local, 0, seconds, None, 10)


def test_a_newer_measurement_replaces_the_older_of_its_configuration():
    history = StepHistory()
    history.update(goodput_job(measured=[step(2, seconds=1.0), step(4)]), now=0.0)
    kept = history.update(goodput_job(measured=[step(2, seconds=3.0)]), now=1.0)
    assert [(m.workers, m.seconds) for m in kept] == [(4, 1.0), (2, 3.0)]


def test_only_the_most_recent_configurations_are_kept():
    history = StepHistory()
    many = [step(1, local=float(b)) for b in range(1, MAX_CONFIGURATIONS + 6)]
    kept = history.update(goodput_job(measured=many), now=0.0)
    assert len(kept) == MAX_CONFIGURATIONS
    assert kept[-1].local_batch == float(MAX_CONFIGURATIONS + 5)
    assert min(m.local_batch for m in kept) == 6.0


def test_a_configuration_outside_what_was_known_is_an_exploration():
    history = StepHistory()
    history.update(goodput_job(measured=[step(2)]), now=0.0)
    assert history.may_explore("job-a", now=0.0, interval_s=120.0)  # the first measurement is no exploration
    history.update(goodput_job(measured=[step(2), step(8)]), now=10.0)
    assert history.explored == {"job-a": 10.0}
    assert not history.may_explore("job-a", now=129.0, interval_s=120.0)
    assert history.may_explore("job-a", now=130.0, interval_s=120.0)
    history.update(goodput_job(measured=[step(2), step(8), step(4)]), now=200.0)  # inside the range: not one
    assert history.explored == {"job-a": 10.0}


def test_state_round_trips_and_forgetting_drops_a_job():
    history = StepHistory()
    history.update(goodput_job("a", measured=[step(2), step(8)]), now=0.0)
    history.update(goodput_job("b", measured=[step(1)]), now=0.0)
    history.update(goodput_job("a", measured=[step(2), step(8), step(16)]), now=5.0)
    loaded = StepHistory()
    loaded.load("goodput", history.state(), history.explored)
    assert loaded.state() == history.state()
    assert loaded.explored == {"a": 5.0}
    loaded.keep_only({"b"})
    assert set(loaded.jobs) == {"b"} and loaded.explored == {}
    loaded.forget("b")
    assert loaded.state() == {}


@pytest.mark.parametrize(
    ("state", "explored", "message"),
    [
        ([], {}, "history must be a mapping"),
        ({}, [], "explored must be a mapping"),
        ({"a": [[1, 1, 64.0]]}, {}, "bad history entry"),
        ({"a": []}, {"a": "soon"}, "bad history entry"),
    ],
)
def test_malformed_state_is_refused_and_nothing_changes(state, explored, message):
    history = StepHistory()
    history.update(goodput_job(measured=[step(2)]), now=0.0)
    before = history.state()
    with pytest.raises(PolicyStateError, match=message):
        history.load("goodput", state, explored)
    assert history.state() == before


def test_configurations_measured_anew_merge_as_a_whole_merge_does():
    """Rounds in which a job reports what it reported last with some of it measured anew (the quick merge), a new
    configuration, one dropped, two of one key, another order: the history and the exploration times are those of
    a history that merges everything every round, and the new measurements are kept, never the old."""
    rng = random.Random(3)
    quick, whole = StepHistory(), StepHistory()
    given = [step(w, local=float(b)) for w, b in ((1, 64), (2, 64), (2, 128), (4, 64))]
    for rnd in range(300):
        what = rng.random()
        if what < 0.6:  # measured anew, each at its place
            given = [
                replace(m, seconds=rng.choice((1.0, 2.0)), steps=m.steps + 1) if rng.random() < 0.4 else m
                for m in given
            ]
        elif what < 0.7:
            given = [*given, step(rng.randint(1, 12), local=float(rng.choice((32, 64, 128, 256))))]
        elif what < 0.75 and len(given) > 1:
            given.pop(rng.randrange(len(given)))
        elif what < 0.8:
            given = [*given, replace(rng.choice(given), seconds=5.0)]  # a key twice
        elif what < 0.85:
            rng.shuffle(given)
        given = given[-MAX_CONFIGURATIONS - 2 :]
        view = goodput_job(measured=given)
        whole._seen.clear()
        assert quick.update(view, now=float(rnd)) == whole.update(view, now=float(rnd))
        assert quick.explored == whole.explored
    assert quick.jobs == whole.jobs
