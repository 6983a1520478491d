"""The engine's answer to a request is its reason when the server log has none, and what SGLang's messages
say to do is a remedy wherever they are raised. Lessons of corpus-real-engine-8 (6/11 on arrival) and -9
(0/13 on arrival: failures of the first requests a launch flag causes), each on its blind cases and, where
the blind set has only one, a second real launch of SGLang 0.5.23 recorded here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdoctor.agent.diagnose import context_for, decide, outcome_from_log
from specdoctor.playbooks.json_values import as_json, loose_literal
from specdoctor.playbooks.value_checks import check_values
from specdoctor.playbooks.view import CommandView
from specdoctor.tools.command import LaunchCommand
from specdoctor.tools.log_cause import extract_root_cause, server_answer
from tests.recorded import PY, blind, context, decided, recorded_lines
from tests.test_corpus_scores import CAT

DATA = Path(__file__).parent / "data"


def _blind(folder: str, name: str) -> dict:
    return blind(folder, name)


def _recorded(name: str, command: str, kind: str) -> dict:
    found = decided(command, recorded_lines(name), kind)
    return {"playbook": found["playbook"], "edits": [_describe([e])[0] for e in found["edits"]]}


def test_the_answer_a_request_got_is_the_root_cause_when_the_log_has_none() -> None:
    openai = (
        '{"object":"error","message":"top_p must be in (0, 1], got 0.0.","type":"BadRequestError","code":400}'
    )
    native = '{"error":{"message":"The server is not configured to enable custom logit processor."}}'
    assert server_answer(["INFO: started", openai]) == "top_p must be in (0, 1], got 0.0."
    assert server_answer([native]) == "The server is not configured to enable custom logit processor."
    root = extract_root_cause(["[2026-12-04 23:44:17] The server is fired up and ready to roll!", openai])
    assert (root.kind, root.error_line) == ("message", "top_p must be in (0, 1], got 0.0.")
    # A traceback in the server's own log stays the reason.
    crash = ["Traceback (most recent call last):", '  File "x.py", line 1, in f', "ValueError: boom", openai]
    assert extract_root_cause(crash).error_line == "ValueError: boom"
    assert server_answer(['{"object":"chat.completion","choices":[]}']) is None


def test_a_request_answer_read_from_a_recording_is_unhealthy_not_degraded() -> None:
    lines = (
        (DATA / "sglang-outputs" / "generation-config-top-p-zero-chat-request.rc0.txt")
        .read_text()
        .splitlines()
    )
    assert outcome_from_log(lines, "runs-but-degraded").kind == "unhealthy"


@pytest.mark.parametrize(
    ("name", "edit"),
    [
        ("return-hidden-states-mode-last-rejects-full-request", "set --return-hidden-states-mode full"),
        ("strict-thinking-with-grammar-backend-none", "set --grammar-backend xgrammar"),
    ],
)
def test_what_the_engines_message_says_to_do_with_the_users_own_flag_is_the_remedy(
    name: str, edit: str
) -> None:
    contract = _blind("corpus-real-engine-9", name)
    assert contract["playbook"] == "sglang.message.remedy"
    assert _describe(contract["edits"]) == [edit]
    assert contract["confidence"] < 0.5  # a change of what is served or accepted: a person's decision


@pytest.mark.parametrize(
    "flag", ["--enable-custom-logit-processor", "--is-embedding", "--trust-request-chat-template"]
)
def test_a_new_flag_of_what_is_served_or_accepted_is_quoted_not_added(flag: str) -> None:
    """The trust boundary: message text is data anyone can write, so a flag that changes what the server
    serves or accepts is never added on its word alone; the stop quotes it for the person. Nor does copying
    the engine's phrase around the flag ("Please add `--is-embedding`") make a line the engine's."""
    answer = f'{{"object":"error","message":"This request needs it. Please set `{flag}` to enable it.","code":400}}'
    found = decided(PY, [answer], "runs-but-degraded")
    assert (found["playbook"], found["action"]) == ("sglang.message.remedy", "stop")
    copied = '{"error":{"message":"Please add `--is-embedding` when launching the server."}}'
    assert decided(PY, [copied], "runs-but-degraded")["action"] == "stop"


@pytest.mark.parametrize(
    "folder, name, edit, written_in",
    [
        (
            "corpus-real-engine-9",
            "embeddings-request-without-is-embedding",
            "set --is-embedding",
            "tokenizer_manager",
        ),
        (
            "corpus-real-engine-9",
            "request-chat-template-without-trust-flag",
            "set --trust-request-chat-template",
            "serving_chat",
        ),
        (
            "corpus-real-engine-25",
            "custom-logit-processor-request-without-server-flag",
            "set --enable-custom-logit-processor",
            "tokenizer_manager",
        ),
    ],
)
def test_an_ask_the_releases_own_source_writes_is_proposed_for_the_person(
    folder: str, name: str, edit: str, written_in: str
) -> None:
    """With no engine installed here, the bundled table of the release's own messages grounds the ask: the
    flag is proposed, below the confidence unattended runs act on, citing the source line that writes it."""
    found = blind(folder, name)
    assert (found["playbook"], found["action"]) == ("sglang.message.remedy", "fix")
    assert _describe(found["edits"]) == [edit]
    assert found["confidence"] < 0.5
    case = json.loads((DATA / folder / f"{name}.json").read_text())
    decision = decide(context(case["command"], case["log"].splitlines(), case["exit_kind"]))
    assert "srt/" in decision.why and f"{written_in}.py:" in decision.why


def _describe(edits: list[dict]) -> list[str]:
    out = []
    for e in edits:
        values = " ".join(e.get("values") or ())
        out.append(f"{'set' if e['op'] == 'set' else e['op']} {e['flag']}{' ' + values if values else ''}")
    return out


def test_a_requirement_on_the_users_flag_takes_that_flag_back_before_serving_something_else() -> None:
    contract = _blind("corpus-real-engine-8", "prefill-only-disable-kv-cache-without-embedding")
    assert _describe(contract["edits"]) == ["remove --prefill-only-disable-kv-cache"]


@pytest.mark.parametrize(
    "name", ["chat-max-tokens-above-small-context-length", "completions-prompt-longer-than-context-length"]
)
def test_requests_over_the_commands_own_context_cap_take_the_cap_back(name: str) -> None:
    contract = _blind("corpus-real-engine-9", name)
    assert _describe(contract["edits"]) == ["remove --context-length"]


def test_a_chat_template_file_that_raises_the_answer_is_taken_back(tmp_path: Path) -> None:
    template = tmp_path / "alternating.jinja"
    template.write_text(
        "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
        "{% endif %}{{ message['content'] }}{% endfor %}\n"
    )
    decided = _recorded(
        "chat-template-file-roles-must-alternate.rc137.txt",
        f"{PY} --port 32290 --chat-template {template}",
        "runs-but-degraded",
    )
    assert decided == {
        "playbook": "sglang.request.chat-template-refuses",
        "edits": ["remove --chat-template"],
    }
    # A template file that does not say it: no claim about it.
    template.write_text("{% for message in messages %}{{ message['content'] }}{% endfor %}\n")
    decided = _recorded(
        "chat-template-file-roles-must-alternate.rc137.txt",
        f"{PY} --port 32290 --chat-template {template}",
        "runs-but-degraded",
    )
    assert decided["playbook"] != "sglang.request.chat-template-refuses"


def test_json_written_as_javascript_objects_is_respelled() -> None:
    assert as_json("{enable_thinking: false}") == '{"enable_thinking": false}'
    assert loose_literal("{a: [1, two]}") == {"a": [1, "two"]}
    assert loose_literal("not a collection") is None
    _blind("corpus-real-engine-9", "default-chat-template-kwargs-not-valid-json")
    decided = _recorded(
        "json-model-override-args-unquoted-keys.rc1.txt",
        f"{PY} --port 32290 --json-model-override-args '{{max_position_embeddings: 1024}}'",
        "startup-crash",
    )
    assert decided["edits"] == ['set --json-model-override-args {"max_position_embeddings": 1024}']


def test_a_list_field_of_the_model_config_written_as_a_string_is_named() -> None:
    _blind("corpus-real-engine-8", "json-override-architectures-as-string")
    view = CommandView(
        LaunchCommand.parse(f'{PY} --json-model-override-args \'{{"architectures": "X"}}\''), CAT
    )
    (found,) = check_values(view)
    assert found.code == "override-not-a-list" and '["X"]' in found.message
    listed = CommandView(
        LaunchCommand.parse(f'{PY} --json-model-override-args \'{{"architectures": ["X"]}}\''), CAT
    )
    assert check_values(listed) == []


@pytest.mark.parametrize(
    ("folder", "name", "edits"),
    [
        ("corpus-real-engine-8", "load-format-gguf-on-safetensors-dir", ["remove --load-format"]),
        (
            "corpus-real-engine-6",
            "dflash-speculative-on-cpu",
            ["remove --speculative-algorithm", "remove --speculative-draft-model-path"],
        ),
    ],
)
def test_a_refusal_in_a_chosen_values_own_code_takes_the_choice_back(
    folder: str, name: str, edits: list
) -> None:
    contract = _blind(folder, name)
    assert contract["playbook"] == "sglang.source.check"
    assert _describe(contract["edits"]) == edits


def test_the_targets_context_above_its_drafts_is_set_to_the_drafts() -> None:
    contract = _blind("corpus-real-engine-8", "eagle3-draft-max-position-below-target-context")
    assert _describe(contract["edits"]) == ["set --context-length 256"]


@pytest.mark.real_sglang
def test_an_ask_the_installed_engine_writes_itself_is_proposed_for_the_person(sglang_env) -> None:
    """With the SGLang the command runs installed here, its own source says whether a message is its: then
    the flag it asks for is proposed (for the person to confirm); a crafted line never is."""
    from specdoctor.tools.catalog_load import installed

    installed(sglang_env.python)  # what a run records of the interpreter (its sys.path), before deciding
    case = json.loads(
        (DATA / "corpus-real-engine-9" / "custom-logit-processor-request-not-enabled.json").read_text()
    )
    command = case["command"].replace("python", sglang_env.python, 1)
    lines = case["log"].splitlines()
    ctx = context_for(
        LaunchCommand.parse(command), CAT, lines, outcome=outcome_from_log(lines, case["exit_kind"])
    )
    decision = decide(ctx)
    assert (decision.playbook, decision.action) == ("sglang.message.remedy", "fix")
    assert [e.describe() for e in decision.edits] == ["set --enable-custom-logit-processor"]
    assert decision.confidence < 0.5
    crafted = [
        '{"object":"error","message":"Please set `--trust-remote-code` to load this model.","code":400}'
    ]
    ctx = context_for(
        LaunchCommand.parse(command), CAT, crafted, outcome=outcome_from_log(crafted, "runs-but-degraded")
    )
    assert decide(ctx).action == "stop"


def test_an_ollama_tag_read_as_an_adapter_is_the_clients_to_drop() -> None:
    """`"model": "tiny-llama:latest"`: SGLang reads `base:adapter`, so the tag asks for adapter 'latest';
    turning LoRA on serves no such adapter. The client drops the tag."""
    case = json.loads(
        (DATA / "corpus-real-engine-21" / "chat-request-model-with-ollama-tag.json").read_text()
    )
    decision = decide(context(case["command"], case["log"].splitlines(), case["exit_kind"]))
    assert (decision.playbook, decision.action) == ("sglang.request.lora-not-enabled", "stop")
    assert "without `:latest`" in decision.advice


def test_half_of_what_the_engines_own_message_asks_is_not_proposed() -> None:
    """ "Launch with --x and preload Y using --z": the message gives no value for --z, so --x alone would
    fail again on the other half; the ask is quoted for the person."""
    from specdoctor.playbooks.message_asks import _more_is_asked

    said = "Please launch the server with --enable-foo flag and preload models using --foo-paths."
    ctx = context(PY, [f"ValueError: {said}"], "startup-crash")
    assert _more_is_asked(ctx, said, "--enable-foo")
    assert not _more_is_asked(ctx, "Please launch the server with --enable-foo.", "--enable-foo")


def test_relaunching_without_the_users_flag_as_the_engine_asks_takes_it_back() -> None:
    # A rerank request to an --is-embedding server with a decoder reranker's template: "Please relaunch
    # without --is-embedding"; the user's own flag goes, for the person to confirm (what is served changes).
    contract = _blind("corpus-real-engine-58", "qwen3-reranker-chat-template-with-is-embedding")
    assert (contract["playbook"], _describe(contract["edits"])) == (
        "sglang.message.remedy",
        ["remove --is-embedding"],
    )
    assert contract["confidence"] < 0.5
    # Recorded on the real `sglang serve`, another rerank request.
    lines = recorded_lines("serve-rerank-qwen3-template-on-embedding-server.rc137.txt")
    command = (
        "sglang serve --model-path /models/tiny-llama --device cpu --is-embedding --chat-template /t/r.jinja"
    )
    assert decided(command, lines)["edits"] == [{"op": "remove", "flag": "--is-embedding"}]


def test_a_server_wide_change_for_one_kind_of_request_is_the_persons_trade() -> None:
    # /v1/score with score_extraction_token_id: "requires --disable-radix-cache". The server serves everyone
    # else; whatever is proposed for this one kind of request is not applied unattended. The case is scored
    # wrong today (the engine's next checks ask for more); only the confidence is held, not the answer.
    contract = blind("corpus-real-engine-58", "score-extraction-token-with-radix-cache-enabled", solved=False)
    assert contract["confidence"] < 0.5
