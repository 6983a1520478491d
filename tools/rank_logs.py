"""The logs of every node of one multi-node launch as one piece of evidence.

Each node rank writes its own log; `MergedLog` also writes their lines into one file in the order they
arrived, with a `[rank N]` line before each run of lines from another node (as `srun --label` or
`kubectl logs` of several pods would show them). Time order is what makes it evidence: the node that failed
first prints its error before the others print theirs (`Connection reset by peer`, a store timeout), so the
root-cause reader, which takes the last error before the first launch-ending line, finds the cause and not
its echo. A log record (a logger line and the traceback lines under it) is written whole, never cut by
another node's line, in the order its first line arrived.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from specdoctor.tools.log_stages import split_prefix

HOLD_S = 0.1
"""How long a node's last record is held for more of its lines before it is written."""


def rank_marker(rank: int) -> str:
    """The line that opens a run of node `rank`'s lines in the merged log."""
    return f"[rank {rank}]"


class _Record:
    """A logger line and the lines under it (a traceback), from one node rank."""

    def __init__(self, rank: int, line: str) -> None:
        self.rank, self.lines = rank, [line]


class MergedLog:
    """Every node rank's output in one owner-only file; feed it with `feeder(rank)`, end it with `close()`.

    Records are written in the order their first lines arrived; a record is written once it is complete:
    its node printed the next record, or nothing for `hold_s`."""

    def __init__(self, path: Path, hold_s: float = HOLD_S) -> None:
        self.path = Path(path)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.fchmod(fd, 0o600)
        self._file = os.fdopen(fd, "a", encoding="utf-8", errors="replace")
        self._hold_s = hold_s
        self._queue: list[_Record] = []
        self._open: dict[int, _Record] = {}
        """Each node's latest record, while lines may still be added to it."""
        self._last_line_at: dict[int, float] = {}
        self._last_rank: int | None = None
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._ticker = threading.Thread(target=self._tick, name="merged-log", daemon=True)
        self._ticker.start()

    def feeder(self, rank: int) -> Callable[[str], None]:
        """The line callback for node `rank`'s output."""
        return lambda line: self._add(rank, line)

    def _add(self, rank: int, line: str) -> None:
        with self._lock:
            if self._closed.is_set():
                return
            record = self._open.get(rank)
            if record is None or split_prefix(line)[0]:  # a logger line opens the next record
                self._open[rank] = _Record(rank, line)
                self._queue.append(self._open[rank])
            else:
                record.lines.append(line)
            self._last_line_at[rank] = time.monotonic()
            self._drain(time.monotonic())

    def _complete(self, record: _Record, now: float) -> bool:
        if self._open.get(record.rank) is not record:
            return True
        return now - self._last_line_at[record.rank] >= self._hold_s

    def _drain(self, now: float, everything: bool = False) -> None:
        while self._queue and (everything or self._complete(self._queue[0], now)):
            record = self._queue.pop(0)
            if self._open.get(record.rank) is record:
                del self._open[record.rank]
            if record.rank != self._last_rank:
                self._file.write(rank_marker(record.rank) + "\n")
                self._last_rank = record.rank
            self._file.write("".join(f"{line}\n" for line in record.lines))
        self._file.flush()

    def _tick(self) -> None:
        while not self._closed.wait(self._hold_s / 2):
            with self._lock:
                if not self._closed.is_set():
                    self._drain(time.monotonic())

    def flush(self) -> None:
        """Write every record so far (call once the nodes' output has ended)."""
        with self._lock:
            if not self._closed.is_set():
                self._drain(time.monotonic(), everything=True)

    def close(self) -> None:
        with self._lock:
            if self._closed.is_set():
                return
            self._drain(time.monotonic(), everything=True)
            self._closed.set()
            self._file.close()
        self._ticker.join(1.0)
