"""The LLM's engine-source tools on a real SGLang 0.5.23 failure: the raising statement with the flags
the command gave it, from the bundled index or from an installed engine folder; checks by message."""

from __future__ import annotations

import textwrap
from pathlib import Path

from specdoctor.agent.llm_tools import TOOL_NAMES, Toolbox
from tests.llm_stub import make_context, recorded_output

COMMAND = (
    "python -m sglang.launch_server --model-path /models/m --device cpu --speculative-algorithm EAGLE3 "
    "--speculative-draft-model-path /models/d --speculative-eagle-topk 4 --page-size 16"
)


def _ctx():
    return make_context(COMMAND, recorded_output("spec-topk-gt-1-page-size-gt-1.rc1.txt"))


def test_the_tools_are_declared() -> None:
    assert {"engine_source", "validation_sites"} <= set(TOOL_NAMES)


def test_engine_source_from_the_index_names_the_user_s_flags() -> None:
    result = Toolbox(_ctx()).run("engine_source", {})
    assert result.status == "ok"
    text = result.text
    assert "bundled index: sglang 0.5.23 srt/arg_groups/speculative_hook.py:1278" in text
    assert "when: cfg.speculative_eagle_topk > 1 and view.page_size > 1" in text
    assert (
        "field page_size (condition/message) ← --page-size: set to '16'; this value trips the check" in text
    )
    assert "field attention_backend (condition/message) ← --attention-backend: not set" in text
    assert "allowed: attention_backend in ('flashinfer', 'fa3', 'triton')" in text
    assert "no installed engine here" in text


def test_engine_source_reads_an_installed_engine_with_the_lines_around(tmp_path: Path) -> None:
    package = tmp_path / "sglang"
    (package / "srt").mkdir(parents=True)
    body = [f"x{i} = {i}" for i in range(30)]
    body += textwrap.dedent(
        """
        def check(server_args):
            if server_args.page_size > 1:
                raise ValueError("page_size > 1 is not supported here")
        """
    ).splitlines()
    (package / "srt" / "server_args.py").write_text("\n".join(body) + "\n")
    frame = f'File "{package}/srt/server_args.py", line 34, in check\n    raise ValueError("page_size > 1 is not supported here")'
    result = Toolbox(_ctx(), engine=package).run("engine_source", {"frame": frame})
    assert result.status == "ok"
    assert "read from the installed engine" in result.text
    assert '>>    34          raise ValueError("page_size > 1 is not supported here")' in result.text
    assert "x13 = 13" in result.text and "x12 = 12" not in result.text, "20 lines each side: 14..54"
    assert '<source untrusted="true">' in result.text
    pasted = Toolbox(_ctx(), engine=package, host=False).run("engine_source", {"frame": frame})
    assert "installed engine" not in pasted.text.split("\n")[0], (
        "a log from elsewhere: not this host's engine"
    )


def test_engine_source_outside_sglang_is_no_data() -> None:
    result = Toolbox(_ctx()).run(
        "engine_source", {"frame": 'File "/usr/lib/python3.11/runpy.py", line 198, in _run'}
    )
    assert result.status == "no_data"


def test_validation_sites_by_message_and_by_words() -> None:
    box = Toolbox(_ctx())
    by_message = box.run(
        "validation_sites",
        {"query": "--speculative-draft-sink-size requires --speculative-draft-window-size."},
    )
    assert by_message.status == "ok"
    assert by_message.text.startswith("sglang 0.5.23 srt/arg_groups/speculative_hook.py:")
    assert "message match 1.00" in by_message.text
    by_words = box.run("validation_sites", {"query": "trtllm_mha page_size"})
    assert by_words.status == "ok" and "page_size" in by_words.text.lower()
    assert box.run("validation_sites", {"query": "zzz qqq www"}).status == "no_data"


def test_the_prompt_carries_the_settings_on_the_failing_path() -> None:
    # The same grounds the rules read: the chosen settings the failure names, strongest first.
    import json

    from specdoctor.agent.diagnose import context_for, outcome_from_log
    from specdoctor.agent.llm_planner import build_messages
    from specdoctor.tools.catalog_load import bundled
    from specdoctor.tools.command import LaunchCommand

    case = json.loads(
        (
            Path(__file__).parent
            / "data"
            / "corpus-fresh-2"
            / "glm5-fp8-b300-deepgemm-tma-capture-illegal-address-0512.json"
        ).read_text()
    )
    lines = case["log"].splitlines()
    ctx = context_for(
        LaunchCommand.parse(case["command"]),
        bundled(),
        lines,
        outcome=outcome_from_log(lines, case["exit_kind"]),
    )
    _, user = build_messages(ctx)
    section = user["content"].split('<failing-path untrusted="true">', 1)[1]
    assert section.lstrip().startswith("SGL_ENABLE_JIT_DEEPGEMM: "), section[:200]
