"""Where every process reads its environment: :func:`settings`, the one typed model of every variable.

The model and the table of what each variable means are in :mod:`submarine_elastic.settings` (pydantic); this
module is the standard library only and loads the model on first use, so the training side (``tf_hooks``) and
the CLI may import it without pulling in the controller, and ``submarine job show`` without pydantic. The
submit side writes a job's containers' variables from the same model (``settings.container_env``); the user
sets the cluster-side ones in their shell.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from submarine_elastic.secret_files import SecretFileError, read_secret

if TYPE_CHECKING:
    from submarine_elastic.settings import Settings

__all__ = ["SecretFileError", "read_secret", "settings"]


def settings() -> Settings:
    """This process's settings, read from its environment (again only when a variable of the model changed). A
    variable its rule refuses raises ``settings.SettingsError`` (a ``ValueError`` naming it and the value) where
    its field is read."""
    from submarine_elastic.settings import load

    return load()


# Call sites not yet on Settings (issue 37): elastic/driver.py, cluster/local.py, cluster/jars.py, yarn/client.py,
# controller/client.py, controller/locate.py, sim/physics.py, sim/workload.py, and the tests and benchmarks that
# call these names; each reads one field of :func:`settings`.
def insecure() -> bool:
    return settings().insecure


def rm_url() -> str | None:
    return settings().rm_url


def yarn_user() -> str:
    return settings().user()


def yarn_auth() -> str:
    return settings().yarn_auth


def yarn_keytab() -> Path | None:
    return settings().yarn_keytab


def yarn_principal() -> str | None:
    return settings().yarn_principal


def cluster_dir() -> Path:
    return settings().cluster_directory()


def hadoop_lib() -> Path:
    return settings().hadoop_lib_directory()


def hadoop_conf_template() -> Path:
    return settings().hadoop_conf_template()


def controller_dir() -> Path:
    return settings().controller_directory()


def pollux_data_dir() -> Path:
    return settings().pollux_data_directory()


def job_id() -> str | None:
    return settings().job_id


def queue() -> str | None:
    return settings().queue


def driver_port() -> int | None:
    return settings().driver_port


def worker_limits() -> tuple[int, int, int]:
    return settings().worker_limits()


def batch_limits() -> tuple[int, int] | None:
    return settings().batch_limits()


def job_token() -> str | None:
    return settings().read_job_token()


def driver_tls() -> tuple[bytes, bytes] | None:
    return settings().read_driver_tls()


def driver_tls_client_ca() -> bytes | None:
    return settings().read_driver_tls_client_ca()


def gloo_iface() -> str | None:
    return settings().gloo_iface


def job_outcome_file() -> Path | None:
    return settings().job_outcome_file


def driver_state_file() -> Path | None:
    return settings().state_file()


def node_id() -> str:
    return settings().node_id()


def positive_seconds(name: str, default: float) -> float:
    found = getattr(
        settings(), {"SUBMARINE_HUNG_AFTER_S": "hung_after_s", "SUBMARINE_DRIVER_GRACE_S": "driver_grace_s"}[name]
    )
    return default if found is None else float(found)
