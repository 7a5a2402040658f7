"""Hadoop Submarine's ``job run`` flags beyond the project's own: what each means here, the ones an allreduce
job has no use for (refused before anything is submitted, with what to run instead), its quicklinks and
configuration pairs, and its YAML job file (``-f FILE``).

Pure: reads only the job file it is given.
"""

from __future__ import annotations

import re
from pathlib import Path

from submarine_elastic.submit.api import JobSpecError
from submarine_elastic.submit.jobspec import shell_problem

#: Submarine's flags for roles an allreduce (Horovod) job does not have, by role.
_ROLES = {
    "parameter servers": ("num_ps", ("ps_resources", "ps_launch_cmd", "ps_docker_image")),
    "MXNet schedulers": ("num_schedulers", ("scheduler_resources", "scheduler_launch_cmd", "scheduler_docker_image")),
}
#: What a job of this project is instead, by Submarine's framework.
_FRAMEWORKS = {
    "pytorch": "PyTorch's distributed jobs need their own launcher; this project runs TensorFlow with Horovod",
    "mxnet": "MXNet's parameter servers and schedulers have no place in an allreduce ring",
}
_QUICKLINK_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")
_QUICKLINK_URL = re.compile(r"https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~/%?&=+-]*)?")
_CONF_KEY = re.compile(r"[A-Za-z][A-Za-z0-9._-]*")


class SubmarineFlagError(JobSpecError):
    """A Submarine flag this project refuses or a value of one it cannot take; ``flag`` names it."""

    def __init__(self, message: str, flag: str) -> None:
        super().__init__(message)
        self.flag = flag


def refuse_other_roles(given: dict[str, object]) -> list[str]:
    """Refuse, before anything is submitted, Submarine's flags for roles an allreduce job lacks (``given``:
    click's parameter names -> values, None where not given). A role whose count is given as 0 has no
    instances: its other flags are then ignored, as Submarine does; returns a note for each so ignored.

    Raises:
        SubmarineFlagError: a role with instances, or its flags without a count of 0 (naming the flag, why,
            and what to run instead).
    """
    notes: list[str] = []
    for role, (count, others) in _ROLES.items():
        used = [name for name in others if given.get(name) is not None]
        number = given.get(count)
        if number == 0:
            notes.extend(f"--{name} ignored: --{count} 0" for name in used)
            continue
        if number is None and not used:
            continue
        flags = " ".join(f"--{name}" for name in ([count] if number is not None else []) + used)
        raise SubmarineFlagError(
            f"{role}: this job is allreduce (Horovod), every worker holds the whole model and there are no "
            f"{role}; drop {flags} and give the workers' count with --num_workers (their resources with "
            "--worker_resources, their command with --worker_launch_cmd)",
            f"--{count}" if number is not None else f"--{used[0]}",
        )
    return notes


def refuse_framework(framework: str) -> str:
    """The framework, lower-cased, when it is TensorFlow.

    Raises:
        SubmarineFlagError: another (naming ``--framework`` and why).
    """
    lowered = framework.strip().lower()
    if lowered == "tensorflow":
        return lowered
    why = _FRAMEWORKS.get(lowered, "only tensorflow is supported")
    raise SubmarineFlagError(
        f"--framework {framework}: {why}; run a TensorFlow script (Keras fit or a GradientTape loop with "
        "Horovod) with --framework tensorflow, the default",
        "--framework",
    )


def parse_quicklinks(pairs: tuple[str, ...]) -> dict[str, str]:
    """``NAME=URL`` pairs of ``--quicklink`` (the YARN service's quicklinks). As in Submarine, the URL's host
    may be an instance of the job (``worker-0``, ``tensorboard-0``): ``job show`` resolves it to that
    container's host.

    Raises:
        SubmarineFlagError: a pair without ``=``, a name that is not one, a URL that is not http(s) of plain
            characters, or a name given twice.
    """
    links: dict[str, str] = {}
    for pair in pairs:
        name, sep, url = pair.partition("=")
        if not sep or not _QUICKLINK_NAME.fullmatch(name):
            raise SubmarineFlagError(
                f"--quicklink: expected NAME=URL with a name of letters, digits, _ and -, got {pair!r}", "--quicklink"
            )
        if not _QUICKLINK_URL.fullmatch(url):
            raise SubmarineFlagError(
                f"--quicklink {name}: {url!r} is not an http(s) URL (e.g. http://worker-0:6006/)", "--quicklink"
            )
        if name in links:
            raise SubmarineFlagError(f"--quicklink: {name} given twice", "--quicklink")
        links[name] = url
    return links


def parse_conf(pairs: tuple[str, ...]) -> dict[str, str]:
    """``K=V`` pairs of ``--conf``: here, properties of the job's YARN service (its ``configuration.properties``,
    e.g. ``yarn.service.am-restart.max-attempts=3``); the components' own properties win over them. Submarine's
    client settings (``submarine.*``) have no counterpart and are refused.

    Raises:
        SubmarineFlagError: a pair without ``=``, a key that is not a property name, a ``submarine.*`` key, or a
            value with a character YARN's launch script would interpret.
    """
    conf: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not _CONF_KEY.fullmatch(key):
            raise SubmarineFlagError(f"--conf: expected KEY=VALUE with a property name, got {pair!r}", "--conf")
        if key.startswith("submarine."):
            raise SubmarineFlagError(
                f"--conf {key}: a setting of Hadoop Submarine's own client (its runtime, its storage), which this "
                "project does not have; --conf here sets the job's YARN service properties (yarn.service.*)",
                "--conf",
            )
        if (problem := shell_problem(f"--conf {key}", value)) is not None:
            raise SubmarineFlagError(problem, "--conf")
        conf[key] = value
    return conf


#: Submarine's job file: section -> key -> the ``job run`` parameter it sets (click's name).
_FILE_KEYS: dict[str, dict[str, str]] = {
    "spec": {"name": "name", "job_type": "framework", "jobType": "framework", "framework": "framework"},
    "configs": {
        "input_path": "input_path",
        "checkpoint_path": "checkpoint_path",
        "saved_model_path": "saved_model_path",
        "docker_image": "docker_image",
        "wait_job_finish": "wait_job_finish",
        "envs": "env_pairs",
        "localizations": "localizations",
        "quicklinks": "quicklinks",
    },
    "scheduling": {"queue": "queue"},
    "security": {"keytab": "keytab", "principal": "principal", "distribute_keytab": "distribute_keytab"},
    "tensorBoard": {"resources": "tensorboard_resources", "docker_image": "tensorboard_docker_image"},
}
#: ``roles.<role>`` keys -> the parameter, by role (``{}``: the role's prefix).
_ROLE_KEYS = {"resources": "{}_resources", "replicas": "num_{}", "launch_cmd": "{}_launch_cmd",
              "docker_image": "{}_docker_image"}  # fmt: skip
#: Each role's count parameter (``replicas``).
_ROLE_COUNTS = {"worker": "num_workers", "ps": "num_ps", "scheduler": "num_schedulers"}
_LISTS = {"env_pairs", "localizations", "quicklinks"}
_SWITCHES = {"wait_job_finish", "distribute_keytab"}


def load_job_file(path: Path) -> dict[str, object]:
    """Submarine's YAML job file (``job run -f FILE``) as ``job run`` parameters (click's names), each value of
    the type its flag takes. Its sections: ``spec`` (name, framework), ``configs``, ``roles`` (worker, ps,
    scheduler: resources, replicas, launch_cmd, docker_image), ``scheduling``, ``security``, ``tensorBoard``
    (its presence turns TensorBoard on). The caller lets the command line win.

    Raises:
        SubmarineFlagError: the file cannot be read or is not YAML of mappings, a key it does not know (naming
            the key and the ones its section takes), or a value of the wrong kind (naming the key).
    """
    import yaml

    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise SubmarineFlagError(f"-f {path}: cannot read it as YAML ({exc})", "-f") from exc
    if not isinstance(doc, dict):
        raise SubmarineFlagError(f"-f {path}: expected a mapping of sections, got {type(doc).__name__}", "-f")
    values: dict[str, object] = {}
    for section, body in doc.items():
        where = f"-f {path}: {section}"
        if section == "roles":
            for role, keys in _mapping(body, where).items():
                if role not in _ROLE_COUNTS:
                    raise SubmarineFlagError(f"{where}: unknown role {role!r} (known: {', '.join(_ROLE_COUNTS)})", "-f")
                for key, value in _mapping(keys, f"{where}.{role}").items():
                    if key not in _ROLE_KEYS:
                        raise SubmarineFlagError(
                            f"{where}.{role}: unknown key {key!r} (known: {', '.join(_ROLE_KEYS)})", "-f"
                        )
                    param = _ROLE_COUNTS[role] if key == "replicas" else _ROLE_KEYS[key].format(role)
                    values[param] = _typed(param, value, f"{where}.{role}.{key}")
            continue
        known = _FILE_KEYS.get(section)
        if known is None:
            raise SubmarineFlagError(
                f"-f {path}: unknown section {section!r} (known: {', '.join([*_FILE_KEYS, 'roles'])})", "-f"
            )
        if section == "tensorBoard":
            values["tensorboard"] = ""
        for key, value in _mapping(body, where).items():
            if key not in known:
                raise SubmarineFlagError(f"{where}: unknown key {key!r} (known: {', '.join(known)})", "-f")
            values[known[key]] = _typed(known[key], value, f"{where}.{key}")
    return values


def _mapping(body: object, where: str) -> dict[str, object]:
    if body is None:
        return {}
    if not isinstance(body, dict) or not all(isinstance(k, str) for k in body):
        raise SubmarineFlagError(f"{where}: expected a mapping, got {body!r}", "-f")
    return body


def _typed(param: str, value: object, where: str) -> object:
    """``value`` as the flag ``param`` takes it: a tuple of strings, a switch, a count or a string."""
    if param in _LISTS:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise SubmarineFlagError(f"{where}: expected a list of strings, got {value!r}", "-f")
        return tuple(value)
    if param in _SWITCHES:
        if not isinstance(value, bool):
            raise SubmarineFlagError(f"{where}: expected true or false, got {value!r}", "-f")
        return value
    if param.startswith("num_"):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise SubmarineFlagError(f"{where}: expected a whole number >= 0, got {value!r}", "-f")
        return value
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise SubmarineFlagError(f"{where}: expected a string, got {value!r}", "-f")
    text = str(value)
    return Path(text) if param == "keytab" else text
