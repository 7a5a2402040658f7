"""A live replay: a workload's jobs submitted at their arrival times to the running pseudo-cluster.

Each job is ``submarine job run`` of ``examples/train_elastic.py`` on emulated accelerators (one stand-in GPU
a worker, :mod:`tf_hooks.emulate`), with the samples its plan gives (:mod:`submarine_elastic.replay.plan`).
Under a policy (``goodput``, ``goodput+goodput``, ``greedy+fair-share``, ...) every job is submitted elastic
(1 .. its cap of workers, its global batch fixed) when it arrives and the controller sizes it; under
``static`` every job runs at its submitted size, never resized, and waits in arrival order until its workers
are free (FIFO, as the simulator's ``fifo`` scheduler: no job behind a waiting one starts first); under
``tiresias`` every job runs at its submitted size with a checkpoint every commit, and the simulator's Tiresias
(:mod:`.tiresias`) decides each round which jobs hold the GPUs: a job it preempts is suspended whole (its YARN
service stopped, its checkpoint and job files kept) and resumed later from its checkpoint (the service started
again), its step log continuing.

What is recorded: per job its arrival, when it was submitted, its first and last committed step (from its
step log), the ring size over time and the worker containers YARN held for it, and its end as YARN reports it;
from those its JCT (arrival to its last committed step), its queueing (arrival to its first step), and the
exactly-once checks of its step log. Interrupted, it kills every job it submitted.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from tenacity import Retrying, retry_if_result, stop_after_delay, wait_fixed

from submarine_elastic.cluster import ClusterSpec
from submarine_elastic.replay.plan import COMMIT_EVERY, ReplayJob, ReplayPlan
from submarine_elastic.replay.records import JobRecord, LiveRun, ReplayRunError, ended_state
from submarine_elastic.replay.steplog import StepLog, read_step_log
from submarine_elastic.replay.tiresias import LiveJob, LiveTiresias
from submarine_elastic.yarn import RM_UNREACHABLE_EXIT, ServiceNotFoundError, YarnError, YarnServiceClient

REPO = Path(__file__).resolve().parents[2]
TRAIN_SCRIPT = REPO / "examples" / "train_elastic.py"
STATIC = "static"
TIRESIAS = "tiresias"
#: Commits between two checkpoints of a job under ``tiresias``: every one, so a suspension loses no step.
CHECKPOINT_EVERY = 1
#: Each worker container: a stand-in GPU, one vcore, memory for one TensorFlow process.
WORKER_RESOURCES = "memory-mb=1024,vcores=1,gpu=1"
#: The environment variable that names a job's emulated GPU profile (what `job show` reads back).
EMULATE_ENV = "SUBMARINE_EMULATE"
#: Horovod's background cycle in an emulated job's workers (``HOROVOD_CYCLE_TIME``, ms; Horovod's default 1).
#: The thread wakes every cycle to coordinate the ring while the step is held for its device time: on these
#: shared cores a rank so held used 20-25 % of a core at 1 ms and 7-8 % at 10 (a two-rank ring, a step every
#: 30 ms), which a replay's eight workers would take from the cluster and the jobs starting beside them. On a
#: GPU host the thread has a core of its own, which the emulation cannot give it.
EMULATED_CYCLE_MS = 10
#: How long a run's end waits for the controller to see its jobs' ends before stopping it.
CONTROLLER_ENDS_S = 30.0
#: The controller's round under a policy (``controller start --interval``), and the simulator's beside it.
INTERVAL_S = 2.0
#: Seconds between two looks at the jobs.
POLL_S = 1.0
#: How long YARN must say a created job's service does not exist before the job counts ended (destroyed).
GONE_S = 15.0
#: The longest a run waits for YARN to remove a service it destroys at its end.
RELEASE_TIMEOUT_S = 120.0
#: How long a job whose ``job run`` found the ResourceManager unreachable is submitted again, and how often.
SUBMIT_RETRY_S = 300.0
SUBMIT_RETRY_EVERY_S = 5.0

Say = Callable[[str], None]


def replay_cluster_spec(port_base: int = 18000, nodes: int = 2, gpus_per_node: int = 4) -> ClusterSpec:
    """A pseudo-cluster a replay fits on: ``nodes`` x ``gpus_per_node`` stand-in GPUs, and memory and vcores
    for every job's service AM (1 GB) and driver (512 MB) beside the workers (1 GB each), a dozen jobs at once.
    YARN's memory is accounting: a worker's TensorFlow process uses about 650 MB of it."""
    return ClusterSpec(
        nodes=nodes, gpus_per_node=gpus_per_node, node_memory_mb=16384, node_vcores=16, port_base=port_base
    )


class LiveReplay:
    """Runs one plan under one policy on the running cluster at ``rm_url``; logs and results under ``out``.

    Args:
        plan: the jobs (:func:`submarine_elastic.replay.plan.plan_replay`).
        policy: ``static``, or a policy the controller runs (``goodput``, ``goodput+goodput``, ...).
        env: the environment of the ``submarine`` commands it runs (RM, controller directory, ...).
        say: where progress lines go.
        timeout_s: how long after the last arrival the jobs may take to end.
        checkpoints: every job writes a checkpoint at every commit (``--checkpoint_path``), as under
            ``tiresias``: a job that loses every worker resumes from it (a chaos run's jobs).
        queue: the CapacityScheduler queue every job is submitted to (``job run --queue``; None: YARN's
            default).

    Raises:
        ReplayRunError: a policy the live replay does not run: a simulator baseline other than the two live
            ones, or a policy or arbiter the controller could not load (named with why).
    """

    def __init__(
        self,
        plan: ReplayPlan,
        policy: str,
        *,
        rm_url: str,
        out: Path,
        env: dict[str, str] | None = None,
        say: Say = print,
        timeout_s: float = 1800.0,
        interval_s: float = INTERVAL_S,
        tag: str | None = None,
        checkpoints: bool = False,
        queue: str | None = None,
    ) -> None:
        check_policy(policy)
        if not TRAIN_SCRIPT.is_file():
            raise ReplayRunError(
                f"a replay's jobs run {TRAIN_SCRIPT.relative_to(REPO)} of a checkout of submarine-elastic, "
                f"not found at {TRAIN_SCRIPT}: run it from a checkout (the wheel does not ship the examples)"
            )
        self.plan = plan
        self.policy = policy
        self.rm_url = rm_url
        self.out = out
        self.say = say
        self._t0 = 0.0  # when the running replay began (time.time())
        self.timeout_s = timeout_s
        self.interval_s = interval_s
        self.env = {
            **(env if env is not None else os.environ),
            "SUBMARINE_RM_URL": rm_url,
            "SUBMARINE_CONTROLLER_DIR": str(out / "controller"),
        }
        # Every run's services are named apart (YARN keeps a stopped service's name): the tag, then the job.
        letter = {STATIC: "s", TIRESIAS: "t"}.get(policy, "e")
        self.tag = tag or f"{letter}{secrets.token_hex(2)}"
        self.records = [JobRecord(job, f"{self.tag}-{job.name}") for job in plan.jobs]
        self._decisions: dict[str, list[tuple[float, int, int, str]]] = {}
        self.tiresias = LiveTiresias(plan.nodes, plan.gpus_per_node, plan.time_scale) if policy == TIRESIAS else None
        self.checkpoints = checkpoints or self.tiresias is not None
        self.queue = queue

    @property
    def elastic(self) -> bool:
        """Whether the controller sizes the jobs (every policy but the two baselines)."""
        return self.policy not in (STATIC, TIRESIAS)

    # --- the run -------------------------------------------------------------------------------
    def run(self) -> LiveRun:
        """Submit every job at its arrival, follow them to their end, return what was recorded; every job
        still running when it stops (the jobs done, an error, an interrupt) is killed."""
        self.out.mkdir(parents=True, exist_ok=True)
        with YarnServiceClient(self.rm_url) as yarn:
            gpus_before = _gpus_in_use(yarn)
        if self.elastic:
            self.start_controller()
        t0 = self._t0 = time.time()
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="replay-submit")
        pending: dict[str, concurrent.futures.Future[None]] = {}
        try:
            with interrupted_by(signal.SIGTERM), YarnServiceClient(self.rm_url) as yarn:
                self._loop(yarn, t0, pool, pending)
        finally:
            for future in pending.values():
                future.cancel()
            pool.shutdown(wait=True)
            self._kill_all()
            self._release(t0, gpus_before)
            if self.elastic:
                self._controller_saw_the_ends()
                self._print_decisions(t0)
                self.submarine("controller", "stop", check=False)
        for record in self.records:
            if not record.checked:  # killed, or the run stopped before its end was seen
                self._read_log(record, t0)
        return LiveRun(self.policy, self.plan, t0, self.records, dict(self._decisions), time.time() - t0)

    def _loop(
        self,
        yarn: YarnServiceClient,
        t0: float,
        pool: concurrent.futures.ThreadPoolExecutor,
        pending: dict[str, concurrent.futures.Future[None]],
    ) -> None:
        deadline = max(j.arrival_s for j in self.plan.jobs) + self.timeout_s
        decisions_read = 0.0
        queue: list[JobRecord] = []  # arrived, waiting for their workers (static)
        arrived: set[str] = set()
        while True:
            now = time.time() - t0
            for record in self.records:
                if record.job.name not in arrived and now >= record.job.arrival_s:
                    arrived.add(record.job.name)
                    self.say(
                        f"+{now:6.0f} s  {record.service} arrives ({record.job.application}, "
                        f"{record.job.workers} workers, batch {record.job.batch})"
                    )
                    queue.append(record)
            if self.tiresias is not None:
                self._tiresias_round(self.tiresias, yarn, time.time() - t0, queue, pool, pending)
            else:
                for record in self._admit(queue):
                    queue.remove(record)
                    record.submitted_s = time.time() - t0
                    pending[record.service] = pool.submit(self._submit, record)
            for name, future in list(pending.items()):
                if future.done():
                    future.result()  # a refused submission ends the run (and kills the rest)
                    del pending[name]
                    next(r for r in self.records if r.service == name).created = True
            self._look(yarn, t0)
            if self.elastic and now - decisions_read >= self.interval_s:  # the controller decides once a round
                decisions_read = now
                self._print_decisions(t0)
            if all(r.ended_s is not None for r in self.records):
                return
            if now > deadline:
                left = [r.job.name for r in self.records if r.ended_s is None]
                raise ReplayRunError(f"{len(left)} jobs did not end within {self.timeout_s:.0f} s: {left}")
            time.sleep(POLL_S)

    def _admit(self, queue: list[JobRecord]) -> list[JobRecord]:
        """The arrived jobs to submit now: every one under a policy; under static, from the head of the queue
        while its workers fit beside the jobs still running."""
        if self.elastic:
            return list(queue)
        busy = sum(r.job.workers for r in self.records if r.submitted_s is not None and r.ended_s is None)
        admitted = []
        for record in queue:
            if busy + record.job.workers > self.plan.gpus:
                break
            busy += record.job.workers
            admitted.append(record)
        return admitted

    # --- tiresias: suspend and resume whole jobs -------------------------------------------------------
    def _tiresias_round(
        self,
        tiresias: LiveTiresias,
        yarn: YarnServiceClient,
        now: float,
        queue: list[JobRecord],
        pool: concurrent.futures.ThreadPoolExecutor,
        pending: dict[str, concurrent.futures.Future[None]],
    ) -> None:
        """Ask the simulator's Tiresias about the arrived, unfinished jobs; submit, resume and suspend as it says.
        A job it starts that is still being stopped is started once YARN has it stopped (a later round)."""
        live = [r for r in self.records if r.job.arrival_s <= now and r.ended_s is None]
        decided = tiresias.decide(
            now,
            [
                LiveJob(
                    r.job.name,
                    r.job.application,
                    r.job.arrival_s,
                    r.job.workers,
                    r.job.batch,
                    holding=r.holding_since is not None,
                    attained_gpu_s=r.attained(now),
                )
                for r in live
            ],
        )
        by_name = {r.job.name: r for r in live}
        for name in decided.suspend:
            record = by_name[name]
            if not record.created or record.suspending:
                continue  # its submission is under way: it is suspended once it exists
            self._suspend(yarn, record, now)
        for name in decided.start:
            record = by_name[name]
            if record.submitted_s is None:
                queue.remove(record)
                record.submitted_s = now
                record.holding_since = now
                self._note(record, now, 0, record.job.workers, "tiresias starts it")
                pending[record.service] = pool.submit(self._submit, record)
            elif record.suspended:
                self._resume(yarn, record, now)

    def _suspend(self, yarn: YarnServiceClient, record: JobRecord, now: float) -> None:
        try:
            yarn.stop(record.service, wait=False)
        except YarnError as exc:
            self.say(f"+{now:6.0f} s  {record.service}: not suspended ({exc}); asked again next round")
            return
        record.attained_gpu_s = record.attained(now)
        record.holding_since = None
        record.suspending = True
        record.resuming = False  # stopped again before its start showed: its next stop is a suspension
        record.stopped_s.append(now)
        self._note(
            record, now, record.job.workers, 0, f"tiresias preempts it ({record.attained_gpu_s:.0f} GPU-s attained)"
        )

    def _resume(self, yarn: YarnServiceClient, record: JobRecord, now: float) -> None:
        try:
            yarn.start(record.service, wait=False)
        except YarnError as exc:
            self.say(f"+{now:6.0f} s  {record.service}: not resumed ({exc}); asked again next round")
            return
        record.suspended = False
        record.resuming = True
        record.holding_since = now
        record.resumed_s.append(now)
        self._note(record, now, 0, record.job.workers, "tiresias resumes it from its checkpoint")

    def _note(self, record: JobRecord, now: float, before: int, after: int, why: str) -> None:
        """A tiresias decision: printed, and kept with the run's decisions (as the controller's are)."""
        self._decisions.setdefault(record.job.name, []).append((now, before, after, why))
        self.say(f"+{now:6.0f} s  {record.service}: {before} -> {after} workers: {why}")

    def _stopped(self, record: JobRecord, now: float, t0: float) -> bool:
        """A suspended job's service has stopped: True when it is suspended, False when it had trained its
        samples by then (it ended as it was being stopped)."""
        record.suspending = False
        record.stopped_done_s.append(now)
        log_dir = self.log_dir(record.job)
        if log_dir.is_dir() and self._read(record, t0).samples >= record.job.samples:
            return False
        record.suspended = True
        self.say(f"+{now:6.0f} s  {record.service} suspended (stopped, its checkpoint kept)")
        return True

    def _look(self, yarn: YarnServiceClient, t0: float) -> None:
        for record in self.records:
            if not record.created or record.ended_s is not None or record.suspended:
                continue
            now = time.time() - t0
            try:
                status = yarn.status(record.service)
            except ServiceNotFoundError:
                self._gone(record, now, t0)
                continue
            except YarnError:
                continue
            record.gone_since = None
            worker = status.component("worker")
            record.held.append((now, worker.ready_count if worker is not None else 0))
            if record.resuming:
                if status.is_terminal:
                    continue  # the start asked is not in its status yet
                record.resuming = False
            if status.is_terminal and record.suspending and self._stopped(record, now, t0):
                continue
            if status.is_terminal:
                self._ended(record, now, str(status.state), now, t0)

    def _ended(self, record: JobRecord, at: float, yarn_state: str, now: float, t0: float, why: str = "") -> None:
        """The job ended at run second ``at`` in ``yarn_state`` (its driver's record decides, :func:`ended_state`):
        recorded, its step log read (its processes have ended: the log is whole), said."""
        record.holding_since = None
        if self.tiresias is not None:
            self.tiresias.finished(record.job.name)
        record.ended_s = at
        record.state = ended_state(record.service, yarn_state)
        self._read_log(record, t0)
        took = record.jct_s
        said = [f"JCT {took:.0f} s, queued {record.queueing_s:.0f} s"] if took is not None else []
        said += [why] if why else []
        self.say(f"+{now:6.0f} s  {record.service} ends {record.state}" + (f": {'; '.join(said)}" if said else ""))

    def _gone(self, record: JobRecord, now: float, t0: float) -> None:
        """YARN says the service of a job whose `job run` returned does not exist: destroyed (a `job kill`). Once
        that has lasted :data:`GONE_S`, the job ended, STOPPED (its driver's record decides, as for any end). Seen in
        a chaos run: a job killed while the ResourceManager did not answer was never seen ended, and the replay
        waited for it until its timeout."""
        if record.gone_since is None:
            record.gone_since = now
            return
        if now - record.gone_since >= GONE_S:
            self._ended(record, record.gone_since, "STOPPED", now, t0, why="its service is gone (destroyed)")

    def _read(self, record: JobRecord, t0: float) -> StepLog:
        return read_step_log(
            self.log_dir(record.job), record.job.dataset_samples, resumed=[t0 + t for t in record.resumed_s]
        )

    def _read_log(self, record: JobRecord, t0: float) -> None:
        """Read and check the job's step log, once."""
        record.checked = True
        log_dir = self.log_dir(record.job)
        if not log_dir.is_dir():
            return
        steps = self._read(record, t0)
        record.ring = [(t - t0, n) for t, n in zip(steps.times, steps.sizes, strict=True)]
        record.rolled_back = steps.rolled_back
        record.resumed_step_s = [
            next((t for t, _ in record.ring if t >= resumed), None) for resumed in record.resumed_s
        ]
        record.first_step_s = None if steps.first_s is None else steps.first_s - t0
        record.last_step_s = None if steps.last_s is None else steps.last_s - t0
        record.samples = steps.samples
        record.problems = list(steps.problems)
        if record.samples < record.job.samples:
            record.problems.append(f"trained {record.samples} of its {record.job.samples} samples")

    # --- submitting and stopping -----------------------------------------------------------------
    def log_dir(self, job: ReplayJob) -> Path:
        return self.out / job.name / "log"

    def _service(self, job: ReplayJob) -> str:
        return next(r.service for r in self.records if r.job is job)

    def checkpoint_dir(self, job: ReplayJob) -> Path:
        return self.out / job.name / "checkpoint"

    def command(self, job: ReplayJob) -> str:
        """The training command of a job's workers."""
        return (
            f"{sys.executable} {TRAIN_SCRIPT} --data blobs --samples {job.dataset_samples} "
            f"--global-batch {job.batch} --total-samples {job.samples} --epochs 1000000 "
            f"--commit-every {COMMIT_EVERY} --emulate {job.application} --log-dir {self.log_dir(job)}"
        )

    def job_run_args(self, job: ReplayJob) -> list[str]:
        """``submarine job run``'s arguments for a job under this run's policy."""
        args = ["job", "run", "--name", self._service(job), "--num_workers", str(job.workers)]
        if self.elastic:
            args += [
                "--elastic", "--min_workers", "1", "--max_workers", str(job.max_workers),
                "--min_batch_size", str(job.batch), "--max_batch_size", str(job.batch),
            ]  # fmt: skip
        if self.checkpoints:  # under tiresias: suspended whole and resumed from its checkpoint
            args += ["--checkpoint_path", str(self.checkpoint_dir(job)), "--checkpoint_every", str(CHECKPOINT_EVERY)]
        if self.queue is not None:
            args += ["--queue", self.queue]
        args += [
            "--worker_resources", WORKER_RESOURCES,
            "--env", f"{EMULATE_ENV}={job.application}",
            "--env", f"HOROVOD_CYCLE_TIME={EMULATED_CYCLE_MS}",
            "--worker_launch_cmd", self.command(job),
        ]  # fmt: skip
        return args

    def _submit(self, record: JobRecord) -> None:
        """``job run`` of the record's job; while the ResourceManager or HDFS does not answer (``job run`` exits
        :data:`RM_UNREACHABLE_EXIT`: a restart, a pause), submitted again every :data:`SUBMIT_RETRY_EVERY_S` for up
        to :data:`SUBMIT_RETRY_S`, as a user's submission script would, unless YARN holds the job by then (the
        submission that failed reached it).

        Raises:
            ReplayRunError: ``job run`` refused the job, or the cluster stayed away.
        """
        args = self.job_run_args(record.job)
        deadline = time.monotonic() + SUBMIT_RETRY_S
        while True:
            done = self.submarine(*args, check=False)
            if done.returncode == 0:
                return
            why = (done.stderr or done.stdout).strip()
            if done.returncode != RM_UNREACHABLE_EXIT or time.monotonic() > deadline:
                raise ReplayRunError(f"submarine job run {record.service} failed: {why}")
            time.sleep(SUBMIT_RETRY_EVERY_S)
            if self._held_by_yarn(record.service):
                return
            now = time.time() - self._t0
            said = _last_line(why)
            self.say(f"+{now:6.0f} s  {record.service}: the cluster did not answer ({said}); submitting again")

    def _held_by_yarn(self, service: str) -> bool:
        try:
            with YarnServiceClient(self.rm_url) as yarn:
                return bool(yarn.status(service).id)
        except YarnError:
            return False

    def _kill_all(self) -> None:
        for record in self.records:
            if record.submitted_s is not None and record.ended_s is None:  # a suspended one too
                self.submarine("job", "kill", record.service, check=False)

    def _release(self, t0: float, gpus_before: int) -> None:
        """Destroy the services of this run whose ApplicationMaster still runs after the job's end (YARN keeps a
        finished service's application FINISHING for tens of seconds), then wait until the ResourceManager lists
        none of them live and the nodes hold no more GPUs than before the run (``gpus_before``), so that the
        next run on the cluster starts on a cluster without them: a controller started meanwhile would count
        them as another tenant's jobs holding workers, and a FINISHING application's containers kept their GPUs
        20 s into the next run (its allocations, even its jobs' ApplicationMasters, waited behind them)."""
        names = {r.service for r in self.records if r.submitted_s is not None}
        try:
            with YarnServiceClient(self.rm_url) as yarn:
                lingering = sorted(a.name for a in yarn.list() if a.name in names)
                for name in lingering:
                    now = time.time() - t0
                    self.say(f"+{now:6.0f} s  {name}: its application still runs after the job's end: destroyed")
                    yarn.destroy(name, missing_ok=True, timeout=RELEASE_TIMEOUT_S)
                waited = time.monotonic()

                def holding() -> int:
                    """GPUs over what the nodes held before the run; one more while an application of it is live."""
                    extra = _gpus_in_use(yarn) - gpus_before
                    return max(extra, int(any(a.name in names for a in yarn.list())))

                left = Retrying(
                    stop=stop_after_delay(RELEASE_TIMEOUT_S),
                    wait=wait_fixed(POLL_S),
                    retry=retry_if_result(lambda extra: extra > 0),
                    retry_error_callback=lambda state: state.outcome.result() if state.outcome else 1,
                )(holding)
                now = time.time() - t0
                if left > 0:
                    self.say(f"+{now:6.0f} s  the run's containers or GPUs still held {RELEASE_TIMEOUT_S:.0f} s on")
                elif time.monotonic() - waited >= POLL_S:
                    self.say(
                        f"+{now:6.0f} s  YARN released the run's containers {time.monotonic() - waited:.0f} s later"
                    )
        except YarnError as exc:
            self.say(f"the run's applications could not all be released: {exc}")

    def start_controller(self) -> None:
        policy, _, arbiter = self.policy.partition("+")
        args = ["controller", "start", "--policy", policy, "--interval", f"{self.interval_s:g}"]
        if arbiter:
            args += ["--arbiter", arbiter]
        self.say("submarine " + " ".join(args))
        self.submarine(*args)

    def submarine(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cli = Path(sys.executable).parent / "submarine"
        done = subprocess.run([str(cli), *args], env=self.env, capture_output=True, text=True, check=False)
        if check and done.returncode != 0:
            raise ReplayRunError(f"submarine {' '.join(args[:3])} failed: {(done.stderr or done.stdout).strip()}")
        return done

    def _controller_saw_the_ends(self) -> None:
        """Waits (up to :data:`CONTROLLER_ENDS_S`) until the controller counts none of the run's jobs live: it
        removes what it kept of each ended job (its files on HDFS too) once it sees its end, and is stopped
        next."""
        from submarine_elastic.controller.api import ControllerError
        from submarine_elastic.controller.client import view

        ours = {r.service for r in self.records}
        deadline = time.monotonic() + CONTROLLER_ENDS_S
        while time.monotonic() < deadline:
            try:
                with view(Path(self.env["SUBMARINE_CONTROLLER_DIR"])) as controller:
                    live = [] if controller is None else controller.statuses(include_finished=False)
            except ControllerError:
                return
            if not any(s.job.job_id in ours for s in live):
                return
            time.sleep(POLL_S)

    def _print_decisions(self, t0: float) -> None:
        from submarine_elastic.controller.api import ControllerError
        from submarine_elastic.controller.client import view

        try:
            with view(Path(self.env["SUBMARINE_CONTROLLER_DIR"])) as controller:
                if controller is None:
                    return
                for record in self.records:
                    if record.submitted_s is None:
                        continue
                    try:
                        timeline = controller.timeline(record.service)
                    except ControllerError:
                        continue
                    seen = self._decisions.setdefault(record.job.name, [])  # by the job's name in the plan
                    for d in timeline[len(seen) :]:
                        seen.append((d.time - t0, d.from_workers, d.to_workers, d.reason))
                        self.say(
                            f"+{d.time - t0:6.0f} s  {record.service}: {d.from_workers} -> {d.to_workers} "
                            f"workers: {d.reason}"
                        )
        except ControllerError as exc:
            self.say(f"  (the controller did not answer: {exc})")


def check_policy(policy: str) -> None:
    """Refuses a policy a live replay cannot run, before anything is submitted: ``static`` and ``tiresias`` are
    the live baselines; any other is loaded as the controller would load it (``JOB_POLICY[+ARBITER]``).

    Raises:
        ReplayRunError: naming the policy and why.
    """
    if policy in (STATIC, TIRESIAS):
        return
    from submarine_elastic.sim import BASELINES, SchedulerError, load_scheduler

    if policy in BASELINES:
        raise ReplayRunError(
            f"policy {policy!r} is a simulator baseline with no live run: the live baselines are {STATIC!r} "
            f"(the simulator's fifo) and {TIRESIAS!r}; `submarine sim run --scheduler {policy}` runs it simulated"
        )
    try:
        load_scheduler(policy)
    except SchedulerError as exc:
        raise ReplayRunError(f"policy {policy!r}: {exc}") from None


@contextlib.contextmanager
def interrupted_by(*signums: signal.Signals) -> Iterator[None]:
    """While the block runs, each of ``signums`` raises KeyboardInterrupt (naming it) in the main thread, so a run
    stopped by one cleans up (kills what it submitted, writes what it got to) as one interrupted by ^C does. A
    shell starts a background job with SIGINT ignored, which Python keeps: name SIGINT to have ^C back. The
    handlers it replaced come back after; off the main thread it changes nothing."""

    def interrupt(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, interrupt) for signum in signums}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def emulated_application(raw: Mapping[str, object]) -> str | None:
    """The GPU profile a job's workers emulate (:data:`EMULATE_ENV` in its service's or a component's
    environment, as ``submarine replay`` submits it), or None."""
    configs = [raw.get("configuration")]
    components = raw.get("components")
    configs += (
        [c.get("configuration") for c in components if isinstance(c, dict)] if isinstance(components, list) else []
    )
    for config in configs:
        env_vars = config.get("env") if isinstance(config, dict) else None
        if isinstance(env_vars, dict) and env_vars.get(EMULATE_ENV):
            return str(env_vars[EMULATE_ENV])
    return None


def run_policies(
    plan: ReplayPlan,
    policies: Sequence[str],
    *,
    rm_url: str,
    out: Path,
    say: Say = print,
    heading: Say | None = None,
    interval_s: float = INTERVAL_S,
    timeout_s: float = 1800.0,
) -> list[LiveRun]:
    """The plan under each policy in turn on the same cluster (each run's logs under ``out/<policy>``); every
    policy is checked before the first run starts.

    Raises:
        ReplayRunError: a policy with no live run (before anything runs), or a run that failed.
    """
    replays = [
        LiveReplay(
            plan,
            policy,
            rm_url=rm_url,
            out=out / policy.replace("+", "-"),
            say=say,
            interval_s=interval_s,
            timeout_s=timeout_s,
        )  # fmt: skip
        for policy in policies
    ]
    runs = []
    for replay in replays:
        (heading or say)(f"{replay.policy} (emulated GPUs)")
        runs.append(replay.run())
    return runs


def _gpus_in_use(yarn: YarnServiceClient) -> int:
    """GPUs the running nodes' containers hold now."""
    return sum(node.used_gpus for node in yarn.nodes())


def _last_line(text: str) -> str:
    """The last line of what a command said, cut to 100 characters."""
    lines = text.splitlines()
    return lines[-1][:100] if lines else "nothing said"
