"""No log, however odd, makes the planner raise: a broken rule is skipped, garbage gets a plain stop."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specdoctor.agent.diagnose import context_for, decide
from specdoctor.agent.planner import ChainPlanner, PlaybookPlanner
from specdoctor.playbooks.base import Playbook
from specdoctor.playbooks.decision import Stop
from specdoctor.playbooks.registry import all_playbooks
from specdoctor.tools.catalog_load import bundled
from specdoctor.tools.command import LaunchCommand

DATA = Path(__file__).parent / "data"
CAT = bundled()
REAL_LINES = [
    line
    for p in sorted((DATA / "corpus").glob("*.json")) + sorted((DATA / "corpus-extra").glob("*.json"))
    for line in json.loads(p.read_text())["log"].splitlines()
]
COMMANDS = [json.loads(p.read_text())["command"] for p in sorted((DATA / "corpus").glob("*.json"))]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lines=st.lists(st.one_of(st.sampled_from(REAL_LINES), st.text(max_size=200)), max_size=30),
    command=st.sampled_from(COMMANDS),
)
def test_any_mix_of_real_and_random_lines_gets_a_decision(lines, command):
    decision = decide(context_for(LaunchCommand.parse(command), CAT, lines))
    assert decision.summary and decision.category


def test_a_rule_that_raises_is_skipped():
    def broken(ctx, m):
        raise KeyError("boom")

    bad = Playbook(
        id="site.broken",
        category="other",
        when=frozenset({"exited"}),
        pattern=None,
        fn=broken,
        doc="",
        priority=0,
    )
    rules = PlaybookPlanner([bad, *all_playbooks()])
    planner = ChainPlanner([rules])
    ctx = context_for(
        LaunchCommand.parse(COMMANDS[0]),
        CAT,
        ["RuntimeError: CUDART error: peer access is not supported between these two devices"],
    )
    planned = planner.plan(ctx)
    assert planned.decision is not None and not isinstance(planned.decision, Stop)
    # The failure is handed over with the decision it happened on, and not again with the next one.
    assert planned.rule_errors == ("playbook site.broken failed: KeyError: 'boom'",)
    assert planner.plan(ctx).rule_errors == ("playbook site.broken failed: KeyError: 'boom'",)
