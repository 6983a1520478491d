"""The speculative draft's own files are what fails: its config.json is not JSON, or not one transformers
reads (no `model_type`, vLLM's speculators layout), it names an architecture SGLang does not register or no
architecture at all, its folder holds no weights or Git LFS pointers instead of them. No flag repairs a
draft's files and no flag names a draft that is not on disk, so the one change that serves the target is
launching without speculative decoding until the draft is fixed: proposed for a person (a draft path and the
algorithm are not what an unattended run changes), with what to fix in the folder."""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from specdoctor.playbooks.base import Context, fix, playbook
from specdoctor.playbooks.decision import Decision
from specdoctor.tools.command import RemoveFlag

# What a model folder's files look like when they cannot be read: config.json, architectures, weights.
_UNREADABLE = (
    r"Unrecognized model in .{0,300}model_type|is not a valid JSON file|JSONDecodeError|"
    r"Cannot find any model weights|No model weights found in|Error while deserializing header|HeaderTooLarge|"
    r"is not a registered model|Model architectures? \[.*\] (?:is|are) not supported|"
    r"does not recognize this architecture|'NoneType' object is not subscriptable"
)
# Frames that build or read the draft: the draft worker, an EAGLE draft model's own file, what reads the
# draft's config for the target (aux hidden states), and the argument hook that reads it.
_DRAFT_FRAME = re.compile(r"draft|speculative_hook|resolve_speculative|eagle", re.I)


@playbook(id="sglang.speculative.draft-unreadable", category="model-path", pattern=_UNREADABLE, priority=25)
def draft_unreadable(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    draft = ctx.view.get("--speculative-draft-model-path")
    if m is None or draft is None or not (why := _the_drafts(ctx, draft, m.group(0))):
        return None
    edits = [
        RemoveFlag(flag=o.name)
        for o in ctx.spec.options()
        if ctx.catalog.canonical(o.name).startswith("--speculative-")
    ]
    return fix(
        ctx,
        edits,
        "model-path",
        f"SGLang cannot read the speculative draft at {draft}: {ctx.root.error_line or m.group(0)}",
        why=f"{why}; no flag repairs a draft's files, so the target is served without speculative decoding "
        "until the draft folder is fixed (its config.json, its weights: a Git LFS pointer is not weights, a "
        "draft exported for vLLM has another layout) or --speculative-draft-model-path names a draft SGLang "
        "loads",
        evidence=(ctx.root.error_line or m.group(0),),
        confidence=0.45,
    )


def _the_drafts(ctx: Context, draft: str, matched: str) -> str | None:
    """Why the unreadable files are the draft's and not the target's: the error names the draft's folder,
    or the traceback runs through what builds or reads the draft."""
    error = ctx.root.error_line or matched
    target = ctx.view.get("--model-path") or ""
    mine, theirs = _folder_named(draft, error), _folder_named(target, error)
    if mine and not theirs:
        return f"the error names the draft's folder ({PurePosixPath(draft).name})"
    drafting = [f for f in ctx.root.frames if _DRAFT_FRAME.search(f"{f.path} {f.function}")]
    if drafting and not theirs:
        where = drafting[-1]
        return f"it fails in {where.function} ({PurePosixPath(where.path).name}), which builds or reads the draft"
    return None


def _folder_named(path: str, text: str) -> bool:
    name = PurePosixPath(path.rstrip("/")).name
    return bool(name) and re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w-]|\.\w)", text) is not None
