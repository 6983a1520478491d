"""Flag conflicts read from SGLang's own argument checks (tools/engine_source/conflicts.py): the committed
table is what the committed index gives, only checks that name what they read are in it, and a command is
judged only on what it shows. tests/test_real_sglang_cli.py confirms the verdicts against real SGLang."""

from __future__ import annotations

import json
import re

import pytest

from specdoctor.agent.preflight import preflight
from specdoctor.playbooks.conflict_checks import check_engine_conflicts
from specdoctor.tools.catalog_load import bundled
from specdoctor.tools.command import LaunchCommand, RemoveFlag, SetFlag
from specdoctor.tools.engine_source.conflicts import DATA, derive, judged_release, tripped
from specdoctor.tools.engine_source.index import bundled_index

CAT = bundled("0.5.23")
PY = "python -m sglang.launch_server --model-path M"


def _spec(flags: str) -> LaunchCommand:
    return LaunchCommand.parse(f"{PY} {flags}")


def test_the_committed_table_is_what_the_committed_index_gives() -> None:
    assert json.loads(DATA.read_text()) == json.loads(json.dumps(derive(bundled_index()), sort_keys=True))


def test_every_conflict_names_the_flags_its_condition_reads_and_no_other() -> None:
    table = json.loads(DATA.read_text())
    assert len(table["conflicts"]) >= 20
    for conflict in table["conflicts"]:
        flags = set(conflict["flags"].values())
        named = set(re.findall(r"--[a-z][a-z0-9-]+", conflict["message"].lower()))
        assert named <= flags, conflict
        assert not re.search(r"model_overrides|deepseek|qwen", conflict["where"]), conflict


@pytest.mark.parametrize(
    ("flags", "edit"),
    [
        ("--enable-hierarchical-cache --disable-radix-cache", RemoveFlag(flag="--disable-radix-cache")),
        ("--retraction-policy priority", SetFlag(flag="--enable-priority-scheduling")),
        ("--watermark-config '{}'", SetFlag(flag="--enable-watermark")),
    ],
)
def test_a_written_conflict_is_an_error_with_the_engines_own_remedy(flags: str, edit) -> None:
    found = check_engine_conflicts(_spec(flags), CAT)
    assert [f.code for f in found] == ["engine-conflict"]
    assert found[0].severity == "error" and found[0].edits == (edit,)
    assert found[0].message.startswith("SGLang 0.5.23 rejects this combination: ")
    assert "srt/" in found[0].evidence[0]
    fixed = _spec(flags).apply_all(found[0].edits, CAT.canonical)
    assert check_engine_conflicts(fixed, CAT) == []


def test_one_check_written_twice_in_a_release_is_one_finding() -> None:
    # 0.5.23 has the dp/attn-dp check both in its parallel hook and in a model override's helper.
    found = check_engine_conflicts(_spec("--dp-size 2 --attn-dp-size 2"), CAT)
    assert len(found) == 1 and "--dp-size 2 with --attn-dp-size 2" in found[0].message


def test_a_remedy_only_a_person_can_give_is_not_invented() -> None:
    # "--ssl-keyfile requires --ssl-certfile": the certificate's path is the user's; dropping TLS is no fix.
    found = check_engine_conflicts(_spec("--ssl-keyfile key.pem"), CAT)
    assert len(found) == 1 and found[0].edits == ()


@pytest.mark.parametrize(
    "flags",
    [
        "--enable-hierarchical-cache",  # one side of the pair
        "--tp-size 8",  # dwdp_size == tp_size is asserted only behind an early return the index lacks
        "--dwdp-size 8",  # tp_size is not written and not an off-by-default setting: only the engine knows
        "--retraction-policy priority --enable-priority-scheduling",
    ],
)
def test_what_the_command_does_not_show_is_never_judged(flags: str) -> None:
    assert tripped(_spec(flags), CAT) == []


def test_each_release_is_judged_by_its_own_checks() -> None:
    assert judged_release("0.5.23") == "0.5.23"
    assert judged_release("0.5.24.dev3") == "0.5.23"
    assert judged_release("0.1.13") is None
    pair = _spec("--enable-hierarchical-cache --disable-radix-cache")
    assert tripped(pair, bundled("0.5.1"))[0].release == "0.5.1"
    # 0.4.10 had no such check: the engine of that release took the pair (and crashed later).
    assert tripped(pair, bundled("0.4.10")) == []


def test_preflight_reports_it_and_leaves_a_flag_another_rule_fixes_to_that_rule() -> None:
    report = preflight(_spec("--enable-hierarchical-cache --disable-radix-cache"), CAT, host=False)
    assert "engine-conflict" in [f.code for f in report.findings]
    assert not report.corrected.has("--disable-radix-cache") and report.corrected.has(
        "--enable-hierarchical-cache"
    )


def test_on_every_recorded_real_launch_it_flags_exactly_what_real_sglang_refused() -> None:
    # tests/data/sglang-outputs: real SGLang 0.5.23 on this machine, each with its command and last error.
    from pathlib import Path

    outputs = Path(__file__).parent / "data" / "sglang-outputs"
    checked = 0
    for path in sorted(outputs.glob("*.txt")):
        header = dict(
            line[2:].split(": ", 1) for line in path.read_text().splitlines() if re.match(r"# \w+: ", line)
        )
        if "command" not in header:
            continue
        checked += 1
        said = [
            f.message.split(": ", 1)[1]
            for f in check_engine_conflicts(LaunchCommand.parse(header["command"]), CAT)
        ]
        refused = header.get("last_error_line", "")
        assert all(m in refused for m in said), (path.name, said, refused)
        if "requires --enable-priority-scheduling" in refused:
            assert said, path.name
    assert checked >= 60
