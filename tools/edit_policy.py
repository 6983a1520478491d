"""Which flags and environment variables an automatic change may touch: the classes of
`tools/data/edit-policy.yaml`, and what a run allows beyond tuning.

The table is data a person can review; this module only reads it. Unknown names get the strictest class.
"""

from __future__ import annotations

import fnmatch
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

EditClass = Literal["tuning", "capability", "identity"]
STRICTEST: EditClass = "identity"


class Classed(BaseModel):
    """A name's class and the policy entry that gave it (shown to people, kept in transcripts)."""

    model_config = ConfigDict(frozen=True, defer_build=True)
    name: str
    edit_class: EditClass
    rule: str = Field(description="e.g. `tuning list`, `capability pattern --*-path`, `not in the policy`.")


class EditPolicy(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)
    identity: frozenset[str]
    capability: frozenset[str]
    capability_patterns: tuple[str, ...]
    tuning: frozenset[str]
    tuning_patterns: tuple[str, ...]
    env_tuning: frozenset[str]
    env_capability: frozenset[str]
    ranges: dict[str, tuple[float, float]]

    def flag(self, name: str) -> Classed:
        named = ((self.identity, "identity"), (self.capability, "capability"), (self.tuning, "tuning"))
        for names, edit_class in named:
            if name in names:
                return Classed(name=name, edit_class=edit_class, rule=f"{edit_class} list")
        if pattern := _first_match(name, self.capability_patterns):
            return Classed(name=name, edit_class="capability", rule=f"capability pattern {pattern}")
        if pattern := _first_match(name, self.tuning_patterns):
            return Classed(name=name, edit_class="tuning", rule=f"tuning pattern {pattern}")
        return Classed(
            name=name, edit_class=STRICTEST, rule="not in the policy (new flags are never automatic)"
        )

    def env(self, name: str) -> Classed:
        if name in self.env_tuning:
            return Classed(name=name, edit_class="tuning", rule="environment tuning list")
        if name in self.env_capability:
            return Classed(name=name, edit_class="capability", rule="environment capability list")
        return Classed(name=name, edit_class=STRICTEST, rule="environment variable not in the policy")


def _first_match(name: str, patterns: tuple[str, ...]) -> str | None:
    return next((p for p in patterns if fnmatch.fnmatchcase(name, p)), None)


@cache
def edit_policy(path: Path | None = None) -> EditPolicy:
    import yaml

    raw = yaml.safe_load((path or Path(__file__).with_name("data") / "edit-policy.yaml").read_text())
    flags, env = raw["flags"], raw["env"]
    return EditPolicy(
        identity=frozenset(flags["identity"]),
        capability=frozenset(flags["capability"]),
        capability_patterns=tuple(flags["capability_patterns"]),
        tuning=frozenset(flags["tuning"]),
        tuning_patterns=tuple(flags["tuning_patterns"]),
        env_tuning=frozenset(env["tuning"]),
        env_capability=frozenset(env["capability"]),
        ranges={k: (float(lo), float(hi)) for k, (lo, hi) in raw["ranges"].items()},
    )


class Allowance(BaseModel):
    """What a run may change without asking: tuning, plus what the user named (`--allow`, `--allow-env`)."""

    model_config = ConfigDict(frozen=True, defer_build=True)
    flags: frozenset[str] = Field(default=frozenset(), description="Canonical flags allowed beyond tuning.")
    env: frozenset[str] = Field(
        default=frozenset(), description="Environment variables allowed beyond tuning."
    )

    def permits(self, classed: Classed, is_env: bool) -> bool:
        if classed.edit_class == "tuning":
            return True
        return classed.name in (self.env if is_env else self.flags)
