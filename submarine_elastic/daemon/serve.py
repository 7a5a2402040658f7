"""The controller's process, wired: metrics service, policy engine, YARN backend, the controller, its gRPC
API, and the py4j bridge as one more client of that API. Runs until SIGTERM or SIGINT, then stops them in
the reverse order and removes its state file.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from contextlib import ExitStack
from pathlib import Path
from urllib.parse import urlsplit

import click
import psutil

from submarine_elastic import env, netif
from submarine_elastic.bridge.api import DEFAULT_JAVA_PORT, BridgeError
from submarine_elastic.bridge.server import BridgeServer, write_tls_files
from submarine_elastic.controller import locate
from submarine_elastic.controller.api import ControllerError, ControllerInfo
from submarine_elastic.controller.backend import YarnJobBackend
from submarine_elastic.controller.client import ControllerClient
from submarine_elastic.controller.server import ControllerServer
from submarine_elastic.controller.service import ControllerService, metrics_store
from submarine_elastic.controller.store import ControllerStore
from submarine_elastic.metrics.api import ServerStartError
from submarine_elastic.metrics.server import MetricsServer, TlsCredentials
from submarine_elastic.policy import PolicyEngine, PolicyError, load_arbiter_spec, load_job_policy_spec
from submarine_elastic.rpc import ServerTls
from submarine_elastic.tls import TlsError, cluster_ca, loopback_hosts

log = logging.getLogger("submarine_elastic.controller")


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--dir",
    "where",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Its directory [default: SUBMARINE_CONTROLLER_DIR].",
)
@click.option("--rm-url", required=True, help="The ResourceManager's web address.")
@click.option("--policy", default="static", show_default=True, help="Default job policy (name or module:Class).")
@click.option("--arbiter", default="fair-share", show_default=True)
@click.option("--interval", type=click.FloatRange(min=0, min_open=True), default=5.0, show_default=True)
@click.option("--cooldown", type=click.FloatRange(min=0), default=30.0, show_default=True)
@click.option("--capacity", type=click.IntRange(min=1), default=None)
@click.option(
    "--bind",
    default=None,
    help="Address the metrics service, the API and the bridge listen on [default: this machine's address "
    "towards the ResourceManager: loopback, or on a cluster on hosts the bridge's].",
)
@click.option(
    "--advertise",
    default=None,
    help="Host or address jobs and clients are told to dial [default: --bind; for 0.0.0.0, the address "
    "towards the ResourceManager].",
)
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=0, show_default=True)
@click.option("--api-port", type=click.IntRange(0, 65535), default=0, show_default=True, help="Port of its gRPC API.")
@click.option("--bridge-port", type=click.IntRange(0, 65535), default=None, help="Serve the py4j bridge here.")
@click.option("--bridge-java-port", type=click.IntRange(1, 65535), default=DEFAULT_JAVA_PORT, show_default=True)
@click.option(
    "--insecure",
    is_flag=True,
    default=None,
    help="Serve the API and the metrics service in plaintext, on loopback only [default: SUBMARINE_INSECURE; "
    "without either, TLS with certificates of the cluster's CA].",
)
def serve(
    where: Path | None,
    rm_url: str,
    policy: str,
    arbiter: str,
    interval: float,
    cooldown: float,
    capacity: int | None,
    bind: str | None,
    advertise: str | None,
    metrics_port: int,
    api_port: int,
    bridge_port: int | None,
    bridge_java_port: int,
    insecure: bool | None,
) -> None:
    """Run the controller in the foreground until SIGTERM (``submarine controller start`` runs this)."""
    where = where or env.settings().controller_directory()
    where.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        handlers=[logging.FileHandler(where / locate.LOG)],
    )
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    with ExitStack() as running:
        try:
            engine = PolicyEngine(load_job_policy_spec(policy), load_arbiter_spec(arbiter), cooldown_s=cooldown)
            plaintext = env.settings().insecure if insecure is None else insecure
            if plaintext and bind is None:
                bind = "127.0.0.1"  # plaintext beyond loopback only where --bind says so
            try:
                host, advertised = netif.service_addresses(urlsplit(rm_url).hostname or "", bind, advertise)
            except (OSError, LookupError) as exc:
                raise ControllerError(f"cannot choose the address to serve on (give --bind): {exc}") from exc
            api_tls, metrics_tls = (None, None) if plaintext else _service_tls(host, advertised)
            # The CLI reads every job with the operator token; each job reports with its own credential,
            # made from the key (submarine job run asks locate.metrics_credential for it).
            metrics = MetricsServer(
                metrics_store(),
                host=host,
                port=metrics_port,
                token=locate.token_for(where, locate.METRICS_TOKEN),
                job_key=locate.token_for(where, locate.METRICS_KEY).encode(),
                tls=metrics_tls,
            ).start()
            running.callback(metrics.stop)
            backend = YarnJobBackend(rm_url)
            running.callback(backend.close)
            store = ControllerStore(where / locate.DB)
            running.callback(store.close)
            service = ControllerService(
                store, engine, backend, metrics=metrics.store, interval=interval, capacity=capacity
            )
            service.start()
            running.callback(service.stop)
            token = locate.token_for(where, locate.API_TOKEN)
            # Plaintext is served on loopback only; with TLS the API is where the metrics service is, so that a
            # client on another host (job kill from host 0) reaches it.
            api_host = "127.0.0.1" if plaintext else host
            api = ControllerServer(service, token=token, host=api_host, port=api_port, tls=api_tls).start()
            api_address = api.address if plaintext else endpoint(advertised, api.port)
            running.callback(api.stop)
            bridge, bridge_tls_dir = None, None
            if bridge_port is not None:
                # The bridge is one more caller of the API: a JVM's calls are checked like any other. Mutual TLS
                # with certificates of the cluster's CA issued at each start, as `submarine bridge serve` does.
                client = ControllerClient(api.address, token, insecure=plaintext)
                running.callback(client.close)
                bridge_tls = None
                if not plaintext:
                    bridge_tls_dir = where / locate.BRIDGE_TLS_DIR
                    bridge_tls = write_tls_files(bridge_tls_dir, cluster_ca(), advertised)
                bridge = BridgeServer(
                    client,
                    token=locate.token_for(where, locate.BRIDGE_TOKEN),
                    host=host,
                    python_port=bridge_port,
                    java_port=bridge_java_port,
                    tls=bridge_tls,
                    insecure=plaintext,
                ).start()
                running.callback(bridge.stop)
        except (PolicyError, ServerStartError, ControllerError, BridgeError, TlsError, ValueError) as exc:
            log.error("%s", exc)
            raise SystemExit(2) from exc
        info = ControllerInfo(
            pid=os.getpid(),
            create_time=psutil.Process().create_time(),
            address=api_address,
            metrics_endpoint=endpoint(advertised, metrics.port),
            db=str(where / locate.DB),
            rm_url=rm_url,
            policy=policy,
            arbiter=arbiter,
            bridge_port=bridge.port if bridge else None,
            bridge_token_file=str(where / locate.BRIDGE_TOKEN) if bridge else None,
            bridge_tls_dir=str(bridge_tls_dir) if bridge_tls_dir else None,
        )
        locate.write_info(where, info)
        running.callback(locate.remove_info, where)
        log.info(
            "controller serving: API at %s, metrics at %s, policy %s + %s",
            info.address,
            info.metrics_endpoint,
            policy,
            arbiter,
        )
        # Python runs signal handlers on the main thread only, and a signal the kernel hands to one of the
        # gRPC or py4j threads does not wake a main thread blocked in wait(): look at least once a second.
        while not done.wait(1.0):
            pass
        log.info("stopping")


def endpoint(host: str, port: int) -> str:
    """``host:port`` (an IPv6 address in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _service_tls(host: str, advertised: str) -> tuple[ServerTls, TlsCredentials]:
    """Certificates of the cluster's CA for the API and the metrics service, naming the address they listen
    on (``host``), the one they are advertised at (and what it resolves to) and loopback; issued at each start
    and kept in memory only. The metrics service requires its callers' certificates of the cluster's CA
    (``job run`` gives each job one).

    Raises:
        TlsError: the cluster's CA cannot be opened, or a name cannot be put in a certificate.
    """
    names = [host, advertised]
    try:
        names.append(socket.gethostbyname(advertised))
    except OSError:
        pass  # an advertised name this machine cannot resolve is still named as given
    ca = cluster_ca()
    api = ca.issue_server("submarine-elastic controller", loopback_hosts(*names))
    metrics = ca.issue_server("submarine-elastic metrics", loopback_hosts(*names))
    return ServerTls(api.cert, api.key), TlsCredentials(metrics.cert, metrics.key, client_ca=ca.cert_pem)
