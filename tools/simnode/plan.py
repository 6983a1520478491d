"""What the resolved launch will cost on the node and how well its speculative decoding will work."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from specdoctor.tools.simnode.engine import SpecPlan
from specdoctor.tools.simnode.model import ModelConfig
from specdoctor.tools.simnode.profile import ModelSize, NodeProfile
from specdoctor.tools.simnode.validate import Resolved

DEFAULT_ACCEPT = {
    "EAGLE3": 3.0,
    "EAGLE": 2.6,
    "STANDALONE": 2.2,
    "NGRAM": 1.6,
    "DFLASH": 3.2,
    "DSPARK": 3.0,
    "UNO": 2.0,
    "FROZEN_KV_MTP": 2.4,
}
"""Accept length of a draft that matches its algorithm, when the node profile does not give one."""


class LaunchPlan(BaseModel):
    model_config = ConfigDict(frozen=True)
    target_weights_gib: float = Field(description="All ranks together; each holds a 1/tp share.")
    draft_weights_gib: float
    cell_bytes: int = Field(description="Target KV bytes per token on one GPU.")
    draft_cell_bytes: int
    graph_mib_per_bs: float
    spec: SpecPlan | None
    degraded_reason: str | None = Field(
        description="Why the draft cannot help (accept length pinned at 1.0)."
    )


def make_plan(resolved: Resolved, profile: NodeProfile) -> LaunchPlan:
    model, draft, args = resolved.model, resolved.draft, resolved.args
    tp = args["tp_size"]
    size = profile.model_size(args["model_path"])
    shards = 1 if model.mla else max(1, min(tp, model.num_key_value_heads))
    cell = (size.kv_bytes_per_token if size else model.kv_bytes_per_token()) // shards
    draft_weights, draft_cell = _draft_costs(resolved, profile, size)
    spec, reason = _spec_plan(resolved, size)
    return LaunchPlan(
        target_weights_gib=size.weights_gib if size else model.estimated_weights_gib(),
        draft_weights_gib=draft_weights if draft is not None else 0.0,
        cell_bytes=max(1, cell),
        draft_cell_bytes=draft_cell // shards if draft is not None else 0,
        graph_mib_per_bs=size.graph_mib_per_bs
        if size
        else ModelSize.model_fields["graph_mib_per_bs"].default,
        spec=spec,
        degraded_reason=reason,
    )


def _draft_costs(resolved: Resolved, profile: NodeProfile, size: ModelSize | None) -> tuple[float, int]:
    model, draft = resolved.model, resolved.draft
    if draft is None:
        return 0.0, 0
    target_weights = size.weights_gib if size else model.estimated_weights_gib()
    target_cell = size.kv_bytes_per_token if size else model.kv_bytes_per_token()
    if resolved.draft_source == "mtp":
        # An MTP layer shipped in the target checkpoint: about one layer of the target.
        layers = max(1, model.num_hidden_layers)
        return target_weights / layers, target_cell // layers
    if resolved.draft_source == "target":
        return target_weights, target_cell
    weights = size.draft_weights_gib if size and size.draft_weights_gib is not None else None
    if weights is None:
        own = profile.model_size(draft.path)
        weights = own.weights_gib if own else draft.estimated_weights_gib()
    cell = (
        size.draft_kv_bytes_per_token
        if size and size.draft_kv_bytes_per_token
        else draft.kv_bytes_per_token()
    )
    return weights, cell


def _spec_plan(resolved: Resolved, size: ModelSize | None) -> tuple[SpecPlan | None, str | None]:
    args, draft = resolved.args, resolved.draft
    algo = resolved.algorithm
    if algo is None:
        return None, None
    steps, topk, tokens = (
        args["speculative_num_steps"],
        args["speculative_eagle_topk"],
        args["speculative_num_draft_tokens"],
    )
    reason = _degraded(algo, draft, resolved.draft_source)
    if reason is not None:
        accept = 1.0
    elif algo == "NGRAM":
        accept = min(DEFAULT_ACCEPT["NGRAM"], tokens)
    else:
        base = size.accept_length if size and size.accept_length else DEFAULT_ACCEPT.get(algo, 2.0)
        accept = min(base, steps + 1 if algo in ("EAGLE", "EAGLE3", "STANDALONE") else tokens)
    plan = SpecPlan(algorithm=algo, num_steps=steps, topk=topk, num_draft_tokens=tokens, accept_length=accept)
    return plan, reason


def _degraded(algo: str, draft: ModelConfig | None, source: str) -> str | None:
    if algo == "EAGLE" and draft is not None and draft.is_eagle3_draft:
        return "an EAGLE-3 draft run as EAGLE: its auxiliary hidden states are never fed"
    if algo in ("EAGLE", "EAGLE3") and source == "target":
        return "no draft model: the target checkpoint was loaded as its own draft"
    return None
