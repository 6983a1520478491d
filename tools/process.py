"""Running the engine: one launch, its output teed to a log, and a stop that leaves nothing of it behind.

SGLang starts `sglang::scheduler` and `sglang::detokenizer` children; a SIGKILL of the launcher alone
leaves them running and holding GPU memory, while a SIGTERM to the launcher ends them cleanly. So a
launch runs in its own session and is always stopped as a whole tree: SIGTERM to the launcher, SIGTERM
to whatever outlives it, SIGKILL to all after a grace period, then a check of /proc that nothing is
left (see `specdoctor.tools.reaper` for how the tree is found, even children that left the process group).
Whatever ends specdoctor, the engine goes too:

* normal exit or an uncaught exception: the `with` block and an `atexit` hook stop every live launch;
* SIGTERM / SIGHUP: `install_signal_handlers()` turns them into `StopRequested`, which unwinds the same way;
* SIGKILL of specdoctor (no Python code runs): a watchdog process, `tools/reaper.py`, started before the
  engine in a session of its own, sees its stdin pipe from specdoctor close and stops the engine.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import FrameType, TracebackType
from typing import BinaryIO

from pydantic import BaseModel, ConfigDict, Field

from specdoctor.tools import reaper
from specdoctor.tools.detached import Launched
from specdoctor.tools.reaper import MARKER_VARIABLE, EngineIdentity, Proc, find_engine, read_proc, stop_tree
from specdoctor.tools.redact import LogRedactor

__all__ = [
    "DEFAULT_GRACE_S",
    "EngineLeftRunning",
    "EngineProcess",
    "EngineStartError",
    "LineCallback",
    "ProcessRef",
    "StopRequested",
    "StopResult",
    "install_signal_handlers",
]

LineCallback = Callable[[str], None]
"""Called from the reader thread with each output line (decoded, newline stripped); keep it quick."""

DEFAULT_GRACE_S = 10.0
_SNAPSHOT_S = 0.5
_MAX_LINE_BYTES = 256 * 1024
_JOIN_S = 2.0
_log = logging.getLogger(__name__)


class EngineStartError(RuntimeError):
    """The engine could not be started at all; the message says why and what to do."""


class EngineLeftRunning(RuntimeError):
    """Processes of a launch survived SIGKILL (e.g. stuck in the GPU driver); the message names them."""


class StopRequested(SystemExit):
    """Raised in the main thread on SIGTERM/SIGHUP after `install_signal_handlers()`; exits 128 + signum."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum


class ProcessRef(BaseModel):
    """One process of an engine launch."""

    model_config = ConfigDict(frozen=True)

    pid: int = Field(description="Process id.")
    name: str = Field(
        description="Command name from /proc/<pid>/stat, cut to 15 characters, e.g. 'sglang::schedul'."
    )
    pgid: int = Field(description="Process group; differs from the launch's when a child left the group.")

    @classmethod
    def of(cls, proc: Proc) -> ProcessRef:
        return cls(pid=proc.pid, name=proc.name, pgid=proc.pgid)


class StopResult(BaseModel):
    """What `EngineProcess.stop` did and whether anything of the launch is still running."""

    model_config = ConfigDict(frozen=True)

    pid: int = Field(description="Pid of the launcher (the process group leader).")
    exit_code: int | None = Field(
        description="Launcher exit status; negative means killed by that signal; None if it could not be reaped."
    )
    stopped: tuple[ProcessRef, ...] = Field(
        description="Every process of the launch seen running during the stop."
    )
    terminated: tuple[ProcessRef, ...] = Field(
        description="Processes sent SIGTERM: the launcher, and what outlived it (its children end with it)."
    )
    killed: tuple[ProcessRef, ...] = Field(
        description="Processes still alive after the grace period: SIGKILLed."
    )
    survivors: tuple[ProcessRef, ...] = Field(
        description="Processes alive even after SIGKILL; should be empty."
    )
    elapsed_s: float = Field(description="Seconds the stop took.")
    message: str = Field(description="One line for a person.")

    @property
    def clean(self) -> bool:
        return not self.survivors


class EngineProcess:
    """One running engine launch. Create it with `EngineProcess.start(...)`, end it with `stop()`."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        watchdog: subprocess.Popen[bytes],
        log_file: BinaryIO,
        log_path: Path,
        engine_id: str,
        tail_lines: int,
        on_line: Iterable[LineCallback],
        follow_from: int | None = None,
    ) -> None:
        self._popen = popen
        self._follow_from = follow_from
        self._detached = threading.Event()
        self._watchdog = watchdog
        self._log_file: BinaryIO | None = log_file
        self.log_path = log_path
        self.engine_id = engine_id
        leader = read_proc(popen.pid)
        self._identity = EngineIdentity(popen.pid, leader.start_time if leader else 0, engine_id)
        self._known: set[tuple[int, int]] = set()
        self._lock = threading.RLock()
        self._stop_lock = threading.Lock()
        self._stopping = threading.Event()
        self._tail: deque[str] = deque(maxlen=tail_lines)
        self._redactor = LogRedactor()
        self._subscribers: list[LineCallback] = list(on_line)
        self._lines_seen = 0
        self._last_output_at: float | None = None
        self.log_error: str | None = None
        self._tell_watchdog(f"engine {self._identity.pgid} {self._identity.leader_start}\n")
        reader = self._read if follow_from is None else self._follow
        self._reader = threading.Thread(target=reader, name=f"engine-{popen.pid}-reader", daemon=True)
        self._watcher = threading.Thread(target=self._watch, name=f"engine-{popen.pid}-watch", daemon=True)
        self._reader.start()
        self._watcher.start()
        with _live_lock:
            _live.add(self)

    @classmethod
    def start(
        cls,
        argv: Sequence[str],
        env: Mapping[str, str],
        log_path: Path,
        cwd: Path | None = None,
        tail_lines: int = 2000,
        on_line: Iterable[LineCallback] = (),
        to_file: bool = False,
    ) -> EngineProcess:
        """Start `argv` (no shell) with exactly `env` (plus the launch marker), teeing output to `log_path`.

        `on_line` callbacks are registered before the first line is read, so they see every line; they and
        the log get each line with its secrets masked (the server_args dump names the API key). The log is
        created owner-only either way.
        `to_file`: the engine writes its output straight into the log (read back by following the file),
        so it can outlive specdoctor after `detach()`; otherwise it writes into a pipe we drain. Only the
        lines published are masked then: the file holds what the engine wrote.
        """
        if not argv:
            raise EngineStartError("no engine command to run: the argv is empty")
        log_path = Path(log_path)
        try:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            log_file = _open_private(log_path)
        except OSError as exc:
            raise EngineStartError(
                f"cannot write the engine log {log_path}: {exc.strerror}; choose a writable log directory"
            ) from exc
        engine_id = uuid.uuid4().hex
        watchdog = _start_watchdog(engine_id, log_file)
        try:
            start_offset = log_path.stat().st_size
            popen = subprocess.Popen(
                list(argv),
                env={**env, MARKER_VARIABLE: engine_id},
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=log_file if to_file else subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            _release_watchdog(watchdog)
            log_file.close()
            raise EngineStartError(_start_failure(argv[0], cwd, exc)) from exc
        return cls(
            popen,
            watchdog,
            log_file,
            log_path,
            engine_id,
            tail_lines,
            on_line,
            follow_from=start_offset if to_file else None,
        )

    # -- state -------------------------------------------------------------------------------------

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def pgid(self) -> int:
        # start_new_session makes the launcher the leader of a new group with its own pid.
        return self._popen.pid

    @property
    def identity(self) -> EngineIdentity:
        """What names this launch once specdoctor is gone: its group, the leader's start time, its marker."""
        return self._identity

    @property
    def watchdog_pid(self) -> int:
        return self._watchdog.pid

    def poll(self) -> int | None:
        return self._popen.poll()

    def wait(self, timeout: float | None = None) -> int | None:
        """The launcher's exit status, or None if it is still running after `timeout` seconds."""
        try:
            return self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def tail(self) -> list[str]:
        with self._lock:
            return list(self._tail)

    @property
    def lines_seen(self) -> int:
        return self._lines_seen

    @property
    def last_output_at(self) -> float | None:
        """`time.monotonic()` of the last output line, None before the first."""
        return self._last_output_at

    def subscribe(self, on_line: LineCallback, replay: bool = False) -> Callable[[], None]:
        """Call `on_line` for each new line (after the kept tail, if `replay`); returns an unsubscribe."""
        with self._lock:
            if replay:
                for line in self._tail:
                    on_line(line)
            self._subscribers.append(on_line)

        def unsubscribe() -> None:
            with self._lock:
                if on_line in self._subscribers:
                    self._subscribers.remove(on_line)

        return unsubscribe

    def processes(self) -> list[ProcessRef]:
        """Live processes of this launch, including children that left its process group."""
        with self._lock:
            known = set(self._known)
        return [ProcessRef.of(p) for p in find_engine(self._identity, known)]

    # -- stopping ----------------------------------------------------------------------------------

    def stop(self, grace_s: float = DEFAULT_GRACE_S) -> StopResult:
        """SIGTERM the launcher, then whatever of the launch outlives it; SIGKILL all after `grace_s`.

        Then reap the launcher and confirm in /proc that nothing of the launch is left. Call it after a
        crash too: a launcher that died first can leave its scheduler running (see `specdoctor.tools.reaper`).
        """
        with self._stop_lock:
            began = time.monotonic()
            self._stopping.set()
            # Snapshot descendants before signalling: once parents die their children lose the link.
            known = self._snapshot()
            unreaped = self._popen.returncode is None
            leader = (self._identity.pgid, self._identity.leader_start)
            tree = stop_tree(
                lambda: find_engine(self._identity, known), grace_s, leader, self.pgid if unreaped else None
            )
            exit_code = self.wait(_JOIN_S)
            self._join_threads()
            if not tree.survivors:
                self._tell_watchdog("release\n")
            _release_watchdog(self._watchdog)
            with _live_lock:
                _live.discard(self)
            elapsed = time.monotonic() - began
            return StopResult(
                pid=self.pid,
                exit_code=exit_code,
                stopped=tuple(ProcessRef.of(p) for p in tree.found),
                terminated=tuple(ProcessRef.of(p) for p in tree.terminated),
                killed=tuple(ProcessRef.of(p) for p in tree.killed),
                survivors=tuple(ProcessRef.of(p) for p in tree.survivors),
                elapsed_s=round(elapsed, 3),
                message=_stop_message(self.pid, tree, grace_s, elapsed),
            )

    def __enter__(self) -> EngineProcess:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        result = self.stop()
        if result.survivors and exc_type is None:
            raise EngineLeftRunning(result.message)

    # -- threads -----------------------------------------------------------------------------------

    def _read(self) -> None:
        stream = self._popen.stdout
        assert stream is not None
        try:
            while raw := stream.readline(_MAX_LINE_BYTES):
                line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                shown = self._redactor.line(line)
                # Bytes that needed no mask are kept exactly, undecodable ones included.
                self._write_log(raw if shown == line else shown.encode() + raw[len(raw.rstrip(b"\r\n")) :])
                self._publish(shown)
        finally:
            stream.close()
            if self._log_file is not None:
                self._log_file.close()
                self._log_file = None

    def _follow(self) -> None:
        """Read the engine's own writes to the log file back, like `tail -f`, until it exits (or detach)."""
        assert self._follow_from is not None
        if self._log_file is not None:
            self._log_file.close()  # the engine holds its own descriptor
            self._log_file = None
        with open(self.log_path, "rb") as f:
            f.seek(self._follow_from)
            pending, exited = b"", False
            while not self._detached.is_set():
                chunk = f.readline(_MAX_LINE_BYTES)
                if chunk:
                    pending += chunk
                    if pending.endswith(b"\n") or len(pending) >= _MAX_LINE_BYTES:
                        self._publish(self._redacted(pending))
                        pending = b""
                    continue
                if exited:  # it had exited before this EOF, so its last line has been read
                    if pending:
                        self._publish(self._redacted(pending))
                    return
                exited = self._popen.poll() is not None
                if not exited:
                    time.sleep(0.05)

    def _redacted(self, raw: bytes) -> str:
        return self._redactor.line(raw.decode("utf-8", errors="replace").rstrip("\r\n"))

    def launches(self) -> list[Launched]:
        identity = self._identity
        return [
            Launched(
                pid=self.pid,
                pgid=identity.pgid,
                start_time=identity.leader_start,
                engine_id=identity.marker,
                log_path=str(self.log_path),
            )
        ]

    def detach(self) -> None:
        """Leave the engine running on its own (it must have been started `to_file`): stop following its
        log, release the watchdog so it does not stop the engine when specdoctor exits."""
        if self._follow_from is None:
            raise RuntimeError(
                "only an engine started with to_file=True can be detached (its output would go to a closed pipe)"
            )
        self._detached.set()
        self._stopping.set()
        self._tell_watchdog("release\n")
        _release_watchdog(self._watchdog)
        self._join_threads()
        with _live_lock:
            _live.discard(self)

    def _write_log(self, raw: bytes) -> None:
        if self._log_file is None:
            return
        try:
            self._log_file.write(raw)
        except OSError as exc:
            # Keep draining the pipe regardless: a full pipe would block the engine.
            self.log_error = (
                f"writing {self.log_path} failed ({exc.strerror}); later output is only in memory"
            )
            self._log_file.close()
            self._log_file = None

    def _publish(self, line: str) -> None:
        with self._lock:
            self._tail.append(line)
            self._lines_seen += 1
            self._last_output_at = time.monotonic()
            for callback in list(self._subscribers):
                try:
                    callback(line)
                except Exception:
                    _log.exception("engine output subscriber %r failed; it is dropped", callback)
                    self._subscribers.remove(callback)

    def _watch(self) -> None:
        while not self._stopping.wait(_SNAPSHOT_S):
            if not self._snapshot():
                return

    def _snapshot(self) -> set[tuple[int, int]]:
        with self._lock:
            known = set(self._known)
        found = {p.key for p in find_engine(self._identity, known)}
        with self._lock:
            self._known = found
        return found

    def _join_threads(self) -> None:
        for thread in (self._reader, self._watcher):
            if thread is not threading.current_thread():
                thread.join(_JOIN_S)

    def _tell_watchdog(self, message: str) -> None:
        stdin = self._watchdog.stdin
        if stdin is None or stdin.closed:
            return
        try:
            stdin.write(message.encode("ascii"))
            stdin.flush()
        except (BrokenPipeError, ValueError):
            # The watchdog already exited because the engine was gone.
            pass


# -- starting and releasing the watchdog -----------------------------------------------------------


def _open_private(path: Path) -> BinaryIO:
    """The log opened for appending, readable by its owner only: it holds the command's arguments."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.fchmod(fd, 0o600)  # an older log of the same name may have been made readable by all
        return os.fdopen(fd, "ab", buffering=0)
    except BaseException:
        os.close(fd)
        raise


def _start_watchdog(engine_id: str, log_file: BinaryIO) -> subprocess.Popen[bytes]:
    try:
        return subprocess.Popen(
            [
                sys.executable,
                "-I",
                "-S",
                reaper.__file__,
                "--marker",
                engine_id,
                "--grace",
                str(DEFAULT_GRACE_S),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=log_file,
            start_new_session=True,
        )
    except OSError as exc:
        log_file.close()
        raise EngineStartError(
            f"cannot start the engine watchdog ({sys.executable} {reaper.__file__}): {exc.strerror}"
        ) from exc


def _release_watchdog(watchdog: subprocess.Popen[bytes]) -> None:
    if watchdog.stdin is not None and not watchdog.stdin.closed:
        with contextlib.suppress(BrokenPipeError):
            watchdog.stdin.close()
    # On timeout it is still stopping leftovers on its own; Popen reaps it later.
    with contextlib.suppress(subprocess.TimeoutExpired):
        watchdog.wait(_JOIN_S)


def _start_failure(program: str, cwd: Path | None, exc: OSError) -> str:
    if isinstance(exc, FileNotFoundError) and cwd is not None and not Path(cwd).is_dir():
        return f"cannot start the engine: working directory {cwd} does not exist"
    if isinstance(exc, FileNotFoundError):
        return f"cannot start the engine: {program!r} was not found; install it or give its full path"
    if isinstance(exc, PermissionError):
        return f"cannot start the engine: {program!r} is not executable; check its path and permissions"
    return f"cannot start the engine {program!r}: {exc.strerror or exc}"


def _stop_message(pid: int, tree: reaper.TreeStop, grace_s: float, elapsed: float) -> str:
    if tree.survivors:
        listed = ", ".join(f"{p.pid} ({p.name})" for p in tree.survivors)
        return (
            f"engine pid {pid}: {len(tree.survivors)} process(es) survived SIGKILL: {listed}; they may hold "
            f"GPU memory: check nvidia-smi and end them by hand"
        )
    if not tree.found:
        return f"engine pid {pid} had already exited; nothing of it was left running"
    text = (
        f"engine pid {pid} stopped in {elapsed:.1f} s: {len(tree.found)} process(es) ended, "
        f"{len(tree.terminated)} sent SIGTERM"
    )
    if tree.killed:
        text += f", {len(tree.killed)} still running after {grace_s:g} s were SIGKILLed"
    return text


# -- whole-program safety nets ---------------------------------------------------------------------

_live: set[EngineProcess] = set()
_live_lock = threading.Lock()
_stop_signal_seen = threading.Event()
_interrupt_seen = threading.Event()


@atexit.register
def _stop_live_engines() -> None:
    with _live_lock:
        engines = list(_live)
    for engine in engines:
        engine.stop()


def install_signal_handlers(signals: Sequence[int] = (signal.SIGTERM, signal.SIGHUP)) -> None:
    """Make SIGTERM/SIGHUP raise `StopRequested` in the main thread, so `with` blocks and atexit stop engines.

    Call it once from the main thread. Later signals are ignored while the first one unwinds, so a second
    SIGTERM cannot cut a stop short.
    """
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("install_signal_handlers() must be called from the main thread")
    for signum in signals:
        signal.signal(signum, _on_stop_signal)
    signal.signal(signal.SIGINT, _on_interrupt)


def interrupt_requested() -> bool:
    """A person pressed Ctrl-C or a stop signal came. A library may turn the exception that signal raised
    into one of its own (pydantic wraps a KeyboardInterrupt that lands inside a schema build in a
    SchemaError): the exception is then still the interrupt, only disguised."""
    return _stop_signal_seen.is_set() or _interrupt_seen.is_set()


def _on_interrupt(signum: int, frame: FrameType | None) -> None:
    _interrupt_seen.set()
    raise KeyboardInterrupt


def _on_stop_signal(signum: int, frame: FrameType | None) -> None:
    if _stop_signal_seen.is_set():
        return
    _stop_signal_seen.set()
    raise StopRequested(signum)
