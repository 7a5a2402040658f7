"""``job run --tensorboard``: a ``tensorboard`` component in the job's YARN service, one instance running
TensorBoard (``python -m tensorboard.main``, the job's own Python) over the job's TensorBoard directory.

TensorBoard has no authentication: it binds its node's address (``$NM_HOST``) only, never every interface,
on a port chosen at submission; whoever reaches that address and port reads the job's event files. The link
is the service's quicklink ``TensorBoard`` (``http://tensorboard-0:PORT/``, the instance's name as its host,
as Hadoop Submarine writes quicklinks), which ``submarine job show`` resolves to the instance's host.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from submarine_elastic.submit.api import JobSpecError
from submarine_elastic.submit.jobresources import WorkerResources

COMPONENT = "tensorboard"
#: The quicklink naming the component's page.
QUICKLINK = "TensorBoard"
#: ``--tensorboard_resources``' default.
DEFAULT_RESOURCES = "memory=1G,vcores=1"
#: Where TensorBoard's directory is, under ``--checkpoint_path`` or the job's directory, without a directory given.
SUBDIR = "tensorboard"


@dataclass(frozen=True)
class TensorBoard:
    """The job's TensorBoard: the directory it reads (``SUBMARINE_TENSORBOARD_DIR`` in every container), its
    container's size and image (None: the job's), and its port (0: not chosen yet; ``submit`` chooses it)."""

    logdir: str
    resources: WorkerResources
    docker_image: str | None = None
    port: int = 0

    def __post_init__(self) -> None:
        """Refuses a directory TensorBoard could not read here.

        Raises:
            JobSpecError: the directory is not a local absolute path (TensorBoard of TensorFlow 2.21 reads no
                ``hdfs://``), naming ``--tensorboard``.
        """
        path = self.logdir.removeprefix("file://")
        if not path.startswith("/"):
            raise JobSpecError(
                f"--tensorboard: {self.logdir!r} is not a local absolute directory, which every node reaches at "
                "the same path (TensorBoard here reads no hdfs://); give --tensorboard /shared/dir"
            )

    def link(self) -> str:
        """The quicklink's URL (the instance's name as its host)."""
        return f"http://{COMPONENT}-0:{self.port}/"

    def component(self, python: str, env: dict[str, str], image: str | None) -> dict[str, object]:
        """The YARN Services component (a dict of the spec's form), running ``python``'s TensorBoard, in the
        Docker ``image`` when one is given. ``--reload_multifile``: a job's run has several event files (rank 0,
        a later rank 0, the driver), and without it TensorBoard stops reading all but the newest."""
        command = (
            f"{shlex.quote(python)} -m tensorboard.main --logdir {shlex.quote(self.logdir.removeprefix('file://'))} "
            f"--host $NM_HOST --port {self.port} --reload_multifile true"
        )
        component: dict[str, object] = {
            "name": COMPONENT,
            "number_of_containers": 1,
            "launch_command": command,
            "resource": self.resources.yarn_resource(),
            "restart_policy": "ON_FAILURE",
            "configuration": {"env": env},
        }
        if image:
            component["artifact"] = {"type": "DOCKER", "id": image}
        return component
