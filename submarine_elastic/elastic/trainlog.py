"""Where a training process's output goes: its incarnation's own log file and the agent's streams.

Every incarnation of the training process writes its stdout and stderr to ``training-N.log`` in the container's
first log directory (YARN relaunches a failed agent in the same container and overwrites ``stderr.txt``), and
to the agent's own streams. The last lines of its stderr are kept, to go to the driver when it failed.
"""

from __future__ import annotations

import collections
import sys
import threading
from pathlib import Path
from typing import IO

from submarine_elastic import env

#: Lines of a failed process's stderr sent to the driver, and the most characters they may take.
TAIL_LINES = 30
TAIL_CHARS = 4000
#: The longest piece of a line copied at once (a progress bar may write megabytes without a newline);
#: the kept tail is at most TAIL_LINES of these.
CHUNK_BYTES = 8192


def log_dir() -> Path:
    """The container's first log directory (YARN's ``LOG_DIRS``), else the working directory."""
    dirs = [d for d in (env.settings().log_dirs or "").split(",") if d]
    return Path(dirs[0]) if dirs else Path.cwd()


def next_log_path(directory: Path) -> Path:
    """``training-N.log`` with N one above the highest incarnation already logged in ``directory``."""
    taken = [int(p.stem.split("-", 1)[1]) for p in directory.glob("training-*.log") if p.stem[9:].isdigit()]
    return directory / f"training-{max(taken, default=0) + 1}.log"


class Tee:
    """Copies one stream of the training process to the agent's stream and the incarnation's log,
    keeping its last lines."""

    def __init__(self, source: IO[bytes], sink: IO[bytes], log: IO[bytes], lock: threading.Lock) -> None:
        self.tail: collections.deque[bytes] = collections.deque(maxlen=TAIL_LINES)
        self._source, self._sink, self._log, self._lock = source, sink, log, lock
        self.thread = threading.Thread(target=self._run, daemon=True, name="tee")
        self.thread.start()

    def _run(self) -> None:
        for line in iter(lambda: self._source.readline(CHUNK_BYTES), b""):
            self.tail.append(line)
            with self._lock:
                for out in (self._sink, self._log):
                    try:
                        out.write(line)
                        out.flush()
                    except (OSError, ValueError):
                        pass

    def text(self) -> str:
        text = b"".join(self.tail).decode(errors="replace")
        return text[-TAIL_CHARS:]


class IncarnationLog:
    """One incarnation's output: its log file (opened here, appended to), and a :class:`Tee` for each of its two
    streams into that file and the agent's own stream, both under one lock so their lines do not interleave."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[bytes] = open(path, "ab")  # closed in close()
        self._lock = threading.Lock()
        self._stdout: Tee | None = None
        self._stderr: Tee | None = None

    def follow(self, stdout: IO[bytes], stderr: IO[bytes]) -> None:
        """Starts copying the process's ``stdout`` and ``stderr`` (one thread each, until the stream ends)."""
        self._stdout = Tee(stdout, sys.stdout.buffer, self._file, self._lock)
        self._stderr = Tee(stderr, sys.stderr.buffer, self._file, self._lock)

    def close(self, timeout: float = 5.0) -> None:
        """Waits up to ``timeout`` s for each copy to reach its stream's end, then closes the file."""
        for tee in (self._stdout, self._stderr):
            if tee is not None:
                tee.thread.join(timeout=timeout)
        self._file.close()

    def stderr_tail(self) -> str:
        """The last lines of its stderr (at most :data:`TAIL_CHARS` characters); empty before :meth:`follow`."""
        return self._stderr.text() if self._stderr is not None else ""
