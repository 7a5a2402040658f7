"""The pseudo-cluster's state file, ``cluster.json``: the spec it was started with and the daemons started
(each by pid and start time), written by ``up`` and ``restart`` as each daemon starts, read by every other
command. Replaced whole on each write (:func:`~submarine_elastic.files.write_atomic`), so a reader never sees
half of one.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from submarine_elastic.cluster.api import ClusterSpec, Daemon, QueueSpec
from submarine_elastic.files import write_atomic

#: The state file's name in the cluster directory.
STATE_FILE = "cluster.json"


@dataclasses.dataclass(frozen=True)
class StateFile:
    """The state file at ``path``."""

    path: Path

    def read(self) -> tuple[ClusterSpec, list[Daemon]] | None:
        """The spec and the daemons recorded, or None when nothing is.

        Raises:
            ValueError, KeyError, TypeError: the file is not one this module wrote.
        """
        try:
            raw = json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        recorded = raw["spec"]
        spec = ClusterSpec(**{**recorded, "queues": tuple(QueueSpec(**q) for q in recorded.get("queues", ()))})
        daemons = [Daemon(d["name"], int(d["pid"]), int(d["start_ticks"]), Path(d["log"])) for d in raw["daemons"]]
        return spec, daemons

    def write(self, spec: ClusterSpec, daemons: list[Daemon]) -> None:
        """Records ``spec`` (with the addresses a client reads: the RM's, HDFS's) and ``daemons``.

        Raises:
            OSError: the directory cannot be written.
        """
        raw = {
            "spec": dataclasses.asdict(spec),
            "rm_url": spec.rm_url,
            "default_fs": spec.default_fs,
            "webhdfs_url": spec.webhdfs_url,
            "daemons": [{**dataclasses.asdict(d), "log": str(d.log)} for d in daemons],
        }
        write_atomic(self.path, json.dumps(raw, indent=2))

    def remove(self) -> None:
        """Removes the file, if there is one."""
        self.path.unlink(missing_ok=True)
