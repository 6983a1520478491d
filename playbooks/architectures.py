"""A model config names an architecture SGLang does not register, and one it does register is that
name respelled (`LLaMAForCausalLM`, a copy renamed `MyLlamaForCausalLM`). SGLang then falls back to
transformers, which does not know it either, and the launch stops. --json-model-override-args sets the
config's `architectures` without touching the model folder; the name put there comes from the engine's own
registry (each srt/models file's EntryClass), never from the log.

An export can also name the family's model without its language-model head (`LlamaModel`, which SGLang
serves through transformers' fallback) or with a classification head (`LlamaForSequenceClassification`,
which pools instead of generating): a server asked to generate then runs degraded or crashes on the first
chat request. The family's `ForCausalLM`, where SGLang registers it, is what generates."""

from __future__ import annotations

import json
import re
from difflib import SequenceMatcher

from specdoctor.playbooks.base import Context, fix, playbook
from specdoctor.playbooks.decision import Decision
from specdoctor.tools.command import SetFlag
from specdoctor.tools.engine_source.architectures import registered_architectures

_UNREGISTERED = (
    r"'([\w.]+)' is not a registered model|Model architectures? \['([\w.]+)'\] (?:is|are) not supported"
)


def respelled_architecture(name: str, registered: frozenset[str]) -> tuple[str, float] | None:
    """The registered architecture `name` respells, and how sure: the same letters in another case, a
    registered name with a prefix put before it, or one name clearly closest (a typo away); None when nothing
    is close or two are as close."""
    if name in registered:
        return None
    folded = [a for a in registered if a.lower() == name.lower()]
    if len(folded) == 1:
        return folded[0], 0.7
    # A copy renamed with a prefix of its own (`MyLlamaForCausalLM`): the longest registered name it ends with.
    tails = sorted((a for a in registered if len(a) >= 10 and name.endswith(a)), key=len, reverse=True)
    if tails:
        return tails[0], 0.5
    ranked = sorted(
        ((SequenceMatcher(None, name.lower(), a.lower()).ratio(), a) for a in registered), reverse=True
    )
    if ranked and ranked[0][0] >= 0.9 and (len(ranked) == 1 or ranked[0][0] - ranked[1][0] >= 0.05):
        return ranked[0][1], 0.5
    return None


@playbook(id="sglang.model.architecture-respelled", category="model-path", pattern=_UNREGISTERED, priority=35)
def architecture_respelled(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    if m is None:
        return None
    written = m.group(1) or m.group(2)
    found = respelled_architecture(written, registered_architectures(ctx.catalog.version))
    if found is None:
        return None
    meant, confidence = found
    override = _user_override(ctx)
    if override is None:
        return None  # an override SGLang could not read is its own fault, named by the flag checks
    override["architectures"] = [meant]
    return fix(
        ctx,
        [SetFlag(flag="--json-model-override-args", values=(json.dumps(override),))],
        "model-path",
        f"the model config names architecture {written}, which SGLang does not register; it registers {meant}",
        why=f"--json-model-override-args sets the config's architectures to {meant} without editing the model "
        "folder (its config.json can be corrected instead)",
        evidence=(m.group(0),),
        confidence=confidence,
    )


def _user_override(ctx: Context) -> dict[str, object] | None:
    raw = ctx.view.get("--json-model-override-args")
    try:
        parsed = json.loads(raw) if raw else {}
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


# SGLang's log of which class it loads: "X has no SGLang implementation, falling back to Transformers",
# "Load weight end. ... type=X,".
_LOADED = (
    r"(\w+) has no SGLang implementation, falling back to Transformers|Load weight end\.[^\n]*?\btype=(\w+)"
)
# Heads that do not generate text: the bare model, classifiers and reward heads.
_NOT_GENERATING = re.compile(
    r"^(?P<family>[A-Z]\w*?)(?:Model|For(?:Sequence|Token)Classification|ForRewardModel)$"
)


@playbook(
    id="sglang.model.head-does-not-generate",
    category="model-path",
    when=("exited", "hung", "unhealthy", "degraded"),
    pattern=_LOADED,
    priority=36,
)
def head_does_not_generate(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """The config names the family's model without its generation head while the server is to generate."""
    if m is None or ctx.view.has("--is-embedding") or ctx.view.has("--json-model-override-args"):
        return None
    loaded = m.group(1) or m.group(2)
    head = _NOT_GENERATING.match(loaded)
    if head is None:
        return None
    meant = f"{head['family']}ForCausalLM"
    if meant not in registered_architectures(ctx.catalog.version):
        return None
    if m.group(2) and not any("pooler" in f"{f.path} {f.function}" for f in ctx.root.frames):
        return None  # a classifier loaded, but the failure is not its pooling where text was asked for
    return fix(
        ctx,
        [SetFlag(flag="--json-model-override-args", values=(json.dumps({"architectures": [meant]}),))],
        "model-path",
        f"the model config names {loaded}, a {head['family']} without its text-generation head; SGLang "
        f"registers {meant}",
        why=f"{loaded} does not generate (SGLang falls back to transformers, or pools for a classifier); "
        f"--json-model-override-args names {meant}, the head that does, without editing the model folder "
        "(if the checkpoint has no lm_head weights it cannot generate at all)",
        evidence=(m.group(0),),
        confidence=0.45,
    )
