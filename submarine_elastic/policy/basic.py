"""Two trivial job policies: keep the size, or want the maximum and let the arbiter decide."""

from __future__ import annotations

from .api import Decision, JobPolicy, JobView, Snapshot

__all__ = ["GreedyPolicy", "StaticPolicy"]


class StaticPolicy(JobPolicy):
    """No opinion: a running job keeps its size and a waiting job starts at its minimum.

    The engine's default job policy, and the reference a user policy can start from.
    """

    name = "static"

    def propose(self, job: JobView, snapshot: Snapshot) -> Decision | None:
        return None


class GreedyPolicy(JobPolicy):
    """Every job wants its maximum; the arbiter (``goodput`` in particular) decides who gets it."""

    name = "greedy"

    def propose(self, job: JobView, snapshot: Snapshot) -> Decision | None:
        return Decision(job.job_id, job.max_workers, f"wants its maximum of {job.max_workers}")
