"""How the control plane's costs grow with its size: one job's driver against the workers attached to
it, the controller against the jobs it runs, and how soon a silent partition is noticed.

- Driver (``--agents 1,10,100,300,1000``): for each count N a fresh driver process serves the real
  :class:`~submarine_elastic.elastic.driver.JobDriver` control plane on port 0 (limits ``N, 1..N+1``; its
  YARN backend records the targets it is given and has them at once). ``--procs`` client processes run
  N stand-in agents between them, each on its own channel with the agents' keepalive options, speaking
  the agents' protocol (Hello, Warm; a Leave answered by Exited). Measured: time from the common start
  to every agent attached and warm in the driver's registry; ``Status`` latency from another process;
  Horovod's host discovery (``find_available_hosts_and_slots``, polled once a second); the ``Flex``
  round trip from the call to YARN being given the target, out (N -> N+1) and in (N -> N-1, through
  the leaving agent's Leave and Exited); the driver's resident memory, threads and idle CPU. Beside it,
  the driver as it was served before (a pool of 64 threads, no bound on calls) with 100 agents.
- Controller (``--jobs 1,10,100,500``): the controller's round (``ControllerService.tick``) against the
  job count, driven as ``bench_controller.py`` drives it (every job reports step points each round,
  one leaves and one arrives to a full cluster; a job backend that answers at once), measured after
  warm-up rounds: wall time, and the CPU time of the thread running it, which other load disturbs less.
- Partition: an agent attached through a TCP relay that stops forwarding (nothing is closed, nothing
  arrives: a partition as both ends see it), after its stream was quiet for longer than a ping
  interval; seconds until the driver detaches it and until the agent's stream fails, with the
  project's keepalive on both ends, on the driver only, and with gRPC's defaults (the driver before).

Growth is a least-squares slope on log-log over the points from 10 on (1.0: linear) and the factor
per 10x it implies. Everything runs on this machine. Writes ``benchmarks/results/control_plane.json``
and ``control_plane.md``.

Run: ``.venv/bin/python benchmarks/bench_control_plane.py [--agents 1,10,100,300,1000] [--jobs 1,10,100,500]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing as mp
import os
import platform
import select
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import psutil

from submarine_elastic.elastic.jobdriver import JobDriver, control_plane_threads
from submarine_elastic.protocol.api import Limits, WorkerState
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.protocol.proto import elastic_pb2_grpc as pb_grpc
from submarine_elastic.rpc import PARTITION_NOTICED_WITHIN_S, STREAM_KEEPALIVE_CLIENT_OPTIONS
from submarine_elastic.yarn import ComponentTarget, ReconcileResult

RESULTS = Path(__file__).resolve().parent / "results"
STATUS_CALLS = 50
#: Resizes N+1 and back measured per driver, and workers that leave one at a time after them.
FLEX_REPEATS = 5
LEAVES = 3
LEAVE_WAIT_S = 60.0
#: Controller rounds run before the measured ones: the first resizes every job, and a job's metrics
#: window (``SERIES_WINDOW`` points) fills over the first rounds.
CONTROLLER_WARMUP = 15
DISCOVERY_CALLS = 200
IDLE_WINDOW_S = 10.0
ATTACH_TIMEOUT_S = 180.0
#: The driver's pool before it was sized from the job's limits, and how long that driver is given.
BEFORE_POOL = 64
BEFORE_AGENTS = 100
BEFORE_WAIT_S = 10.0
#: How long a partition may go unnoticed before the scenario gives up on it.
PARTITION_CAP_S = 40.0
#: How long an agent's stream stays quiet before the partition: longer than one keepalive interval.
QUIET_S = 12.0


# ---------------------------------------------------------------------------------------------- driver


class RecordingYarn:
    """Stands in for the YARN service: records each target with its time; YARN has it at once."""

    def __init__(self) -> None:
        self.targets: list[tuple[float, int]] = []
        self.given = threading.Condition()

    def set_target(self, name: str, component: str, n: int, *, remove: Sequence[str] = ()) -> ComponentTarget:
        with self.given:
            self.targets.append((time.monotonic(), n))
            self.given.notify_all()
        return ComponentTarget(n, tuple(remove))

    def target(self, name: str, component: str) -> ComponentTarget | None:
        return ComponentTarget(self.targets[-1][1]) if self.targets else None

    def reconcile(self, name: str, component: str, n: int | None = None, *, timeout: float) -> ReconcileResult:
        n = self.targets[-1][1]
        names = tuple(f"worker-{i}" for i in range(n))
        return ReconcileResult(name, component, n, n, n, names, "STABLE", converged=True)

    def wait_for(self, n: int, *, after: float, timeout: float) -> float:
        """When the target ``n`` was given from ``after`` on (monotonic seconds, as ``time.monotonic``).

        Raises:
            TimeoutError: it was not given within ``timeout``.
        """

        def given() -> float | None:
            return next((when for when, t in self.targets if t == n and when >= after), None)

        with self.given:
            if not self.given.wait_for(lambda: given() is not None, timeout):
                raise TimeoutError(f"the driver did not give YARN the target {n} within {timeout:.0f} s")
            return given()  # type: ignore[return-value]


async def _agent(target: str, number: int) -> None:
    async with grpc.aio.insecure_channel(target, options=STREAM_KEEPALIVE_CLIENT_OPTIONS) as channel:
        call = pb_grpc.ElasticDriverStub(channel).Attach()
        hello = pb.Hello(instance=f"worker-{number}", container_id=f"container-{number}", host="bench")
        await call.write(pb.AgentEvent(hello=hello))
        await call.write(pb.AgentEvent(warm=pb.Warm(pid=number, warmup_seconds=0.0)))
        async for command in call:
            if command.WhichOneof("command") == "leave":
                await call.write(pb.AgentEvent(exited=pb.Exited(exit_code=0, leaving=True, joined=True)))
                await call.done_writing()


def agents_process(port: int, numbers: list[int], ready: Any, go: Any, stop: Any) -> None:
    """N stand-in agents on one event loop: each its own channel, as each worker container has."""

    async def run() -> None:
        loop = asyncio.get_running_loop()
        ready.put(os.getpid())
        await loop.run_in_executor(None, go.wait)
        tasks = [asyncio.create_task(_agent(f"127.0.0.1:{port}", n)) for n in numbers]
        await loop.run_in_executor(None, stop.wait)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(run())


def flex_plan(n: int) -> list[tuple[str, int]]:
    """The resizes measured on a job of ``n``: ``resize`` (N+1 and back to N, no worker joins or leaves:
    the call, the resizer and YARN's target), then ``leave`` (one worker at a time leaves, its agent told
    Leave and answering Exited)."""
    plan = [("resize", target) for _ in range(FLEX_REPEATS) for target in (n + 1, n)]
    return plan + [("leave", n - k) for k in range(1, min(LEAVES, n - 1) + 1)]


def probe_process(port: int, n: int, out: Any, done: Any) -> None:
    """What ``submarine job show`` and ``flex`` see: Status latencies, then the resizes of
    :func:`flex_plan`, each once the one before it is done (``done``)."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.ElasticDriverStub(channel)
        stub.Status(pb.StatusRequest(), timeout=30)  # connected before timing
        latencies, size, listed = [], 0, 0
        for _ in range(STATUS_CALLS):
            started = time.perf_counter()
            status = stub.Status(pb.StatusRequest(), timeout=30)
            latencies.append(time.perf_counter() - started)
            size, listed = status.ByteSize(), len(status.workers)
        out.put((latencies, size, listed))
        for _, workers in flex_plan(n):
            sent = time.monotonic()
            stub.SetTarget(pb.Target(workers=workers, reason="bench"), timeout=30)
            out.put((sent, time.monotonic() - sent))
            done.get(timeout=120)


class AgentFleet:
    """``n`` stand-in agents spread over ``procs`` client processes, started and imported; they attach
    to the driver on ``port`` once :meth:`go` is called."""

    def __init__(self, port: int, n: int, procs: int) -> None:
        ctx = mp.get_context("spawn")
        ready, self._go, self._stop = ctx.Queue(), ctx.Event(), ctx.Event()
        self.procs = max(1, min(procs, n))
        self._clients = [
            ctx.Process(target=agents_process, args=(port, list(range(i, n, self.procs)), ready, self._go, self._stop))
            for i in range(self.procs)
        ]
        for client in self._clients:
            client.start()
        for _ in self._clients:
            ready.get(timeout=120)

    def go(self) -> float:
        """Lets every agent attach; returns when (monotonic seconds)."""
        started = time.monotonic()
        self._go.set()
        return started

    def stop(self) -> None:
        self._stop.set()
        for client in self._clients:
            client.join(30)
            if client.is_alive():
                client.kill()


def all_warm(driver: JobDriver, n: int) -> bool:
    agents = driver.registry.snapshot()
    return len(agents) == n and all(a.state is WorkerState.WARM for a in agents)


def measure_before(n: int, procs: int) -> dict[str, Any]:
    """The driver's control plane as it was served before it was sized from the job's limits: a pool of
    64 threads, no bound on concurrent calls. How many of ``n`` agents attach, and whether Status answers."""
    driver = JobDriver("bench", Limits(n, 1, n), RecordingYarn(), None, "lo", 600)  # type: ignore[arg-type]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=BEFORE_POOL))
    pb_grpc.add_ElasticDriverServicer_to_server(driver.servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    fleet = AgentFleet(port, n, procs)
    fleet.go()
    driver.registry.wait(lambda: all_warm(driver, n), BEFORE_WAIT_S)
    attached = len(driver.registry.snapshot())
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        started = time.perf_counter()
        try:
            pb_grpc.ElasticDriverStub(channel).Status(pb.StatusRequest(), timeout=BEFORE_WAIT_S)
            status = f"answered in {(time.perf_counter() - started) * 1e3:.1f} ms"
        except grpc.RpcError as exc:
            status = f"{exc.code().name} after {time.perf_counter() - started:.1f} s"
    fleet.stop()
    server.stop(None)
    return {"agents": n, "pool_threads": BEFORE_POOL, "attached": attached, "status": status}


def measure_driver(n: int, procs: int) -> dict[str, Any]:
    """One driver with ``n`` agents (run in a fresh process, so its memory is its own)."""
    me = psutil.Process()
    yarn = RecordingYarn()
    limits = Limits(n, 1, n + 1)
    driver = JobDriver("bench", limits, yarn, token=None, iface="lo", elastic_timeout=600)  # type: ignore[arg-type]
    served = driver.serve(0)
    if served is None:
        raise RuntimeError("the driver could not bind a port")
    server, port = served
    threading.Thread(target=driver.resizer.loop, daemon=True, name="resizer").start()
    fleet = AgentFleet(port, n, procs)
    base_rss, base_threads = me.memory_info().rss, me.num_threads()

    cpu0 = me.cpu_times()
    started = fleet.go()
    if not driver.registry.wait(lambda: all_warm(driver, n), ATTACH_TIMEOUT_S):
        warm = sum(a.state is WorkerState.WARM for a in driver.registry.snapshot())
        raise RuntimeError(f"only {warm} of {n} agents attached and warm within {ATTACH_TIMEOUT_S:.0f} s")
    attach_s = time.monotonic() - started
    cpu1 = me.cpu_times()
    rss, threads = me.memory_info().rss, me.num_threads()

    discovery = []
    for _ in range(DISCOVERY_CALLS):
        t = time.perf_counter()
        hosts = driver.registry.find_available_hosts_and_slots()
        discovery.append(time.perf_counter() - t)
    if len(hosts) != n:
        raise RuntimeError(f"discovery offered {len(hosts)} hosts, {n} are warm")

    time.sleep(IDLE_WINDOW_S)  # the attached agents' streams idle: keepalive pings only
    cpu2 = me.cpu_times()

    ctx = mp.get_context("spawn")
    out, done = ctx.Queue(), ctx.Queue()
    probe = ctx.Process(target=probe_process, args=(port, n, out, done), daemon=True)
    probe.start()
    status_s, status_bytes, listed = out.get(timeout=120)
    flex: dict[str, list[float]] = {"reply": [], "resize": [], "leave": []}
    for kind, workers in flex_plan(n):
        sent, reply_s = out.get(timeout=120)
        given = yarn.wait_for(workers, after=sent, timeout=LEAVE_WAIT_S)
        flex["reply"].append(reply_s)
        flex[kind].append(given - sent)
        done.put(True)
    probe.join(30)

    fleet.stop()
    server.stop(None)
    return {
        "agents": n,
        "client_processes": fleet.procs,
        "pool_threads": control_plane_threads(limits),
        "attach_all_s": attach_s,
        "attach_cpu_s": busy(cpu0, cpu1),
        "status_ms": {
            "median": statistics.median(status_s) * 1e3,
            "p99": percentile(status_s, 0.99) * 1e3,
        },
        "status_listed": listed,
        "status_bytes": status_bytes,
        "discovery_us": statistics.median(discovery) * 1e6,
        "flex_reply_ms": statistics.median(flex["reply"]) * 1e3,
        "flex_resize_ms": statistics.median(flex["resize"]) * 1e3,
        "flex_leave_ms": statistics.median(flex["leave"]) * 1e3 if flex["leave"] else None,
        "rss_mb": rss / 2**20,
        "rss_per_agent_kb": (rss - base_rss) / 1024 / n,
        "threads": threads,
        "threads_before": base_threads,
        "idle_cpu_pct": busy(cpu1, cpu2) / IDLE_WINDOW_S * 100,
    }


def busy(a: Any, b: Any) -> float:
    """CPU seconds (user and system) between two ``cpu_times()``."""
    return float((b.user - a.user) + (b.system - a.system))


# ------------------------------------------------------------------------------------------ controller


def measure_controller(jobs: int, rounds: int) -> dict[str, Any]:
    """Rounds of the controller with ``jobs`` live jobs; the cost of ``tick`` and of the whole round."""
    import tempfile

    from bench_controller import InstantCluster, report

    from submarine_elastic.controller.service import ControllerService
    from submarine_elastic.controller.store import ControllerStore
    from submarine_elastic.metrics.store import InMemoryStore
    from submarine_elastic.policy import PolicyEngine, load_arbiter, load_job_policy

    cluster = InstantCluster()
    # The metrics service keeps --max-jobs jobs (256 by default, least recently reported dropped): sized
    # here for every job that comes and goes, as an operator running this many jobs would set it.
    metrics = InMemoryStore(max_jobs=jobs + CONTROLLER_WARMUP + rounds + 1)
    with tempfile.TemporaryDirectory() as tmp:
        service = ControllerService(
            ControllerStore(Path(tmp) / "c.db"),
            PolicyEngine(load_job_policy("greedy"), load_arbiter("fair-share"), cooldown_s=0),
            cluster,
            metrics=metrics,
            interval=3600,
            capacity=3 * jobs,
        )
        for i in range(jobs):
            job = f"job-{i:04d}"
            service.job_submitted(job, 1, 8, 2)
            cluster.sizes[job] = 2
        ticks, tick_cpu, whole = [], [], []
        decisions = 0
        next_id = jobs
        for r in range(CONTROLLER_WARMUP + rounds):
            for job, size in list(cluster.sizes.items()):
                report(metrics, job, size, seq=r + 1, step=r)
            leaving = next(iter(cluster.sizes))
            service.job_finished(leaving)
            del cluster.sizes[leaving]
            arriving = f"job-{next_id:04d}"
            next_id += 1
            service.job_submitted(arriving, 1, 8, 2)
            started, cpu = time.perf_counter(), time.thread_time()
            decided = len(service.tick())
            tick, tick_thread = time.perf_counter() - started, time.thread_time() - cpu
            service.wait_idle(60)
            if r >= CONTROLLER_WARMUP:
                decisions += decided
                ticks.append(tick)
                tick_cpu.append(tick_thread)
                whole.append(time.perf_counter() - started)
            cluster.sizes.setdefault(arriving, 2)
        service.store.close()
    return {
        "jobs": jobs,
        "rounds": rounds,
        "decisions": decisions,
        "tick_ms": {"median": statistics.median(ticks) * 1e3, "p99": percentile(ticks, 0.99) * 1e3},
        "tick_cpu_ms": {"median": statistics.median(tick_cpu) * 1e3, "min": min(tick_cpu) * 1e3},
        "round_ms": {"median": statistics.median(whole) * 1e3, "p99": percentile(whole, 0.99) * 1e3},
    }


# ------------------------------------------------------------------------------------------- partition


class Relay:
    """A TCP relay to ``port`` that can stop forwarding: its connections stay open, nothing passes."""

    def __init__(self, port: int) -> None:
        self.upstream = port
        self.cut = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            down, _ = self.listener.accept()
            up = socket.create_connection(("127.0.0.1", self.upstream))
            threading.Thread(target=self._pump, args=(down, up), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        while not self.cut.is_set():
            readable, _, _ = select.select([a, b], [], [], 0.05)
            for s in readable:
                if self.cut.is_set():
                    break
                data = s.recv(65536)
                if not data:
                    return
                (b if s is a else a).sendall(data)
        self.cut.wait()  # hold both connections open, forward nothing


def measure_partition(mode: str) -> dict[str, Any]:
    """``mode``: ``both`` (the project's keepalive on driver and agent), ``driver`` (the agent on gRPC's
    defaults), ``none`` (both on gRPC's defaults, as the driver served before)."""
    driver = JobDriver("bench", Limits(1, 1, 1), RecordingYarn(), None, "lo", 600)  # type: ignore[arg-type]
    if mode == "none":
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=64))
        pb_grpc.add_ElasticDriverServicer_to_server(driver.servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
    else:
        served = driver.serve(0)
        if served is None:
            raise RuntimeError("the driver could not bind a port")
        server, port = served
    relay = Relay(port)
    options = STREAM_KEEPALIVE_CLIENT_OPTIONS if mode == "both" else ()
    channel = grpc.insecure_channel(f"127.0.0.1:{relay.port}", options=options)
    hold = threading.Event()

    def events() -> Iterator[pb.AgentEvent]:
        yield pb.AgentEvent(hello=pb.Hello(instance="worker-0", container_id="container-0", host="bench"))
        yield pb.AgentEvent(warm=pb.Warm(pid=1))
        hold.wait()

    stream = pb_grpc.ElasticDriverStub(channel).Attach(events())
    agent_failed: list[float] = []

    def read() -> None:
        try:
            for _ in stream:
                pass
        except grpc.RpcError:
            pass
        agent_failed.append(time.monotonic())

    threading.Thread(target=read, daemon=True).start()
    if not driver.registry.wait(lambda: bool(driver.registry.available()), 30):
        raise RuntimeError("the agent did not attach through the relay")
    time.sleep(QUIET_S)  # the stream is quiet, as a training worker's is
    attached = driver.registry.snapshot()[0]
    kept = attached.connected and not agent_failed
    cut = time.monotonic()
    relay.cut.set()
    detached = driver.registry.wait(lambda: not attached.connected, PARTITION_CAP_S)
    driver_s = time.monotonic() - cut if detached else None
    remaining = max(0.0, cut + PARTITION_CAP_S - time.monotonic())
    deadline = time.monotonic() + remaining
    while not agent_failed and time.monotonic() < deadline:
        time.sleep(0.05)
    agent_s = agent_failed[0] - cut if agent_failed else None
    hold.set()
    channel.close()
    server.stop(None)
    return {"mode": mode, "quiet_stream_kept": kept, "driver_noticed_s": driver_s, "agent_noticed_s": agent_s}


# ---------------------------------------------------------------------------------------------- report


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def growth(xs: list[int], ys: list[float]) -> tuple[float, float]:
    """Least-squares slope of log(y) on log(x) over the points with x >= 10, and the factor per 10x."""
    pts = [(math.log10(x), math.log10(y)) for x, y in zip(xs, ys, strict=True) if x >= 10 and y > 0]
    if len(pts) < 2:
        return float("nan"), float("nan")
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    slope = sum((p[0] - mx) * (p[1] - my) for p in pts) / sum((p[0] - mx) ** 2 for p in pts)
    return slope, 10**slope


def fmt_growth(xs: list[int], ys: list[float]) -> str:
    slope, factor = growth(xs, ys)
    return "n/a" if math.isnan(slope) else f"x{factor:.1f} per 10x (slope {slope:.2f})"


def run_child(*args: str) -> dict[str, Any]:
    """Runs this script in a fresh interpreter for one measurement; its last stdout line is the JSON."""
    done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=False, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def write_report(
    driver: list[dict], before: dict, controller: list[dict], partition: list[dict], meta: dict
) -> list[str]:
    ns = [r["agents"] for r in driver]
    js = [r["jobs"] for r in controller]
    lines = [
        "# Control plane at scale",
        "",
        f"{meta['cpus']} CPUs, Python {meta['python']}, grpcio {grpc.__version__}; everything on one machine "
        f"(driver, {meta['procs']} agent client processes, the Status/Flex probe), shared: load average "
        f"{meta['load_before'][0]:.1f} at the start, {meta['load_after'][0]:.1f} at the end, so latencies "
        "are upper bounds.",
        "",
        "## One job's driver against the agents attached to it",
        "",
        "Driver pool: `2 * max_workers + 16` threads and concurrent calls (limits `N, 1..N+1`). Attach: "
        "from the common start until all N are attached and warm. Flex: the call answered; resize: call -> "
        f"YARN given the target, N -> N+1 -> N {FLEX_REPEATS} times (no worker moves); leave: call -> the "
        f"leaver told, its Exited back, YARN given the target, one worker at a time ({LEAVES} times). Medians.",
        "",
        "| agents | attach all s | Status median ms | Status p99 ms | Status bytes | discovery us "
        "| Flex ms | resize ms | leave ms | driver RSS MB | RSS per agent KB | threads | idle CPU % |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in driver:
        leave = "-" if r["flex_leave_ms"] is None else f"{r['flex_leave_ms']:.1f}"
        per_agent = f"{r['rss_per_agent_kb']:.0f}" if r["agents"] >= 10 else "-"  # one agent: noise
        lines.append(
            f"| {r['agents']} | {r['attach_all_s']:.2f} | {r['status_ms']['median']:.2f} | "
            f"{r['status_ms']['p99']:.2f} | {r['status_bytes']} | {r['discovery_us']:.1f} | "
            f"{r['flex_reply_ms']:.2f} | {r['flex_resize_ms']:.1f} | {leave} | "
            f"{r['rss_mb']:.0f} | {per_agent} | "
            f"{r['threads']} | {r['idle_cpu_pct']:.1f} |"
        )
    lines += [
        "",
        "| cost | growth from 10 agents on |",
        "|---|---|",
        f"| attach all | {fmt_growth(ns, [r['attach_all_s'] for r in driver])} |",
        f"| Status median | {fmt_growth(ns, [r['status_ms']['median'] for r in driver])} |",
        f"| discovery | {fmt_growth(ns, [r['discovery_us'] for r in driver])} |",
        f"| Flex answered | {fmt_growth(ns, [r['flex_reply_ms'] for r in driver])} |",
        f"| resize (YARN given the target) | {fmt_growth(ns, [r['flex_resize_ms'] for r in driver])} |",
        f"| a worker leaves | {fmt_growth(ns, [r['flex_leave_ms'] or 0.0 for r in driver])} |",
        f"| driver RSS | {fmt_growth(ns, [r['rss_mb'] for r in driver])} |",
        f"| driver threads | {fmt_growth(ns, [r['threads'] for r in driver])} |",
        "",
        f"Before (a pool of {before['pool_threads']} threads, no bound on calls), {before['agents']} agents: "
        f"{before['attached']} attached within {BEFORE_WAIT_S:.0f} s, and Status {before['status']}.",
        "",
        "## The controller against its jobs",
        "",
        "Each round: every job reports a step point per worker, one job leaves and one arrives to a full "
        "cluster (greedy + fair-share); the job backend answers at once. Measured after "
        f"{CONTROLLER_WARMUP} rounds (the first resizes every job; the metrics windows fill); the metrics "
        "store keeps every job (`submarine metrics serve --max-jobs` is 256 by default).",
        "",
        "| jobs | rounds | decisions | tick median ms | tick p99 ms | tick CPU median ms | round median ms "
        "| round p99 ms | tick CPU per job us |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in controller:
        lines.append(
            f"| {r['jobs']} | {r['rounds']} | {r['decisions']} | {r['tick_ms']['median']:.2f} | "
            f"{r['tick_ms']['p99']:.2f} | {r['tick_cpu_ms']['median']:.2f} | {r['round_ms']['median']:.2f} | "
            f"{r['round_ms']['p99']:.2f} | {r['tick_cpu_ms']['median'] * 1e3 / r['jobs']:.0f} |"
        )
    lines += [
        "",
        "Tick CPU: the CPU time of the thread running `tick` (less sensitive to other load than wall time). "
        f"Growth from 10 jobs on: tick {fmt_growth(js, [r['tick_ms']['median'] for r in controller])}; "
        f"tick CPU {fmt_growth(js, [r['tick_cpu_ms']['median'] for r in controller])}.",
        "",
        "## A silent partition",
        "",
        f"The agent's stream quiet for {QUIET_S:.0f} s, then its relay stops forwarding. Stated bound with "
        f"the keepalive: {PARTITION_NOTICED_WITHIN_S:.0f} s. '-': not noticed within {PARTITION_CAP_S:.0f} s.",
        "",
        "| keepalive | quiet stream kept | driver detached the agent after s | agent's stream failed after s |",
        "|---|---|---|---|",
    ]
    names = {"both": "driver and agent", "driver": "driver only", "none": "neither (gRPC defaults)"}
    for r in partition:
        d, a = r["driver_noticed_s"], r["agent_noticed_s"]
        lines.append(
            f"| {names[r['mode']]} | {'yes' if r['quiet_stream_kept'] else 'no'} | "
            f"{'-' if d is None else f'{d:.1f}'} | {'-' if a is None else f'{a:.1f}'} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", default="1,10,100,300,1000")
    parser.add_argument("--procs", type=int, default=8, help="agent client processes")
    parser.add_argument("--jobs", default="1,10,100,500")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--driver", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--partition", help=argparse.SUPPRESS)
    parser.add_argument("--before", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    child = (
        measure_driver(args.driver, args.procs)
        if args.driver is not None
        else measure_before(args.before, args.procs)
        if args.before is not None
        else measure_partition(args.partition)
        if args.partition is not None
        else None
    )
    if child is not None:
        print(json.dumps(child), flush=True)
        os._exit(0)  # gRPC's and the driver's threads of a measured server are not waited for

    load_before = os.getloadavg()
    with futures.ThreadPoolExecutor(3) as pool:  # the partitions mostly wait: run them beside the rest
        partition_runs = [pool.submit(run_child, "--partition", mode) for mode in ("both", "driver", "none")]
        driver = []
        for n in (int(x) for x in args.agents.split(",")):
            result = run_child("--driver", str(n), "--procs", str(args.procs))
            driver.append(result)
            print(
                f"driver, {n} agents: attach {result['attach_all_s']:.2f} s, Status "
                f"{result['status_ms']['median']:.2f} ms, RSS {result['rss_mb']:.0f} MB, {result['threads']} threads",
                flush=True,
            )
        before = run_child("--before", str(BEFORE_AGENTS), "--procs", str(args.procs))
        print(f"driver as before, {BEFORE_AGENTS} agents: {before['attached']} attached, Status {before['status']}")
        partition = [run.result() for run in partition_runs]
    controller = []
    for jobs in (int(x) for x in args.jobs.split(",")):
        result = measure_controller(jobs, args.rounds)
        controller.append(result)
        print(f"controller, {jobs} jobs: tick {result['tick_ms']['median']:.2f} ms", flush=True)

    meta = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "procs": args.procs,
        "load_before": load_before,
        "load_after": os.getloadavg(),
    }
    results = {"meta": meta, "driver": driver, "before": before, "controller": controller, "partition": partition}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "control_plane.json").write_text(json.dumps(results, indent=2) + "\n")
    lines = write_report(driver, before, controller, partition, meta)
    (RESULTS / "control_plane.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
