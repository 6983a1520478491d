"""LoRA requests to a server launched without LoRA. SGLang cannot switch LoRA on at run time: every request
naming an adapter (`lora_path`, `model: base:adapter`, `/load_lora_adapter`) is answered 400 until the
server is relaunched with it. Its check of the launch (srt/arg_groups/lora_hook.py) then wants either the
adapters to preload (`--lora-paths`) or, for adapters loaded later, both `--max-lora-rank` and
`--lora-target-modules`: `--enable-lora` alone fails at the next launch. Room for adapters loaded later is
proposed; the adapters a client tried to load are named for the person to preload (a folder from a log never
goes into a command on its own)."""

from __future__ import annotations

import json
import re

from specdoctor.playbooks.base import Context, fix, line_of, playbook, stop
from specdoctor.playbooks.decision import Decision
from specdoctor.tools.command import SetFlag

# Both of SGLang's wordings: the request handlers' and the adapter endpoints'.
_NOT_ENABLED = r"LoRA adapter '(?P<adapter>[^']*)' was requested, but LoRA is not enabled|\bLoRA is not enabled\. Please set"
# What follows the colon in an Ollama model name (`llama3:latest`, `qwen2.5:7b`, `x:q4_K_M`): SGLang reads
# `model: base:adapter`, so a tag a client copied from Ollama becomes an adapter nobody meant.
_OLLAMA_TAG = re.compile(r"latest|\d+(?:\.\d+)?[bBmMkK]|(?:\d+[bB]-)?(?:q\d\w*|fp16|f16|bf16|int[48])", re.I)
# A client's /load_lora_adapter body: {"lora_name": "sql", "lora_path": "/adapters/sql-r8"}.
_LOAD_BODY = re.compile(r'\{[^{}]*"lora_name"\s*:\s*"[^"]+"[^{}]*"lora_path"\s*:\s*"[^"]+"[^{}]*\}')
_NAME = re.compile(r"^[\w.-]{1,64}$")
ROOM_FOR_ADAPTERS = "64"
"""A rank that takes the adapters people commonly train (r ≤ 64); the person sets their largest."""


@playbook(
    id="sglang.request.lora-not-enabled",
    category="other",
    when=("unhealthy", "degraded", "exited"),
    pattern=_NOT_ENABLED,
    priority=26,
)
def lora_not_enabled(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """Requests name a LoRA adapter and the server was launched without LoRA: relaunch with it."""
    if ctx.view.has("--enable-lora") or ctx.view.has("--lora-paths"):
        return None
    adapter = (m.group("adapter") if m else None) or ""
    if _OLLAMA_TAG.fullmatch(adapter):
        return stop(
            ctx,
            "other",
            f"the client's model name ends in `:{adapter}`, an Ollama tag, which SGLang reads as LoRA adapter "
            f"'{adapter}'",
            f"Send the model name without `:{adapter}` (SGLang's OpenAI layer reads `model: base:adapter`); no "
            "launch flag changes that, and turning LoRA on would not serve an adapter that does not exist.",
            evidence=(line_of(m),) if m else (),
            confidence=0.6,
        )
    rank = ROOM_FOR_ADAPTERS
    edits = [
        SetFlag(flag="--enable-lora"),
        SetFlag(flag="--max-lora-rank", values=(rank,)),
        SetFlag(flag="--lora-target-modules", values=("all",)),
    ]
    # A folder from the log is never put into the command (only a person sets free text): it is named
    # for the person to preload.
    loaded = _adapters_clients_load(ctx.search_text)
    preload = " ".join(f"{n}={p}" for n, p in loaded)
    how = (
        f"makes room for adapters loaded later through /load_lora_adapter (rank up to {rank}: set your largest "
        "adapter's `r`; `all` modules)"
        + (f", or preload what the client loads with --lora-paths {preload}" if preload else "")
    )
    return fix(
        ctx,
        edits,
        "other",
        "requests name a LoRA adapter, and the server was launched without LoRA: SGLang turns each away",
        why=(
            "SGLang cannot switch LoRA on at run time; its launch check (lora_hook.py) wants the adapters to "
            f"preload, or both a maximum rank and target modules. This relaunch {how}. It changes what the "
            "server serves, so it is yours to confirm"
        ),
        evidence=(line_of(m),) if m else (),
        confidence=0.45,
    )


def _adapters_clients_load(text: str) -> list[tuple[str, str]]:
    """(name, folder) of each adapter a client asked /load_lora_adapter for, in the order asked."""
    found: dict[str, str] = {}
    for body in _LOAD_BODY.findall(text):
        try:
            asked = json.loads(body)
        except json.JSONDecodeError:
            continue
        name, path = str(asked.get("lora_name", "")), str(asked.get("lora_path", ""))
        if _NAME.match(name) and path.startswith(("/", "~")) and "=" not in path and " " not in path:
            found.setdefault(name, path)
    return list(found.items())
