"""A controller round's act phase: what the step returned, carried out.

:func:`carry` applies what following a job came to (:class:`~.book.Follow`): to the job's entry, and, when the
entry still held what the step read, to the SQLite store. :class:`Sender` sends each recorded decision to its
job's driver in the background, through at most :data:`SENDERS` threads (a replacement on a thread of its own),
then follows it once (:func:`.step.check`); a decision the driver does not take fails, and its job's target goes
back to what it was until the driver's is read again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from submarine_elastic.controller.api import DecisionState, JobBackend
from submarine_elastic.controller.book import Converging, Follow, JobBook
from submarine_elastic.controller.step import Send, check
from submarine_elastic.controller.store import ControllerStore
from submarine_elastic.protocol.proto import elastic_pb2 as pb

log = logging.getLogger(__name__)

#: Threads that send decisions to the jobs' drivers, at most, whatever a round decides: a round that resizes
#: 500 jobs queues its flex calls rather than starting 500 threads (0.2-0.4 s of thread starts). A flex call
#: ends within its deadline (3 s, 2 s more to locate the driver), so a driver that does not answer holds one
#: sender that long. A replacement waits for the ring to re-form (up to ``stall_after``): it has a thread of its
#: own, so that replacements never hold the senders (one per job at a time).
SENDERS = 16


def carry(store: ControllerStore, book: JobBook, followed: Follow) -> bool:
    """Apply ``followed`` to its job's entry and, if the entry still held the decision it read, to the store;
    whether it did."""
    if not book.follow(followed):
        return False
    if followed.changes:
        store.update_job(followed.job_id, **followed.changes)
    if followed.was is not None:
        if followed.finish is not None:
            store.finish_decision(followed.was.decision_id, *followed.finish)
        if followed.progress is not None:
            why, stalled = followed.progress
            store.note_progress(followed.was.decision_id, why, stalled=stalled)
    return True


class Sender:
    """Sends recorded decisions to the jobs' drivers.

    Args:
        backend, store, book: the cluster, the SQLite state, the jobs' entries.
        stall_after: the bound of a replacement's steps, and of a decision's converging.
        clock: wall-clock seconds.
        wake: called once a send has ended (the next round follows it at once).
    """

    def __init__(
        self,
        backend: JobBackend,
        store: ControllerStore,
        book: JobBook,
        *,
        stall_after: float,
        clock: Callable[[], float],
        wake: Callable[[], None],
    ) -> None:
        self.backend, self.store, self.book = backend, store, book
        self.stall_after, self.clock, self.wake = stall_after, clock, wake
        self._pool = ThreadPoolExecutor(max_workers=SENDERS, thread_name_prefix="resize")

    def stop(self) -> None:
        """Decisions queued for a sender are dropped (recorded, never sent); those being sent end within their
        deadline."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def send(self, decision_id: int, send: Send) -> None:
        """Send the recorded decision ``send`` in the background, and follow it as a decision of its job's run."""
        job_id = send.record.job_id
        done = self.book.start_send(job_id, Converging(decision_id, send.record, send.run, send.restarts_cooldown))

        def run() -> None:
            try:
                self._deliver(send)
            except Exception as exc:  # noqa: BLE001 - recorded as the decision's error, the loop goes on
                log.warning("resize of %s to %d failed: %s", job_id, send.record.to_workers, exc)
                self.book.send_failed(job_id)
                self.store.finish_decision(decision_id, DecisionState.FAILED, str(exc) or type(exc).__name__)
                self.store.update_job(job_id, target=send.previous_target)
            else:
                try:
                    self._check(job_id)
                except Exception:  # noqa: BLE001 - the next round reads it again
                    log.exception("cannot follow the resize of %s; the next round reads it again", job_id)
            finally:
                self.book.send_ended(job_id, done)
                self.wake()

        if send.replace:
            threading.Thread(target=run, daemon=True, name=f"replace-{job_id}").start()
            return
        try:
            queued = self._pool.submit(run)
        except RuntimeError:  # stopped already (a round that outlived stop()'s wait): recorded, never sent
            self.book.send_ended(job_id, done)
            return
        queued.add_done_callback(lambda future: self.book.send_ended(job_id, done) if future.cancelled() else None)

    def _deliver(self, send: Send) -> None:
        job_id = send.record.job_id
        if send.replace:
            self.backend.replace(job_id, send.replace, self.stall_after)
            return
        target = pb.Target(workers=send.record.to_workers, reason=send.record.reason)
        if send.batch is not None:
            target.MergeFrom(send.batch)
        self.backend.set_target(job_id, target)
        if send.batch is not None:
            self.book.sent_batch(job_id, send.batch)

    def _check(self, job_id: str) -> None:
        converging = self.book.converging(job_id)
        if converging is None:
            return
        status = self.backend.status(job_id)
        followed = check(job_id, converging, status.size if status else None, self.clock(), self.stall_after)
        if followed is not None:
            carry(self.store, self.book, followed)
