"""``submarine job run``'s options: the project's own and Hadoop Submarine's ``job run --help`` list, each with
what it means here, and Submarine's YAML job file (``-f FILE``) merged under the command line.

A flag an allreduce job has no use for (parameter servers, MXNet schedulers) is accepted by the parser and
refused by :func:`job_flags` before anything is submitted, saying why and what to run instead.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from submarine_elastic.submit import tensorboard as tb
from submarine_elastic.submit.jobspec import Placement
from submarine_elastic.submit.service import FlagError, JobFlags
from submarine_elastic.submit.submarine_flags import (
    SubmarineFlagError,
    load_job_file,
    refuse_framework,
    refuse_other_roles,
)

F = TypeVar("F", bound=Callable[..., Any])


def _other_role(role: str, count: str, what: str) -> list[Callable[[F], F]]:
    refused = f"Submarine's {what}: refused, this job is allreduce (ignored with --{count} 0)."
    return [
        click.option(f"--{role}_resources", default=None, help=refused),
        click.option(f"--{role}_launch_cmd", default=None, help=refused),
        click.option(f"--{role}_docker_image", default=None, help=refused),
    ]


_OPTIONS: list[Callable[[F], F]] = [
    click.option(
        "-f",
        "job_file",
        type=click.Path(dir_okay=False, exists=True, path_type=Path),
        default=None,
        metavar="FILE",
        help="Hadoop Submarine's YAML job file (spec, configs, roles, scheduling, security, tensorBoard): its keys "
        "set the flags of the same meaning; the command line wins; an unknown key is refused.",
    ),
    click.option("--name", default=None, help="Job name: the YARN service name, [a-z][a-z0-9-]* (or spec.name in -f)."),
    click.option(
        "--framework",
        default="tensorflow",
        show_default=True,
        help="Only tensorflow (pytorch and mxnet are refused, saying why).",
    ),
    click.option("--elastic/--no-elastic", default=False, help="Let the worker count change while the job runs."),
    click.option("--num_workers", type=int, default=2, show_default=True, help="Workers at start."),
    click.option(
        "--min_workers", type=int, default=None, help="Fewest workers (default: --num_workers; 1 if --elastic)."
    ),
    click.option("--max_workers", type=int, default=None, help="Most workers (default: --num_workers)."),
    click.option(
        "--worker_resources",
        default="memory-mb=2048,vcores=1",
        show_default=True,
        help="Per worker container: memory=8G, memory=2048M or memory-mb=2048; vcores=N; gpu=N or yarn.io/gpu=N; "
        "another resource type the RM offers by its name.",
    ),
    click.option("--worker_launch_cmd", default=None, help="The training command each worker runs (or in -f)."),
    click.option("--env", "env_pairs", multiple=True, metavar="K=V", help="Environment of every container (repeat)."),
    click.option("--input_path", default=None, help="Passed to the job as SUBMARINE_INPUT_PATH."),
    click.option(
        "--checkpoint_path",
        default=None,
        help="Directory every worker host reaches at the same path: the elastic helpers checkpoint there and a job "
        "that lost every worker resumes from it (SUBMARINE_CHECKPOINT_PATH).",
    ),
    click.option(
        "--checkpoint_every",
        type=int,
        default=None,
        metavar="N",
        help="Checkpoint every N commits (SUBMARINE_CHECKPOINT_EVERY) [default: 50]. Needs --checkpoint_path.",
    ),
    click.option(
        "--min_batch_size",
        type=int,
        default=None,
        metavar="N",
        help="Smallest global batch a policy or an operator may set the job's batch to (SUBMARINE_MIN_BATCH_SIZE) "
        "[default: 1]. Needs --max_batch_size.",
    ),
    click.option(
        "--max_batch_size",
        type=int,
        default=None,
        metavar="N",
        help="Largest global batch the job's batch may be set to (SUBMARINE_MAX_BATCH_SIZE). Without it and "
        "--min_batch_size the driver takes any batch.",
    ),
    click.option(
        "--placement",
        type=click.Choice([p.value for p in Placement]),
        default=None,
        help="How YARN places the workers: spread = at most one worker on a node (default: wherever it has room).",
    ),
    click.option("--queue", default=None, help="YARN queue."),
    click.option("--docker_image", default=None, help="Image of the job's containers (a Docker-enabled NodeManager)."),
    click.option("--worker_docker_image", default=None, help="The workers' image: --docker_image's alias here."),
    click.option(
        "--workdir",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="The job's code: snapshotted at submission and localized into every container, where the command runs "
        "in its copy [default: the current directory].",
    ),
    click.option(
        "--localization",
        "localizations",
        multiple=True,
        metavar="SRC:DEST[:ro|rw]",
        help="Also put local file or directory SRC at DEST (relative to the directory the command runs in) in the "
        "snapshot; ro makes its files read-only there (repeat).",
    ),
    click.option(
        "--snapshot/--no_snapshot",
        "take_snapshot",
        default=True,
        help="--no_snapshot: run the command in --workdir on each node's own file system (a shared file system only).",
    ),
    click.option(
        "--python_env",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        metavar="ARCHIVE",
        help="A packed Python environment (venv-pack/conda-pack .tar.gz, `submarine job pack-env`) the driver, "
        "agents and training processes run [default: this interpreter, or with --docker_image the image's python3].",
    ),
    click.option(
        "--policy",
        default=None,
        help="Resize the job by this policy (name or module:Class); starts the controller if none runs.",
    ),
    click.option(
        "--tls_cert",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="The driver's certificate chain (PEM): its control plane then speaks TLS only. Needs --tls_key.",
    ),
    click.option(
        "--tls_key", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Its private key (PEM)."
    ),
    click.option(
        "--tls_ca",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="Certificates the agents and `job flex|show` trust for the driver [default: --tls_cert].",
    ),
    click.option(
        "--insecure",
        is_flag=True,
        default=None,
        help="Plaintext control plane: no certificates (default: SUBMARINE_INSECURE; without either, mutual TLS with "
        "certificates issued for the job).",
    ),
    click.option("--wait_job_finish", is_flag=True, help="Follow the job to its end with a live view."),
    click.option("--timeout", type=float, default=3600, show_default=True, help="Seconds --wait_job_finish waits."),
    click.option(
        "--saved_model_path",
        default=None,
        help="Where the training exports the model: told to every container (SUBMARINE_SAVED_MODEL_PATH).",
    ),
    click.option(
        "--tensorboard",
        is_flag=False,
        flag_value="",
        default=None,
        metavar="[DIR]",
        help="Run TensorBoard in the job (a tensorboard component, bound to its node's address, no authentication) "
        "over DIR [default: <--checkpoint_path>/tensorboard, else the job's directory's]: SUBMARINE_TENSORBOARD_DIR "
        "in every container; `job show` prints its link.",
    ),
    click.option(
        "--tensorboard_resources",
        default=tb.DEFAULT_RESOURCES,
        show_default=True,
        help="The TensorBoard container's resources, as --worker_resources.",
    ),
    click.option("--tensorboard_docker_image", default=None, help="The TensorBoard's image [default: the job's]."),
    click.option(
        "--quicklink",
        "quicklinks",
        multiple=True,
        metavar="NAME=URL",
        help="A link of the YARN service (its quicklinks; a host worker-0 is that instance's host in `job show`).",
    ),
    click.option(
        "--conf",
        "conf",
        multiple=True,
        metavar="K=V",
        help="A property of the job's YARN service configuration (yarn.service.*), repeatable; Submarine's own "
        "client settings (submarine.*) are refused.",
    ),
    click.option(
        "--keytab",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="Kerberos: the keytab job run and the job's containers log in to the ResourceManager from.",
    ),
    click.option("--principal", default=None, help="Kerberos: its principal [default: the keytab's first]."),
    click.option(
        "--distribute_keytab",
        is_flag=True,
        default=False,
        help="Copy --keytab into the job's secrets (localized to each container); without it every node has the "
        "keytab at the --keytab path.",
    ),
    click.option("--verbose", is_flag=True, default=False, help="Debug logging, and the YARN service spec sent."),
    click.option(
        "--num_ps",
        type=click.IntRange(min=0),
        default=None,
        help="Submarine's parameter servers: refused (this job is allreduce); 0 accepted.",
    ),
    *_other_role("ps", "num_ps", "parameter servers"),
    click.option(
        "--num_schedulers",
        type=click.IntRange(min=0),
        default=None,
        help="Submarine's MXNet schedulers: refused; 0 accepted.",
    ),
    *_other_role("scheduler", "num_schedulers", "MXNet schedulers"),
]


def run_options(func: F) -> F:
    """Every option of ``job run`` on ``func``, in the order ``--help`` lists them."""
    for option in reversed(_OPTIONS):
        func = option(func)
    return func


def with_job_file(ctx: click.Context, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with the values of ``-f FILE`` where the command line gave none (a flag left at its default).

    Raises:
        click.BadParameter: the file refused (naming the key).
    """
    path = params.get("job_file")
    if path is None:
        return params
    try:
        from_file = load_job_file(path)
    except SubmarineFlagError as exc:
        raise click.BadParameter(str(exc), param_hint="-f") from exc
    merged = dict(params)
    for name, value in from_file.items():
        source = ctx.get_parameter_source(name)
        if source in (None, ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP):
            merged[name] = value
    return merged


def job_flags(params: dict[str, Any]) -> tuple[JobFlags, list[str]]:
    """The :class:`JobFlags` of ``job run``'s parameters (after :func:`with_job_file`), and notes on flags
    ignored; refuses, before anything else, what an allreduce job cannot run.

    Raises:
        click.UsageError: a required flag missing.
        click.BadParameter: a Submarine flag refused (naming it, why and what to run instead), or
            ``--worker_docker_image`` and ``--docker_image`` naming different images.
    """
    try:
        notes = refuse_other_roles(params)
        framework = refuse_framework(params["framework"])
    except SubmarineFlagError as exc:
        raise click.BadParameter(str(exc), param_hint=exc.flag) from exc
    for flag in ("name", "worker_launch_cmd"):
        if not params.get(flag):
            raise click.UsageError(f"Missing option '--{flag}' (or its key in the -f job file).")
    image, worker_image = params["docker_image"], params["worker_docker_image"]
    if image and worker_image and image != worker_image:
        raise click.BadParameter(
            f"{worker_image!r} and --docker_image {image!r}: every container of the job runs one image here",
            param_hint="--worker_docker_image",
        )
    fields = {f: params[f] for f in JobFlags.__dataclass_fields__ if f in params}
    fields.update(
        framework=framework,
        env=tuple(params["env_pairs"]),
        snapshot=params["take_snapshot"],
        docker_image=image or worker_image,
        localizations=tuple(params["localizations"]),
        quicklinks=tuple(params["quicklinks"]),
        conf=tuple(params["conf"]),
        keytab=None if params["keytab"] is None else Path(params["keytab"]),
    )
    return JobFlags(**fields), notes


def verbose_logging() -> None:
    """``--verbose``: the project's debug log on stderr for this command."""
    logger = logging.getLogger("submarine_elastic")
    logger.setLevel(logging.DEBUG)
    if any(getattr(h, "submarine_verbose", False) for h in logger.handlers):
        return  # a second job run in one process (tests) logs once
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    handler.submarine_verbose = True  # type: ignore[attr-defined]
    logger.addHandler(handler)


def refused(exc: FlagError) -> click.ClickException:
    """A :class:`FlagError` as click shows it: naming its flag when it has one."""
    if exc.flag is None:
        return click.UsageError(str(exc))
    return click.BadParameter(str(exc), param_hint=exc.flag)
