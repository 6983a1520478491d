"""Static checks of speculative decoding settings: the rules SGLang 0.5.23 enforces in
`srt/arg_groups/speculative_hook.py`, and the mismatches it does not catch but that make the drafter useless.
"""

from __future__ import annotations

import re

from specdoctor.playbooks.decision import Finding
from specdoctor.playbooks.translate import kind_from_name
from specdoctor.playbooks.view import CommandView
from specdoctor.tools.catalog import FlagCatalog
from specdoctor.tools.command import Edit, LaunchCommand, RemoveFlag, SetFlag
from specdoctor.tools.similarity import only_version_differs, score
from specdoctor.tools.system import ModelFacts

_SPEC_FLAG = re.compile(r"^--speculative-(?!algorithm)")


def builtin_algorithms(catalog: FlagCatalog) -> tuple[str, ...]:
    """The algorithms this SGLang knows: argparse choices in old releases, the help's `Builtins:` list since
    0.5.12 made the flag free-form."""
    flag = catalog.get("--speculative-algorithm")
    if flag is None:
        return ()
    if flag.choices:
        return flag.choices
    m = re.search(r"Builtins:\s*([A-Z0-9_, ]+)", flag.help)
    names = [n.strip() for n in m.group(1).split(",")] if m else []
    return tuple(n for n in names if n) or ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")


def check_speculative(
    spec: LaunchCommand,
    catalog: FlagCatalog,
    model: ModelFacts | None = None,
    draft: ModelFacts | None = None,
) -> list[Finding]:
    view = CommandView(spec, catalog)
    algorithm = view.algorithm
    if algorithm is None:
        return _spec_flags_without_algorithm(view, draft)
    known = builtin_algorithms(catalog)
    if known and algorithm not in known and algorithm != "FROZEN_KV_MTP":
        return [_unknown_algorithm(view, algorithm, known, draft)]
    found: list[Finding] = []
    if algorithm in view.facts.speculative.eagle_family:
        found += _steps_topk_draft(view, algorithm)
        found += _draft_model(view, algorithm, model, draft)
    found += _unsupported_combinations(view, algorithm)
    return found


def _f(
    code: str, severity: str, message: str, edits: tuple[Edit, ...] = (), why: str = "", **kw: object
) -> Finding:
    return Finding(
        code=code,
        severity=severity,
        category=kw.pop("category", "spec-config"),
        message=message,
        edits=edits,
        why=why,
        **kw,
    )  # type: ignore[arg-type]


def _spec_flags_without_algorithm(view: CommandView, draft: ModelFacts | None) -> list[Finding]:
    written = [o.name for o in view.spec.options() if _SPEC_FLAG.match(view.canon(o.name))]
    if not written:
        return []
    edits: tuple[Edit, ...] = ()
    if view.has("--speculative-draft-model-path"):
        kind = (draft.draft_kind if draft else None) or kind_from_name(
            view.get("--speculative-draft-model-path") or ""
        )
        if kind:
            edits = (SetFlag(flag="--speculative-algorithm", values=(kind,)),)
    return [
        _f(
            "spec-no-algorithm",
            "warning",
            f"{', '.join(written)} given without --speculative-algorithm: SGLang ignores them and serves without speculative decoding",
            edits,
            f"the draft is an {edits[0].values[0]} draft" if edits else "",  # type: ignore[union-attr]
            category="spec-config",
        )
    ]


def _unknown_algorithm(
    view: CommandView, algorithm: str, known: tuple[str, ...], draft: ModelFacts | None
) -> Finding:
    kind = draft.draft_kind if draft else None
    ranked = sorted(
        ((score(algorithm, k), k) for k in known if not only_version_differs(k, algorithm)), reverse=True
    )
    target = (
        kind
        if kind in known
        else (
            ranked[0][1]
            if ranked
            and ranked[0][0] >= 0.85
            and ranked[0][0] - (ranked[1][0] if len(ranked) > 1 else 0) >= 0.1
            else None
        )
    )
    return _f(
        "spec-unknown-algorithm",
        "error",
        f"--speculative-algorithm {algorithm} is not an algorithm SGLang {view.catalog.version} knows ({', '.join(known)})",
        (SetFlag(flag="--speculative-algorithm", values=(target,)),) if target else (),
        f"{target} matches {'the draft model' if kind else 'the name'}" if target else "",
        evidence=(f"ValueError: Unknown speculative algorithm name: {algorithm}",),
    )


def _steps_topk_draft(view: CommandView, algorithm: str) -> list[Finding]:
    steps = view.int("--speculative-num-steps")
    topk = view.int("--speculative-eagle-topk")
    tokens = view.int("--speculative-num-draft-tokens")
    if view.has("--speculative-adaptive"):
        return []
    if steps is None and (topk is not None or tokens is not None):
        return [_steps_missing(topk, tokens)]
    if steps is not None and topk is None and tokens is None:
        return [
            _f(
                "spec-only-steps",
                "error",
                f"--speculative-num-steps {steps} without --speculative-eagle-topk and --speculative-num-draft-tokens: "
                "SGLang then skips choosing them and crashes comparing None (TypeError)",
                (
                    SetFlag(flag="--speculative-eagle-topk", values=("1",)),
                    SetFlag(flag="--speculative-num-draft-tokens", values=(str(steps + 1),)),
                ),
                f"give all three or none; a chain of {steps} steps verifies {steps + 1} tokens with topk 1",
                evidence=("TypeError: '>' not supported between instances of 'NoneType' and 'int'",),
            )
        ]
    if steps is None or topk is None:
        return _partial(steps, topk, tokens)
    if topk > 1 and tokens is None:
        return [_tree_without_tokens(steps, topk)]
    if topk == 1 and tokens is not None and tokens != steps + 1:
        return [
            _f(
                "spec-chain-tokens",
                "warning",
                f"with --speculative-eagle-topk 1 SGLang replaces --speculative-num-draft-tokens {tokens} by "
                f"--speculative-num-steps + 1 = {steps + 1}",
                (SetFlag(flag="--speculative-num-draft-tokens", values=(str(steps + 1),)),),
                "a chain of N steps always verifies N + 1 tokens; writing it keeps the command honest",
                evidence=(
                    "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1",
                ),
            )
        ]
    if topk > 1 and tokens is not None and tokens - 1 > topk + (steps - 1) * topk * topk:
        most = 1 + topk + (steps - 1) * topk * topk
        return [
            _f(
                "spec-tree-too-small",
                "error",
                f"--speculative-num-draft-tokens {tokens} exceeds what {steps} steps of topk {topk} can propose ({most})",
                (SetFlag(flag="--speculative-num-draft-tokens", values=(str(most),)),),
                "the verifier picks num-draft-tokens - 1 candidates from topk + (steps-1)·topk² drafts",
            )
        ]
    return []


def _tree_without_tokens(steps: int, topk: int) -> Finding:
    """SGLang fills --speculative-num-draft-tokens in only for a chain (topk 1, steps + 1): a tree of
    topk > 1 leaves it None, and the tokenizer manager's reserve arithmetic fails on it."""
    most = 1 + topk + (steps - 1) * topk * topk
    tokens = min(most, steps * topk)
    return _f(
        "spec-tree-tokens-missing",
        "error",
        f"--speculative-num-steps {steps} and --speculative-eagle-topk {topk} without "
        "--speculative-num-draft-tokens: SGLang sets it only for topk 1, and crashes comparing None (TypeError)",
        (SetFlag(flag="--speculative-num-draft-tokens", values=(str(tokens),)),),
        f"a tree of {steps} steps with topk {topk} proposes up to {most} tokens; {tokens} (steps × topk) verifies "
        "a tree of that shape without padding it out (tune it, or give none of the three and SGLang picks all)",
        evidence=("TypeError: '>' not supported between instances of 'NoneType' and 'int'",),
    )


def _steps_missing(topk: int | None, tokens: int | None) -> Finding:
    k = topk or 1
    if k == 1:
        d = tokens if tokens and tokens >= 2 else 4
        s = d - 1
        why = f"with --speculative-eagle-topk 1 the draft-token count is --speculative-num-steps + 1, so {d} tokens means {s} steps"
    else:
        d = tokens or 8
        s = next(x for x in range(1, d + 1) if k + (x - 1) * k * k >= d - 1)
        why = f"{s} steps of topk {k} propose enough candidates for {d} draft tokens"
    edits: list[Edit] = [SetFlag(flag="--speculative-num-steps", values=(str(s),))]
    if topk is None:
        edits.append(SetFlag(flag="--speculative-eagle-topk", values=("1",)))
    if tokens is None:
        edits.append(SetFlag(flag="--speculative-num-draft-tokens", values=(str(d),)))
    given = " and ".join(
        f
        for f, v in (("--speculative-eagle-topk", topk), ("--speculative-num-draft-tokens", tokens))
        if v is not None
    )
    return _f(
        "spec-steps-missing",
        "error",
        f"{given} without --speculative-num-steps: SGLang rejects it (bare AssertionError); it auto-chooses all three or none",
        tuple(edits),
        why,
        evidence=(
            "AssertionError  (assert speculative_eagle_topk is None and speculative_num_draft_tokens is None)",
        ),
    )


def _partial(steps: int | None, topk: int | None, tokens: int | None) -> list[Finding]:
    if steps is not None and topk is None and tokens is not None:
        k = (
            1
            if tokens == steps + 1
            else next((x for x in range(2, 17) if x + (steps - 1) * x * x >= tokens - 1), None)
        )
        message = (
            "--speculative-num-steps and --speculative-num-draft-tokens without --speculative-eagle-topk leave topk "
            "unset, which SGLang compares with 1"
        )
        if (
            k is None
        ):  # no tree of that depth holds that many drafts: which number was meant is not ours to guess
            return [
                _f(
                    "spec-topk-missing",
                    "error",
                    f"{message}; and {steps} step(s) cannot propose {tokens} draft tokens",
                )
            ]
        return [
            _f(
                "spec-topk-missing",
                "error",
                message,
                (SetFlag(flag="--speculative-eagle-topk", values=(str(k),)),),
                f"topk {k} fits {steps} steps and {tokens} draft tokens",
            )
        ]
    return []


def _draft_model(
    view: CommandView, algorithm: str, model: ModelFacts | None, draft: ModelFacts | None
) -> list[Finding]:
    path = view.get("--speculative-draft-model-path")
    if path is None:
        return _no_draft(view, algorithm, model)
    if draft is not None and draft.local and not draft.exists:
        return [
            _f("draft-missing", "error", f"draft model folder {path} does not exist", category="model-path")
        ]
    if draft is not None and draft.local and not draft.has_config:
        return [_f("draft-no-config", "error", f"draft model {path}: {draft.error}", category="model-path")]
    kind = draft.draft_kind if draft and draft.has_config else None
    source = f"its config.json says {draft.architecture}" if kind and draft else ""
    if kind is None and (draft is None or not draft.has_config):
        kind = kind_from_name(path)
        source = f"its name says {kind}" if kind else ""
    if algorithm == "EAGLE" and kind == "EAGLE3":
        return [
            _f(
                "eagle3-draft-as-eagle",
                "error",
                f"the draft {path} is an EAGLE-3 model ({source}) but runs as --speculative-algorithm EAGLE: SGLang "
                "starts, yet never feeds it the 3-layer hidden states, so every draft token is rejected (accept length 1.0)",
                (SetFlag(flag="--speculative-algorithm", values=("EAGLE3",)),),
                "EAGLE3 is the algorithm that captures the auxiliary hidden states an EAGLE-3 head reads",
                category="spec-draft-mismatch",
                confidence=0.95 if draft and draft.has_config else 0.8,
            )
        ]
    if algorithm == "EAGLE3" and kind == "EAGLE" and draft is not None and draft.has_config:
        return [
            _f(
                "eagle-draft-as-eagle3",
                "error",
                f"the draft {path} is an EAGLE (1/2) model ({source}) but runs as EAGLE3, which expects an EAGLE-3 head",
                (SetFlag(flag="--speculative-algorithm", values=("EAGLE",)),),
                "EAGLE is the algorithm for EAGLE-1/2 heads",
                category="spec-draft-mismatch",
            )
        ]
    return []


def _no_draft(view: CommandView, algorithm: str, model: ModelFacts | None) -> list[Finding]:
    """EAGLE without a draft path is right for a target that carries MTP layers (SGLang uses the target's
    own); any other target gets loaded as its own draft. EAGLE-3 heads are always separate checkpoints, so
    EAGLE3 without one is suspect even when the target's config cannot be read."""
    known = model is not None and model.has_config
    if algorithm == "NEXTN" or (known and model.architecture in view.facts.speculative.mtp_targets):
        return []
    if not known and algorithm != "EAGLE3":
        return []
    edits: tuple[Edit, ...] = (
        SetFlag(flag="--speculative-algorithm", values=("NGRAM",)),
        *(RemoveFlag(flag=f) for f in ("--speculative-eagle-topk", "--speculative-num-steps") if view.has(f)),
    )
    unless = "" if known else " (unless the target's checkpoint carries its own draft layers)"
    return [
        _f(
            "spec-no-draft",
            "error" if known else "warning",
            f"--speculative-algorithm {algorithm} without --speculative-draft-model-path: SGLang does not reject it, "
            f"it loads the target checkpoint as the draft{unless}",
            edits,
            "NGRAM drafts from the request's own text and needs no draft model; to keep "
            f"{algorithm}, give --speculative-draft-model-path a head trained for this target instead",
            category="spec-draft-mismatch",
            confidence=0.6 if known else 0.45,
        )
    ]


def _unsupported_combinations(view: CommandView, algorithm: str) -> list[Finding]:
    checks = (_backend_cannot_verify, _dp_attention, _tree_drafting, _rejection_sampling, _draft_window)
    return [f for check in checks for f in check(view, algorithm)]


def _backend_cannot_verify(view: CommandView, algorithm: str) -> list[Finding]:
    backend = view.get("--attention-backend")
    if backend not in view.facts.speculative.no_spec_backends or view.get("--device") == "cpu":
        return []
    return [
        _f(
            "spec-attention-backend",
            "error",
            f"--attention-backend {backend} does not support speculative decoding: SGLang accepts it and crashes in warmup",
            (RemoveFlag(flag="--attention-backend"),),
            "without it SGLang picks a backend that implements draft verification",
            category="attention-backend",
        )
    ]


def _dp_attention(view: CommandView, algorithm: str) -> list[Finding]:
    if not (view.attention_dp and algorithm in view.facts.speculative.no_dp_attention):
        return []
    dp_flags = [f for f in ("--enable-dp-attention", "--attn-dp-size") if view.has(f)]
    return [
        _f(
            "spec-dp-attention",
            "error",
            f"{algorithm} speculative decoding does not support DP attention (SGLang raises ValueError)",
            tuple(RemoveFlag(flag=f) for f in dp_flags),
            "DP attention is the part SGLang cannot combine with this drafter; the drafter is kept",
            evidence=(
                f"ValueError: Currently {algorithm.lower()} speculative decoding does not support dp attention.",
            ),
        )
    ]


def _tree_drafting(view: CommandView, algorithm: str) -> list[Finding]:
    """topk > 1 (tree drafting) needs a backend that verifies trees."""
    topk, steps = view.int("--speculative-eagle-topk") or 1, view.int("--speculative-num-steps")
    backend, spec = view.get("--attention-backend"), view.facts.speculative
    found = []
    paged = (view.int("--page-size") or 1) > 1
    if topk > 1 and paged and backend is not None and backend not in spec.tree_paged_backends:
        reason = (
            f"topk {topk} with --page-size > 1 is only supported on {', '.join(spec.tree_paged_backends)}"
        )
        found.append(_to_chain(reason, steps))
    if topk > 1 and backend in spec.chain_only_backends:
        found.append(_to_chain(f"the {backend} backend only supports topk 1 for speculative decoding", steps))
    if view.has("--speculative-use-rejection-sampling") and topk != 1:
        found.append(
            _to_chain("--speculative-use-rejection-sampling requires --speculative-eagle-topk 1", steps)
        )
    return found


def _rejection_sampling(view: CommandView, algorithm: str) -> list[Finding]:
    thresholds = [
        f
        for f in ("--speculative-accept-threshold-single", "--speculative-accept-threshold-acc")
        if view.has(f)
    ]
    if not (view.has("--speculative-use-rejection-sampling") and thresholds):
        return []
    return [
        _f(
            "spec-rejection-thresholds",
            "error",
            "--speculative-use-rejection-sampling ignores accept thresholds, and SGLang rejects them together",
            tuple(RemoveFlag(flag=f) for f in thresholds),
            "rejection sampling decides acceptance itself",
        )
    ]


def _draft_window(view: CommandView, algorithm: str) -> list[Finding]:
    found = []
    window = view.int("--speculative-draft-window-size")
    if window is not None and window <= 0:
        found.append(
            _f(
                "spec-window-size",
                "error",
                f"--speculative-draft-window-size must be positive, got {window}",
                (RemoveFlag(flag="--speculative-draft-window-size"),),
                "without it the draft attends to the whole context",
            )
        )
    if view.has("--speculative-use-block-verification") and view.get("--device") not in (None, "cuda"):
        found.append(
            _f(
                "spec-block-verification-device",
                "error",
                f"--speculative-use-block-verification runs only on CUDA/ROCm, not --device {view.get('--device')}",
                (RemoveFlag(flag="--speculative-use-block-verification"),),
                "plain verification works on every device",
            )
        )
    if view.has("--speculative-draft-sink-size") and not view.has("--speculative-draft-window-size"):
        found.append(
            _f(
                "spec-sink-without-window",
                "error",
                "--speculative-draft-sink-size requires --speculative-draft-window-size",
                (RemoveFlag(flag="--speculative-draft-sink-size"),),
                "a sink only exists inside a draft attention window",
            )
        )
    return found


def chain_drafting(steps: int | None) -> tuple[Edit, ...]:
    """Edits that turn tree drafting into a chain: topk 1, and draft tokens = steps + 1 as SGLang requires."""
    topk: tuple[Edit, ...] = (SetFlag(flag="--speculative-eagle-topk", values=("1",)),)
    if steps is None:
        return topk
    return (*topk, SetFlag(flag="--speculative-num-draft-tokens", values=(str(steps + 1),)))


def _to_chain(reason: str, steps: int | None) -> Finding:
    return _f(
        "spec-needs-chain",
        "error",
        reason,
        chain_drafting(steps),
        "topk 1 drafts a single chain, which every backend and sampler supports",
    )
