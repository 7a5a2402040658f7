from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobPhase(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_PHASE_UNSPECIFIED: _ClassVar[JobPhase]
    JOB_WAITING: _ClassVar[JobPhase]
    JOB_RUNNING: _ClassVar[JobPhase]
    JOB_FINISHED: _ClassVar[JobPhase]
    JOB_FAILED: _ClassVar[JobPhase]

class WorkerState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WORKER_STATE_UNSPECIFIED: _ClassVar[WorkerState]
    WORKER_ATTACHED: _ClassVar[WorkerState]
    WORKER_WARM: _ClassVar[WorkerState]
    WORKER_RUNNING: _ClassVar[WorkerState]
    WORKER_LEAVING: _ClassVar[WorkerState]
    WORKER_EXITED: _ClassVar[WorkerState]

class AgentState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    AGENT_STATE_UNSPECIFIED: _ClassVar[AgentState]
    AGENT_STARTING: _ClassVar[AgentState]
    AGENT_WARM: _ClassVar[AgentState]
    AGENT_RUNNING: _ClassVar[AgentState]
    AGENT_LEAVING: _ClassVar[AgentState]
    AGENT_STOPPING: _ClassVar[AgentState]
    AGENT_EXITED: _ClassVar[AgentState]
JOB_PHASE_UNSPECIFIED: JobPhase
JOB_WAITING: JobPhase
JOB_RUNNING: JobPhase
JOB_FINISHED: JobPhase
JOB_FAILED: JobPhase
WORKER_STATE_UNSPECIFIED: WorkerState
WORKER_ATTACHED: WorkerState
WORKER_WARM: WorkerState
WORKER_RUNNING: WorkerState
WORKER_LEAVING: WorkerState
WORKER_EXITED: WorkerState
AGENT_STATE_UNSPECIFIED: AgentState
AGENT_STARTING: AgentState
AGENT_WARM: AgentState
AGENT_RUNNING: AgentState
AGENT_LEAVING: AgentState
AGENT_STOPPING: AgentState
AGENT_EXITED: AgentState

class AgentEvent(_message.Message):
    __slots__ = ("hello", "warm", "exited", "preempted")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    WARM_FIELD_NUMBER: _ClassVar[int]
    EXITED_FIELD_NUMBER: _ClassVar[int]
    PREEMPTED_FIELD_NUMBER: _ClassVar[int]
    hello: Hello
    warm: Warm
    exited: Exited
    preempted: Preempted
    def __init__(self, hello: _Optional[_Union[Hello, _Mapping]] = ..., warm: _Optional[_Union[Warm, _Mapping]] = ..., exited: _Optional[_Union[Exited, _Mapping]] = ..., preempted: _Optional[_Union[Preempted, _Mapping]] = ...) -> None: ...

class Preempted(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class Hello(_message.Message):
    __slots__ = ("instance", "container_id", "host", "agent_id", "resume", "gpus", "node")
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    RESUME_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    instance: str
    container_id: str
    host: str
    agent_id: str
    resume: Resume
    gpus: _containers.RepeatedScalarFieldContainer[int]
    node: str
    def __init__(self, instance: _Optional[str] = ..., container_id: _Optional[str] = ..., host: _Optional[str] = ..., agent_id: _Optional[str] = ..., resume: _Optional[_Union[Resume, _Mapping]] = ..., gpus: _Optional[_Iterable[int]] = ..., node: _Optional[str] = ...) -> None: ...

class Resume(_message.Message):
    __slots__ = ("state", "rank", "driver_incarnation")
    STATE_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    DRIVER_INCARNATION_FIELD_NUMBER: _ClassVar[int]
    state: AgentState
    rank: int
    driver_incarnation: int
    def __init__(self, state: _Optional[_Union[AgentState, str]] = ..., rank: _Optional[int] = ..., driver_incarnation: _Optional[int] = ...) -> None: ...

class Warm(_message.Message):
    __slots__ = ("pid", "warmup_seconds")
    PID_FIELD_NUMBER: _ClassVar[int]
    WARMUP_SECONDS_FIELD_NUMBER: _ClassVar[int]
    pid: int
    warmup_seconds: float
    def __init__(self, pid: _Optional[int] = ..., warmup_seconds: _Optional[float] = ...) -> None: ...

class Exited(_message.Message):
    __slots__ = ("exit_code", "leaving", "joined", "stderr_tail", "log_path", "hung_seconds")
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    LEAVING_FIELD_NUMBER: _ClassVar[int]
    JOINED_FIELD_NUMBER: _ClassVar[int]
    STDERR_TAIL_FIELD_NUMBER: _ClassVar[int]
    LOG_PATH_FIELD_NUMBER: _ClassVar[int]
    HUNG_SECONDS_FIELD_NUMBER: _ClassVar[int]
    exit_code: int
    leaving: bool
    joined: bool
    stderr_tail: str
    log_path: str
    hung_seconds: float
    def __init__(self, exit_code: _Optional[int] = ..., leaving: bool = ..., joined: bool = ..., stderr_tail: _Optional[str] = ..., log_path: _Optional[str] = ..., hung_seconds: _Optional[float] = ...) -> None: ...

class AgentCommand(_message.Message):
    __slots__ = ("start", "leave", "stop", "reform", "target", "reattached")
    START_FIELD_NUMBER: _ClassVar[int]
    LEAVE_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    REFORM_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    REATTACHED_FIELD_NUMBER: _ClassVar[int]
    start: Start
    leave: Leave
    stop: Stop
    reform: Reform
    target: Target
    reattached: Reattached
    def __init__(self, start: _Optional[_Union[Start, _Mapping]] = ..., leave: _Optional[_Union[Leave, _Mapping]] = ..., stop: _Optional[_Union[Stop, _Mapping]] = ..., reform: _Optional[_Union[Reform, _Mapping]] = ..., target: _Optional[_Union[Target, _Mapping]] = ..., reattached: _Optional[_Union[Reattached, _Mapping]] = ...) -> None: ...

class Reattached(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Start(_message.Message):
    __slots__ = ("env",)
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ENV_FIELD_NUMBER: _ClassVar[int]
    env: _containers.ScalarMap[str, str]
    def __init__(self, env: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Reform(_message.Message):
    __slots__ = ("env",)
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ENV_FIELD_NUMBER: _ClassVar[int]
    env: _containers.ScalarMap[str, str]
    def __init__(self, env: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Leave(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Stop(_message.Message):
    __slots__ = ("grace_seconds",)
    GRACE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    grace_seconds: float
    def __init__(self, grace_seconds: _Optional[float] = ...) -> None: ...

class FromTraining(_message.Message):
    __slots__ = ("ready", "beat", "ping", "exiting")
    READY_FIELD_NUMBER: _ClassVar[int]
    BEAT_FIELD_NUMBER: _ClassVar[int]
    PING_FIELD_NUMBER: _ClassVar[int]
    EXITING_FIELD_NUMBER: _ClassVar[int]
    ready: Ready
    beat: float
    ping: int
    exiting: bool
    def __init__(self, ready: _Optional[_Union[Ready, _Mapping]] = ..., beat: _Optional[float] = ..., ping: _Optional[int] = ..., exiting: bool = ...) -> None: ...

class Ready(_message.Message):
    __slots__ = ("pid", "time")
    PID_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    pid: int
    time: float
    def __init__(self, pid: _Optional[int] = ..., time: _Optional[float] = ...) -> None: ...

class ToTraining(_message.Message):
    __slots__ = ("start", "leave", "driver_lost", "reform", "target", "pong")
    START_FIELD_NUMBER: _ClassVar[int]
    LEAVE_FIELD_NUMBER: _ClassVar[int]
    DRIVER_LOST_FIELD_NUMBER: _ClassVar[int]
    REFORM_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    PONG_FIELD_NUMBER: _ClassVar[int]
    start: Start
    leave: Leave
    driver_lost: bool
    reform: Reform
    target: Target
    pong: int
    def __init__(self, start: _Optional[_Union[Start, _Mapping]] = ..., leave: _Optional[_Union[Leave, _Mapping]] = ..., driver_lost: bool = ..., reform: _Optional[_Union[Reform, _Mapping]] = ..., target: _Optional[_Union[Target, _Mapping]] = ..., pong: _Optional[int] = ...) -> None: ...

class Target(_message.Message):
    __slots__ = ("workers", "remove", "batch_size", "accum_steps", "learning_rate", "reason", "version", "time")
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    REMOVE_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    ACCUM_STEPS_FIELD_NUMBER: _ClassVar[int]
    LEARNING_RATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    workers: int
    remove: _containers.RepeatedScalarFieldContainer[str]
    batch_size: int
    accum_steps: int
    learning_rate: float
    reason: str
    version: int
    time: float
    def __init__(self, workers: _Optional[int] = ..., remove: _Optional[_Iterable[str]] = ..., batch_size: _Optional[int] = ..., accum_steps: _Optional[int] = ..., learning_rate: _Optional[float] = ..., reason: _Optional[str] = ..., version: _Optional[int] = ..., time: _Optional[float] = ...) -> None: ...

class FlexReply(_message.Message):
    __slots__ = ("previous", "target", "message", "version")
    PREVIOUS_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    previous: int
    target: int
    message: str
    version: int
    def __init__(self, previous: _Optional[int] = ..., target: _Optional[int] = ..., message: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WorkerStatus(_message.Message):
    __slots__ = ("instance", "container_id", "state", "rank", "exit_code", "preempted", "gpus", "node")
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    PREEMPTED_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    instance: str
    container_id: str
    state: WorkerState
    rank: int
    exit_code: int
    preempted: bool
    gpus: _containers.RepeatedScalarFieldContainer[int]
    node: str
    def __init__(self, instance: _Optional[str] = ..., container_id: _Optional[str] = ..., state: _Optional[_Union[WorkerState, str]] = ..., rank: _Optional[int] = ..., exit_code: _Optional[int] = ..., preempted: bool = ..., gpus: _Optional[_Iterable[int]] = ..., node: _Optional[str] = ...) -> None: ...

class ResizeEvent(_message.Message):
    __slots__ = ("time", "from_workers", "to_workers", "reason")
    TIME_FIELD_NUMBER: _ClassVar[int]
    FROM_WORKERS_FIELD_NUMBER: _ClassVar[int]
    TO_WORKERS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    time: float
    from_workers: int
    to_workers: int
    reason: str
    def __init__(self, time: _Optional[float] = ..., from_workers: _Optional[int] = ..., to_workers: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class WorkerFailure(_message.Message):
    __slots__ = ("time", "instance", "container_id", "rank", "exit_code", "reason", "stderr_tail", "log_path")
    TIME_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_ID_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    STDERR_TAIL_FIELD_NUMBER: _ClassVar[int]
    LOG_PATH_FIELD_NUMBER: _ClassVar[int]
    time: float
    instance: str
    container_id: str
    rank: int
    exit_code: int
    reason: str
    stderr_tail: str
    log_path: str
    def __init__(self, time: _Optional[float] = ..., instance: _Optional[str] = ..., container_id: _Optional[str] = ..., rank: _Optional[int] = ..., exit_code: _Optional[int] = ..., reason: _Optional[str] = ..., stderr_tail: _Optional[str] = ..., log_path: _Optional[str] = ...) -> None: ...

class JobStatus(_message.Message):
    __slots__ = ("job", "phase", "target", "world_size", "min_workers", "max_workers", "workers", "timeline", "error", "failures", "incarnations", "batch", "batch_timeline", "min_batch_size", "max_batch_size", "converged", "lag", "version", "ring_at_target", "yarn_ready")
    JOB_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    MIN_WORKERS_FIELD_NUMBER: _ClassVar[int]
    MAX_WORKERS_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    TIMELINE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    INCARNATIONS_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    BATCH_TIMELINE_FIELD_NUMBER: _ClassVar[int]
    MIN_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    CONVERGED_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    RING_AT_TARGET_FIELD_NUMBER: _ClassVar[int]
    YARN_READY_FIELD_NUMBER: _ClassVar[int]
    job: str
    phase: JobPhase
    target: int
    world_size: int
    min_workers: int
    max_workers: int
    workers: _containers.RepeatedCompositeFieldContainer[WorkerStatus]
    timeline: _containers.RepeatedCompositeFieldContainer[ResizeEvent]
    error: str
    failures: _containers.RepeatedCompositeFieldContainer[WorkerFailure]
    incarnations: _containers.RepeatedCompositeFieldContainer[DriverIncarnation]
    batch: Target
    batch_timeline: _containers.RepeatedCompositeFieldContainer[Target]
    min_batch_size: int
    max_batch_size: int
    converged: bool
    lag: str
    version: int
    ring_at_target: bool
    yarn_ready: int
    def __init__(self, job: _Optional[str] = ..., phase: _Optional[_Union[JobPhase, str]] = ..., target: _Optional[int] = ..., world_size: _Optional[int] = ..., min_workers: _Optional[int] = ..., max_workers: _Optional[int] = ..., workers: _Optional[_Iterable[_Union[WorkerStatus, _Mapping]]] = ..., timeline: _Optional[_Iterable[_Union[ResizeEvent, _Mapping]]] = ..., error: _Optional[str] = ..., failures: _Optional[_Iterable[_Union[WorkerFailure, _Mapping]]] = ..., incarnations: _Optional[_Iterable[_Union[DriverIncarnation, _Mapping]]] = ..., batch: _Optional[_Union[Target, _Mapping]] = ..., batch_timeline: _Optional[_Iterable[_Union[Target, _Mapping]]] = ..., min_batch_size: _Optional[int] = ..., max_batch_size: _Optional[int] = ..., converged: bool = ..., lag: _Optional[str] = ..., version: _Optional[int] = ..., ring_at_target: bool = ..., yarn_ready: _Optional[int] = ...) -> None: ...

class DriverIncarnation(_message.Message):
    __slots__ = ("number", "started", "host", "adopted_workers", "recovered_after")
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    ADOPTED_WORKERS_FIELD_NUMBER: _ClassVar[int]
    RECOVERED_AFTER_FIELD_NUMBER: _ClassVar[int]
    number: int
    started: float
    host: str
    adopted_workers: int
    recovered_after: float
    def __init__(self, number: _Optional[int] = ..., started: _Optional[float] = ..., host: _Optional[str] = ..., adopted_workers: _Optional[int] = ..., recovered_after: _Optional[float] = ...) -> None: ...
