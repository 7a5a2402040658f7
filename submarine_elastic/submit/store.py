"""What the submitting machine keeps of each job, in its directory under ``SUBMARINE_JOBS_DIR``: its control
token and the certificates its driver is reached with (written by ``jobspec.write_secrets``), the driver's last
address, and the record of how the job ended (written by its driver)."""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING

from submarine_elastic.submit.jobspec import (
    CLIENT_CERT,
    CLIENT_KEY,
    DRIVER_CN,
    INSECURE_MARK,
    SECRET_ENV,
    TLS_FILES,
    job_dir,
    outcome_path,
)

if TYPE_CHECKING:
    from submarine_elastic.protocol.records import JobOutcome
    from submarine_elastic.submit.jobfiles import HdfsJobFiles


def forget_job(job: str, files: HdfsJobFiles | None = None) -> None:
    """Removes what :func:`submit` kept of a job that is gone (its outcome record stays), with ``files`` its
    directory on HDFS too.

    Raises:
        OSError: a file could not be removed.
        WebHdfsError: HDFS refused or did not answer.
    """
    if files is not None:
        files.remove(job)
    if job_dir(job).is_dir():
        shutil.rmtree(job_dir(job))


def load_outcome(job: str) -> JobOutcome | None:
    """The job's outcome record, or None when its driver wrote none (still running, or the record's
    directory is not shared with the NodeManagers) or it cannot be read."""
    from submarine_elastic.protocol.records import JobOutcome  # pydantic: only for an ended job's record

    try:
        return JobOutcome.from_json(outcome_path(job).read_bytes())
    except (OSError, ValueError):
        return None


def forget_outcome(job: str) -> None:
    """Removes the job's outcome record."""
    outcome_path(job).unlink(missing_ok=True)


_DRIVER_ADDRESS = "driver.address"


def remember_driver(job: str, target: str) -> None:
    """Keeps the address the job's driver was last found at (for when the ResourceManager is down)."""
    directory = job_dir(job)
    if directory.is_dir():
        try:
            (directory / _DRIVER_ADDRESS).write_text(target)
        except OSError:
            pass


def last_driver_address(job: str) -> str | None:
    """The address :func:`remember_driver` kept, or None."""
    try:
        return (job_dir(job) / _DRIVER_ADDRESS).read_text().strip() or None
    except OSError:
        return None


def load_tls_ca(job: str) -> bytes | None:
    """The certificates the job's driver is checked against, if it was started with TLS."""
    path = job_dir(job) / TLS_FILES["driver_tls_ca_file"]
    return path.read_bytes() if path.is_file() else None


def load_client_cert(job: str) -> tuple[bytes, bytes] | None:
    """The client certificate chain and key ``job run`` issued for the job's submitting side, or None."""
    cert, key = job_dir(job) / CLIENT_CERT, job_dir(job) / CLIENT_KEY
    return (cert.read_bytes(), key.read_bytes()) if cert.is_file() and key.is_file() else None


def load_server_name(job: str) -> str | None:
    """The name the job's driver certificate carries, when ``job run`` issued it (else None: the
    certificate given with ``--tls_cert`` names the driver's hosts)."""
    from submarine_elastic.tls import common_name, driver_server_name

    path = job_dir(job) / TLS_FILES["driver_tls_cert_file"]
    try:
        issued = common_name(path.read_bytes()) == DRIVER_CN
    except (OSError, ValueError):
        return None
    return driver_server_name(job) if issued else None


def is_insecure(job: str) -> bool:
    """Whether the job was run with ``--insecure`` (its directory then holds no TLS files)."""
    return (job_dir(job) / INSECURE_MARK).is_file()


def load_token(job: str) -> str | None:
    """The job's control token as :func:`submit` kept it, or None."""
    path = job_dir(job) / SECRET_ENV["SUBMARINE_JOB_TOKEN"]
    return path.read_text() if path.is_file() else None
