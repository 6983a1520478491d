"""A tool-call parser made for another model family. Each of SGLang's `--tool-call-parser` choices reads one
family's tool-call markup (`glm47`: GLM's `<tool_call>`, `kimi_k3`: Kimi's special tokens, `llama3`: Llama's
JSON); on another family's model the constraint it builds does not fit the tokenizer, or the calls never
parse, and tool requests come back as plain text or 400. The parser of the served model's own family, where
SGLang has exactly one, is what reads its calls."""

from __future__ import annotations

import re
from pathlib import PurePath

from specdoctor.playbooks.base import Context, fix, playbook
from specdoctor.playbooks.decision import Decision
from specdoctor.tools.command import SetFlag

_FLAG = "--tool-call-parser"
# What a tool request that the parser did not serve leaves in the log.
_TOOLS_FAILED = (
    r"(?i)Required tool call missing|structural_tag|tool[_ ]call[^\n]{0,80}(?:fail|error|missing|\bnot?\b|dropping)|"
    r"Failed to (?:parse|compile)[^\n]{0,40}tool"
)


@playbook(
    id="sglang.request.tool-parser-of-another-family",
    category="other",
    when=("degraded", "unhealthy", "exited"),
    pattern=_TOOLS_FAILED,
    priority=30,
)
def tool_parser_of_another_family(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """Tool requests fail, and --tool-call-parser names a family the served model is not of."""
    parser = ctx.view.get(_FLAG)
    info = ctx.catalog.get(_FLAG)
    if not parser or info is None or not info.choices:
        return None
    words = _model_words(ctx)
    if _stem(parser) in words:
        return None  # the parser is of this model's family: its failure is another one
    own = [c for c in info.choices if _stem(c) in words]
    digits = re.sub(r"\D", "", " ".join(words))
    if len(own) > 1:
        own = [c for c in own if (d := re.sub(r"\D", "", c)) and digits.startswith(d)]
    if len(own) != 1:
        return None
    return fix(
        ctx,
        [SetFlag(flag=_FLAG, values=(own[0],))],
        "other",
        f"--tool-call-parser {parser} reads another model family's tool calls; this model is "
        f"a {_stem(own[0]).capitalize()} model",
        why=f"SGLang's {parser} parser builds its tool-call constraint from {_stem(parser)}'s markup, which this "
        f"model's tokenizer and output do not have; {own[0]} is the parser of the model's own family",
        evidence=(m.group(0),) if m else (),
        confidence=0.45,
    )


def _stem(choice: str) -> str:
    """The family a parser choice is named for: `glm47` → glm, `kimi_k3` → kimi, `deepseekv31` → deepseek."""
    found = re.match(r"[a-z]+", choice.lower())
    return found.group(0) if found else choice


def _model_words(ctx: Context) -> list[str]:
    """The words of the served model's name and its config's architectures (`tiny-llama` → tiny, llama)."""
    names = [PurePath(ctx.view.get("--model-path") or "").name]
    if ctx.model is not None:
        names += [*ctx.model.architectures, ctx.model.model_type or ""]
    text = " ".join(names)
    split = re.sub(r"([a-z])([A-Z])", r"\1 \2", text).lower()
    return list(dict.fromkeys(w for w in re.split(r"[^a-z0-9]+|(?<=[a-z])(?=\d)", split) if w))
