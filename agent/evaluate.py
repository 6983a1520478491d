"""Score decisions against the crash corpus' `expected` constraints (tests/data/corpus/README.md).

A flag counts as present under any spelling SGLang 0.5.23 itself accepts (alias, unique prefix, `=value`),
except an `_` spelling and `--model` for `--model-path`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from specdoctor.tools.catalog import FlagCatalog
from specdoctor.tools.catalog_load import bundled
from specdoctor.tools.command import LaunchCommand


class CaseScore(BaseModel):
    id: str
    category: str
    expected_action: str
    action: str
    decided_category: str
    solved: bool
    category_right: bool
    playbook: str | None
    summary: str
    command: str
    confidence: float = 0.0

    def confident_wrong_fix(self, threshold: float) -> bool:
        """A fix an unattended run would apply (confidence at the threshold or above) that is wrong."""
        return self.action == "fix" and not self.solved and self.confidence >= threshold

    @property
    def stopped_where_a_fix_was_known(self) -> bool:
        return self.expected_action == "fix" and self.action == "stop"


def _accepted_as(catalog: FlagCatalog, written: str) -> str | None:
    """The canonical flag SGLang 0.5.23's argparse would take this spelling for, or None."""
    if "_" in written.lstrip("-") or written == "--model":
        return None
    r = catalog.resolve(written)
    return r.flag.name if r.flag is not None and r.accepted_by_engine else None


def flag_value(spec: LaunchCommand, flag: str, catalog: FlagCatalog) -> tuple[bool, str | None]:
    """(present, value) of a canonical flag in a command: its last occurrence, a list flag's values joined by
    spaces as the command line writes them (`--lora-target-modules q_proj v_proj` is "q_proj v_proj")."""
    want = catalog.canonical(flag)
    found = [o for o in spec.options() if _accepted_as(catalog, o.name) == want]
    if not found:
        return False, None
    values = found[-1].values
    return True, " ".join(values) if values else None


def satisfies(
    constraint: dict[str, Any], spec: LaunchCommand | None, stop_category: str | None, catalog: FlagCatalog
) -> bool:
    if "stop_category" in constraint:
        return stop_category is not None and stop_category == constraint["stop_category"]
    if spec is None:
        return False
    if "env" in constraint:
        # Unset and empty are alike for a variable: `absent` and `equals: ""` both ask for either.
        given = spec.env_dict().get(constraint["env"], "")
        return given == "" if constraint.get("absent") else given == str(constraint.get("equals"))
    present, value = flag_value(spec, constraint["flag"], catalog)
    if constraint.get("absent"):
        return not present
    if constraint.get("present"):
        return present
    if not present:
        return False
    if "equals" in constraint:
        return value == str(constraint["equals"])
    if "in" in constraint:
        return value in [str(v) for v in constraint["in"]]
    number = _number(value)
    if number is None:
        return False
    if "lt" in constraint:
        return number < float(constraint["lt"])
    if "gt" in constraint:
        return number > float(constraint["gt"])
    return False


def _number(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def refused(case: dict, why: str) -> CaseScore:
    """A case whose command specdoctor does not take (not an SGLang server launch): not solved."""
    return CaseScore(
        id=case["id"],
        category=case["category"],
        expected_action=case["action"],
        action="refused",
        decided_category="",
        solved=False,
        category_right=False,
        playbook=None,
        summary=f"the command was refused: {why}",
        command=case["command"],
    )


def score_case(
    case: dict[str, Any], contract: dict[str, Any], catalog: FlagCatalog | None = None
) -> CaseScore:
    """Score one `diagnose --json` answer against its case."""
    catalog = catalog or bundled("0.5.23")
    action = contract["action"]
    spec = LaunchCommand.parse(contract["command"]) if action == "fix" else None
    stop_category = contract["category"] if action == "stop" else None
    if case.get("action") == "stop":
        solved = action == "stop"
    else:
        solved = action == "fix" and any(
            all(satisfies(c, spec, stop_category, catalog) for c in alternative)
            for alternative in case.get("expected", [])
        )
    return CaseScore(
        id=case["id"],
        category=case.get("category") or "?",
        expected_action=case.get("action") or "?",
        action=action,
        decided_category=contract["category"],
        solved=solved,
        category_right=contract["category"] == case.get("category"),
        playbook=contract.get("playbook"),
        summary=contract["summary"],
        command=contract["command"],
        confidence=contract.get("confidence", 0.0),
    )
