"""Live replays: a simulator workload submitted to the running pseudo-cluster at its arrival times, its jobs
on emulated accelerators, under a policy or the static baseline (``submarine replay``)."""

from submarine_elastic.replay.plan import ReplayError, ReplayJob, ReplayPlan, plan_replay
from submarine_elastic.replay.records import LiveRun, ReplayRunError
from submarine_elastic.replay.runner import LiveReplay

__all__ = ["LiveReplay", "LiveRun", "ReplayError", "ReplayJob", "ReplayPlan", "ReplayRunError", "plan_replay"]
