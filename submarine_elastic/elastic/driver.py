"""The job driver: the one process of an elastic job's ``driver`` container.

It runs Horovod's elastic driver and rendezvous server, learns its workers from the agents that attach over gRPC
(each worker container runs one, see :mod:`submarine_elastic.elastic.agent`), and starts each training process
inside its own container by handing the waiting, already-warm process its slot's Horovod environment. Each agent
process is its own Horovod host (keyed by YARN container id and agent pid), so a worker that YARN relaunches is
never taken for the blacklisted one, and all of it works with every container on one host.

Host discovery answers Horovod's poll (every 0.1 s, :mod:`~submarine_elastic.elastic.horovod_adapter`) from the
agents' states in memory (no process spawn, no call to the ResourceManager): a worker is offered to Horovod only
once its training process is warm, so a joiner never stalls the ring, and is withdrawn before YARN is asked to
remove it, so scale-in happens at a commit boundary. That ring host (the registry, the rendezvous server and its
address) is :mod:`submarine_elastic.elastic.ringhost`; the target, its checks and the verdict on it are
:mod:`submarine_elastic.elastic.reconcile`. :class:`~submarine_elastic.elastic.jobdriver.JobDriver` runs them, with
one part for each job (listed in :mod:`~submarine_elastic.elastic.jobdriver`); this module is the process: it reads
the container's settings, runs the driver, and exits.

Targets (``SetTarget``: a worker count and, optionally, a batch; one message from every writer) are checked,
numbered and queued by :class:`~submarine_elastic.elastic.reconcile.TargetBook`, safe under concurrent calls;
the resizes they ask run one at a time, in version order, on a background thread:
- out: YARN is flexed up; the new containers' agents attach and warm up while the ring trains; the
  ring re-forms with them at its next commit;
- in: the leaving workers (those not yet in the ring, then the highest ranks, so rank 0 stays; or
  the named instances) are withdrawn from discovery, the ring re-forms without them at its next
  commit, their processes exit, and only then is YARN flexed down (or the leaving instances
  decommissioned by name, when they are not the highest-numbered).

The YARN side of a resize is declarative: the driver records the worker component's target (a count, and the
instances to remove by name) and reconciles until YARN has it
(:meth:`~submarine_elastic.yarn.ServiceBackend.reconcile`), a slice of at most
:data:`~submarine_elastic.elastic.yarnsync.RECONCILE_SLICE_S` at a time, taking new resizes in between. A flex the
ResourceManager did not take (unreachable, restarting) is sent again, not lost; until YARN has the target,
``JobStatus.error`` says why.

The job and each worker follow the state machines of :mod:`submarine_elastic.protocol.api` (:class:`JobPhase`,
:class:`WorkerState`); a transition they do not have raises.

The driver is recoverable. It runs in a YARN component with restart policy ON_FAILURE: a driver that concludes the
job (finished or failed, its outcome recorded) exits 0 and ends the service; one that dies is relaunched. What its
next incarnation needs (the target, the resize asked for, the timeline, the failures, its incarnations) it keeps in
a small state file (:class:`~submarine_elastic.protocol.records.DriverState`, beside the outcome record). The
workers train on while it is gone (Gloo's ring needs no driver), their agents re-attach to the next incarnation with
where they stand (:class:`pb.Resume`), and it adopts those that train: it offers Horovod only them until their ring
has re-formed around its own rendezvous (``Reform``: the new environment, applied at their next commit), so rank 0
is a worker holding the committed state, never a fresh joiner; then warm joiners are admitted as usual. A driver
loss costs no committed step.

Failures are explained: the first failed training processes are kept with the last lines of their stderr
(:class:`pb.WorkerFailure`) and shown by ``submarine job show``. Before the ring has formed, one failed training
process, or one that finished without ever calling ``hvd.init()``, fails the job at once with its reason (start-up
failures repeat in every relaunch). The driver's exit 0, once it concluded the job, ends the YARN service (the
component reports its state as the service's); its last stderr line and the outcome record give the reason.
"""

from __future__ import annotations

import logging
import os
import socket
import sys

from submarine_elastic import env
from submarine_elastic.elastic.jobdriver import JobDriver
from submarine_elastic.elastic.ringhost import gloo_endpoint
from submarine_elastic.protocol.api import BatchLimits, GlooInterfaceError, JobPhase, Limits
from submarine_elastic.rpc import ServerTls
from submarine_elastic.yarn import YarnError, YarnServiceClient

log = logging.getLogger("submarine_elastic.driver")


def application_of(container_id: str) -> str:
    """The YARN application id of a container id (``container_e01_1700000000000_0001_01_000002`` ->
    ``application_1700000000000_0001``); '' when it is not one."""
    parts = container_id.split("_")
    if len(parts) > 1 and parts[1].startswith("e"):
        del parts[1]
    return f"application_{parts[1]}_{parts[2]}" if len(parts) >= 5 and parts[0] == "container" else ""


def advertised_host() -> str:
    """The address YARN reports for this container, which the job's clients dial: the one this host's name
    resolves to (how a NodeManager without Docker finds a container's IP)."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def control_plane_problem(token: str | None, tls: ServerTls | None, insecure: bool) -> str | None:
    """Why the driver must not serve (no token, or no TLS, without ``--insecure``); None when it may."""
    if insecure:
        return None
    if token is None:
        return (
            "no job token (SUBMARINE_JOB_TOKEN or SUBMARINE_JOB_TOKEN_FILE): refusing to open the control plane "
            "to anyone; `submarine job run` sets one, SUBMARINE_INSECURE=1 (job run --insecure) allows it"
        )
    if tls is None:
        return (
            "no TLS certificate (SUBMARINE_DRIVER_TLS_CERT_FILE/KEY_FILE): refusing to serve the control plane "
            "in plaintext; `submarine job run` issues one, SUBMARINE_INSECURE=1 (job run --insecure) allows it"
        )
    return None


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s driver %(levelname)s %(message)s")
    s = env.settings()
    job, port, rm = s.job_id, s.driver_port, s.rm_url
    if not job or not port or not rm:
        log.error("SUBMARINE_JOB_ID, SUBMARINE_DRIVER_PORT and SUBMARINE_RM_URL must be set")
        return 2
    try:
        num, lo, hi = s.worker_limits()
        batch = s.batch_limits()
        batch_limits = BatchLimits(*batch) if batch is not None else None
    except ValueError as exc:
        log.error("the job's worker or batch limits: %s", exc)
        return 2
    try:
        timeout = s.horovod_elastic_timeout
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    try:
        token, pair, client_ca, insecure = (
            s.read_job_token(),
            s.read_driver_tls(),
            s.read_driver_tls_client_ca(),
            s.insecure,
        )
    except (ValueError, OSError) as exc:
        log.error("cannot read the job's token or TLS files: %s", exc)
        return 2
    tls = None if pair is None else ServerTls(cert=pair[0], key=pair[1], client_ca=client_ca)
    if (problem := control_plane_problem(token, tls, insecure)) is not None:
        log.error("%s", problem)
        return 2
    host = advertised_host()
    try:
        iface, rendezvous = gloo_endpoint(host, s.gloo_iface)
    except (GlooInterfaceError, OSError) as exc:
        log.error("cannot choose the interface of Horovod's rendezvous and Gloo: %s", exc)
        return 2
    log.info("Horovod's rendezvous on %s, Gloo on interface %s", rendezvous, iface)
    container_id = s.container_id or ""
    app = application_of(container_id)
    try:
        # SUBMARINE_YARN_AUTH; with kerberos, a login from the keytab job run localized (SUBMARINE_YARN_KEYTAB)
        # into a credentials cache of this process's own.
        yarn = YarnServiceClient(rm, auth=s.yarn_auth, keytab=s.yarn_keytab, principal=s.yarn_principal)
    except (ValueError, YarnError) as exc:
        log.error("cannot authenticate to the ResourceManager at %s: %s", rm, exc)
        return 2
    with yarn:
        driver = JobDriver(
            job,
            Limits(num, lo, hi),
            yarn,
            token,
            iface,
            timeout,
            state_file=s.state_file(),
            app=app,
            container_id=container_id,
            batch_limits=batch_limits,
            queue=s.queue,
        )
        rc = driver.run(port, tls, host=host)
    # A job that ended (finished or failed, its outcome recorded) exits 0: with the driver's restart policy
    # (ON_FAILURE) that ends the service; any other exit of the driver is a crash that YARN relaunches.
    return 0 if driver.phase in (JobPhase.FINISHED, JobPhase.FAILED) else rc


if __name__ == "__main__":
    code = main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    # Horovod's driver and the gRPC server leave non-daemon threads behind; the job ends with the driver.
    os._exit(code)
