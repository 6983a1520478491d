"""Speculative decoding failures: a useless drafter (accept length ~1.0), SGLang's rules on
steps/topk/draft tokens, and features the speculative path does not support."""

from __future__ import annotations

import re

from specdoctor.playbooks.base import Context, fix, playbook, stop
from specdoctor.playbooks.decision import Decision, Finding
from specdoctor.playbooks.spec_checks import chain_drafting, check_speculative
from specdoctor.playbooks.translate import kind_from_name
from specdoctor.tools.command import RemoveFlag, SetEnv, SetFlag


def _first_finding(ctx: Context, *codes: str) -> Finding | None:
    """The first fixable finding of the static speculative checks with one of these codes."""
    found = check_speculative(ctx.spec, ctx.catalog, ctx.model, ctx.draft)
    return next((f for f in found if f.code in codes and f.edits), None)


def _first_fix(ctx: Context, *codes: str) -> Decision | None:
    first = _first_finding(ctx, *codes)
    return _from_finding(ctx, first) if first is not None else None


def _from_finding(ctx: Context, f: Finding, evidence: tuple[str, ...] = ()) -> Decision | None:
    return fix(
        ctx,
        f.edits,
        f.category,
        f.message,
        why=f.why,
        evidence=evidence or ctx.evidence(),
        confidence=f.confidence,
    )


@playbook(id="sglang.spec.accept-length-one", category="spec-draft-mismatch", when=("degraded",), priority=10)
def accept_length_one(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """The server answers but every draft token is rejected: the drafter does not match the algorithm."""
    accept = ctx.outcome.accept_length
    # At or under the facts table's "none accepted" level every drafted token is rejected.
    if accept is None or accept > ctx.view.facts.acceptance.none_accepted:
        return None
    evidence = ctx.evidence(r"accept[ _]len", r"spec_accept_length") or (f"accept length {accept:.2f}",)
    if ctx.view.algorithm == "NGRAM":
        return _ngram_accepts_nothing(ctx, accept, evidence)
    mismatch = _first_finding(ctx, "eagle3-draft-as-eagle", "eagle-draft-as-eagle3")
    if mismatch is not None:
        return _from_finding(ctx, mismatch, evidence)
    view = ctx.view
    draft = view.get("--speculative-draft-model-path")
    if (
        view.algorithm in ("EAGLE", "EAGLE3")
        and draft
        and ctx.draft
        and ctx.draft.has_config
        and not ctx.draft.draft_kind
        and not kind_from_name(draft)
    ):
        return fix(
            ctx,
            [SetFlag(flag="--speculative-algorithm", values=("STANDALONE",))],
            "spec-draft-mismatch",
            f"the draft {draft} is a plain language model ({ctx.draft.architecture}), not an EAGLE head",
            why="a small standalone model drafts with --speculative-algorithm STANDALONE",
            evidence=evidence,
            confidence=0.7,
        )
    return stop(
        ctx,
        "spec-draft-mismatch",
        f"speculative decoding runs but accepts nothing (accept length {accept:.2f}): the draft does not predict this target",
        "Use a draft trained for this exact target model (same tokenizer and hidden size); check that the "
        "algorithm matches the draft (EAGLE3 for EAGLE-3 heads).",
        evidence=evidence,
        confidence=0.6,
    )


def _ngram_accepts_nothing(ctx: Context, accept: float, evidence: tuple[str, ...]) -> Decision | None:
    """NGRAM has no draft model to retrain: it copies drafts from earlier text of the same request."""
    return stop(
        ctx,
        "spec-draft-mismatch",
        f"NGRAM speculative decoding runs but accepts nothing (accept length {accept:.2f}): the text it saw "
        "repeats nothing it could copy",
        "NGRAM pays off where outputs repeat their input (code edits, retrieval, summaries that quote): measure "
        "it on your real requests. For general text use a draft model trained for this target (EAGLE3), or "
        "launch without speculative decoding.",
        evidence=evidence,
        confidence=0.6,
    )


@playbook(
    id="sglang.spec.steps-missing",
    category="spec-config",
    pattern=r"AssertionError|speculative_eagle_topk is None and speculative_num_draft_tokens is None",
    priority=20,
)
def steps_missing(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """topk or draft tokens without num-steps: SGLang's bare AssertionError in the speculative hook."""
    return _first_fix(ctx, "spec-steps-missing")


@playbook(
    id="sglang.spec.only-steps",
    category="spec-config",
    pattern=r"TypeError: '[<>]=?' not supported between instances of 'NoneType' and 'int'",
    priority=20,
)
def only_steps(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """num-steps alone leaves topk and draft tokens unset; a later comparison with None fails."""
    return _first_fix(ctx, "spec-only-steps", "spec-topk-missing")


@playbook(
    id="sglang.spec.unknown-algorithm",
    category="spec-config",
    pattern=r"Unknown speculative algorithm name",
    priority=20,
)
def unknown_algorithm(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """An algorithm name this SGLang does not have."""
    found = _first_finding(ctx, "spec-unknown-algorithm")
    if found is not None:
        return _from_finding(ctx, found)
    return stop(
        ctx,
        "spec-config",
        "SGLang does not know this speculative algorithm",
        "Pick one from `--help` (Builtins: ...).",
    )


@playbook(
    id="sglang.spec.dp-attention",
    category="spec-config",
    pattern=r"speculative decoding does not support dp attention|does not support DP attention",
    priority=20,
)
def dp_attention(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """NGRAM and STANDALONE drafting cannot run with DP attention; keep the drafter, drop DP attention."""
    return _first_fix(ctx, "spec-dp-attention")


@playbook(
    id="sglang.spec.needs-chain",
    category="spec-config",
    pattern=r"only supports? topk ?=+ ?1|topk ?<= ?1\)?|linear draft chain only|requires --speculative-eagle-topk=1|"
    r"speculative_eagle_topk(?:\(\d+\))? > 1 with page_size",
    priority=20,
)
def needs_chain(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """Tree drafting (topk > 1) where only a chain is supported: a backend, paging, a sampler, a verifier."""
    topk = ctx.view.int("--speculative-eagle-topk")
    if topk is None or topk <= 1:
        return None  # already a chain: the feature that needs one is the fault (see engine_bugs.feature)
    return fix(
        ctx,
        chain_drafting(ctx.view.int("--speculative-num-steps")),
        "spec-config",
        f"tree drafting (topk {topk}) is not supported here: {ctx.root.error_line or m.group(0) if m else ''}",
        why="topk 1 drafts a single chain of num-steps tokens, which every backend supports",
    )


_ONLY_ALGOS = re.compile(
    r"Only ([A-Z0-9_]+(?:(?:, | and | or )[A-Z0-9_]+)*) speculative algorithms? (?:are|is) supported"
)


@playbook(
    id="sglang.spec.supported-algorithms", category="spec-config", pattern=_ONLY_ALGOS.pattern, priority=20
)
def supported_algorithms(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """The model allows only some speculative algorithms, and says which."""
    assert m is not None
    allowed = re.split(r", | and | or ", m.group(1))
    current = ctx.view.algorithm
    # NEXTN is SGLang's alias of EAGLE (MTP heads); some checks read the name before the alias is resolved.
    target = "EAGLE" if current == "NEXTN" and "EAGLE" in allowed else allowed[0]
    if target == (ctx.view.get("--speculative-algorithm") or ""):
        return None
    return fix(
        ctx,
        [SetFlag(flag="--speculative-algorithm", values=(target,))],
        "spec-config",
        f"this model supports only {', '.join(allowed)} as --speculative-algorithm",
        why=f"{target} is the allowed algorithm closest to {current}"
        + (" (NEXTN is an alias of EAGLE the check does not resolve)" if current == "NEXTN" else ""),
        confidence=0.85,
    )


@playbook(
    id="sglang.spec.v2-tree-shapes",
    category="spec-config",
    pattern=r"Sizes of tensors must match|shape .* is invalid for input of size|size mismatch",
    priority=30,
)
def spec_v2_tree(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """A tensor-shape crash in the draft path with topk > 1: the overlap (v2) worker drafts chains only."""
    view = ctx.view
    topk = view.int("--speculative-eagle-topk") or 1
    in_draft = any(
        re.search(r"speculative|eagle|draft", f.path + f.function, re.I) for f in ctx.root.frames
    ) or re.search(r"eagle|draft|speculative", ctx.root_text, re.I)
    if view.algorithm not in view.facts.speculative.eagle_family or topk <= 1 or not in_draft:
        return None
    why = "the overlap (spec v2) EAGLE worker implements chain drafting (topk 1) only"
    decision = fix(
        ctx,
        chain_drafting(view.int("--speculative-num-steps")),
        "spec-config",
        f"tree drafting (topk {topk}) breaks the draft step's tensor shapes",
        why=why,
    )
    if decision is None and view.truthy_env("SGLANG_ENABLE_SPEC_V2"):
        decision = fix(
            ctx,
            [SetEnv(name="SGLANG_ENABLE_SPEC_V2", value="0")],
            "spec-config",
            "tree drafting under spec v2 breaks the draft step",
            why="the v1 worker supports tree drafting",
        )
    return decision


@playbook(
    id="sglang.spec.attention-backend",
    category="attention-backend",
    pattern=r"not supported with Flex Attention|'NoneType' object has no attribute|TARGET_VERIFY|spec_info",
    priority=30,
)
def backend_without_spec(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """An attention backend without a speculative (target-verify) path crashes once drafts are verified."""
    backend = ctx.view.get("--attention-backend")
    if ctx.view.algorithm is None or backend not in ctx.view.facts.speculative.no_spec_backends:
        return None
    return _first_fix(ctx, "spec-attention-backend")


@playbook(
    id="sglang.spec.validation",
    category="spec-config",
    pattern=r"(?:ValueError|NotImplementedError): .*(?:--speculative-|speculative)",
    priority=40,
)
def validation(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """SGLang's speculative hook rejected a combination it names; apply the matching static fix."""
    line = ctx.root.error_line or ""
    named = set(re.findall(r"--[a-z0-9\-]+", line))
    for f in check_speculative(ctx.spec, ctx.catalog, ctx.model, ctx.draft):
        flags = {getattr(e, "flag", "") for e in f.edits}
        if f.edits and f.severity == "error" and (flags & named or not named):
            return _from_finding(ctx, f)
    return None


@playbook(id="sglang.spec.no-draft", category="spec-draft-mismatch", when=("exited", "hung"), priority=70)
def no_draft(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """The launch failed before ready running EAGLE-family speculation with no draft model: SGLang loaded
    the target as its own draft, which only an MTP checkpoint can be."""
    if ctx.outcome.ready_seen:
        return None
    return _first_fix(ctx, "spec-no-draft")


@playbook(id="sglang.spec.overlap-worker", category="spec-config", priority=60)
def overlap_worker(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """A crash inside the overlap (spec v2) draft worker: the synchronous path is the tested fallback."""
    text = ctx.search_text
    if ctx.view.algorithm is None or ctx.view.has("--disable-overlap-schedule"):
        return None
    if not re.search(r"eagle_worker_v2|_worker_v2\.py|spec_v2", text):
        return None
    # A state the overlap path forgot to prepare: a None where the draft step expects metadata.
    if not re.search(r"must not be None|is None|NoneType", ctx.root.error_line or ""):
        return None
    if not re.search(r"draft_extend|prepare_for|metadata|spec_info", text):
        return None
    return fix(
        ctx,
        [SetFlag(flag="--disable-overlap-schedule")],
        "spec-config",
        "speculative decoding crashed in the overlap-scheduler (spec v2) draft worker",
        why="--disable-overlap-schedule runs drafting synchronously, a separate and older code path",
        confidence=0.6,
    )


@playbook(id="sglang.spec.disaggregation", category="spec-config", priority=60)
def with_disaggregation(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """A speculative decode worker of a PD-disaggregated deployment crashes on a missing draft state."""
    view = ctx.view
    if view.algorithm is None or view.get("--disaggregation-mode") != "decode":
        return None
    if view.algorithm in view.facts.speculative.pd_decode_algorithms:
        return None  # the PD hand-over carries this algorithm's draft state: a crash here is something else
    if not re.search(r"spec_info|NoneType", ctx.root.error_line or "") or not re.search(
        r"speculative|spec_", ctx.root_text
    ):
        return None
    edits = [
        RemoveFlag(flag=o.name)
        for o in view.spec.options()
        if view.canon(o.name).startswith("--speculative-")
    ]
    return fix(
        ctx,
        edits,
        "spec-config",
        f"{view.algorithm} speculative decoding has no draft state on a PD decode worker "
        "(the prefill side does not hand one over for this algorithm)",
        why="without speculative decoding the disaggregated decode worker runs; use an algorithm the PD "
        "hand-over supports (EAGLE) to get drafting back",
        # Below the default auto-apply threshold: dropping speculation is a real loss the user should approve.
        confidence=0.45,
    )


@playbook(
    id="sglang.spec.backend-unsupported",
    category="attention-backend",
    pattern=r"does not support speculative decoding",
    priority=32,
)
def backend_unsupported(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """An attention backend (or the hybrid of two) has no draft/verify path."""
    view = ctx.view
    if view.get("--attention-backend") in view.facts.speculative.no_spec_backends:
        return None  # backend_without_spec fixes that one
    hybrid = [f for f in ("--prefill-attention-backend", "--decode-attention-backend") if view.has(f)]
    advice = (
        f"Use one attention backend for both phases (without {', '.join(hybrid)}), "
        if hybrid
        else "Pick an attention backend with speculative support (flashinfer, triton, fa3), "
    ) + "or launch without speculative decoding; this SGLang has no draft/verify path for this combination."
    return stop(
        ctx,
        "attention-backend",
        f"this attention setup cannot do speculative decoding: {ctx.root.error_line}",
        advice,
        confidence=0.7,
    )


_DTYPE_CLASH = re.compile(
    r"(?i)must have the same dtype|expected (?:mat1 and mat2|both \w+|all \w+) to have the same dtype|"
    r"expected scalar type \w+ but found \w+|dtype mismatch",
    re.I,
)
_HALF = (
    ("bfloat16", re.compile(r"\bBFloat16\b|bfloat16|\bbf16\b")),
    ("float16", re.compile(r"\bHalf\b|(?<!b)float16\b")),
)
_IN_DRAFT = re.compile(r"draft|eagle|nextn|mtp", re.I)


@playbook(
    id="sglang.spec.draft-dtype", category="spec-draft-mismatch", pattern=_DTYPE_CLASH.pattern, priority=12
)
def draft_dtype(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """Tensors of two dtypes meet in a speculative launch: with --dtype auto the target and the draft each
    load in their own checkpoint's dtype, and the draft's hidden states meet the target's weights. One
    --dtype loads both the same."""
    view = ctx.view
    if view.algorithm is None or not view.has("--speculative-draft-model-path"):
        return None
    if view.get("--dtype") not in (None, "auto"):
        return None
    said = ctx.root_text or ctx.search_text
    model_dtype = ctx.model.torch_dtype if ctx.model else None
    named = [name for name, pattern in _HALF if pattern.search(said)]
    target = model_dtype if model_dtype in ("bfloat16", "float16") else (named[0] if named else "bfloat16")
    return fix(
        ctx,
        [SetFlag(flag="--dtype", values=(target,))],
        "spec-draft-mismatch",
        "the draft and the target compute in different dtypes",
        why=f"--dtype auto loads the target and the draft each in its own checkpoint's dtype; --dtype {target} "
        "loads both alike",
        # The draft's code on the failing path is a finding; a dtype clash elsewhere in a speculative
        # launch may be another part's (a sampler's fp32 against fp16): a lead.
        confidence=0.6 if _IN_DRAFT.search(f"{ctx.root_text}\n{ctx.log_text}") else 0.45,
    )
