"""Which GPUs a worker's training process may use: those of its own container, and no other.

A worker container that holds ``yarn.io/gpu`` N is given N devices of its node, in this order of trust:

1. YARN's own assignment. With the LinuxContainerExecutor and its GPU module, the NodeManager picks the devices
   per container, fences the others off in the devices cgroup, and lists the choice in its REST resource
   ``/ws/v1/node/resources/yarn.io%2Fgpu`` (``assignedGpuDevices``, each with its ``containerId``). The agent
   takes those.
2. Where YARN assigns none (the DefaultContainerExecutor, the pseudo-cluster's: ``assignedGpuDevices`` stays
   empty while 1-GPU containers run), the workers of every job this project runs share one claim directory per
   NodeManager (:func:`claims_dir`) and each takes N of the devices the NodeManager reports, one lock file per
   device, held with ``flock`` for as long as the agent or its training process lives (the training process
   inherits the descriptors). The kernel drops a lock when its last holder dies, ``kill -9`` included, so a
   dead worker's devices are free again without any clean-up; YARN's count of GPUs per node keeps the claims
   within the devices there are. This holds only among the project's own jobs: another application's container
   on the same node is not stopped from using a claimed device.

The training process then runs with ``CUDA_VISIBLE_DEVICES`` and ``NVIDIA_VISIBLE_DEVICES`` naming the devices by
UUID (``CUDA_DEVICE_ORDER=PCI_BUS_ID`` where only minor numbers are known), so it sees exactly its own devices as
0..N-1, and Horovod's ``local_rank`` (0 for a worker that is one Horovod host) indexes them.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
import tenacity

from submarine_elastic.protocol.api import ElasticError

log = logging.getLogger("submarine_elastic.gpus")

#: How long a worker waits for devices a dead worker's orphaned training process still holds.
CLAIM_TIMEOUT_S = 60.0
#: The NodeManager REST resource of its GPUs.
NM_GPU_RESOURCE = "/ws/v1/node/resources/yarn.io%2Fgpu"
_SAFE = re.compile(r"[^A-Za-z0-9._-]")


class GpuPinningError(ElasticError):
    """A worker's devices could not be found or taken; the message says which and why."""


@dataclass(frozen=True)
class NodeGpus:
    """What a NodeManager reports of its GPUs.

    Attributes:
        minors: the minor numbers of the devices it offers, in its order.
        uuids: minor number -> UUID, for the devices its discovery described (empty where it had none).
        assigned: container id -> the minor numbers YARN assigned it (empty: YARN assigns none).
    """

    minors: tuple[int, ...]
    uuids: dict[int, str] = field(default_factory=dict)
    assigned: dict[str, tuple[int, ...]] = field(default_factory=dict)


@dataclass
class Pinning:
    """A worker's devices, and the open claim files that hold them (empty where YARN assigned them).

    Attributes:
        minors: the devices' minor numbers, ascending.
        uuids: their UUIDs where the NodeManager knows them, in the same order.
        source: ``yarn`` (YARN assigned them) or ``claim`` (taken from the node's claim directory).
    """

    minors: tuple[int, ...]
    uuids: tuple[str, ...]
    source: str
    fds: list[int] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        """The variables the training process starts with: its devices, by UUID where known."""
        if len(self.uuids) == len(self.minors) and self.minors:
            names = ",".join(self.uuids)
            return {"CUDA_VISIBLE_DEVICES": names, "NVIDIA_VISIBLE_DEVICES": names}
        names = ",".join(map(str, self.minors))
        return {"CUDA_VISIBLE_DEVICES": names, "NVIDIA_VISIBLE_DEVICES": names, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}

    def release(self) -> None:
        """Closes the claim files (the locks go once no training process holds them either)."""
        for fd in self.fds:
            os.close(fd)
        self.fds.clear()


def parse_node_gpus(info: dict[str, Any]) -> NodeGpus:
    """The NodeManager's answer at :data:`NM_GPU_RESOURCE`: the devices of ``totalGpuDevices`` (which only its GPU
    resource handler, under the LinuxContainerExecutor, fills), else those its discovery described
    (``gpuDeviceInformation``, all a NodeManager under the DefaultContainerExecutor reports).

    Raises:
        GpuPinningError: it lists no device either way (the NodeManager runs no GPU plugin).
    """
    described = (info.get("gpuDeviceInformation") or {}).get("gpus") or []
    total = info.get("totalGpuDevices") or described
    if not total:
        raise GpuPinningError(f"the NodeManager lists no GPU devices (no yarn.io/gpu plugin?): {info}")
    minors = tuple(int(d["minorNumber"]) for d in total)
    uuids = {int(g["minorNumber"]): str(g["uuid"]) for g in described if g.get("uuid")}
    assigned: dict[str, list[int]] = {}
    for device in info.get("assignedGpuDevices") or []:
        assigned.setdefault(str(device["containerId"]), []).append(int(device["minorNumber"]))
    return NodeGpus(minors, uuids, {c: tuple(sorted(m)) for c, m in assigned.items()})


def read_node_gpus(nm_url: str, user: str, session: requests.Session | None = None) -> NodeGpus:
    """What the NodeManager at ``nm_url`` (``http://host:port``) reports of its GPUs, asked as ``user``.

    Raises:
        GpuPinningError: it cannot be reached or does not answer with its GPUs (the message names the URL).
    """
    url = nm_url.rstrip("/") + NM_GPU_RESOURCE
    try:
        response = (session or requests).get(url, params={"user.name": user}, timeout=10)
        response.raise_for_status()
        return parse_node_gpus(response.json())
    except (requests.RequestException, ValueError, KeyError, TypeError) as exc:
        raise GpuPinningError(f"cannot read the GPUs of the NodeManager at {url}: {exc}") from exc


def claims_dir(base: Path, nm_host: str, nm_port: str) -> Path:
    """The claim directory of the NodeManager ``nm_host:nm_port`` under ``base`` (a NodeManager is one node's)."""
    return base / _SAFE.sub("_", f"{nm_host}_{nm_port}")


def claim(directory: Path, minors: tuple[int, ...], count: int, owner: str) -> list[tuple[int, int]] | None:
    """Takes ``count`` of the devices ``minors`` in ``directory`` (lowest free first) for ``owner``: (minor, open
    lock descriptor) each; None, holding nothing, when fewer are free.

    Raises:
        GpuPinningError: the directory or a lock file cannot be made or opened.
    """
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if directory.parent.stat().st_uid == os.getuid():
            directory.parent.chmod(0o1777)  # every job's user claims on the node
        if directory.stat().st_uid == os.getuid():
            directory.chmod(0o1777)
    except OSError as exc:
        raise GpuPinningError(f"cannot make the GPU claim directory {directory}: {exc}") from exc
    taken: list[tuple[int, int]] = []
    for minor in sorted(minors):
        if len(taken) == count:
            break
        path = directory / f"gpu-{minor}.lock"
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as exc:
            for _minor, held in taken:
                os.close(held)
            raise GpuPinningError(f"cannot open the GPU claim file {path}: {exc}") from exc
        if os.fstat(fd).st_uid == os.getuid():
            os.fchmod(fd, 0o666)  # the umask narrowed it: another user's worker must open it to claim
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{owner}\n".encode(), 0)
        taken.append((minor, fd))
    if len(taken) < count:
        for _minor, fd in taken:
            os.close(fd)
        return None
    return taken


def holders(directory: Path) -> dict[int, str]:
    """Minor number -> the owner written in its claim file, for every device some live process holds."""
    held: dict[int, str] = {}
    for path in sorted(directory.glob("gpu-*.lock")):
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
        except BlockingIOError:
            held[int(path.stem.removeprefix("gpu-"))] = path.read_text().strip()
        finally:
            os.close(fd)
    return held


def pin(
    node: NodeGpus,
    count: int,
    container_id: str,
    directory: Path,
    owner: str,
    *,
    timeout: float = CLAIM_TIMEOUT_S,
    sleep: Callable[[float], None] = tenacity.nap.sleep,
) -> Pinning:
    """The ``count`` devices of ``container_id``: YARN's assignment where it makes one, else a claim in
    ``directory``, waited for up to ``timeout`` seconds (an orphaned training process of a dead worker may still
    hold its devices).

    Raises:
        GpuPinningError: YARN assigns devices but none or not ``count`` to this container; the node has fewer than
            ``count`` devices; or they stayed taken for ``timeout`` (naming who holds them).
    """
    if node.assigned:
        mine = node.assigned.get(container_id)
        if mine is None or len(mine) != count:
            raise GpuPinningError(
                f"YARN assigns this node's GPUs per container, but lists {list(mine or [])} for {container_id}, "
                f"which holds yarn.io/gpu {count}"
            )
        return Pinning(mine, _uuids(node, mine), "yarn")
    if count > len(node.minors):
        raise GpuPinningError(f"the container holds yarn.io/gpu {count}, but its node has {len(node.minors)} devices")
    try:
        taken = tenacity.Retrying(
            stop=tenacity.stop_after_delay(timeout),
            wait=tenacity.wait_fixed(0.5),
            retry=tenacity.retry_if_result(lambda result: result is None),
            sleep=sleep,
        )(claim, directory, node.minors, count, owner)
    except tenacity.RetryError:
        raise GpuPinningError(
            f"{count} of the GPUs {list(node.minors)} in {directory} stayed taken for {timeout:.0f} s; held by "
            f"{holders(directory)}"
        ) from None
    assert taken is not None  # the retry returns only a claim
    minors = tuple(m for m, _fd in taken)
    return Pinning(minors, _uuids(node, minors), "claim", [fd for _m, fd in taken])


def _uuids(node: NodeGpus, minors: tuple[int, ...]) -> tuple[str, ...]:
    return tuple(node.uuids[m] for m in minors) if all(m in node.uuids for m in minors) else ()
