"""Stopping processes we did not start, which hold the GPUs a launch needs. Only with the user's leave
(`deploy --allow-kill`, or a yes at the `fix` prompt), never a process of ours, and only a process that is
provably an inference engine of this user, still the one nvidia-smi listed.

nvidia-smi gives a pid and a name, and the name is whatever the process calls itself: `exec -a python3
sleep 100` lists as `python3`. So before any signal a process must (1) still have the start time it had
when it was listed (a pid reused since is another process), (2) run as our user, and (3) be a Python
interpreter by its executable (`/proc/<pid>/exe`, which a process cannot rename) whose command line runs
SGLang or vLLM (`-m sglang.launch_server`, the `sglang`/`vllm` entry scripts or package files), or carry
the `sglang::`/`VLLM::` title their workers set. The message says what matched, and why anything was spared.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from specdoctor.tools.gpu import GpuProcess
from specdoctor.tools.reaper import Proc, read_proc, stop_tree

__all__ = ["FreedGpus", "Identity", "identify", "terminate_foreign"]

_ENGINES = ("sglang", "vllm")
_WORKER_TITLE = re.compile(r"^(?:sglang::|VLLM::|VllmWorker)\S*")
_PYTHON_EXE = re.compile(r"^python[\w.\-]*(?: \(deleted\))?$")
_VALUE_OPTIONS = frozenset({"-X", "-W", "--check-hash-based-pycs"})
_CMDLINE_MAX_BYTES = 64 << 10


class Identity(BaseModel):
    """Who a listed pid is now, and whether it may be stopped."""

    model_config = ConfigDict(frozen=True)
    pid: int
    name: str = Field(description="Command name from /proc/<pid>/stat (the executable's, not argv[0]).")
    start_time: int = Field(description="Clock ticks after boot; with the pid, names the process.")
    uid: int | None = Field(description="Real uid; None where /proc does not say.")
    exe: str | None = Field(description="The executable; None where we may not see it.")
    argv: tuple[str, ...] = ()
    matched: str | None = Field(None, description="What made it an engine, e.g. `-m sglang.launch_server`.")
    refusal: str | None = Field(None, description="Why it is not stopped; None: it may be.")

    def label(self) -> str:
        shown = self.argv[0] if self.argv else self.name
        return f"{self.pid} ({self.name})" if shown == self.name else f"{self.pid} ({self.name} as {shown!r})"


class FreedGpus(BaseModel):
    """What `--allow-kill` did: the pids stopped, and one line saying what matched and what was spared."""

    model_config = ConfigDict(frozen=True)
    stopped: tuple[int, ...] = ()
    message: str


def terminate_foreign(processes: Sequence[GpuProcess], grace_s: float = 10.0) -> FreedGpus:
    """SIGTERM, then SIGKILL after `grace_s`, each listed process whose identity checks out (module doc)."""
    me = {os.getpid(), os.getppid()}
    seen = [(p, identify(p.pid, p.start_time)) for p in processes if p.pid not in me]
    gone = sorted({p.pid for p, who in seen if who is None})
    judged = [who for _, who in seen if who is not None]
    targets = [who for who in judged if who.refusal is None]
    listed = {who.pid: Proc(who.pid, 0, 0, "", who.start_time, who.name) for who in targets}
    stop_tree(lambda: [p for p in listed.values() if _same(p)], grace_s)
    parts = []
    if targets:
        parts.append("stopped " + ", ".join(f"{who.label()}: {who.matched}" for who in targets))
    if gone:
        parts.append("already gone: " + ", ".join(map(str, gone)))
    parts += [f"not stopped {who.label()}: {who.refusal}" for who in judged if who.refusal is not None]
    return FreedGpus(stopped=tuple(who.pid for who in targets), message="; ".join(parts) or "nothing to stop")


def identify(pid: int, listed_start: int | None = None) -> Identity | None:
    """Who `pid` is now (None: gone), with the reason it must not be stopped, if any."""
    proc = read_proc(pid)
    if proc is None or proc.state in ("Z", "X"):
        return None
    argv = _argv(pid)
    exe = _exe(pid)
    who = Identity(pid=pid, name=proc.name, start_time=proc.start_time, uid=_uid(pid), exe=exe, argv=argv)
    matched = engine_match(argv) if exe is not None and _is_python(exe) else None
    return who.model_copy(update={"matched": matched, "refusal": _refusal(who, matched, listed_start)})


def _refusal(who: Identity, matched: str | None, listed_start: int | None) -> str | None:
    if listed_start is not None and who.start_time != listed_start:
        return "a new process took the pid since nvidia-smi listed it"
    if who.uid is None or who.uid != os.getuid():
        owner = "an unknown user" if who.uid is None else f"uid {who.uid}"
        return f"it belongs to {owner}, not to you (uid {os.getuid()}); ask its owner"
    if who.exe is None:
        return "its executable cannot be seen, so it cannot be told from an engine"
    if not _is_python(who.exe):
        return f"it runs {who.exe}, not a Python interpreter running SGLang or vLLM"
    if matched is None:
        return "its command line runs neither SGLang nor vLLM"
    return None


def engine_match(argv: Sequence[str]) -> str | None:
    """What in a Python command line makes it an SGLang or vLLM process; None when nothing does."""
    if argv and (title := _WORKER_TITLE.match(argv[0])):
        return f"worker title {title.group(0)!r}"
    words = iter(argv[1:])
    for word in words:
        if word == "-m" or (word.startswith("-m") and len(word) > 2):
            module = word[2:] or next(words, "")
            top = module.split(".")[0]
            return f"-m {module}" if top in _ENGINES else None
        if word.startswith("-c"):
            return None  # code given inline: whatever words follow are its arguments, not what runs
        if word in _VALUE_OPTIONS:
            next(words, None)
        elif not word.startswith("-"):
            return _script_match(word)
    return None


def _script_match(script: str) -> str | None:
    parts = script.replace("\\", "/").split("/")
    if parts[-1] in _ENGINES:
        return f"the {parts[-1]} entry script {script}"
    if script.endswith(".py") and any(p in _ENGINES for p in parts[:-1]):
        return f"the script {script}"
    return None


def _is_python(exe: str) -> bool:
    return bool(_PYTHON_EXE.match(os.path.basename(exe)))


def _argv(pid: int) -> tuple[str, ...]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read(_CMDLINE_MAX_BYTES)
    except OSError:
        return ()
    return tuple(w.decode("utf-8", "replace") for w in raw.rstrip(b"\0").split(b"\0") if w)


def _exe(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


def _uid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            status = f.read(_CMDLINE_MAX_BYTES).decode("ascii", "replace")
    except OSError:
        return None
    found = re.search(r"^Uid:\s+(\d+)", status, re.M)
    return int(found.group(1)) if found else None


def _same(proc: Proc) -> bool:
    """Still the process that was identified (not a reused pid), and not a zombie."""
    current = read_proc(proc.pid)
    return current is not None and current.key == proc.key and current.state not in ("Z", "X")
