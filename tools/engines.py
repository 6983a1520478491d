"""What is specific to the SGLang server, as data: how to start it, what it prints, where to probe it.

Everything here was read from real SGLang 0.5.23 output (`tests/data/sglang-outputs/`) or its source
(`/work/shared/sglang-cli/REPORT.md` §3, §5; `/work/shared/gpu/signatures.md`). Code that watches a
launch (`tools/logs.py`) reads these patterns instead of hard-coding strings, so a second engine or a
format change is an edit here.
"""

from __future__ import annotations

import re
from re import Pattern

from pydantic import BaseModel, ConfigDict, Field


class Stage(BaseModel):
    """One startup step, in the order SGLang goes through them."""

    model_config = ConfigDict(frozen=True)
    id: str = Field(description="Short stable id, e.g. `weights`.")
    label: str = Field(description="What a user reads, e.g. `loading weights`.")
    pattern: Pattern[str] | None = Field(
        description="Searched in a prefix-stripped log line; the first match enters this stage. None: entered at launch."
    )
    anchors: tuple[str, ...] = Field(
        default=(),
        description="Literal starts of a matching message (right after the log prefix's `] `), used to "
        "byte-search a huge log in one pass.",
    )


class Wrapper(BaseModel):
    """A line SGLang prints around a failure. It tells that something died, never why."""

    model_config = ConfigDict(frozen=True)
    name: str = Field(description="Stable name, reported as `RootCause.wrapper`.")
    pattern: Pattern[str]
    ends_launch: bool = Field(
        description="Printed after the cause, once the launcher has noticed a death: the cause is above it."
    )


class FatalLine(BaseModel):
    """A line after which the server never becomes ready although the process keeps running."""

    model_config = ConfigDict(frozen=True)
    name: str
    pattern: Pattern[str]
    why: str = Field(description="Why the watcher must stop waiting at once.")


_READY = "The server is fired up and ready to roll!"


def _re(pattern: str, flags: int = 0) -> Pattern[str]:
    return re.compile(pattern, flags)


class EngineProfile(BaseModel):
    """How one engine starts, logs, fails and answers."""

    model_config = ConfigDict(frozen=True)
    name: str
    version: str = Field(description="The release these patterns were read from.")
    argparse_progs: tuple[str, ...] = Field(
        description="`prog` names argparse prints in `usage:` and `error:`."
    )
    probe_paths: frozenset[str] = Field(
        description="GET paths a watcher polls; their access lines are not progress."
    )
    log_prefix: Pattern[str] = Field(description="The `[date time ranks] ` prefix of every logger line.")
    message_start: str = Field(description="What ends the log prefix; stage anchors follow it directly.")
    stages: tuple[Stage, ...] = Field(
        description="Startup stages in order; a watcher only ever moves forward."
    )
    wrappers: tuple[Wrapper, ...]
    fatal_no_exit: tuple[FatalLine, ...]
    killed: Pattern[str] = Field(
        description="The process was SIGKILLed (host OOM killer, or our own timeout)."
    )
    accept_length: Pattern[str] = Field(description="Group 1: mean accepted tokens per verify step.")
    access_line: Pattern[str] = Field(description="uvicorn access log; groups `method`, `path`, `status`.")
    benign: tuple[Pattern[str], ...] = Field(description="Error-sounding lines every healthy launch prints.")

    def stage(self, stage_id: str) -> Stage:
        for stage in self.stages:
            if stage.id == stage_id:
                return stage
        raise KeyError(f"{self.name} has no startup stage {stage_id!r}; known: {[s.id for s in self.stages]}")

    def stage_index(self, stage_id: str) -> int:
        return self.stages.index(self.stage(stage_id))


SGLANG = EngineProfile(
    name="sglang",
    version="0.5.23",
    # 0.5.10+ prints `sglang serve` for both entry points; 0.3.6-0.5.8 printed `launch_server.py`.
    argparse_progs=("sglang serve", "launch_server.py"),
    probe_paths=frozenset(
        {
            "/health",
            "/health_generate",
            "/ready",
            "/server_info",
            "/get_server_info",
            "/model_info",
            "/get_model_info",
            "/v1/models",
            "/metrics",
            "/ping",
        }
    ),
    # `[%Y-%m-%d %H:%M:%S<prefix>] `; the prefix is built from ` DP0`, ` PP0`, ` ATTN_CP0`, ` MOE_DP0`, ` TP0`,
    # ` EP0`. Pre-0.4 releases print no date (`[23:17:01 TP7] `); SGLANG_LOG_MS=1 adds `.123`.
    message_start="] ",
    log_prefix=_re(r"^\[(?:\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d(?:[.,]\d+)?(?: [A-Z][A-Z_]*\d+)*\] ?"),
    stages=(
        Stage(id="launch", label="process started", pattern=None),
        Stage(
            id="args", label="server args resolved", pattern=_re(r"^server_args="), anchors=("server_args=",)
        ),
        # `Init torch distributed begin.` is the pre-0.5 wording of the same step.
        Stage(
            id="init",
            label="initialising devices",
            pattern=_re(r"^Init (?:parallel|torch distributed) begin"),
            anchors=("Init parallel begin", "Init torch distributed begin"),
        ),
        Stage(
            id="weights",
            label="loading weights",
            pattern=_re(r"^Load weight begin"),
            anchors=("Load weight begin",),
        ),
        Stage(
            id="weights_done",
            label="weights loaded",
            pattern=_re(r"^Load weight end"),
            anchors=("Load weight end",),
        ),
        # The draft and SWA pools prefix the KV line with a label, so it is not anchored.
        Stage(
            id="kv_cache",
            label="KV cache allocated",
            pattern=_re(r"KV Cache is allocated|^Memory pool end"),
            anchors=("KV Cache is allocated", "Memory pool end"),
        ),
        Stage(
            id="cuda_graph",
            label="capturing CUDA graphs",
            pattern=_re(r"^Capture .*graph begin|^Capturing batches", re.IGNORECASE),
            anchors=("Capture ", "Capturing batches"),
        ),
        # The scheduler prints its token budget once its model runner is up; in 0.5.23 this comes before
        # uvicorn binds, so it cannot mean "warm-up" (that is after `http`).
        Stage(
            id="scheduler",
            label="scheduler initialised",
            pattern=_re(r"^max_total_num_tokens=|^Engine startup timings"),
            anchors=("max_total_num_tokens=", "Engine startup timings"),
        ),
        Stage(
            id="http",
            label="HTTP port bound (not ready yet)",
            pattern=_re(r"Uvicorn running on "),
            anchors=("INFO:     Uvicorn running on ",),
        ),
        # The server's own warm-up request, visible as an access line before the ready line.
        Stage(
            id="warmup",
            label="warm-up request",
            # No anchors: access lines are too common to byte-search; seen in parsed lines only.
            pattern=_re(r'"POST /generate HTTP/'),
        ),
        Stage(
            id="ready",
            label="ready",
            pattern=_re(re.escape(_READY)),
            anchors=(_READY,),
        ),
    ),
    wrappers=(
        Wrapper(
            name="Scheduler hit an exception", pattern=_re(r"Scheduler hit an exception"), ends_launch=False
        ),
        Wrapper(
            name="TokenizerManager hit an exception",
            pattern=_re(r"TokenizerManager hit an exception"),
            ends_launch=False,
        ),
        Wrapper(
            name="DetokenizerManager hit an exception",
            pattern=_re(r"DetokenizerManager hit an exception"),
            ends_launch=False,
        ),
        Wrapper(
            name="DataParallelController hit an exception",
            pattern=_re(r"DataParallelController hit an exception"),
            ends_launch=False,
        ),
        # Pre-0.4 name of the scheduler wrapper (the process was `run_tp_server`).
        Wrapper(
            name="Exception in run_tp_server", pattern=_re(r"^Exception in run_tp_server"), ends_launch=False
        ),
        Wrapper(name="Initialization failed", pattern=_re(r"Initialization failed\."), ends_launch=False),
        Wrapper(
            name="Received sigquit from a child process",
            pattern=_re(r"Received sigquit from a child process"),
            ends_launch=True,
        ),
        # The same, once the server is serving: the tokenizer manager's running-phase handler.
        Wrapper(name="SIGQUIT received", pattern=_re(r"SIGQUIT received\. signum="), ends_launch=True),
        Wrapper(name="Rank 0 scheduler is dead", pattern=_re(r"Rank 0 scheduler is dead"), ends_launch=True),
        # 0.5.23: the launcher's own error when a scheduler exits before it reports ready.
        Wrapper(
            name="scheduler died during initialization",
            pattern=_re(r"Rank \d+ scheduler died during initialization"),
            ends_launch=True,
        ),
        Wrapper(
            name="Subprocess crashed",
            pattern=_re(r"Subprocess \w+ \(pid=\d+\) crashed with exit code"),
            ends_launch=True,
        ),
        Wrapper(name="Exit code: -9", pattern=_re(r"^Exit code: -9\b"), ends_launch=True),
        # Printed in a `finally:` *before* the traceback when resolution fails (exit 1), so it does not
        # mark "the cause is above".
        Wrapper(
            name="kill_process_tree called", pattern=_re(r"^kill_process_tree called"), ends_launch=False
        ),
        # vLLM's equivalent of the scheduler wrapper (signatures row 57), for logs quoted from vLLM.
        Wrapper(
            name="EngineCore failed to start", pattern=_re(r"EngineCore failed to start"), ends_launch=True
        ),
    ),
    fatal_no_exit=(
        FatalLine(
            name="http-port-in-use",
            pattern=_re(r"\[Errno (?:98|48)\].*address already in use"),
            why="uvicorn could not bind --port; SGLang keeps its scheduler alive and hangs forever.",
        ),
        FatalLine(
            name="watchdog",
            # `soft` watchdogs (0.5.23's --soft-watchdog-timeout) only dump stacks; older ones print no flag.
            pattern=_re(r"[Ww]atchdog timeout \(self\.watchdog_timeout=[\d.]+(?:, self\.soft=False)?\)"),
            why="SGLang's watchdog took a forward step for a hang and is killing the server (SIGQUIT).",
        ),
    ),
    killed=_re(r"^Exit code: -9\b|(?:^|\])\s*Killed\s*$"),
    # `accept len: 2.84` (0.4-0.5.23 Decode batch lines); `accept_len: 1.00` is how issue threads quote it.
    # `block accept len:` is a different metric (block verification) and must not be read as this one.
    accept_length=_re(r"(?<!block )\baccept[ _]len(?:gth)?:\s*(\d+(?:\.\d+)?)"),
    access_line=_re(r'"(?P<method>[A-Z]+) (?P<path>/[^ ?"]*)[^ "]* HTTP/[\d.]+" (?P<status>\d{3})'),
    benign=(
        _re(r"^Ignore import error when loading "),
        _re(r"^Fail to set RLIMIT_NOFILE"),
        _re(r"^Cannot detect CUDA architecture"),
        _re(r"^OpenAI Responses API .* disabled"),
        _re(r"^init_cpu_threads_env and shared memory based AllReduce is disabled"),
        _re(r"\w+Warning: "),
    ),
)
