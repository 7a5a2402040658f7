"""What the Keras callback and the SessionRunHook share: settings, sink, ring, failure handling."""

from __future__ import annotations

import logging
from collections.abc import Callable

from tf_hooks._horovod import horovod_ring
from tf_hooks.api import MetricsSink, SenderStats, resolve
from tf_hooks.config import HOOK_ONLY_OPTIONS, MetricsConfig, ReportingOptions
from tf_hooks.sender import make_sink


class ReportingHook:
    """Mixed into both hooks; never raises into the training loop."""

    config: MetricsConfig
    sink: MetricsSink
    errors: int

    def _init_reporting(self, options: ReportingOptions) -> None:
        """Settings not given come from the environment; starts the sender when there is an endpoint.

        Raises:
            MetricsConfigError: a setting is unusable (names it).
        """
        sink = options.get("sink")
        self._batch_size = options.get("batch_size")
        self._rank_arg = options.get("rank")
        self._world_size_arg = options.get("world_size")
        self._noise = options.get("gradient_noise")
        connection = {k: v for k, v in options.items() if k not in HOOK_ONLY_OPTIONS}
        self.config = MetricsConfig.from_env(**connection)  # type: ignore[arg-type]
        self.sink = sink if sink is not None else make_sink(self.config)
        self.errors = 0

    def close(self, timeout: float | None = None) -> SenderStats:
        """Flushes for up to ``timeout`` seconds (default ``close_timeout``) and stops the sender.

        Blocks at most that long (plus channel teardown). Never raises.
        """
        return self.sink.close(self.config.close_timeout if timeout is None else timeout)

    def _ring_now(self) -> tuple[int, int, int | None]:
        """(rank, world size, batch size) now: the arguments, else Horovod's ring, else 0 and 1."""
        ring = horovod_ring() if self._rank_arg is None or self._world_size_arg is None else None
        default_rank, default_size = ring or (0, 1)
        return (
            resolve(self._rank_arg, default_rank),
            resolve(self._world_size_arg, default_size),
            resolve(self._batch_size, 0) or None,
        )

    def _failed(self, what: str = "failed; training goes on") -> None:
        """Counts a failure and logs it: WARNING the first time, DEBUG after (no flood from a broken hook)."""
        self.errors += 1
        level = logging.WARNING if self.errors == 1 else logging.DEBUG
        logging.getLogger(type(self).__module__).log(level, "%s %s", type(self).__name__, what, exc_info=True)

    def _guard(self, fn: Callable[[], object]) -> None:
        try:
            fn()
        except Exception:  # noqa: BLE001  (_failed logs it with its traceback)
            self._failed()
