"""Reading a file someone named (a config.json, a log, a catalog, a playbook, a transcript, a case, a saved
nvidia-smi output): only a regular file, only up to a size fit for what it is, never blocking.

A path can be a symlink to /dev/zero (an endless read), a FIFO (an open that never returns) or a 50 GB
file; each of those must end in one line saying so, not in a hang or an out-of-memory kill. So the path
is checked with `os.stat` before it is opened (opening some devices has effects of its own), opened with
O_NONBLOCK (a FIFO swapped in after the check then cannot block the open) and checked again on the open
descriptor, and read no further than its cap, even if it grows meanwhile.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from typing import BinaryIO

from specdoctor.tools.errors import UsageError

__all__ = ["MiB", "UnreadableFile", "head_bytes", "open_regular", "read_bytes", "read_text"]

MiB = 1 << 20
_READ_CHUNK = 1 << 20


class UnreadableFile(UsageError):
    """A file that cannot or must not be read; `reason` says which (`str()` is the whole line)."""

    def __init__(self, what: str, path: str | os.PathLike[str], reason: str) -> None:
        self.what, self.path, self.reason = what, str(path), reason
        super().__init__(f"cannot read {what} {path}: {reason}")


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _size(n: int) -> str:
    return f"{n / MiB:.1f} MiB" if n >= MiB else f"{n} bytes"


def _checked_fd(path: str | os.PathLike[str], what: str, max_bytes: int | None) -> int:
    """An open descriptor of the regular file at `path` (symlinks followed), within `max_bytes`."""
    try:
        before = os.stat(path)
        if not stat.S_ISREG(before.st_mode):
            raise UnreadableFile(what, path, f"it is {_kind(before.st_mode)}, not a regular file")
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | os.O_CLOEXEC)
    except OSError as exc:
        raise UnreadableFile(what, path, (exc.strerror or str(exc)).lower()) from None
    try:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode):
            raise UnreadableFile(what, path, f"it is {_kind(now.st_mode)}, not a regular file")
        if max_bytes is not None and now.st_size > max_bytes:
            raise UnreadableFile(
                what, path, f"it is {_size(now.st_size)}, more than the {_size(max_bytes)} a {what} may be"
            )
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def open_regular(path: str | os.PathLike[str], what: str) -> Iterator[BinaryIO]:
    """The regular file at `path`, opened for binary reading, for callers that stream it (logs)."""
    fd = _checked_fd(path, what, None)
    with os.fdopen(fd, "rb") as f:
        yield f


def read_bytes(path: str | os.PathLike[str], what: str, max_bytes: int) -> bytes:
    """All of the regular file at `path`, refused when it is (or grows) past `max_bytes`."""
    fd = _checked_fd(path, what, max_bytes)
    chunks: list[bytes] = []
    total = 0
    with os.fdopen(fd, "rb") as f:
        while chunk := f.read(min(_READ_CHUNK, max_bytes + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise UnreadableFile(what, path, f"it grew past the {_size(max_bytes)} a {what} may be")
    return b"".join(chunks)


def read_text(path: str | os.PathLike[str], what: str, max_bytes: int, errors: str = "strict") -> str:
    """Like read_bytes, decoded as UTF-8; undecodable bytes are refused unless `errors` says otherwise."""
    data = read_bytes(path, what, max_bytes)
    if errors == "strict" and b"\0" in data:
        raise UnreadableFile(what, path, "it is binary (it holds NUL bytes), not text")
    try:
        return data.decode("utf-8", errors=errors)
    except UnicodeDecodeError as exc:
        raise UnreadableFile(
            what, path, f"it is not UTF-8 text (byte {exc.start} cannot be decoded): a binary file?"
        ) from None


def head_bytes(path: str | os.PathLike[str], what: str, n: int) -> bytes:
    """At most the first `n` bytes of the regular file at `path`, whatever its size."""
    fd = _checked_fd(path, what, None)
    with os.fdopen(fd, "rb") as f:
        return f.read(n)
