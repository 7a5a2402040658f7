"""Several job policies as one: earlier ones take precedence on the size, replacements are merged."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .api import Decision, JobPolicy, JobView, PolicyConfigError, PolicyStateError, Snapshot

__all__ = ["CompositePolicy"]


class CompositePolicy(JobPolicy):
    """Ask each policy in turn; combine their answers.

    The target size is that of the first policy whose target differs from the job's current size (so
    ``convergence`` listed before ``scaling-efficiency`` wins once the loss plateaus); if none wants a
    change, the first answer's. Instances to replace are the union, in order; batch size and learning
    rate come from the first policy that sets them. Hooks go to every policy.

    Args:
        policies: JobPolicy objects, or names / ``module:Class`` specs loaded with default options.

    Raises:
        PolicyConfigError: no policies, or one that is not a JobPolicy.
        PolicyLoadError: a name could not be loaded.
    """

    name = "composite"

    def __init__(self, policies: Sequence[JobPolicy | str]) -> None:
        if isinstance(policies, str) or not isinstance(policies, Sequence) or not policies:
            raise PolicyConfigError(f"CompositePolicy: policies must be a non-empty sequence, got {policies!r}")
        from .loader import load_job_policy

        loaded: list[JobPolicy] = []
        for policy in policies:
            if isinstance(policy, str):
                policy = load_job_policy(policy)
            if not isinstance(policy, JobPolicy):
                raise PolicyConfigError(f"CompositePolicy: {policy!r} is not a JobPolicy")
            loaded.append(policy)
        self.policies: tuple[JobPolicy, ...] = tuple(loaded)

    def before_train(self, job: JobView, snapshot: Snapshot) -> None:
        for policy in self.policies:
            policy.before_train(job, snapshot)

    def after_step(self, job: JobView, snapshot: Snapshot) -> None:
        for policy in self.policies:
            policy.after_step(job, snapshot)

    def on_resize(self, job: JobView, previous_workers: int, snapshot: Snapshot) -> None:
        for policy in self.policies:
            policy.on_resize(job, previous_workers, snapshot)

    def after_train(self, job_id: str, snapshot: Snapshot) -> None:
        for policy in self.policies:
            policy.after_train(job_id, snapshot)

    def propose(self, job: JobView, snapshot: Snapshot) -> Decision | None:
        answers = [d for d in (p.propose(job, snapshot) for p in self.policies) if d is not None]
        if not answers:
            return None
        sizing = next((d for d in answers if d.target_workers != job.current_workers), answers[0])
        replace: list[str] = []
        reasons = [sizing.reason]
        for answer in answers:
            new = [n for n in answer.replace if n not in replace]
            replace.extend(new)
            if new and answer is not sizing:
                reasons.append(answer.reason)
        return Decision(
            job.job_id,
            sizing.target_workers,
            "; ".join(reasons),
            batch_size=next((d.batch_size for d in answers if d.batch_size is not None), None),
            learning_rate=next((d.learning_rate for d in answers if d.learning_rate is not None), None),
            replace=tuple(replace),
        )

    def state_dict(self) -> dict[str, Any]:
        return {"policies": [p.state_dict() for p in self.policies]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        states = state.get("policies") if isinstance(state, Mapping) else None
        if not isinstance(states, list) or len(states) != len(self.policies):
            raise PolicyStateError(f"composite: state must hold {len(self.policies)} policy states, got {state!r}")
        for policy, policy_state in zip(self.policies, states, strict=True):
            policy.load_state_dict(policy_state)
