"""The goodput policy's memory of each job: its step times per configuration (worker count, nodes, micro-batch,
accumulation), the most recent :data:`MAX_CONFIGURATIONS` of each, and when it last explored, that is ran in a
configuration outside what it had been measured at. Persisted through the policy's ``state_dict()``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .api import JobView, PolicyStateError, StepTime

__all__ = ["MAX_CONFIGURATIONS", "StepHistory"]

#: Measured configurations kept per job (the most recently measured; older ones are dropped).
MAX_CONFIGURATIONS = 32


def _key(m: StepTime) -> tuple[int, int, float, int]:
    return (m.workers, m.nodes, round(m.local_batch, 3), m.accum_steps)


class StepHistory:
    """Step times per job and configuration, the most recent :data:`MAX_CONFIGURATIONS` of each job, and when each
    job last ran in a configuration outside what it had been measured at (it explored)."""

    def __init__(self) -> None:
        self.jobs: dict[str, dict[tuple[int, int, float, int], StepTime]] = {}
        self.explored: dict[str, float] = {}
        # the configurations last merged per job, with their keys when those are all different (else None)
        self._seen: dict[str, tuple[tuple[StepTime, ...], tuple[tuple[int, int, float, int], ...] | None]] = {}

    def update(self, job: JobView, now: float) -> tuple[StepTime, ...]:
        """Merges the configurations ``job`` reports (a newer measurement of a configuration replaces the older),
        noting ``now`` as its exploration time when one is outside what was known; returns what is kept."""
        kept = self.jobs.setdefault(job.job_id, {})
        given = job.metrics.configurations
        seen = self._seen.get(job.job_id)
        if seen is not None:
            before, keys = seen
            if before is given or (len(given) <= MAX_CONFIGURATIONS and before == given):
                # what was merged last: merged again, equal configurations (all of them kept) leave the history as is
                return tuple(kept.values())
            if keys is not None and len(given) == len(keys) and self._remeasured(kept, before, keys, given):
                self._seen[job.job_id] = (given, keys)
                return tuple(kept.values())
        given_keys = tuple(map(_key, given))
        self._seen[job.job_id] = (
            given,
            given_keys if len(set(given_keys)) == len(given_keys) <= MAX_CONFIGURATIONS else None,
        )
        known = tuple(kept.values())
        for m, key in zip(given, given_keys, strict=True):
            if known and key not in kept and _outside(m, known):
                self.explored[job.job_id] = now
            kept.pop(key, None)
            kept[key] = m
        while len(kept) > MAX_CONFIGURATIONS:
            del kept[next(iter(kept))]
        return tuple(kept.values())

    @staticmethod
    def _remeasured(
        kept: dict[tuple[int, int, float, int], StepTime],
        before: tuple[StepTime, ...],
        keys: tuple[tuple[int, int, float, int], ...],
        given: tuple[StepTime, ...],
    ) -> bool:
        """Merge ``given`` where it is the configurations merged last (``before``, all different, so the last of
        ``kept`` in that order) with new measurements of some of them, each at its place; False (nothing changed)
        where it is not. A job reports every configuration it keeps each round, one or two of them measured anew
        (the simulator's up to 32): merging them all again, as a new configuration needs, cost most of the policy's
        round in a 1,600-job simulation. The history is the one the whole merge gives: the same keys in the same
        order, the newer measurements, no exploration (no key is new)."""
        if given and given[:-1] == before[:-1]:  # the newest alone measured anew (one comparison, not a loop)
            changed = [] if given[-1] is before[-1] else [(keys[-1], given[-1])]
        else:
            changed = [(key, m) for key, old, m in zip(keys, before, given, strict=True) if m is not old]
        if any(_key(m) != key for key, m in changed):
            return False
        for key, m in changed:
            kept[key] = m
        return True

    def may_explore(self, job_id: str, now: float, interval_s: float) -> bool:
        """Whether the job may be given a configuration outside what it was measured at."""
        last = self.explored.get(job_id)
        return last is None or now - last >= interval_s

    def keep_only(self, job_ids: set[str]) -> None:
        for job_id in [j for j in self.jobs if j not in job_ids]:
            self.forget(job_id)

    def forget(self, job_id: str) -> None:
        self.jobs.pop(job_id, None)
        self.explored.pop(job_id, None)
        self._seen.pop(job_id, None)

    def state(self) -> dict[str, Any]:
        """The step times as JSON-able rows per job (the exploration times are :attr:`explored`)."""
        return {
            job_id: [
                [m.workers, m.nodes, m.local_batch, m.accum_steps, m.seconds, m.sync_seconds, m.steps]
                for m in kept.values()
            ]
            for job_id, kept in sorted(self.jobs.items())
        }

    def load(self, owner: str, state: Any, explored: Any) -> None:
        """Replaces what is kept with :meth:`state`'s rows and ``explored``'s times.

        Raises:
            PolicyStateError: either is malformed (naming ``owner``); nothing is changed then.
        """
        if not isinstance(state, Mapping):
            raise PolicyStateError(f"{owner}: history must be a mapping, got {state!r}")
        if not isinstance(explored, Mapping):
            raise PolicyStateError(f"{owner}: explored must be a mapping, got {explored!r}")
        jobs: dict[str, dict[tuple[int, int, float, int], StepTime]] = {}
        try:
            for job_id, rows in state.items():
                kept: dict[tuple[int, int, float, int], StepTime] = {}
                for w, n, local, accum, seconds, sync, steps in rows:
                    m = StepTime(int(w), int(n), float(local), int(accum), float(seconds), sync, int(steps))
                    kept[_key(m)] = m
                jobs[str(job_id)] = kept
            times = {str(job_id): float(t) for job_id, t in explored.items()}
        except (TypeError, ValueError) as exc:
            raise PolicyStateError(f"{owner}: bad history entry: {exc}") from exc
        self.jobs = jobs
        self.explored = times
        self._seen = {}


def _outside(m: StepTime, known: Sequence[StepTime]) -> bool:
    """Whether ``m`` has more workers than any of ``known``, or a micro-batch outside their range."""
    locals_ = [k.local_batch for k in known]
    return (
        m.workers > max(k.workers for k in known)
        or m.local_batch < min(locals_) * (1 - 1e-9)
        or m.local_batch > max(locals_) * (1 + 1e-9)
    )
