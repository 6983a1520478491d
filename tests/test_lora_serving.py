"""Lessons of corpus-real-engine-24 (LoRA serving, recorded blind, 7/14 on arrival), each on its blind case
and a second real launch: an entry of --lora-paths the error names goes alone, the engine's "specify both"
is never half-done, and PEFT's `all-linear` is SGLang's `all`."""

from __future__ import annotations

import pytest

from tests.recorded import PY, SERVE, blind, decided, recorded_lines


def test_the_adapter_the_error_names_goes_and_the_others_stay() -> None:
    assert blind("corpus-real-engine-24", "lora-loha-adapter-next-to-lora")["edits"] == [
        {"op": "set", "flag": "--lora-paths", "values": ["sql=/adapters/sql-r8"]}
    ]
    # The same name twice: SGLang loaded the first and refused the later one.
    assert blind("corpus-real-engine-24", "lora-paths-duplicate-adapter-name")["edits"] == [
        {"op": "set", "flag": "--lora-paths", "values": ["sql=/adapters/sql-r8"]}
    ]
    lines = recorded_lines("lora-paths-same-name-twice.rc1.txt")
    command = f"{PY} --lora-paths chat=/adapters/chat-r8 chat=/adapters/sql-r8"
    assert decided(command, lines)["edits"] == [
        {"op": "set", "flag": "--lora-paths", "values": ["chat=/adapters/chat-r8"]}
    ]
    # Nothing in the list is named: the list is not guessed at.
    other = decided(f"{PY} --lora-paths a=/adapters/a b=/adapters/b", lines)["edits"]
    assert {"op": "set", "flag": "--lora-paths", "values": ["a=/adapters/a"]} not in other


def test_both_settings_the_engine_asks_for_or_none() -> None:
    # "specify both --max-lora-rank and --lora-target-modules": the rank has no value to give, so setting the
    # modules alone is half a fix; --enable-lora with nothing to serve goes back.
    assert blind("corpus-real-engine-24", "enable-lora-without-paths-rank-or-targets")["edits"] == [
        {"op": "remove", "flag": "--enable-lora"}
    ]
    # With the rank given, the modules are the half left: SGLang's `all`.
    lines = recorded_lines("enable-lora-with-rank-but-no-targets.rc1.txt")
    assert decided(f"{PY} --enable-lora --max-lora-rank 8", lines)["edits"] == [
        {"op": "set", "flag": "--lora-target-modules", "values": ["all"]}
    ]


def test_pefts_all_linear_is_sglangs_all() -> None:
    assert blind("corpus-real-engine-24", "lora-target-modules-peft-all-linear")["edits"] == [
        {"op": "set", "flag": "--lora-target-modules", "values": ["all"]}
    ]
    lines = recorded_lines("lora-target-modules-peft-all-linear-serve.rc2.txt")
    command = f"{SERVE} --enable-lora --max-lora-rank 8 --lora-target-modules all-linear"
    assert decided(command, lines, "parse-error")["edits"] == [
        {"op": "set", "flag": "--lora-target-modules", "values": ["all"]}
    ]


def test_a_number_in_a_list_is_no_entry_to_take_out() -> None:
    # "Unsupported --prompt-tokens-buckets rule type: '128'": the list lacks its rule name; 128 is not at fault.
    contract = blind("corpus-real-engine-3", "metrics-buckets-without-rule-name")
    assert contract["edits"] != [{"op": "set", "flag": "--prompt-tokens-buckets", "values": ["512", "2048"]}]


@pytest.mark.parametrize(
    "lines, command, fixed",
    [
        (
            "corpus-real-engine-24/lora-paths-json-form-wrong-keys",
            None,
            '{"lora_name": "sql", "lora_path": "/adapters/sql-r8"}',
        ),
        (
            "lora-paths-json-with-path-key.rc1.txt",
            f"{PY} --port 32290 --enable-lora --lora-paths "
            """'{"lora_name": "chat", "path": "/tmp/rec/adapters/chat-r8"}'""",
            '{"lora_name": "chat", "lora_path": "/tmp/rec/adapters/chat-r8"}',
        ),
    ],
)
def test_json_keys_are_respelled_as_the_engines_check_quotes_them(lines, command, fixed) -> None:
    """SGLang's check asks for 'lora_name' and 'lora_path'; `name`/`path` become them, values untouched, and
    the gate takes the new keys because the engine's own check quotes them."""
    if command is None:
        folder, name = lines.split("/")
        found = blind(folder, name)
    else:
        found = decided(command, recorded_lines(lines))
    assert found["playbook"] == "sglang.flag.json-keys-respelled"
    assert found["edits"] == [{"op": "set", "flag": "--lora-paths", "values": [fixed]}]


def test_a_json_key_is_never_respelled_into_a_name_no_check_quotes() -> None:
    from specdoctor.playbooks.gate import invalid_edits
    from specdoctor.tools.command import LaunchCommand, SetFlag
    from tests.test_corpus_scores import CAT

    spec = LaunchCommand.parse(f"""{PY} --lora-paths '{{"name": "a", "path": "/p"}}'""")
    taken = SetFlag(flag="--lora-paths", values=('{"lora_name": "a", "lora_path": "/p"}',))
    invented = SetFlag(flag="--lora-paths", values=('{"evil_name": "a", "lora_path": "/p"}',))
    changed = SetFlag(flag="--lora-paths", values=('{"lora_name": "b", "lora_path": "/p"}',))
    assert invalid_edits(spec, [taken], CAT) == []
    assert invalid_edits(spec, [invented], CAT) and invalid_edits(spec, [changed], CAT)


_ROOM = [
    {"op": "set", "flag": "--enable-lora", "values": []},
    {"op": "set", "flag": "--max-lora-rank", "values": ["64"]},
    {"op": "set", "flag": "--lora-target-modules", "values": ["all"]},
]


@pytest.mark.parametrize(
    "folder, name",
    [
        ("corpus-real-engine-20", "lora-request-on-server-without-enable-lora"),
        ("corpus-real-engine-24", "lora-requests-on-server-without-enable-lora"),
    ],
)
def test_a_lora_request_to_a_server_without_lora_relaunches_with_room_for_adapters(folder, name) -> None:
    # --enable-lora alone fails SGLang's next launch check (paths, or both rank and modules): all three go.
    contract = blind(folder, name)
    assert (contract["playbook"], contract["edits"]) == ("sglang.request.lora-not-enabled", _ROOM)
    assert contract["confidence"] < 0.5  # what is served changes: the person's call


def test_the_adapter_a_client_loads_is_named_for_the_person_not_put_in_the_command() -> None:
    # Recorded on the real `sglang serve`: an OpenAI client asks for `tiny-llama:support-bot`.
    lines = recorded_lines("serve-lora-completions-without-lora.rc137.txt")
    found = decided(SERVE, lines, "runs-but-degraded")
    assert (found["playbook"], found["edits"]) == ("sglang.request.lora-not-enabled", _ROOM)
    # A folder from the log goes into the reason for the person, never into the command by itself.
    body = '$ curl localhost/load_lora_adapter -d \'{"lora_name":"sql","lora_path":"/adapters/sql-r8"}\''
    from specdoctor.agent.diagnose import decide
    from tests.recorded import context

    decision = decide(context(SERVE, [*lines, body], "runs-but-degraded"))
    assert "--lora-paths sql=/adapters/sql-r8" in decision.why
    assert all(getattr(e, "flag", "") != "--lora-paths" for e in decision.edits)
    # A server that has LoRA on is not told to turn it on.
    assert decided(f"{SERVE} --enable-lora --max-lora-rank 8 --lora-target-modules all", lines)[
        "playbook"
    ] != ("sglang.request.lora-not-enabled")


@pytest.mark.parametrize(
    "name, fixed",
    [
        ("json-override-max-position-embeddings-quoted-string", '{"max_position_embeddings": 2048}'),
        (
            "rope-yarn-factor-quoted-string-context-length-int-parse",
            '{"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}',
        ),
    ],
)
def test_a_number_written_as_a_string_in_a_flags_json_is_written_as_a_number(name: str, fixed: str) -> None:
    contract = blind("corpus-real-engine-56", name)
    assert contract["edits"] == [{"op": "set", "flag": "--json-model-override-args", "values": [fixed]}]


def test_quoted_numbers_are_unquoted_only_where_a_string_stood_for_a_number() -> None:
    lines = recorded_lines("serve-json-override-num-kv-heads-quoted.rc1.txt")
    command = f"""{SERVE} --json-model-override-args '{{"num_key_value_heads": "2"}}'"""
    assert decided(command, lines)["edits"] == [
        {"op": "set", "flag": "--json-model-override-args", "values": ['{"num_key_value_heads": 2}']}
    ]
    # The JSON has no quoted number: nothing to respell.
    plain = f"""{SERVE} --json-model-override-args '{{"num_key_value_heads": 2}}'"""
    assert decided(plain, lines)["playbook"] != "sglang.flag.json-number-quoted"
