"""Names and limits every side of a job agrees on, in one place.

The training side (``tf_hooks``), the metrics service, the controller, the job CLI and the YARN client
all import their rules from here, so a name one of them accepts is never refused by another. Nothing
here imports more than ``re``: a training process pays nothing for it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class NameRule:
    """A kind of name: a pattern with its length bound, and the words that explain it to a user."""

    kind: str
    pattern: re.Pattern[str]
    explained: str

    def matches(self, value: object) -> bool:
        return isinstance(value, str) and self.pattern.fullmatch(value) is not None

    def problem(self, value: object) -> str | None:
        """None when ``value`` follows the rule; else a sentence naming the value and the rule."""
        if self.matches(value):
            return None
        shown = repr(value) if not isinstance(value, str) or len(value) <= 40 else repr(value[:40] + "...")
        return f"{self.kind} {shown} is not {self.explained}"


#: The jobs' directories on HDFS: ``/submarine-jobs/<user>/<job>``. ``cluster up`` makes it with mode 1777
#: (sticky): each user makes their own directory there, and no user removes another's.
HDFS_JOBS = "/submarine-jobs"

#: The characters of a YARN service or component name (a DNS label); the lengths are bounded below.
YARN_NAME_CHARS = re.compile(r"[a-z][a-z0-9-]*")
#: Registry DNS limits a label to 63 characters (YARN's ``RegistryConstants.MAX_FQDN_LABEL_LENGTH``).
SERVICE_NAME_MAX_LENGTH = 63
#: 63 minus the 19 digits YARN reserves for a component instance's number (``ServiceApiUtil``).
COMPONENT_NAME_MAX_LENGTH = 44

#: A job's name is its YARN service name, which is also the job id of its metrics.
JOB_NAME = NameRule(
    "job name",
    re.compile(rf"[a-z][a-z0-9-]{{0,{SERVICE_NAME_MAX_LENGTH - 1}}}"),
    f"a YARN service name: 1-{SERVICE_NAME_MAX_LENGTH} characters of [a-z0-9-], starting with a letter",
)
COMPONENT_NAME = NameRule(
    "component name",
    re.compile(rf"[a-z][a-z0-9-]{{0,{COMPONENT_NAME_MAX_LENGTH - 1}}}"),
    f"a YARN component name: 1-{COMPONENT_NAME_MAX_LENGTH} characters of [a-z0-9-], starting with a letter",
)
#: A YARN queue: its leaf name or its path from ``root``, parts joined by dots.
QUEUE = NameRule(
    "queue",
    re.compile(r"[A-Za-z0-9_-]{1,255}(\.[A-Za-z0-9_-]{1,255}){0,15}"),
    "a YARN queue name or path: parts of letters, digits, '_' and '-', joined by '.' (prod, root.prod)",
)
#: A worker as YARN names its container (``worker-3``) or a host name; generous on purpose.
INSTANCE = NameRule(
    "worker instance",
    re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}"),
    "1-128 characters of [A-Za-z0-9._:-], starting with a letter or digit",
)
#: A worker's agent as the job driver takes it: a YARN component instance ``<component>-<number>``
#: (``worker-3``), the number at most the 19 digits YARN reserves for it; the driver orders workers by it.
WORKER_INSTANCE = NameRule(
    "worker instance",
    re.compile(rf"[a-z][a-z0-9-]{{0,{COMPONENT_NAME_MAX_LENGTH - 1}}}-[0-9]{{1,19}}"),
    "a YARN component instance name: <component>-<number>, like worker-3",
)
#: Commits between two checkpoints of a job that names none (``SUBMARINE_CHECKPOINT_EVERY``, ``--checkpoint_every``).
CHECKPOINT_EVERY_DEFAULT = 50
#: The longest container id, host or agent id an agent may name itself by (a DNS name has at most 253).
MAX_AGENT_FIELD_LENGTH = 255
#: One run of a training process (the agent numbers them); starts of a process never share one.
INCARNATION = NameRule("incarnation", re.compile(r"[A-Za-z0-9._:-]{1,64}"), "1-64 characters of [A-Za-z0-9._:-]")
#: The name of a metric a user reports beside the built-in ones (``top5_accuracy``).
USER_METRIC = NameRule(
    "metric name",
    re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,63}"),
    "1-64 characters of [A-Za-z0-9_.], starting with a letter or '_'",
)

#: The most steps the metrics service takes in one batch.
MAX_POINTS_PER_BATCH = 10_000
#: The most user metrics one step carries; a hook sends the first ones and leaves the rest out.
MAX_USER_METRICS = 32
#: The largest world size a metrics batch may claim.
MAX_WORLD_SIZE = 100_000
#: Largest magnitude of any float in a point; beyond it a value is a bug, and aggregates could overflow.
MAX_ABS_VALUE = 1e15
#: Steps and batch sizes travel as int64.
MAX_INT64 = 2**63 - 1

# What a worker can plausibly report: beyond these a value is refused, not averaged into what a policy reads.
#: Largest seq: a worker counting 10,000 steps a second takes 890 years to reach it.
MAX_SEQ = 2**48
#: Seconds of one training step: more than a day is a clock or a bug, never a step. A step time is above 0.
MAX_STEP_TIME_SECONDS = 86_400.0
#: One worker's examples per second (a billion: beyond any accelerator of today).
MAX_EXAMPLES_PER_SECOND = 1e9
#: One worker's batch size (2**24 examples).
MAX_BATCH_SIZE = 2**24
#: Largest learning rate.
MAX_LEARNING_RATE = 1e6
#: Largest gradient noise scale, in samples: a critical batch of 10^12 samples is beyond any training run
#: of today (the largest reported are about 10^7 sequences); above it the estimate is a bug or a gradient
#: whose mean is lost in the noise, no figure to size a batch by.
MAX_GRADIENT_NOISE_SCALE = 1e12
#: The optional float fields of a step: (name, lowest value, whether the lowest itself is allowed, highest).
STEP_FLOAT_BOUNDS: tuple[tuple[str, float, bool, float], ...] = (
    ("loss", -MAX_ABS_VALUE, True, MAX_ABS_VALUE),
    ("examples_per_second", 0.0, True, MAX_EXAMPLES_PER_SECOND),
    ("step_time_seconds", 0.0, False, MAX_STEP_TIME_SECONDS),
    ("learning_rate", 0.0, True, MAX_LEARNING_RATE),
    ("grad_sq_norm", 0.0, True, MAX_ABS_VALUE),
    ("grad_variance", 0.0, True, MAX_ABS_VALUE),
    ("gradient_noise_scale", 0.0, True, MAX_GRADIENT_NOISE_SCALE),
)
#: Largest serialized ``ReportBatch`` the service receives (gRPC's ``max_receive_message_length``); the
#: sender cuts its batches to fit.
MAX_REPORT_MESSAGE_BYTES = 1024 * 1024
#: Most (job, worker, incarnation) keys one ``Report`` stream may touch: its acknowledgement lists each once.
MAX_ACK_KEYS = 64


#: The most gradient-accumulation steps a batch setting may ask for (each is one more micro-batch per step).
MAX_ACCUM_STEPS = 1024


def batch_setting_problem(
    batch_size: int | None,
    accum_steps: int = 0,
    learning_rate: float | None = None,
    *,
    min_batch_size: int | None = None,
    max_batch_size: int | None = None,
) -> str | None:
    """None when a batch setting is one every side takes; else a sentence naming the value out of bounds.

    The one rule for a job's batch: a policy's decision (:class:`submarine_elastic.policy.Decision` and the
    engine, against the job's limits), the driver taking a target, and the training process applying it all
    ask this, so nothing one side proposes is refused by the next. ``batch_size``: the global batch, 1 to
    :data:`MAX_BATCH_SIZE` and within ``[min_batch_size, max_batch_size]`` when given (None: the batch is left
    as it is, only the rest is checked); ``accum_steps``: 0 to :data:`MAX_ACCUM_STEPS`; ``learning_rate``: None
    (the job's rule) or a finite number above 0.
    """
    for name, value in (("batch size", 1 if batch_size is None else batch_size), ("accumulation steps", accum_steps)):
        if not isinstance(value, int) or isinstance(value, bool):
            return f"{name} must be a whole number, got {value!r}"
    if batch_size is None:
        pass
    elif not 1 <= batch_size <= MAX_BATCH_SIZE:
        return f"batch size must lie in [1, {MAX_BATCH_SIZE}], got {batch_size}"
    elif (min_batch_size is not None and batch_size < min_batch_size) or (
        max_batch_size is not None and batch_size > max_batch_size
    ):
        return (
            f"batch size {batch_size} is outside the job's [--min_batch_size {min_batch_size}, --max_batch_size "
            f"{max_batch_size}]"
        )
    if not 0 <= accum_steps <= MAX_ACCUM_STEPS:
        return f"accumulation steps must lie in [0, {MAX_ACCUM_STEPS}], got {accum_steps}"
    if learning_rate is not None and (
        isinstance(learning_rate, bool)
        or not isinstance(learning_rate, int | float)
        or not math.isfinite(learning_rate)
        or learning_rate <= 0
    ):
        return f"learning rate must be a finite number > 0 (or none: the job's rule), got {learning_rate!r}"
    return None
