"""How one launch ended, as the watcher saw it."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

OutcomeKind = Literal["exited", "hung", "unhealthy", "degraded", "healthy"]
AcceptanceVerdict = Literal["working", "low", "none", "unmeasured"]
"""The speculative verdict of a server that serves: `working` (at the algorithm's level), `low` (drafts are
accepted, below that level: reported, the server is kept), `none` (nothing accepted: `degraded`) or
`unmeasured` (no accept length could be read: never called working)."""
Ownership = Literal["process", "log"]

# The corpus records how a crash looked from outside; the watcher's outcome kind for each.
EXIT_KIND_TO_OUTCOME: dict[str, OutcomeKind] = {
    "parse-error": "exited",
    "startup-crash": "exited",
    "runtime-crash": "exited",
    "hang": "hung",
    "runs-but-degraded": "degraded",
}


class Outcome(BaseModel):
    """The end of one launch: what happened, where in startup, and the numbers that tell."""

    model_config = ConfigDict(frozen=True, defer_build=True)
    kind: OutcomeKind
    detail: str = Field(default="", description="One line: why the watcher decided this.")
    exit_code: int | None = None
    stage: str | None = Field(default=None, description="Startup stage reached (engines.SGLANG stage id).")
    ready_seen: bool = Field(default=False, description="The server said it was ready before this ended.")
    fatal_line: str | None = Field(default=None, description="A line after which SGLang hangs (Errno 98).")
    accept_length: float | None = Field(
        default=None, description="Mean speculative accept length, if measured."
    )
    acceptance: AcceptanceVerdict | None = Field(
        default=None, description="Speculative verdict; None without speculative decoding (or not judged)."
    )
    ownership: Ownership | None = Field(
        default=None,
        description="How readiness was tied to this launch: `process` (the port's listening socket is held by "
        "our engine) or `log` (the host could not say; our log's bind line and no bind error were trusted).",
    )
    elapsed_s: float = 0.0
    log_path: str | None = None
    parse_error: bool = Field(
        default=False, description="The engine rejected its arguments (argparse, exit 2)."
    )
