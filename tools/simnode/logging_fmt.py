"""SGLang's log lines: `[%Y-%m-%d %H:%M:%S<prefix>] message` on stderr, one write per line.

The prefix is empty in the launcher and for tp 1; scheduler ranks of a tp>1 launch print ` TP<rank>`.
`SGLANG_LOG_MS=1` adds milliseconds, as in SGLang.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import TextIO


class Log:
    def __init__(self, tp_size: int = 1, stream: TextIO | None = None, with_ms: bool | None = None) -> None:
        self.tp_size = tp_size
        self.stream = stream or sys.stderr
        self.with_ms = (
            os.environ.get("SGLANG_LOG_MS", "0") in ("1", "true", "True") if with_ms is None else with_ms
        )
        # Re-entrant: the signal handler runs in the main thread and may log while it holds the lock.
        self._lock = threading.RLock()

    def prefix(self, rank: int | None) -> str:
        return f" TP{rank}" if rank is not None and self.tp_size > 1 else ""

    def stamp(self) -> str:
        now = time.time()
        text = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
        return f"{text}.{int(now * 1000) % 1000:03d}" if self.with_ms else text

    def info(self, message: str, rank: int | None = None) -> None:
        """One logger line; a multi-line message (a traceback) keeps its lines unprefixed, as logging does."""
        self.raw(f"[{self.stamp()}{self.prefix(rank)}] {message}\n")

    def ranks(self, message: str, ranks: range) -> None:
        """The same line from every scheduler rank."""
        for rank in ranks:
            self.info(message, rank)

    def raw(self, text: str) -> None:
        with self._lock:
            self.stream.write(text)
            self.stream.flush()
