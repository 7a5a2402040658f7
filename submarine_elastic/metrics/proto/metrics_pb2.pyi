from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StepPoint(_message.Message):
    __slots__ = ("seq", "step", "loss", "examples_per_second", "step_time_seconds", "batch_size", "learning_rate", "wall_time", "user_metrics", "grad_sq_norm", "grad_variance", "gradient_noise_scale")
    class UserMetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    EXAMPLES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    STEP_TIME_SECONDS_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    LEARNING_RATE_FIELD_NUMBER: _ClassVar[int]
    WALL_TIME_FIELD_NUMBER: _ClassVar[int]
    USER_METRICS_FIELD_NUMBER: _ClassVar[int]
    GRAD_SQ_NORM_FIELD_NUMBER: _ClassVar[int]
    GRAD_VARIANCE_FIELD_NUMBER: _ClassVar[int]
    GRADIENT_NOISE_SCALE_FIELD_NUMBER: _ClassVar[int]
    seq: int
    step: int
    loss: float
    examples_per_second: float
    step_time_seconds: float
    batch_size: int
    learning_rate: float
    wall_time: float
    user_metrics: _containers.ScalarMap[str, float]
    grad_sq_norm: float
    grad_variance: float
    gradient_noise_scale: float
    def __init__(self, seq: _Optional[int] = ..., step: _Optional[int] = ..., loss: _Optional[float] = ..., examples_per_second: _Optional[float] = ..., step_time_seconds: _Optional[float] = ..., batch_size: _Optional[int] = ..., learning_rate: _Optional[float] = ..., wall_time: _Optional[float] = ..., user_metrics: _Optional[_Mapping[str, float]] = ..., grad_sq_norm: _Optional[float] = ..., grad_variance: _Optional[float] = ..., gradient_noise_scale: _Optional[float] = ...) -> None: ...

class StepColumns(_message.Message):
    __slots__ = ("seq", "step", "wall_time", "loss", "examples_per_second", "step_time_seconds", "batch_size", "learning_rate", "user_metrics", "grad_sq_norm", "grad_variance", "gradient_noise_scale")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    WALL_TIME_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    EXAMPLES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    STEP_TIME_SECONDS_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    LEARNING_RATE_FIELD_NUMBER: _ClassVar[int]
    USER_METRICS_FIELD_NUMBER: _ClassVar[int]
    GRAD_SQ_NORM_FIELD_NUMBER: _ClassVar[int]
    GRAD_VARIANCE_FIELD_NUMBER: _ClassVar[int]
    GRADIENT_NOISE_SCALE_FIELD_NUMBER: _ClassVar[int]
    seq: _containers.RepeatedScalarFieldContainer[int]
    step: _containers.RepeatedScalarFieldContainer[int]
    wall_time: _containers.RepeatedScalarFieldContainer[float]
    loss: _containers.RepeatedScalarFieldContainer[float]
    examples_per_second: _containers.RepeatedScalarFieldContainer[float]
    step_time_seconds: _containers.RepeatedScalarFieldContainer[float]
    batch_size: _containers.RepeatedScalarFieldContainer[int]
    learning_rate: _containers.RepeatedScalarFieldContainer[float]
    user_metrics: _containers.RepeatedCompositeFieldContainer[MetricColumn]
    grad_sq_norm: _containers.RepeatedScalarFieldContainer[float]
    grad_variance: _containers.RepeatedScalarFieldContainer[float]
    gradient_noise_scale: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, seq: _Optional[_Iterable[int]] = ..., step: _Optional[_Iterable[int]] = ..., wall_time: _Optional[_Iterable[float]] = ..., loss: _Optional[_Iterable[float]] = ..., examples_per_second: _Optional[_Iterable[float]] = ..., step_time_seconds: _Optional[_Iterable[float]] = ..., batch_size: _Optional[_Iterable[int]] = ..., learning_rate: _Optional[_Iterable[float]] = ..., user_metrics: _Optional[_Iterable[_Union[MetricColumn, _Mapping]]] = ..., grad_sq_norm: _Optional[_Iterable[float]] = ..., grad_variance: _Optional[_Iterable[float]] = ..., gradient_noise_scale: _Optional[_Iterable[float]] = ...) -> None: ...

class MetricColumn(_message.Message):
    __slots__ = ("name", "values")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    name: str
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, name: _Optional[str] = ..., values: _Optional[_Iterable[float]] = ...) -> None: ...

class WorkerRef(_message.Message):
    __slots__ = ("instance", "rank")
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    instance: str
    rank: int
    def __init__(self, instance: _Optional[str] = ..., rank: _Optional[int] = ...) -> None: ...

class ReportBatch(_message.Message):
    __slots__ = ("job_id", "worker", "incarnation", "world_size", "points", "columns")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    POINTS_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    worker: WorkerRef
    incarnation: str
    world_size: int
    points: _containers.RepeatedCompositeFieldContainer[StepPoint]
    columns: StepColumns
    def __init__(self, job_id: _Optional[str] = ..., worker: _Optional[_Union[WorkerRef, _Mapping]] = ..., incarnation: _Optional[str] = ..., world_size: _Optional[int] = ..., points: _Optional[_Iterable[_Union[StepPoint, _Mapping]]] = ..., columns: _Optional[_Union[StepColumns, _Mapping]] = ...) -> None: ...

class ReportAck(_message.Message):
    __slots__ = ("accepted", "duplicates", "last_seq")
    class LastSeqEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    accepted: int
    duplicates: int
    last_seq: _containers.ScalarMap[str, int]
    def __init__(self, accepted: _Optional[int] = ..., duplicates: _Optional[int] = ..., last_seq: _Optional[_Mapping[str, int]] = ...) -> None: ...

class ThroughputStat(_message.Message):
    __slots__ = ("world_size", "per_worker_examples_per_second", "aggregate_examples_per_second", "step_time_seconds", "points")
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    PER_WORKER_EXAMPLES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    AGGREGATE_EXAMPLES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    STEP_TIME_SECONDS_FIELD_NUMBER: _ClassVar[int]
    POINTS_FIELD_NUMBER: _ClassVar[int]
    world_size: int
    per_worker_examples_per_second: float
    aggregate_examples_per_second: float
    step_time_seconds: float
    points: int
    def __init__(self, world_size: _Optional[int] = ..., per_worker_examples_per_second: _Optional[float] = ..., aggregate_examples_per_second: _Optional[float] = ..., step_time_seconds: _Optional[float] = ..., points: _Optional[int] = ...) -> None: ...

class JobSummary(_message.Message):
    __slots__ = ("job_id", "world_size", "active_workers", "last_step", "last_loss", "loss_ema", "loss_slope_per_step", "throughput", "points_received", "points_duplicate", "points_rejected", "points_missing", "last_update", "last_rejection", "gradient_noise_scale", "grad_sq_norm", "grad_variance", "noise_step", "configurations", "resize_pause_seconds")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_WORKERS_FIELD_NUMBER: _ClassVar[int]
    LAST_STEP_FIELD_NUMBER: _ClassVar[int]
    LAST_LOSS_FIELD_NUMBER: _ClassVar[int]
    LOSS_EMA_FIELD_NUMBER: _ClassVar[int]
    LOSS_SLOPE_PER_STEP_FIELD_NUMBER: _ClassVar[int]
    THROUGHPUT_FIELD_NUMBER: _ClassVar[int]
    POINTS_RECEIVED_FIELD_NUMBER: _ClassVar[int]
    POINTS_DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    POINTS_REJECTED_FIELD_NUMBER: _ClassVar[int]
    POINTS_MISSING_FIELD_NUMBER: _ClassVar[int]
    LAST_UPDATE_FIELD_NUMBER: _ClassVar[int]
    LAST_REJECTION_FIELD_NUMBER: _ClassVar[int]
    GRADIENT_NOISE_SCALE_FIELD_NUMBER: _ClassVar[int]
    GRAD_SQ_NORM_FIELD_NUMBER: _ClassVar[int]
    GRAD_VARIANCE_FIELD_NUMBER: _ClassVar[int]
    NOISE_STEP_FIELD_NUMBER: _ClassVar[int]
    CONFIGURATIONS_FIELD_NUMBER: _ClassVar[int]
    RESIZE_PAUSE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    world_size: int
    active_workers: int
    last_step: int
    last_loss: float
    loss_ema: float
    loss_slope_per_step: float
    throughput: _containers.RepeatedCompositeFieldContainer[ThroughputStat]
    points_received: int
    points_duplicate: int
    points_rejected: int
    points_missing: int
    last_update: float
    last_rejection: str
    gradient_noise_scale: float
    grad_sq_norm: float
    grad_variance: float
    noise_step: int
    configurations: _containers.RepeatedCompositeFieldContainer[ConfigurationStat]
    resize_pause_seconds: float
    def __init__(self, job_id: _Optional[str] = ..., world_size: _Optional[int] = ..., active_workers: _Optional[int] = ..., last_step: _Optional[int] = ..., last_loss: _Optional[float] = ..., loss_ema: _Optional[float] = ..., loss_slope_per_step: _Optional[float] = ..., throughput: _Optional[_Iterable[_Union[ThroughputStat, _Mapping]]] = ..., points_received: _Optional[int] = ..., points_duplicate: _Optional[int] = ..., points_rejected: _Optional[int] = ..., points_missing: _Optional[int] = ..., last_update: _Optional[float] = ..., last_rejection: _Optional[str] = ..., gradient_noise_scale: _Optional[float] = ..., grad_sq_norm: _Optional[float] = ..., grad_variance: _Optional[float] = ..., noise_step: _Optional[int] = ..., configurations: _Optional[_Iterable[_Union[ConfigurationStat, _Mapping]]] = ..., resize_pause_seconds: _Optional[float] = ...) -> None: ...

class ConfigurationStat(_message.Message):
    __slots__ = ("world_size", "batch_size", "median_step_time_seconds", "steps")
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    MEDIAN_STEP_TIME_SECONDS_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    world_size: int
    batch_size: int
    median_step_time_seconds: float
    steps: int
    def __init__(self, world_size: _Optional[int] = ..., batch_size: _Optional[int] = ..., median_step_time_seconds: _Optional[float] = ..., steps: _Optional[int] = ...) -> None: ...

class RecordedPoint(_message.Message):
    __slots__ = ("worker", "incarnation", "world_size", "point", "received_time")
    WORKER_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    POINT_FIELD_NUMBER: _ClassVar[int]
    RECEIVED_TIME_FIELD_NUMBER: _ClassVar[int]
    worker: WorkerRef
    incarnation: str
    world_size: int
    point: StepPoint
    received_time: float
    def __init__(self, worker: _Optional[_Union[WorkerRef, _Mapping]] = ..., incarnation: _Optional[str] = ..., world_size: _Optional[int] = ..., point: _Optional[_Union[StepPoint, _Mapping]] = ..., received_time: _Optional[float] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("job_id", "max_points")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_POINTS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    max_points: int
    def __init__(self, job_id: _Optional[str] = ..., max_points: _Optional[int] = ...) -> None: ...

class GetJobResponse(_message.Message):
    __slots__ = ("summary", "points")
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    POINTS_FIELD_NUMBER: _ClassVar[int]
    summary: JobSummary
    points: _containers.RepeatedCompositeFieldContainer[RecordedPoint]
    def __init__(self, summary: _Optional[_Union[JobSummary, _Mapping]] = ..., points: _Optional[_Iterable[_Union[RecordedPoint, _Mapping]]] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[JobSummary]
    def __init__(self, jobs: _Optional[_Iterable[_Union[JobSummary, _Mapping]]] = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ("job_id", "with_summary")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    WITH_SUMMARY_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    with_summary: bool
    def __init__(self, job_id: _Optional[str] = ..., with_summary: bool = ...) -> None: ...

class WatchEvent(_message.Message):
    __slots__ = ("job_id", "points", "summary", "events_dropped")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    POINTS_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    EVENTS_DROPPED_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    points: _containers.RepeatedCompositeFieldContainer[RecordedPoint]
    summary: JobSummary
    events_dropped: int
    def __init__(self, job_id: _Optional[str] = ..., points: _Optional[_Iterable[_Union[RecordedPoint, _Mapping]]] = ..., summary: _Optional[_Union[JobSummary, _Mapping]] = ..., events_dropped: _Optional[int] = ...) -> None: ...
