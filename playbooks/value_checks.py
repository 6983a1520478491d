"""Values SGLang takes at launch without checking and fails on later.

- `--preferred-sampling-params`: the server's default sampling parameters. SGLang checks them only when a
  request uses them (`SamplingParams.verify` in srt/sampling/sampling_params.py), so a value out of its
  range turns away every request, its own warm-up first ("top_p must be in (0, 1], got 95.").
- `--max-total-tokens 0`: a KV pool of no tokens ("Not enough memory").
"""

from __future__ import annotations

import json
import math

from specdoctor.playbooks.decision import Finding
from specdoctor.playbooks.view import CommandView
from specdoctor.tools.command import RemoveFlag, SetFlag
from specdoctor.tools.sglang_facts import OPENAI_SAMPLING_NAMES

# SamplingParams.verify: (lowest, highest, lowest excluded, highest excluded).
_SAMPLING_RANGES = {
    "temperature": (0.0, math.inf, False, False),
    "top_p": (0.0, 1.0, True, False),
    "min_p": (0.0, 1.0, False, False),
    "frequency_penalty": (-2.0, 2.0, False, False),
    "presence_penalty": (-2.0, 2.0, False, False),
    "repetition_penalty": (0.0, 2.0, True, False),
}
# What SGLang's own warm-up request sends (http_server._execute_server_warmup): a request's own value wins
# over the preferred default, so a bad default for these fails only requests that leave them out.
_WARMUP_SENDS = ("temperature", "max_new_tokens")
# Token budgets of nothing: no KV pool (--max-total-tokens 0: "Not enough memory"), no prefill ever
# scheduled (--max-prefill-tokens 0: the warm-up request waits for ever).
_AT_LEAST_ONE = ("--max-total-tokens", "--max-prefill-tokens")


# transformers' PretrainedConfig fields that hold a list: a string there is read letter by letter
# ("'L' is not a registered model" for "LlamaForCausalLM").
_LIST_FIELDS = ("architectures",)


def check_values(view: CommandView) -> list[Finding]:
    return (
        _sampling_defaults(view)
        + _sampling_keys(view)
        + _empty_budgets(view)
        + _all_and_names(view)
        + _pages_in_the_pool(view)
        + _override_shapes(view)
        + _node_rank(view)
    )


def _node_rank(view: CommandView) -> list[Finding]:
    """Node ranks count from 0 to --nnodes - 1; a one-node launch is rank 0 (SGLang's rank 0 scheduler
    otherwise waits for a node rank 0 that never starts, or dies)."""
    rank = view.int("--node-rank")
    if rank is None or rank < view.nnodes:
        return []
    edits = (RemoveFlag(flag="--node-rank"),) if view.nnodes <= 1 else ()
    return [
        Finding(
            code="node-rank-out-of-range",
            severity="error",
            category="tp-config",
            flag="--node-rank",
            message=f"--node-rank {rank} with --nnodes {view.nnodes}: node ranks are 0 to {view.nnodes - 1}",
            edits=edits,
            why="a single node is node rank 0, SGLang's default" if edits else "",
            confidence=0.8,
        )
    ]


def _override_shapes(view: CommandView) -> list[Finding]:
    raw = view.get("--json-model-override-args")
    try:
        override = json.loads(raw) if raw else None
    except ValueError:
        return []
    if not isinstance(override, dict):
        return []
    found = []
    for field in _LIST_FIELDS:
        value = override.get(field)
        if isinstance(value, str):
            found.append(
                Finding(
                    code="override-not-a-list",
                    severity="error",
                    category="model-path",
                    flag="--json-model-override-args",
                    message=f'--json-model-override-args sets "{field}" to a string; the model config holds a '
                    f'list there (["{value}"]), and SGLang reads the string letter by letter',
                    edits=(RemoveFlag(flag="--json-model-override-args"),),
                    why=f'without the override the model\'s own {field} apply; to keep it, write "{field}": ["{value}"]',
                    confidence=0.6,
                )
            )
    return found


def out_of_range(params: dict[str, object]) -> dict[str, str]:
    """Each default SamplingParams.verify would reject: key → `key value (allowed)`."""
    bad: dict[str, str] = {}
    for key, value in params.items():
        if not isinstance(value, int | float) or isinstance(value, bool):
            continue
        if key == "top_k" and not (value == -1 or value >= 1):
            bad[key] = f"top_k {value} (must be -1 or at least 1)"
        elif key in _SAMPLING_RANGES and not _inside(float(value), *_SAMPLING_RANGES[key]):
            low, high, low_open, high_open = _SAMPLING_RANGES[key]
            shown = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
            bad[key] = f"{key} {value} (must be in {shown})"
    return bad


def _inside(value: float, low: float, high: float, low_open: bool, high_open: bool) -> bool:
    above = value > low if low_open else value >= low
    below = value < high if high_open else value <= high
    return above and below


def preferred_sampling(view: CommandView) -> dict[str, object]:
    """The server's default sampling parameters the command gives (empty when none, or not a JSON object:
    the flag checks name that)."""
    try:
        params = json.loads(view.get("--preferred-sampling-params") or "{}")
    except ValueError:
        return {}
    return params if isinstance(params, dict) else {}


def _sampling_keys(view: CommandView) -> list[Finding]:
    """Keys SamplingParams does not take: every request built on the defaults fails (500), the warm-up first."""
    params, known = preferred_sampling(view), view.facts.sampling_params
    unknown = [k for k in params if known and k not in known]
    if not unknown:
        return []
    renamed = {
        k: OPENAI_SAMPLING_NAMES[k]
        for k in unknown
        if OPENAI_SAMPLING_NAMES.get(k) in known and OPENAI_SAMPLING_NAMES[k] not in params
    }
    fixed = {renamed.get(k, k): v for k, v in params.items() if k in renamed or k not in unknown}
    what = ", ".join(f"{k} (SGLang's {renamed[k]})" if k in renamed else k for k in unknown)
    return [
        Finding(
            code="sampling-key-unknown",
            severity="error",
            category="other",
            flag="--preferred-sampling-params",
            message=f"--preferred-sampling-params has keys SGLang's sampling parameters do not take: {what}; "
            "every request that uses the defaults fails, its own warm-up first",
            edits=(SetFlag(flag="--preferred-sampling-params", values=(json.dumps(fixed),)),),
            why="the same defaults under the names SGLang's SamplingParams has"
            + ("" if len(renamed) == len(unknown) else "; keys it has no name for are left out"),
            confidence=0.7 if len(renamed) == len(unknown) else 0.45,
        )
    ]


def _sampling_defaults(view: CommandView) -> list[Finding]:
    if not (bad := out_of_range(preferred_sampling(view))):
        return []
    warmup_fails = any(key not in _WARMUP_SENDS for key in bad)
    return [
        Finding(
            code="sampling-default-out-of-range",
            severity="error" if warmup_fails else "warning",
            category="other",
            flag="--preferred-sampling-params",
            message=f"--preferred-sampling-params sets {', '.join(bad.values())}: SGLang rejects every request "
            + (
                "that uses these defaults, its own warm-up first"
                if warmup_fails
                else "that does not send its own"
            ),
            edits=(RemoveFlag(flag="--preferred-sampling-params"),),
            why="without it requests use SGLang's defaults (or the model's generation config); the intended "
            "values go back in range on their own",
            confidence=0.7,
        )
    ]


def _empty_budgets(view: CommandView) -> list[Finding]:
    found = []
    for flag in _AT_LEAST_ONE:
        number = view.float(flag)
        if number is not None and number < 1:
            found.append(
                Finding(
                    code="empty-budget",
                    severity="error",
                    category="oom",
                    flag=flag,
                    message=f"{flag} {view.get(flag)} is a budget of no token: nothing fits in it",
                    edits=(RemoveFlag(flag=flag),),
                    why=f"without {flag} SGLang sizes it itself",
                    confidence=0.8,
                )
            )
    return found


_MIN_PAGES = 2
"""Pages a KV pool needs before anything runs: one request's page, and the page SGLang keeps back
(its padding slot) — a pool of one page schedules nothing, and the warm-up request waits forever."""


def _pages_in_the_pool(view: CommandView) -> list[Finding]:
    """--page-size against the --max-total-tokens the command itself caps the pool at."""
    page, pool = view.int("--page-size"), view.int("--max-total-tokens")
    if not page or not pool or page <= 1 or pool // page >= _MIN_PAGES:
        return []
    return [
        Finding(
            code="pool-of-one-page",
            severity="error",
            category="oom",
            flag="--page-size",
            message=f"--page-size {page} leaves --max-total-tokens {pool} {pool // page} page(s): no request can "
            "be scheduled, and the server hangs on its warm-up request",
            edits=(RemoveFlag(flag="--page-size"),),
            why="SGLang's default page size is the backend's own (1 token on most); with it the pool has room to "
            "schedule",
            confidence=0.7,
        )
    ]


def _all_and_names(view: CommandView) -> list[Finding]:
    """--lora-target-modules `all` means every module; SGLang asserts it stands alone (lora_hook:
    "If 'all' is specified ..., it should be the only module specified")."""
    modules = [v for o in view.spec.find("--lora-target-modules", view.canon) for v in o.values]
    if "all" not in modules or len(modules) == 1:
        return []
    return [
        Finding(
            code="lora-all-with-names",
            severity="error",
            category="other",
            flag="--lora-target-modules",
            message=f"--lora-target-modules {' '.join(modules)}: `all` already names every module and must stand alone",
            edits=(SetFlag(flag="--lora-target-modules", values=("all",)),),
            why="`all` covers the modules listed with it",
            confidence=0.8,
        )
    ]
