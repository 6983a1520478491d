"""A JSON value the user gave a flag spells SGLang's keys another way: `{"name": ..., "path": ...}` for
--lora-paths, whose check asks for 'lora_name' and 'lora_path'. The keys SGLang wants are the ones its own
check quotes (the bundled index, never the log's text); each of the user's keys becomes the one engine key
it is a part of, values untouched."""

from __future__ import annotations

import json
import re
from functools import cache

from specdoctor.playbooks.base import Context, fix, playbook
from specdoctor.playbooks.decision import Decision
from specdoctor.playbooks.json_values import json_container
from specdoctor.tools.command import SetFlag
from specdoctor.tools.engine_source.index import bundled_index

_QUOTED_KEY = re.compile(r"""['"]([a-z][a-z0-9]*(?:_[a-z0-9]+)+)['"]""")


@playbook(
    id="sglang.flag.json-keys-respelled", category="other", pattern=r"\bkeys?\b", scope="root", priority=38
)
def json_keys_respelled(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    located = ctx.engine_check
    if located is None:
        return None
    wanted = _QUOTED_KEY.findall(located.site.template)
    found = []
    for option in ctx.spec.options():
        for value in option.values:
            renamed = respelled_keys(json_container(value), wanted)
            if renamed:
                found.append((option, value, renamed))
    if len(found) != 1:
        return None
    option, value, renamed = found[0]
    parsed = json_container(value)
    assert isinstance(parsed, dict)
    new = json.dumps({renamed.get(k, k): v for k, v in parsed.items()})
    changed = ", ".join(f"{old} → {key}" for old, key in renamed.items())
    return fix(
        ctx,
        [SetFlag(flag=option.name, values=tuple(new if v == value else v for v in option.values))],
        "other",
        f"{option.name}'s JSON spells SGLang's keys another way ({changed})",
        why=f"SGLang's check ({located.site.file}:{located.site.line}) asks for the keys "
        f"{', '.join(wanted)}; the values stay the user's",
        evidence=(ctx.root.error_line or m.group(0) if m else "",),
        confidence=0.6,
    )


def respelled_keys(parsed: object, wanted: list[str]) -> dict[str, str]:
    """{user key: engine key} for every key of `wanted` the object lacks, each the one engine key a user's
    key is the first or last part of (`name` → `lora_name`); empty when any is missing or ambiguous."""
    if not isinstance(parsed, dict) or not wanted:
        return {}
    renamed: dict[str, str] = {}
    for key in (k for k in wanted if k not in parsed):
        theirs = [u for u in parsed if u not in wanted and u not in renamed and part_of(u, key)]
        if len(theirs) != 1:
            return {}
        renamed[theirs[0]] = key
    return renamed


def part_of(user_key: str, engine_key: str) -> bool:
    parts, whole = user_key.lower().split("_"), engine_key.split("_")
    return len(parts) < len(whole) and (whole[: len(parts)] == parts or whole[-len(parts) :] == parts)


@cache
def engine_keys(version: str | None) -> frozenset[str]:
    """Every key name the release's checks quote: the names a renamed JSON key may take."""
    index = bundled_index()
    release = index.release(version) or index.releases[-1]
    return frozenset(k for site in index.sites(release) for k in _QUOTED_KEY.findall(site.template))
