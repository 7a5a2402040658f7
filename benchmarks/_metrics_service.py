"""``submarine metrics serve`` in its own process, for the benchmarks that measure against it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc


@dataclass(frozen=True)
class Transport:
    """How a benchmark's clients reach the service: mutual TLS with a client certificate of the service's
    CA (what ``submarine metrics serve`` does by default), or plaintext (``--insecure``). Picklable, for
    client processes."""

    ca: bytes | None = None
    client_cert: tuple[bytes, bytes] | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return "plaintext" if self.ca is None else "mutual TLS"

    def channel(self, address: str, options: Sequence[tuple[str, Any]] = ()) -> grpc.Channel:
        from submarine_elastic.rpc import open_channel

        return open_channel(
            address, ca=self.ca, client_cert=self.client_cert, insecure=self.ca is None, options=options
        )


def start_metrics_service(
    token: str, cores: Collection[int] = (), *, tls: bool = True
) -> tuple[subprocess.Popen[str], str, Transport]:
    """Starts the service on a free loopback port with ``token``; pins its threads to ``cores`` if given.
    With ``tls`` it serves mutual TLS with certificates of a CA made for this run (in a temporary
    directory), else plaintext (``--insecure``).

    Returns the process, its ``host:port`` and how to reach it; exits the benchmark if it does not start.
    """
    from submarine_elastic import tls as certificates

    command = "from submarine_elastic.cli.main import main; main()"
    env = {**os.environ, "SUBMARINE_METRICS_TOKEN": token}
    transport = Transport()
    if tls:
        env.pop("SUBMARINE_INSECURE", None)  # the benchmark's hooks may be told plaintext; this service is not
        env["SUBMARINE_CA_DIR"] = tempfile.mkdtemp(prefix="bench-ca-")
        issued = certificates.cluster_ca(Path(env["SUBMARINE_CA_DIR"])).issue_client("bench client")
        transport = Transport(ca=issued.ca, client_cert=(issued.cert, issued.key))
    proc = subprocess.Popen(
        [sys.executable, "-c", command, "metrics", "serve", "--port", "0", *(() if tls else ("--insecure",))],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.search(r"listening on (\S+:\d+)", line)
    if not match:
        proc.kill()
        raise SystemExit(f"the metrics service did not start: {line!r}")
    if cores:
        for tid in os.listdir(f"/proc/{proc.pid}/task"):
            os.sched_setaffinity(int(tid), cores)
    return proc, match.group(1), transport
