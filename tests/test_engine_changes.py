"""Failures the command causes at one remove, each rule on a blind case of the real SGLang 0.5.23 and on a
second real launch recorded here (tests/data/sglang-outputs), with the near miss it must not take:
- a feature crashing in SGLang's own module for it (`srt/kv_canary/` for --kv-canary), taken back with its
  own settings;
- a check that reads only defaults, but on a setting SGLang logged it brought in because of the command's
  flag ("Enable deterministic inference because of rl_on_policy_target.");
- torch's rendezvous at an address this machine cannot reach (the command's own --host on one node), or
  at an init method written without its scheme;
- SGLang's own minimum --mem-fraction-static below the lowest share the edit policy allows."""

from __future__ import annotations

import json

import pytest

from specdoctor.agent.diagnose import decide
from specdoctor.agent.evaluate import score_case
from specdoctor.playbooks.brought_in import brought_in
from specdoctor.playbooks.decision import Fix, Stop
from specdoctor.tools.command import LaunchCommand
from tests.recorded import DATA, PY, SERVE, blind, context, decided, recorded_lines
from tests.test_corpus_scores import CAT, contract_for


def _lines(name: str) -> list[str]:
    return recorded_lines(name)


def _context(command: str, lines: list[str], kind: str = "startup-crash"):
    return context(command, lines, kind)


def _decided(command: str, lines: list[str], kind: str = "startup-crash") -> dict:
    return decided(command, lines, kind)


def _blind(folder: str, name: str) -> dict:
    return blind(folder, name)


# A feature crashing in its own module --------------------------------------------------------------------


def test_a_feature_that_crashes_in_its_own_module_is_taken_back_with_its_settings() -> None:
    blind = _blind("corpus-real-engine-4", "kv-canary-on-cpu-device-stream")
    assert blind["edits"] == [
        {"op": "remove", "flag": "--kv-canary"},
        {"op": "remove", "flag": "--kv-canary-sweep-interval"},
    ]
    # Second log: `sglang serve`, the other mode of the feature, no sub-setting given.
    second = _decided(
        f"{SERVE} --port 32290 --kv-canary raise", _lines("kv-canary-raise-serve-on-cpu.rc137.txt")
    )
    assert second["playbook"] == "sglang.feature.named-in-error"
    assert second["edits"] == [{"op": "remove", "flag": "--kv-canary"}]
    assert second["confidence"] < 0.7  # a lead, not applied unattended


def test_a_module_named_for_a_flag_the_command_left_alone_names_nothing() -> None:
    # The same crash with --kv-canary at its default: the feature's module ran for another reason; the
    # command's other flag is not named by it, and SGLang's own code is reported instead.
    decided = _decided(
        f"{SERVE} --port 32290 --kv-canary none --log-level info",
        _lines("kv-canary-raise-serve-on-cpu.rc137.txt"),
    )
    assert decided["action"] == "stop"


def test_only_the_innermost_frames_tie_a_module_to_a_flag() -> None:
    lines = _lines("kv-canary-raise-serve-on-cpu.rc137.txt")
    frames = [i for i, line in enumerate(lines) if "kv_canary" in line and line.lstrip().startswith("File")]
    assert frames, "the recorded traceback runs through srt/kv_canary/"
    # Push the feature's frames out of the innermost ones: five frames of SGLang's own code below them.
    below = [
        f'  File "/opt/sglang-cpu/lib/python3.11/site-packages/sglang/srt/utils/common.py", line {n}, in helper_{n}\n'
        f"    helper_{n + 1}()"
        for n in range(1, 6)
    ]
    at = frames[-1] + 2
    pushed = [*lines[:at], *"\n".join(below).splitlines(), *lines[at:]]
    decided = _decided(f"{SERVE} --port 32290 --kv-canary raise", pushed)
    assert decided["playbook"] != "sglang.feature.named-in-error"


# A setting SGLang brought in ------------------------------------------------------------------------------


def test_a_check_on_a_setting_brought_in_by_the_command_takes_that_flag_back() -> None:
    blind = _blind("corpus-real-engine-4", "rl-on-policy-target-on-cpu")
    assert blind["edits"] == [{"op": "remove", "flag": "--rl-on-policy-target"}]
    second = _decided(
        f"{SERVE} --port 32290 --rl-on-policy-target fsdp", _lines("rl-on-policy-target-serve-on-cpu.rc1.txt")
    )
    assert second["playbook"] == "sglang.source.check"
    assert second["edits"] == [{"op": "remove", "flag": "--rl-on-policy-target"}]
    assert second["confidence"] < 0.7


def test_a_because_line_about_another_thing_or_another_flag_brings_nothing_in() -> None:
    lines = _lines("rl-on-policy-target-serve-on-cpu.rc1.txt")
    ctx = _context(f"{SERVE} --port 32290 --rl-on-policy-target fsdp", lines)
    assert brought_in(ctx, "deterministic inference attention backend") is not None
    assert brought_in(ctx, "LoRA adapter rank") is None  # the check is about something else
    # A flag the log names but the command did not choose is no lead.
    ctx = _context(f"{SERVE} --port 32290", lines)
    assert brought_in(ctx, "deterministic inference attention backend") is None


# Rendezvous addresses --------------------------------------------------------------------------------------


def test_a_host_this_machine_does_not_reach_is_given_back_to_loopback() -> None:
    blind = _blind("corpus-real-engine-5", "host-ip-not-on-this-machine-hangs")
    assert blind["edits"] == [{"op": "remove", "flag": "--host"}]
    second = _decided(
        f"{PY} --port 32290 --host 10.254.254.7", _lines("host-address-not-on-this-machine.rc124.txt"), "hang"
    )
    assert second["playbook"] == "sglang.network.own-address-unreachable"
    assert second["edits"] == [{"op": "remove", "flag": "--host"}]


def test_an_unreached_address_that_is_not_the_commands_or_on_several_nodes_is_not_its_host() -> None:
    lines = _lines("host-address-not-on-this-machine.rc124.txt")
    other = _decided(f"{PY} --port 32290 --host 0.0.0.0", lines, "hang")
    assert other["playbook"] != "sglang.network.own-address-unreachable"
    nodes = _decided(
        f"{PY} --port 32290 --host 10.254.254.7 --nnodes 2 --node-rank 1 --dist-init-addr 10.0.0.1:5000",
        lines,
        "hang",
    )
    assert nodes["playbook"] != "sglang.network.own-address-unreachable"


@pytest.mark.parametrize(
    ("source", "value"),
    [
        ("blind", "tcp://127.0.0.1:32455"),
        ("init-method-override-localhost-without-scheme.rc137.txt", "tcp://localhost:32291"),
    ],
)
def test_an_init_method_without_its_scheme_gets_tcp(source: str, value: str) -> None:
    if source == "blind":
        decided = _blind("corpus-real-engine-3", "env-dist-init-method-override-without-tcp-scheme")
    else:
        command = f"SGLANG_DISTRIBUTED_INIT_METHOD_OVERRIDE=localhost:32291 {PY} --port 32290"
        decided = _decided(command, _lines(source))
        assert decided["playbook"] == "sglang.network.init-method-without-scheme"
    assert decided["edits"] == [
        {"op": "set_env", "name": "SGLANG_DISTRIBUTED_INIT_METHOD_OVERRIDE", "value": value}
    ]


def test_no_rendezvous_handler_without_a_bare_address_in_the_command_is_not_guessed() -> None:
    lines = _lines("init-method-override-localhost-without-scheme.rc137.txt")
    decided = _decided(f"SGLANG_DISTRIBUTED_INIT_METHOD_OVERRIDE=file:///tmp/x {PY} --port 32290", lines)
    assert decided["playbook"] != "sglang.network.init-method-without-scheme"


# SGLang's minimum share ------------------------------------------------------------------------------------


def test_a_minimum_share_below_the_policy_floor_is_raised_to_the_floor() -> None:
    blind = _blind("corpus-real-engine-5", "chunked-prefill-size-zero-kv-budget-negative")
    assert blind["playbook"] == "sglang.memory.kv-pool-empty"
    # The command turned chunked prefill off, which is what made SGLang's share negative: it goes.
    assert blind["edits"] == [{"op": "remove", "flag": "--chunked-prefill-size"}]
    case = json.loads(
        (DATA / "corpus-real-engine-5" / "chunked-prefill-size-zero-kv-budget-negative.json").read_text()
    )
    lines = case["log"].splitlines()
    own_share = _decided(
        case["command"].replace("--chunked-prefill-size 0", "--chunked-prefill-size 512"), lines
    )
    assert own_share["edits"] == [{"op": "set", "flag": "--mem-fraction-static", "values": ["0.05"]}]


def test_decisions_here_are_typed() -> None:
    lines = _lines("kv-canary-raise-serve-on-cpu.rc137.txt")
    assert isinstance(decide(_context(f"{SERVE} --port 32290 --kv-canary raise", lines)), Fix)
    assert isinstance(decide(_context(f"{SERVE} --port 32290", lines)), Stop)


def test_a_rendezvous_name_no_resolver_knows_is_the_commands_own_address() -> None:
    # corpus-real-engine-11 (blind): torch retries "network addresses of (sglang-head-0, 33313) cannot be
    # retrieved" for ever on one node.
    path = DATA / "corpus-real-engine-11" / "dist-init-addr-unresolvable-hostname-hangs.json"
    contract = contract_for(path)
    assert score_case(json.loads(path.read_text()), contract, CAT).solved, contract
    assert contract["playbook"] == "sglang.network.own-address-unreachable"
    assert contract["edits"] == [{"op": "remove", "flag": "--dist-init-addr"}]


def test_a_node_rank_beyond_the_nodes_is_named_before_launch() -> None:
    from specdoctor.playbooks.value_checks import check_values
    from specdoctor.playbooks.view import CommandView

    _blind("corpus-real-engine-11", "node-rank-1-with-nnodes-1")
    (found,) = check_values(CommandView(LaunchCommand.parse(f"{PY} --node-rank 1"), CAT))
    assert found.code == "node-rank-out-of-range" and found.edits
    (two,) = check_values(CommandView(LaunchCommand.parse(f"{PY} --nnodes 2 --node-rank 2"), CAT))
    assert not two.edits  # which node this is, a person knows
    assert check_values(CommandView(LaunchCommand.parse(f"{PY} --nnodes 2 --node-rank 1"), CAT)) == []


def test_a_setting_named_across_the_error_and_its_code_is_a_suspect() -> None:
    # corpus-real-engine-11 (blind): "Seed must be between 0 and 2**32 - 1" raised in numpy/random for
    # --random-seed -1: the error names its subject, the code the rest.
    contract = _blind("corpus-real-engine-11", "random-seed-minus-one")
    assert contract["edits"] == [{"op": "remove", "flag": "--random-seed"}]


def test_a_named_setting_preflight_can_correct_is_corrected_not_taken_back() -> None:
    contract = _blind("corpus-real-engine", "json-model-override-args-single-quotes")
    assert contract["edits"] == [
        {"op": "set", "flag": "--json-model-override-args", "values": ['{"max_position_embeddings": 8192}']}
    ]


def test_an_engine_variable_set_to_a_value_the_error_does_not_list_gets_one_it_lists() -> None:
    # corpus-real-engine-12 (blind): "SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND='cpp' is not registered.
    # Registered backends: ['python', 'rust']" — an unknown value of the user's variable, the known ones listed.
    contract = _blind("corpus-real-engine-12", "env-unified-radix-tree-core-backend-unknown")
    assert contract["edits"] == [
        {"op": "set_env", "name": "SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND", "value": "python"}
    ]
    from specdoctor.playbooks.suspects import _listed_instead

    assert _listed_instead("SGLANG_X", "a", "SGLANG_X='a' is not known: ['b', 'c']") == "b"
    assert _listed_instead("SGLANG_X", "a", "SGLANG_Y='a' is not known: ['b']") is None


def test_a_prefill_budget_of_no_token_is_taken_back() -> None:
    contract = _blind("corpus-real-engine-12", "max-prefill-tokens-zero-hangs-warmup")
    assert contract["edits"] == [{"op": "remove", "flag": "--max-prefill-tokens"}]
