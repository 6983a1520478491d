"""The command's --json-model-override-args is what the model build trips on: a value it sets is the very one
the error quotes ("Unsupported activation: gelu_pytorch_tanh"), or it names an architecture whose code asks
the model's config for fields that config does not have ("'LlamaConfig' object has no attribute
'kv_lora_rank'"): an override copied from another model's recipe. That key goes (the override with it when
nothing else is left); the checkpoint's own config.json stands."""

from __future__ import annotations

import json
import re

from specdoctor.playbooks.base import Context, fix, playbook
from specdoctor.playbooks.decision import Decision
from specdoctor.playbooks.json_values import json_container
from specdoctor.tools.command import Edit, RemoveFlag, SetFlag

_FLAG = "--json-model-override-args"
_CONFIG_LACKS = re.compile(r"'(\w+Config)' object has no attribute '(\w+)'")


@playbook(id="sglang.model.override-from-another-model", category="model-path", priority=45, scope="root")
def override_from_another_model(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    override = json_container(ctx.view.get(_FLAG) or "")
    error = ctx.root.error_line or ""
    if not isinstance(override, dict) or not error:
        return None
    lacks = _CONFIG_LACKS.search(error)
    if lacks and "architectures" in override and lacks.group(2) not in override:
        key, why = (
            "architectures",
            (
                f"the override makes the model {override['architectures']}, whose code reads {lacks.group(2)}, "
                f"which this checkpoint's {lacks.group(1)} does not have"
            ),
        )
    else:
        quoted = {k: w for k, v in override.items() for w in _strings_in(v) if _quoted_whole(w, error)}
        if len(quoted) != 1:
            return None
        key, word = next(iter(quoted.items()))
        why = f"the error quotes {word!r}, a value the override gives in {key}"
    return fix(
        ctx,
        [_without(override, key)],
        "model-path",
        f"--json-model-override-args sets {key}, which the model build cannot take: {error}",
        why=f"{why}; the checkpoint's own config.json value stands without it",
        evidence=(error,),
        confidence=0.6,
    )


_PLAIN_WORDS = frozenset({"auto", "none", "null", "true", "false", "default"})


def _strings_in(value: object) -> list[str]:
    """The text values of an override's entry, at any depth (`{"rope_type": "ntk"}` gives `ntk`)."""
    if isinstance(value, dict):
        return [w for v in value.values() for w in _strings_in(v)]
    if isinstance(value, list):
        return [w for v in value for w in _strings_in(v)]
    return [value] if isinstance(value, str) else []


def _quoted_whole(word: str, error: str) -> bool:
    """The error names the value as a whole word, and the value is no word every message has."""
    return (
        len(word) >= 3
        and word.lower() not in _PLAIN_WORDS
        and re.search(rf"(?<![\w.-]){re.escape(word)}(?![\w-])", error) is not None
    )


def _without(override: dict[str, object], key: str) -> Edit:
    rest = {k: v for k, v in override.items() if k != key}
    return SetFlag(flag=_FLAG, values=(json.dumps(rest),)) if rest else RemoveFlag(flag=_FLAG)


def leftover_quantization(ctx: Context, failure: str) -> Decision | None:
    """A quantization kernel cannot take the checkpoint's shapes although nothing is split (--tp-size 1) and
    the command asks for no quantization: the model's config.json names one its weights do not have, as a
    merge or dequantization export leaves it. The override drops it; the config's other keys stand."""
    if ctx.view.tp != 1 or ctx.view.has("--quantization"):
        return None
    override = json_container(ctx.view.get(_FLAG) or "{}")
    if not isinstance(override, dict) or "quantization_config" in override:
        return None
    return fix(
        ctx,
        [SetFlag(flag=_FLAG, values=(json.dumps({**override, "quantization_config": None}),))],
        "quantization",
        f"{failure} with nothing split (--tp-size 1): the checkpoint's weights do not have the shapes of the "
        "quantization its config.json names",
        why="a quantization_config left in config.json after the weights were merged or dequantized makes "
        'SGLang build quantized layers for plain weights; {"quantization_config": null} reads them as they are '
        "(if the checkpoint really is quantized, it was made for another kernel and no flag mends it)",
        confidence=0.45,
    )
