"""The controller process: the metrics service, the policy loop, and its state file.

``submarine controller start`` runs ``python -m submarine_elastic.controller.daemon`` in the background;
``stop`` sends it SIGTERM; SIGUSR1 wakes its loop at once (``submarine job run|kill`` send it when they
change the job table). Its directory (``SUBMARINE_CONTROLLER_DIR``) holds:

    controller.json   pid, start time, metrics endpoint, database path (written once it serves)
    controller.db     the SQLite state (jobs, decisions, throughput history, policy state)
    metrics.token     the metrics service's bearer token (mode 0600); jobs get it in their environment
    bridge.token      the py4j bridge's token (mode 0600), with --bridge-port
    controller.log    its log
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import signal
import sys
import threading
from pathlib import Path

from submarine_elastic import env
from submarine_elastic.bridge.api import BridgeError
from submarine_elastic.bridge.server import BridgeServer
from submarine_elastic.controller.backend import YarnJobBackend
from submarine_elastic.controller.service import ControllerService
from submarine_elastic.controller.store import ControllerStore
from submarine_elastic.metrics.api import ServerStartError
from submarine_elastic.metrics.server import MetricsServer
from submarine_elastic.policy import PolicyEngine, PolicyError, load_arbiter_spec, load_job_policy_spec

log = logging.getLogger("submarine_elastic.controller")

STATE = "controller.json"
DB = "controller.db"
TOKEN = "metrics.token"
BRIDGE_TOKEN = "bridge.token"


def token_for(directory: Path, name: str = TOKEN) -> str:
    """A token kept in ``directory`` (created, mode 0600, on first use): the metrics or the bridge token."""
    path = directory / name
    if not path.exists():
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32))
    return path.read_text().strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m submarine_elastic.controller.daemon")
    parser.add_argument("--dir", type=Path, default=env.controller_dir())
    parser.add_argument("--rm-url", required=True)
    parser.add_argument("--policy", default="static", help="default job policy (name or module:Class)")
    parser.add_argument("--arbiter", default="fair-share")
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--cooldown", type=float, default=30.0)
    parser.add_argument("--capacity", type=int, default=None)
    parser.add_argument("--metrics-host", default="127.0.0.1")
    parser.add_argument("--metrics-port", type=int, default=0)
    parser.add_argument("--bridge-port", type=int, default=None, help="serve the py4j bridge on this port")
    parser.add_argument("--bridge-java-port", type=int, default=25333, help="the JVM's py4j port")
    args = parser.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        handlers=[logging.FileHandler(args.dir / "controller.log")],
    )
    try:
        engine = PolicyEngine(
            load_job_policy_spec(args.policy), load_arbiter_spec(args.arbiter), cooldown_s=args.cooldown
        )
    except PolicyError as exc:
        log.error("%s", exc)
        return 2
    server = MetricsServer(host=args.metrics_host, port=args.metrics_port, token=token_for(args.dir))
    try:
        server.start()
    except ServerStartError as exc:
        log.error("%s", exc)
        return 2
    backend = YarnJobBackend(args.rm_url)
    service = ControllerService(
        ControllerStore(args.dir / DB),
        engine,
        backend,
        metrics=server.store,
        interval=args.interval,
        capacity=args.capacity,
    )
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    signal.signal(signal.SIGUSR1, lambda *_: service.wake())
    service.start()
    bridge = None
    if args.bridge_port is not None:
        bridge = BridgeServer(
            service,
            token=token_for(args.dir, BRIDGE_TOKEN),
            python_port=args.bridge_port,
            java_port=args.bridge_java_port,
        )
        try:
            bridge.start()
        except BridgeError as exc:
            log.error("%s", exc)
            service.stop()
            server.stop()
            return 2
    state = {
        "pid": os.getpid(),
        "metrics_endpoint": server.address,
        "db": str(args.dir / DB),
        "rm_url": args.rm_url,
        "policy": args.policy,
        "arbiter": args.arbiter,
        "bridge_port": bridge.port if bridge else None,
        "bridge_token_file": str(args.dir / BRIDGE_TOKEN) if bridge else None,
    }
    tmp = args.dir / (STATE + ".tmp")
    tmp.write_text(json.dumps(state, indent=2))
    tmp.replace(args.dir / STATE)
    log.info("controller serving: metrics at %s, policy %s + %s", server.address, args.policy, args.arbiter)
    done.wait()
    log.info("stopping")
    if bridge is not None:
        bridge.stop()
    service.stop()
    server.stop()
    backend.close()
    (args.dir / STATE).unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
