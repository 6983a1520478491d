"""Find the root cause of a failed launch in its log.

SGLang buries the cause under wrapper lines (`Scheduler hit an exception`, `Received sigquit from a child
process`, `kill_process_tree called`) that are never the diagnosis. The cause is, in this order: an
argparse `error:` line; a line after which the server hangs (`[Errno 98] ... address already in use`);
the last exception before the launcher noticed a death; a SIGKILL (`Exit code: -9`, `Killed`); an
error-sounding last line. A ready line resets the search: what came before it did not stop the launch.
Works on whole logs and on excerpts quoted in issues (`[...]` cuts, one line, lost traceback tails).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from specdoctor.tools.engines import SGLANG, EngineProfile
from specdoctor.tools.log_stages import split_prefix

Kind = Literal["argparse", "exception", "traceback-cut", "fatal-line", "killed", "message", "none"]

BLOCK_LINES = 40
MESSAGE_LINES = 25
MAX_INTERLEAVED = 20

_TB_START = re.compile(r"Traceback \(most recent call last\):\s*$")
# Python's own frames, faulthandler's (`line N in f`, no comma) and the line-less ones issue threads quote.
_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)"(?:, line (?P<line>\d+))?(?:,? in (?P<func>.+?))?\s*$')
_CHAINED = re.compile(
    r"^(?:During handling of the above exception, another exception occurred"
    r"|The above exception was the direct cause of the following exception):\s*$"
)
# A line standing alone that names an exception: `ValueError: ...`, `torch.OutOfMemoryError: ...`, bare
# `AssertionError`, `ValueError("...")` (repr, as issue threads quote it). Names must look like exceptions
# here, because ordinary log lines also have `word: text` shapes.
_NAMED_EXCEPTION = re.compile(
    r"^\s*(?P<type>(?:[A-Za-z_]\w*\.)*(?:(?![0-9])\w*(?:Error|Exception|Exit|Interrupt|Fault|Failed)"
    r"|(?:[A-Za-z_]\w*\.)*(?:errors|exceptions|exc)\.[A-Za-z_]\w*))"
    r"(?:: ?(?P<msg>.*)|\((?P<arg>.*)\)\s*|)$"
)
# Inside a traceback the first unindented line is the exception, whatever its class is called.
_ANY_EXCEPTION = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?:: ?(?P<msg>.*)|\((?P<arg>.*)\)\s*|)$")
_WARNING_LINE = re.compile(r"^\S+:\d+: \w*Warning: ")
_CUT = "[...]"
_DIGITS = re.compile(r"\d+")
_ERRORISH = re.compile(
    r"\b(?:error|errors|failed|failure|fatal|not installed|not supported|unsupported|cannot|can't|could not"
    r"|couldn't|unable to|invalid|out of memory|no such file|not found|denied|refused)\b",
    re.IGNORECASE,
)


class Frame(NamedTuple):
    path: str
    line: int
    function: str


class RootCause(BaseModel):
    """Why the launch failed, as far as its log tells."""

    model_config = ConfigDict(frozen=True)
    kind: Kind = Field(
        description="argparse | exception | traceback-cut (frames but the exception line is missing) | "
        "fatal-line (the server hangs after it) | killed (SIGKILL) | message (an error-sounding last line "
        "with no exception) | none"
    )
    error_line: str | None = Field(default=None, description="The root-cause line, logger prefix stripped.")
    exception_type: str | None = Field(default=None, description="As printed, e.g. `torch.OutOfMemoryError`.")
    message: str = Field(
        default="", description="Text after the type, with continuation lines (`Possible solutions:`)."
    )
    block: tuple[str, ...] = Field(
        default=(), description="The traceback around it, at most ~40 lines, frames kept."
    )
    wrapper: str | None = Field(default=None, description="Name of the wrapper around the cause, if any.")
    wrappers: tuple[str, ...] = Field(
        default=(), description="Every wrapper seen, in order, names deduplicated."
    )
    frames: tuple[Frame, ...] = Field(
        default=(), description="Last frames of the traceback: (path, line, function)."
    )
    chain: tuple[str, ...] = Field(
        default=(),
        description="Exception lines of the tracebacks this one was raised from or during, oldest first.",
    )
    line_index: int | None = Field(default=None, description="Index of `error_line` in the lines given.")
    span: tuple[int, int] | None = Field(
        default=None, description="[start, end) of the block in the lines given."
    )

    @property
    def summary(self) -> str:
        return f"{self.kind}: {self.error_line}" if self.error_line else self.kind


@dataclass
class _Candidate:
    kind: Kind
    index: int
    error_line: str
    exception_type: str | None = None
    message: str = ""
    block: tuple[str, ...] = ()
    frames: tuple[Frame, ...] = ()
    chain: tuple[str, ...] = ()
    span: tuple[int, int] | None = None
    wrapper: str | None = None


@dataclass
class _Scan:
    candidates: list[_Candidate] = field(default_factory=list)
    wrappers: list[tuple[int, str, bool]] = field(default_factory=list)
    killed: list[_Candidate] = field(default_factory=list)


def usage_dump_span(lines: Sequence[str], start: int = 0) -> tuple[int, int] | None:
    """[start, end) of the first argparse `usage:` dump at or after `start` (SGLang's is ~480 lines)."""
    for i in range(start, len(lines)):
        if split_prefix(lines[i])[1].startswith("usage: "):
            end = i + 1
            while end < len(lines) and lines[end][:1] in (" ", "\t") and lines[end].strip():
                end += 1
            return i, end
    return None


def extract_root_cause(lines: Iterable[str], profile: EngineProfile = SGLANG) -> RootCause:
    """The root cause of a launch failure in `lines` (a whole log or an excerpt); kind `none` if there is none."""
    raw = list(lines)
    msgs = [split_prefix(line, profile) for line in raw]
    scan = _scan(msgs, profile)
    chosen = _choose(scan, msgs, profile)
    names = tuple(dict.fromkeys(name for _, name, _ in scan.wrappers))
    if chosen is None:
        answer = server_answer(raw)
        if answer is not None:
            # Up and turning requests away: the engine's answer to the request is all it says of why.
            return RootCause(
                kind="message", error_line=answer, message=answer, block=(answer,), wrappers=names
            )
        return RootCause(kind="none", wrappers=names)
    wrapper = chosen.wrapper or (names[0] if names else None)
    if chosen.kind == "message" and (answer := server_answer([chosen.error_line])) is not None:
        chosen.error_line = chosen.message = answer  # the answer's words, not its JSON
    return RootCause(
        kind=chosen.kind,
        error_line=chosen.error_line,
        exception_type=chosen.exception_type,
        message=chosen.message,
        block=chosen.block,
        wrapper=wrapper,
        wrappers=names,
        frames=chosen.frames[-8:],
        chain=chosen.chain,
        line_index=chosen.index,
        span=chosen.span,
    )


# SGLang's error answers to a request: the OpenAI routes' `{"object": "error", "message": ...}`, the native
# routes' `{"error": {"message": ...}}`, its API-key check's `{"error": "Unauthorized"}`, FastAPI's own
# `{"detail": "Not Found"}` for a route the launch did not enable; quoted in a log,
# pasted from curl, or recorded by our own probe.
_ANSWER = re.compile(
    r'\{\s*"(?:object"\s*:\s*"error"|error"\s*:\s*\{)[^\n]*?"message"\s*:\s*"((?:[^"\\]|\\.)*)"'
    r'|^\s*\{\s*"(?:error|detail)"\s*:\s*"((?:[^"\\]|\\.)*)"\s*\}\s*$'
)


def server_answer(lines: Iterable[str]) -> str | None:
    """The message of the last error answer SGLang gave a request, if the text holds one."""
    found = None
    for line in lines:
        for m in _ANSWER.finditer(line):
            said = m.group(1) if m.group(1) is not None else m.group(2)
            try:
                found = json.loads(f'"{said}"')
            except ValueError:
                found = said
    return found.strip() if found else None


def _wrapper_of(msg: str, profile: EngineProfile) -> tuple[str, bool] | None:
    for w in profile.wrappers:
        if w.pattern.search(msg):
            return w.name, w.ends_launch
    return None


def _scan(msgs: list[tuple[str, str]], profile: EngineProfile) -> _Scan:
    scan = _Scan()
    ready = profile.stage("ready").pattern
    usage_prog: str | None = None
    i = 0
    while i < len(msgs):
        msg = msgs[i][1]
        if ready is not None and ready.search(msg):
            # Whatever happened before the server came up did not stop it, except a line after which it
            # cannot recover (its watchdog already killing it while the warm-up request came back).
            fatal = [c for c in scan.candidates if c.kind == "fatal-line"]
            scan = _Scan()
            scan.candidates.extend(fatal)
            i += 1
            continue
        wrapped = _wrapper_of(msg, profile)
        if wrapped:
            scan.wrappers.append((i, *wrapped))
        if _TB_START.search(msg) or _FRAME.match(msg):
            cand, i = _traceback(msgs, i, profile)
            if wrapped and not wrapped[1]:
                cand.wrapper = wrapped[0]
            inner = _wrapper_of(cand.error_line, profile)
            if inner is not None:
                scan.wrappers.append((cand.index, *inner))
            elif cand.kind != "traceback-cut" or cand.frames:
                # A header with neither frames nor exception says nothing; the lines around it may.
                scan.candidates.append(cand)
            continue
        if msg.startswith("usage: "):
            usage_prog = msg[7:].split(" [", 1)[0].strip()
        cand = _line_candidate(msgs, i, msg, usage_prog, wrapped is not None, profile)
        if cand is not None:
            (scan.killed if cand.kind == "killed" else scan.candidates).append(cand)
            i = cand.span[1] if cand.span else i + 1
            continue
        i += 1
    return scan


def _line_candidate(
    msgs: list[tuple[str, str]],
    i: int,
    msg: str,
    usage_prog: str | None,
    is_wrapper: bool,
    profile: EngineProfile,
) -> _Candidate | None:
    head, sep, rest = msg.partition(": error: ")
    if sep and (head in profile.argparse_progs or head == usage_prog):
        return _Candidate(
            kind="argparse", index=i, error_line=msg, message=rest, block=(msg,), span=(i, i + 1)
        )
    for fatal in profile.fatal_no_exit:
        if fatal.pattern.search(msg):
            return _Candidate(
                kind="fatal-line", index=i, error_line=msg, message=fatal.why, block=(msg,), span=(i, i + 1)
            )
    if profile.killed.search(msg):
        before = tuple(m for _, m in msgs[max(0, i - 8) : i] if m.strip())
        return _Candidate(kind="killed", index=i, error_line=msg, block=(*before, msg), span=(i, i + 1))
    if not is_wrapper:
        m = _NAMED_EXCEPTION.match(msg)
        if m:
            return _exception(msgs, i, m, i, (), profile)
    return None


def _exception(
    msgs: list[tuple[str, str]],
    i: int,
    m: re.Match[str],
    start: int,
    frames: tuple[Frame, ...],
    profile: EngineProfile,
) -> _Candidate:
    """The exception line at `i` and its continuation lines (multi-line messages)."""
    end = i + 1
    shape = _DIGITS.sub("#", msgs[i][0])
    while end < len(msgs) and end - i <= MESSAGE_LINES:
        if _continues_message(msgs[end], shape, profile):
            end += 1
        elif _paragraph_of_message(msgs, end, shape, profile):
            end += 2
        else:
            break
    text = msgs[i][1].strip()
    more = [msg for _, msg in msgs[i + 1 : end]]
    first = m["msg"] if m["msg"] is not None else (m["arg"] or "").strip("'\"")
    body = [msg for _, msg in msgs[start:end]]
    return _Candidate(
        kind="exception",
        index=i,
        error_line=text,
        exception_type=m["type"],
        message="\n".join([first, *more]).strip(),
        block=_bounded(body),
        frames=frames,
        span=(start, end),
    )


# How an engine's message says what it needed: a paragraph worded so belongs to the error above it.
_REQUIREMENT = re.compile(
    r"\b(?:should|must|expected|expects|requires?|only supports?|not supported|but got|please)\b", re.I
)


def _paragraph_of_message(msgs: list[tuple[str, str]], at: int, shape: str, profile: EngineProfile) -> bool:
    """A blank line inside the message: kernels' errors put what was wrong in a paragraph of its own
    (`... error code is 561002` / blank / `block_size should be aligned to 16, but got 1`)."""
    if msgs[at][1].strip() or at + 1 >= len(msgs):
        return False
    after = msgs[at + 1]
    return _continues_message(after, shape, profile) and bool(_REQUIREMENT.search(after[1]))


def _continues_message(item: tuple[str, str], shape: str, profile: EngineProfile) -> bool:
    """Whether a line goes on with the exception message above it rather than starting a new record."""
    prefix, msg = item
    # An SGLang logger prefix always starts a record; vLLM prefixes every line, so only a different
    # process, level or source line does.
    if prefix.startswith("[") or _DIGITS.sub("#", prefix) != shape or not msg.strip() or msg.strip() == _CUT:
        return False
    return not (
        _TB_START.search(msg) or _CHAINED.match(msg) or _FRAME.match(msg) or _WARNING_LINE.match(msg)
    ) and not _wrapper_of(msg, profile)


def _traceback(msgs: list[tuple[str, str]], start: int, profile: EngineProfile) -> tuple[_Candidate, int]:
    """Parse the traceback (and its chained tracebacks) starting at `start`; returns it and the next index."""
    chain: list[str] = []
    while True:
        cand, end = _one_traceback(msgs, start, profile)
        nxt = end
        while nxt < len(msgs) and not msgs[nxt][1].strip():
            nxt += 1
        if cand.kind == "exception" and nxt < len(msgs) and _CHAINED.match(msgs[nxt][1]):
            after = nxt + 1
            while after < len(msgs) and not msgs[after][1].strip():
                after += 1
            if after < len(msgs) and _TB_START.search(msgs[after][1]):
                chain.append(cand.error_line)
                start = after
                continue
        cand.chain = tuple(chain)
        return cand, end


def _one_traceback(msgs: list[tuple[str, str]], start: int, profile: EngineProfile) -> tuple[_Candidate, int]:
    frames: list[Frame] = []
    interleaved = 0
    j = start + 1 if _TB_START.search(msgs[start][1]) else start
    while j < len(msgs):
        prefix, msg = msgs[j]
        frame = _FRAME.match(msg)
        if frame:
            frames.append(Frame(frame["path"], int(frame["line"] or 0), frame["func"] or "<module>"))
        elif msg.strip() == _CUT or not msg.strip():
            break
        elif msg[:1] in (" ", "\t"):
            # Code lines, carets, `[Previous line repeated N more times]`, or an indented exception.
            named = _NAMED_EXCEPTION.match(msg)
            if named and frames:
                # Issue threads sometimes quote the exception line indented.
                cand = _exception(msgs, j, named, start, tuple(frames), profile)
                return cand, cand.span[1] if cand.span else j + 1
        elif prefix.startswith("["):
            # Another process's log record interleaved with this traceback, unless it says a process died:
            # then this traceback lost its end.
            interleaved += 1
            if interleaved > MAX_INTERLEAVED or _wrapper_of(msg, profile):
                break
        else:
            # Python prints a frame before any exception; straight after a bare header only a line that
            # looks like one is taken (`host:123:456 [0] NCCL WARN ...` is not an exception `host`).
            named = (_ANY_EXCEPTION if frames else _NAMED_EXCEPTION).match(msg)
            if named:
                cand = _exception(msgs, j, named, start, tuple(frames), profile)
                return cand, cand.span[1] if cand.span else j + 1
            break
        j += 1
    last = frames[-1] if frames else None
    where = f", line {last.line}" if last and last.line else ""
    line = f'File "{last.path}"{where}, in {last.function}' if last else msgs[start][1].strip()
    body = [msg for _, msg in msgs[start:j]]
    cand = _Candidate(
        kind="traceback-cut",
        index=start,
        error_line=line,
        block=_bounded(body),
        frames=tuple(frames),
        span=(start, j),
    )
    return cand, max(j, start + 1)


def _bounded(body: list[str]) -> tuple[str, ...]:
    """At most BLOCK_LINES lines: the first line, then the innermost frames and the message."""
    if len(body) <= BLOCK_LINES:
        return tuple(body)
    tail = body[-(BLOCK_LINES - 2) :]
    first_frame = next((k for k, line in enumerate(tail) if _FRAME.match(line)), 0)
    tail = tail[first_frame:]
    cut = len(body) - 1 - len(tail)
    return (body[0], f"  [... {cut} traceback lines cut ...]", *tail)


def _choose(scan: _Scan, msgs: list[tuple[str, str]], profile: EngineProfile) -> _Candidate | None:
    cands = scan.candidates
    argparse = [c for c in cands if c.kind == "argparse"]
    if argparse:
        return argparse[-1]
    death = min((i for i, _, ends in scan.wrappers if ends), default=len(msgs))
    before = [c for c in cands if c.index < death]
    fatal = next((c for c in before if c.kind == "fatal-line"), None)
    if fatal:
        return fatal
    for pool in (before, [c for c in cands if c.index >= death]):
        complete = [c for c in pool if c.kind == "exception"]
        if complete:
            return complete[-1] if pool is before else complete[0]
        cut = [c for c in pool if c.kind == "traceback-cut"]
        if cut:
            return cut[-1] if pool is before else cut[0]
    if scan.killed:
        return scan.killed[-1]
    return _last_message(scan, msgs, profile)


def _last_message(scan: _Scan, msgs: list[tuple[str, str]], profile: EngineProfile) -> _Candidate | None:
    wrapper_lines = {i for i, _, _ in scan.wrappers}
    for i in range(len(msgs) - 1, -1, -1):
        msg = msgs[i][1].strip()
        if not msg or msg == _CUT or i in wrapper_lines:
            continue
        if _ERRORISH.search(msg) and not any(b.search(msg) for b in profile.benign):
            return _Candidate(
                kind="message", index=i, error_line=msg, message=msg, block=(msg,), span=(i, i + 1)
            )
        return None
    return None
