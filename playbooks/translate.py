"""Rewrite a vLLM (or older SGLang) flag into what the installed SGLang means by it.

Most are renames. A few change shape: vLLM's speculative flags describe a chain of N proposed tokens,
which SGLang spells as three related flags, and `--speculative-config` packs several flags into JSON.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from specdoctor.playbooks.decision import Finding
from specdoctor.playbooks.view import CommandView, as_int
from specdoctor.tools.catalog import FlagCatalog
from specdoctor.tools.command import Edit, LaunchCommand, Option, RemoveFlag, RenameFlag, SetFlag
from specdoctor.tools.flag_synonyms import BY_WRITTEN, Synonym
from specdoctor.tools.system import model_facts

_VLLM_METHODS = {
    "eagle3": "EAGLE3",
    "eagle": "EAGLE",
    "mtp": "NEXTN",
    "deepseek_mtp": "NEXTN",
    "ngram": "NGRAM",
    "ngram_gpu": "NGRAM",
    "draft_model": "STANDALONE",
    "dflash": "DFLASH",
    "dspark": "DSPARK",
}


def vllm_algorithm(method: object) -> str | None:
    """SGLang's --speculative-algorithm for a vLLM speculative `method`; None when SGLang has no counterpart."""
    return _VLLM_METHODS.get(str(method).strip().lower()) if method else None


def kind_from_name(path: str) -> str | None:
    """EAGLE3 / EAGLE when a draft's path says so; None when the name tells nothing."""
    name = path.lower()
    if "eagle3" in name or "eagle-3" in name:
        return "EAGLE3"
    return "EAGLE" if "eagle" in name else None


Translation = tuple[tuple[Edit, ...], str]
"""Edits and the sentence that explains them."""


def translate_synonym(opt: Option, syn: Synonym, spec: LaunchCommand, catalog: FlagCatalog) -> Finding:
    where = "vLLM" if syn.origin == "vllm" else "an older SGLang"
    rule = _RULES.get(syn.translate or "")
    if rule is not None:
        edits, why = rule(opt, spec, catalog)
    elif syn.target is None:
        edits, why = (
            (RemoveFlag(flag=opt.name),),
            f"SGLang has no counterpart: {syn.note}" if syn.note else "SGLang has no counterpart",
        )
    else:
        edits, why = (RenameFlag(flag=opt.name, to=syn.target),), f"{syn.target} is SGLang's name for it"
        if syn.note:
            why += f" ({syn.note})"
    target = f"; SGLang spells it {syn.target}" if syn.target else ""
    return Finding(
        code="foreign-flag",
        severity="error",
        category="flag-name",
        flag=opt.name,
        message=f"{opt.name} is {where}'s flag, unknown to SGLang {catalog.version}{target}",
        evidence=(f"error: unrecognized arguments: {' '.join(opt.tokens())}",),
        edits=edits,
        why=why,
        confidence=0.9 if edits else 0.0,
    )


def spelled_today(
    flag: str, values: tuple[str, ...], spec: LaunchCommand, catalog: FlagCatalog
) -> tuple[Edit, ...]:
    """The edits that give `flag values` (a flag of another release, named in advice rather than written in
    the command) in this catalog's spelling; () when no synonym knows it."""
    syn = BY_WRITTEN.get(flag)
    if syn is None or syn.target is None:
        return ()
    found = translate_synonym(Option(name=flag, values=values), syn, spec, catalog)
    edits: list[Edit] = []
    for edit in found.edits:
        if isinstance(edit, RemoveFlag) and edit.flag == flag:
            continue
        edits.append(SetFlag(flag=edit.to, values=values) if isinstance(edit, RenameFlag) else edit)
    return tuple(edits)


def _algorithm_after(spec: LaunchCommand, catalog: FlagCatalog) -> str | None:
    """The algorithm the command will have once its vLLM speculative flags are translated."""
    view = CommandView(spec, catalog)
    if view.algorithm:
        return view.algorithm
    for opt in spec.options():
        if opt.name == "--speculative-model" and opt.values and "ngram" in opt.values[0].lower():
            return "NGRAM"
        if opt.name in ("--speculative-config", "--spec-method") and opt.values:
            method = (
                _config(opt.values[0]).get("method") if opt.name == "--speculative-config" else opt.values[0]
            )
            if isinstance(method, str):
                return vllm_algorithm(method)
    return None


def chain_edits(tokens: int, spec: LaunchCommand, catalog: FlagCatalog, algorithm: str | None) -> Translation:
    """SGLang flags for `tokens` draft tokens verified per step, consistent with SGLang's rules."""
    view = CommandView(spec, catalog)
    if algorithm not in view.facts.speculative.eagle_family:
        return (SetFlag(flag="--speculative-num-draft-tokens", values=(str(tokens),)),), (
            f"--speculative-num-draft-tokens {tokens} is how many tokens {algorithm or 'the drafter'} proposes for verification"
        )
    topk = view.int("--speculative-eagle-topk") or 1
    if topk == 1:
        steps = max(tokens - 1, 1)
        # SGLang forces draft tokens to steps + 1 with topk 1, and steps must be at least 1.
        asked, tokens = tokens, steps + 1
        why = (
            f"--speculative-num-draft-tokens {tokens}; with --speculative-eagle-topk 1 SGLang forces the draft-token "
            f"count to --speculative-num-steps + 1, so it needs --speculative-num-steps {steps} (giving topk or "
            f"draft tokens without num-steps is rejected). vLLM's exact chain of {asked} proposals would be "
            f"--speculative-num-steps {asked} --speculative-num-draft-tokens {asked + 1}"
        )
    else:
        steps = next(s for s in range(1, tokens + 1) if topk + (s - 1) * topk * topk >= tokens - 1)
        why = (
            f"--speculative-num-draft-tokens {tokens} with --speculative-eagle-topk {topk} needs --speculative-num-steps; "
            f"{steps} is the fewest steps whose tree ({topk} + (steps-1)·{topk}²) holds {tokens - 1} candidates"
        )
    edits: list[Edit] = [SetFlag(flag="--speculative-num-draft-tokens", values=(str(tokens),))]
    if view.int("--speculative-num-steps") is None:
        edits.append(SetFlag(flag="--speculative-num-steps", values=(str(steps),)))
    if not view.has("--speculative-eagle-topk"):
        edits.append(SetFlag(flag="--speculative-eagle-topk", values=("1",)))
    return tuple(edits), why


def _speculative_tokens(opt: Option, spec: LaunchCommand, catalog: FlagCatalog) -> Translation:
    n = as_int(opt.values[0]) if opt.values else None
    if n is None or n < 1:
        return (RemoveFlag(flag=opt.name),), "no usable token count was given"
    edits, why = chain_edits(n, spec, catalog, _algorithm_after(spec, catalog))
    return (RemoveFlag(flag=opt.name), *edits), why


def _speculative_model(opt: Option, spec: LaunchCommand, catalog: FlagCatalog) -> Translation:
    value = opt.values[0] if opt.values else ""
    view = CommandView(spec, catalog)
    if "ngram" in value.lower():
        edits: list[Edit] = [RemoveFlag(flag=opt.name)]
        if view.algorithm != "NGRAM":
            edits.append(SetFlag(flag="--speculative-algorithm", values=("NGRAM",)))
        return tuple(
            edits
        ), "vLLM's `[ngram]` draft is SGLang's --speculative-algorithm NGRAM (prompt lookup, no draft model)"
    edits = [RenameFlag(flag=opt.name, to="--speculative-draft-model-path")]
    if view.algorithm is None:
        algorithm = draft_algorithm(value)
        edits.append(SetFlag(flag="--speculative-algorithm", values=(algorithm,)))
        return (
            tuple(edits),
            f"the draft model goes to --speculative-draft-model-path; its kind gives --speculative-algorithm {algorithm}",
        )
    return tuple(edits), "the draft model goes to --speculative-draft-model-path"


def draft_algorithm(path: str) -> str:
    """EAGLE3 / EAGLE / STANDALONE for a draft, from its config.json, else its name."""
    return draft_kind(path) or "STANDALONE"


def draft_kind(path: str) -> str | None:
    """EAGLE3 / EAGLE when the draft's config.json or its name says so; None when neither tells."""
    return model_facts(path).draft_kind or kind_from_name(path)


def _config(raw: str) -> dict:
    try:
        data = json.loads(raw)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _speculative_config(opt: Option, spec: LaunchCommand, catalog: FlagCatalog) -> Translation:
    data = _config(opt.values[0]) if opt.values else {}
    if not data:
        return (), "--speculative-config is not a JSON object; write SGLang's --speculative-* flags instead"
    edits: list[Edit] = [RemoveFlag(flag=opt.name)]
    said: list[str] = []
    model = data.get("model")
    method = data.get("method")
    algorithm = (
        vllm_algorithm(method) if method else (draft_algorithm(model) if isinstance(model, str) else None)
    )
    if algorithm:
        edits.append(SetFlag(flag="--speculative-algorithm", values=(algorithm,)))
        said.append(f"method {method or 'from the draft'} → --speculative-algorithm {algorithm}")
    elif method:
        said.append(
            f"SGLang has no algorithm for vLLM method {method!r}; choose --speculative-algorithm yourself"
        )
    if isinstance(model, str):
        edits.append(SetFlag(flag="--speculative-draft-model-path", values=(model,)))
        said.append("model → --speculative-draft-model-path")
    tokens = data.get("num_speculative_tokens")
    if isinstance(tokens, int) and tokens > 0:
        more, why = chain_edits(tokens, spec, catalog, algorithm)
        edits.extend(more)
        said.append(why)
    dropped = sorted(set(data) - {"method", "model", "num_speculative_tokens"})
    if dropped:
        said.append(f"no SGLang counterpart for {', '.join(dropped)}")
    return tuple(edits), "; ".join(said)


def _speculative_method(opt: Option, spec: LaunchCommand, catalog: FlagCatalog) -> Translation:
    method = opt.values[0] if opt.values else ""
    algorithm = vllm_algorithm(method)
    if algorithm is None:
        return (
            (),
            f"SGLang has no algorithm for vLLM method {method!r}; choose --speculative-algorithm yourself",
        )
    return (
        RenameFlag(flag=opt.name, to="--speculative-algorithm", values=(algorithm,)),
    ), f"vLLM method {method} is SGLang's {algorithm}"


def _enforce_eager(opt: Option, spec: LaunchCommand, catalog: FlagCatalog) -> Translation:
    if "--cuda-graph-backend-decode" in catalog:
        edits: tuple[Edit, ...] = (
            RemoveFlag(flag=opt.name),
            SetFlag(flag="--cuda-graph-backend-decode", values=("disabled",)),
            SetFlag(flag="--cuda-graph-backend-prefill", values=("disabled",)),
        )
        return edits, "vLLM's eager mode turns CUDA graphs off; SGLang does that per phase"
    return (
        RenameFlag(flag=opt.name, to="--disable-cuda-graph"),
    ), "vLLM's eager mode is SGLang's --disable-cuda-graph"


def _prefill_graphs_off(opt: Option, spec: LaunchCommand, catalog: FlagCatalog) -> Translation:
    return (
        (
            RemoveFlag(flag=opt.name),
            SetFlag(flag="--cuda-graph-backend-prefill", values=("disabled",)),
        ),
        "the piecewise (prefill) CUDA graphs are turned off per phase now: --cuda-graph-backend-prefill disabled",
    )


def _expert_parallel(opt: Option, spec: LaunchCommand, catalog: FlagCatalog) -> Translation:
    tp = CommandView(spec, catalog).tp
    return (RemoveFlag(flag=opt.name), SetFlag(flag="--ep-size", values=(str(tp),))), (
        f"vLLM's switch means EP = TP; SGLang takes the size: --ep-size {tp}"
    )


def _drop_value(opt: Option, spec: LaunchCommand, catalog: FlagCatalog) -> Translation:
    return (
        RemoveFlag(flag=opt.name),
    ), "the unit differs, so there is no direct translation; SGLang sizes it automatically"


_RULES: dict[str, Callable[[Option, LaunchCommand, FlagCatalog], Translation]] = {
    "speculative_tokens": _speculative_tokens,
    "speculative_model": _speculative_model,
    "speculative_config": _speculative_config,
    "speculative_method": _speculative_method,
    "enforce_eager": _enforce_eager,
    "prefill_graphs_off": _prefill_graphs_off,
    "expert_parallel": _expert_parallel,
    "drop_value": _drop_value,
}
