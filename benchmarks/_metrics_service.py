"""``submarine metrics serve`` in its own process, for the benchmarks that measure against it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Collection


def start_metrics_service(token: str, cores: Collection[int] = ()) -> tuple[subprocess.Popen[str], str]:
    """Starts the service on a free loopback port with ``token``; pins its threads to ``cores`` if given.

    Returns the process and its ``host:port``; exits the benchmark if the service does not start.
    """
    command = "from submarine_elastic.cli.main import main; main()"
    proc = subprocess.Popen(
        [sys.executable, "-c", command, "metrics", "serve", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "SUBMARINE_METRICS_TOKEN": token},
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
    return proc, match.group(1)
