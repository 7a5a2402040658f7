"""The pseudo-cluster's state file, ``cluster.json``: the spec it was started with and the daemons started
(each by pid and start time), written by ``up`` and ``restart`` as each daemon starts, read by every other
command. Replaced whole on each write (:func:`~submarine_elastic.files.write_atomic`), so a reader never sees
half of one.

The file outlives the daemons when the cluster dies (a power loss, a reboot, every daemon killed); ``up`` then
starts the same cluster again with its state (:func:`recovery`); ``down`` removes it.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from submarine_elastic.cluster.api import ClusterSpec, ClusterSpecChangedError, Daemon, QueueSpec
from submarine_elastic.files import write_atomic

#: The state file's name in the cluster directory.
STATE_FILE = "cluster.json"
#: What a cluster's directory keeps across a power loss for ``up`` to start it again with: ZooKeeper's data (the
#: RM's applications, the YARN registry), HDFS, the Kerberos realm, the services' files, the NodeManagers'
#: recovery state, containers and logs, the daemons' logs. The configuration is written anew.
KEPT_ON_RECOVERY = ("zk", "hdfs", "krb5", "yarn-services", "tmp", "logs")
#: Where ZooKeeper's data directory holds its snapshots and transaction logs once it has run.
ZK_DATA = "zk/version-2"


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


def recovery(state: StateFile, spec: ClusterSpec, zk_data: Path) -> tuple[bool, str]:
    """Whether ``up`` of ``spec`` over a directory whose daemons all died starts the cluster recorded there
    again with its state, and why (or why not). Call it once no recorded daemon runs.

    Returns:
        (True, what is kept) when the state file records ``spec`` and ZooKeeper has data; (False, why it starts
        afresh) when nothing is recorded (never started, or stopped by ``down``), the state file is unreadable,
        or ZooKeeper's data is gone.

    Raises:
        ClusterSpecChangedError: the recorded cluster ran with another spec (the differences named).
    """
    try:
        recorded = state.read()
    except (ValueError, KeyError, TypeError) as exc:
        return False, f"its state file {state.path} is unreadable ({exc!r}): starting afresh"
    if recorded is None:
        return False, ""
    old = recorded[0]
    if old != spec:
        changed = [
            f"{f.name} {getattr(old, f.name)!r} -> {getattr(spec, f.name)!r}"
            for f in dataclasses.fields(ClusterSpec)
            if getattr(old, f.name) != getattr(spec, f.name)
        ]
        raise ClusterSpecChangedError(
            f"the cluster in {state.path.parent} died and is kept to be started again with its options; these "
            f"differ: {', '.join(changed)}. Run `submarine cluster up` with the options it had, or with --fresh "
            f"to drop its jobs and start a new one"
        )
    if not zk_data.is_dir():
        return False, f"ZooKeeper's data ({zk_data}) is gone, and with it the RM's applications: starting afresh"
    kept = ["ZooKeeper's data (the RM's applications)", "the NodeManagers' recovery state"]
    kept += ["HDFS"] if spec.hdfs else []
    kept += ["the Kerberos realm"] if spec.secure else []
    return True, f"{', '.join(kept[:-1])} and {kept[-1]} kept"
