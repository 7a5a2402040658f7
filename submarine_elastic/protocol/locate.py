"""Finding a job's driver: its container's address from the YARN Services API, its port from the spec."""

from __future__ import annotations

from submarine_elastic import env
from submarine_elastic.protocol.api import DRIVER_COMPONENT, DriverUnreachableError
from submarine_elastic.yarn import ContainerState, ServiceStatus, YarnError, YarnServiceClient


def driver_host(status: ServiceStatus) -> str | None:
    """The address of the job's driver container, or None while it has none. A container YARN counts as
    ended (lost with its NodeManager, or failed and being replaced) is passed over for the one it runs."""
    comp = status.component(DRIVER_COMPONENT)
    if comp is None:
        return None
    ended = (ContainerState.STOPPED, ContainerState.FAILED, ContainerState.SUCCEEDED)
    for container in sorted(comp.containers, key=lambda c: c.state in ended):
        if container.ip or container.hostname:
            return container.ip or container.hostname
    return None


def driver_address(
    job: str | None = None,
    *,
    client: YarnServiceClient | None = None,
    port: int | None = None,
    timeout: float = 300.0,
) -> str:
    """``host:port`` of the job's driver, polling YARN for up to ``timeout`` s while it starts.

    ``job`` defaults to ``SUBMARINE_JOB_ID`` and ``port`` to ``SUBMARINE_DRIVER_PORT`` (or the
    service's own ``SUBMARINE_DRIVER_PORT`` setting, read from its spec).

    Raises:
        DriverUnreachableError: no job name, no port, no ResourceManager, no driver in time, or the job's
            service has ended (at once, not after ``timeout``).
    """
    job = job or env.settings().job_id
    if not job:
        raise DriverUnreachableError("no job name: SUBMARINE_JOB_ID is not set")
    owns = client is None
    if client is None:
        rm = env.settings().rm_url
        if not rm:
            raise DriverUnreachableError("no ResourceManager address: SUBMARINE_RM_URL is not set")
        client = YarnServiceClient(rm)
    last = "no answer yet"

    def find() -> str:
        """The address, or '' while there is none yet."""
        nonlocal last, port
        try:
            status = client.status(job)
        except YarnError as exc:
            last = str(exc)
            return ""
        if status.is_terminal:
            raise DriverUnreachableError(
                f"job {job!r} has ended (service state {status.state}): it has no driver any more; "
                f"`submarine job show {job}` says how it ended"
            )
        host = driver_host(status)
        if port is None:
            port = env.settings().driver_port or _spec_port(status)
        if host and port:
            return f"{host}:{port}"
        last = f"service state {status.state}, driver container {'without address' if not host else 'ok'}"
        return ""

    from tenacity import RetryCallState, Retrying, retry_if_result, stop_after_delay, wait_fixed

    def not_found(_state: RetryCallState) -> str:
        raise DriverUnreachableError(f"the driver of job {job!r} was not found within {timeout:.0f} s: {last}")

    retrying = Retrying(
        stop=stop_after_delay(timeout),
        wait=wait_fixed(1.0),
        retry=retry_if_result(lambda address: not address),
        retry_error_callback=not_found,
    )
    try:
        return retrying(find)
    finally:
        if owns:
            client.close()


def _spec_port(status: ServiceStatus) -> int | None:
    from submarine_elastic.settings import env_name  # pydantic: only once a driver is looked for

    raw = status.raw.get("configuration", {}).get("env", {}).get(env_name("driver_port")) if status.raw else None
    return int(raw) if raw else None
