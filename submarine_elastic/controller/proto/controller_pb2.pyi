from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATE_UNSPECIFIED: _ClassVar[JobState]
    JOB_STATE_PENDING: _ClassVar[JobState]
    JOB_STATE_RUNNING: _ClassVar[JobState]
    JOB_STATE_FINISHED: _ClassVar[JobState]

class JobSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_SOURCE_UNSPECIFIED: _ClassVar[JobSource]
    JOB_SOURCE_CLI: _ClassVar[JobSource]
    JOB_SOURCE_BRIDGE: _ClassVar[JobSource]
    JOB_SOURCE_YARN: _ClassVar[JobSource]

class DecisionState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DECISION_STATE_UNSPECIFIED: _ClassVar[DecisionState]
    DECISION_STATE_IN_PROGRESS: _ClassVar[DecisionState]
    DECISION_STATE_APPLIED: _ClassVar[DecisionState]
    DECISION_STATE_FAILED: _ClassVar[DecisionState]
    DECISION_STATE_STALLED: _ClassVar[DecisionState]
JOB_STATE_UNSPECIFIED: JobState
JOB_STATE_PENDING: JobState
JOB_STATE_RUNNING: JobState
JOB_STATE_FINISHED: JobState
JOB_SOURCE_UNSPECIFIED: JobSource
JOB_SOURCE_CLI: JobSource
JOB_SOURCE_BRIDGE: JobSource
JOB_SOURCE_YARN: JobSource
DECISION_STATE_UNSPECIFIED: DecisionState
DECISION_STATE_IN_PROGRESS: DecisionState
DECISION_STATE_APPLIED: DecisionState
DECISION_STATE_FAILED: DecisionState
DECISION_STATE_STALLED: DecisionState

class Job(_message.Message):
    __slots__ = ("job_id", "min_workers", "max_workers", "workers", "target", "elastic", "state", "submitted_at", "source", "run", "app_id", "observed_at", "policy", "last_resize_at", "queue", "requested")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    MIN_WORKERS_FIELD_NUMBER: _ClassVar[int]
    MAX_WORKERS_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    ELASTIC_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_AT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_AT_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    LAST_RESIZE_AT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    min_workers: int
    max_workers: int
    workers: int
    target: int
    elastic: bool
    state: JobState
    submitted_at: float
    source: JobSource
    run: int
    app_id: str
    observed_at: float
    policy: str
    last_resize_at: float
    queue: str
    requested: int
    def __init__(self, job_id: _Optional[str] = ..., min_workers: _Optional[int] = ..., max_workers: _Optional[int] = ..., workers: _Optional[int] = ..., target: _Optional[int] = ..., elastic: bool = ..., state: _Optional[_Union[JobState, str]] = ..., submitted_at: _Optional[float] = ..., source: _Optional[_Union[JobSource, str]] = ..., run: _Optional[int] = ..., app_id: _Optional[str] = ..., observed_at: _Optional[float] = ..., policy: _Optional[str] = ..., last_resize_at: _Optional[float] = ..., queue: _Optional[str] = ..., requested: _Optional[int] = ...) -> None: ...

class Decision(_message.Message):
    __slots__ = ("job_id", "time", "from_workers", "to_workers", "reason", "state", "error", "run", "progress")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    FROM_WORKERS_FIELD_NUMBER: _ClassVar[int]
    TO_WORKERS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    time: float
    from_workers: int
    to_workers: int
    reason: str
    state: DecisionState
    error: str
    run: int
    progress: str
    def __init__(self, job_id: _Optional[str] = ..., time: _Optional[float] = ..., from_workers: _Optional[int] = ..., to_workers: _Optional[int] = ..., reason: _Optional[str] = ..., state: _Optional[_Union[DecisionState, str]] = ..., error: _Optional[str] = ..., run: _Optional[int] = ..., progress: _Optional[str] = ...) -> None: ...

class SubmitJobRequest(_message.Message):
    __slots__ = ("job_id", "min_workers", "max_workers", "workers", "elastic", "source", "policy", "gpus", "queue")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    MIN_WORKERS_FIELD_NUMBER: _ClassVar[int]
    MAX_WORKERS_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    ELASTIC_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    min_workers: int
    max_workers: int
    workers: int
    elastic: bool
    source: JobSource
    policy: str
    gpus: int
    queue: str
    def __init__(self, job_id: _Optional[str] = ..., min_workers: _Optional[int] = ..., max_workers: _Optional[int] = ..., workers: _Optional[int] = ..., elastic: bool = ..., source: _Optional[_Union[JobSource, str]] = ..., policy: _Optional[str] = ..., gpus: _Optional[int] = ..., queue: _Optional[str] = ...) -> None: ...

class SubmitJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class EndJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class EndJobResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReportMetricsRequest(_message.Message):
    __slots__ = ("job_id", "world_size", "step", "samples_per_second", "loss")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    world_size: int
    step: int
    samples_per_second: float
    loss: float
    def __init__(self, job_id: _Optional[str] = ..., world_size: _Optional[int] = ..., step: _Optional[int] = ..., samples_per_second: _Optional[float] = ..., loss: _Optional[float] = ...) -> None: ...

class ReportMetricsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class GetJobResponse(_message.Message):
    __slots__ = ("job", "last_decision")
    JOB_FIELD_NUMBER: _ClassVar[int]
    LAST_DECISION_FIELD_NUMBER: _ClassVar[int]
    job: Job
    last_decision: Decision
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ..., last_decision: _Optional[_Union[Decision, _Mapping]] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("include_finished",)
    INCLUDE_FINISHED_FIELD_NUMBER: _ClassVar[int]
    include_finished: bool
    def __init__(self, include_finished: bool = ...) -> None: ...

class JobStatus(_message.Message):
    __slots__ = ("job", "last_decision")
    JOB_FIELD_NUMBER: _ClassVar[int]
    LAST_DECISION_FIELD_NUMBER: _ClassVar[int]
    job: Job
    last_decision: Decision
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ..., last_decision: _Optional[_Union[Decision, _Mapping]] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[JobStatus]
    def __init__(self, jobs: _Optional[_Iterable[_Union[JobStatus, _Mapping]]] = ...) -> None: ...

class GetHistoryRequest(_message.Message):
    __slots__ = ("job_id", "all_runs")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ALL_RUNS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    all_runs: bool
    def __init__(self, job_id: _Optional[str] = ..., all_runs: bool = ...) -> None: ...

class GetHistoryResponse(_message.Message):
    __slots__ = ("decisions",)
    DECISIONS_FIELD_NUMBER: _ClassVar[int]
    decisions: _containers.RepeatedCompositeFieldContainer[Decision]
    def __init__(self, decisions: _Optional[_Iterable[_Union[Decision, _Mapping]]] = ...) -> None: ...
