from __future__ import annotations

import shlex

import pytest

from specdoctor.tools.catalog_load import bundled
from specdoctor.tools.command import (
    CommandError,
    LaunchCommand,
    Option,
    PositionalToFlag,
    RemoveFlag,
    RenameFlag,
    SetEnv,
    SetFlag,
    UnsetEnv,
    diff,
)
from tests.conftest import corpus_cases

CASES = corpus_cases()


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_corpus_commands_round_trip_exactly(case):
    line = case["command"]
    spec = LaunchCommand.parse(line)
    rendered = spec.shell()
    assert shlex.split(rendered) == shlex.split(line)
    assert LaunchCommand.parse(rendered) == spec
    assert LaunchCommand.parse(shlex.split(line)) == spec
    env = [t for t in shlex.split(line) if "=" in t and t.split("=")[0].isupper() and not t.startswith("-")]
    assert [f"{k}={v}" for k, v in spec.env] == env


def test_parse_entrypoints_and_argument_forms():
    spec = LaunchCommand.parse(
        "CUDA_VISIBLE_DEVICES=0,1 /opt/venv/bin/python3.11 -u -m sglang.launch_server --model-path M "
        '--cuda-graph-bs 32 40 --json-model-override-args \'{"rope_scaling": {"factor": 2}}\' '
        "--port=30001 --trust-remote-code --port 30002 --schedule-conservativeness -0.5"
    )
    assert spec.env == (("CUDA_VISIBLE_DEVICES", "0,1"),)
    assert spec.entrypoint == ("/opt/venv/bin/python3.11", "-u", "-m", "sglang.launch_server")
    assert spec.interpreter == "/opt/venv/bin/python3.11"
    assert spec.values("--cuda-graph-bs") == ("32", "40")
    assert spec.value("--json-model-override-args") == '{"rope_scaling": {"factor": 2}}'
    assert spec.value("--port") == "30002"  # argparse keeps the last occurrence
    assert spec.find("--port")[0].inline
    assert spec.value("--schedule-conservativeness") == "-0.5"
    assert spec.has("--trust-remote-code") and spec.values("--trust-remote-code") == ()
    assert spec.argv()[-2:] == ["--schedule-conservativeness", "-0.5"]


def test_sglang_serve_with_positional_model():
    spec = LaunchCommand.parse(["sglang", "serve", "Qwen/Qwen3-8B", "--tp-size", "2"])
    assert spec.is_serve_cli and spec.interpreter is None
    assert spec.positionals() == ["Qwen/Qwen3-8B"]
    assert spec.shell() == "sglang serve Qwen/Qwen3-8B --tp-size 2"


def test_shell_line_quotes_what_needs_quoting():
    spec = LaunchCommand.parse(["python", "-m", "sglang.launch_server", "--chat-template", "a b"])
    spec = spec.apply(SetEnv(name="HF_HOME", value="/data/hf cache"))
    assert spec.shell() == "HF_HOME='/data/hf cache' python -m sglang.launch_server --chat-template 'a b'"


def test_edits_keep_position_and_style():
    cat = bundled()
    spec = LaunchCommand.parse(
        "python -m sglang.launch_server --model-path M --tp 8 --mem-fraction-static=0.9 --port 1"
    )
    out = spec.apply_all(
        [
            SetFlag(flag="--tp-size", values=("4",)),
            SetFlag(flag="--mem-fraction-static", values=("0.85",)),
            RemoveFlag(flag="--port"),
            SetFlag(flag="--disable-custom-all-reduce"),
            SetEnv(name="NCCL_P2P_DISABLE", value="1"),
        ],
        cat.canonical,
    )
    assert out.shell() == (
        "NCCL_P2P_DISABLE=1 python -m sglang.launch_server --model-path M --tp-size 4 "
        "--mem-fraction-static=0.85 --disable-custom-all-reduce"
    )
    assert out.apply(UnsetEnv(name="NCCL_P2P_DISABLE")).env == ()


def test_rename_unknown_flag_keeps_values_in_place():
    spec = LaunchCommand.parse("python -m sglang.launch_server --num-speculative-tokens 16 --model-path M")
    out = spec.apply(RenameFlag(flag="--num-speculative-tokens", to="--speculative-num-draft-tokens"))
    assert out.argv()[3:5] == ["--speculative-num-draft-tokens", "16"]


def test_set_replaces_every_occurrence_once():
    spec = LaunchCommand.parse("python -m sglang.launch_server --port 1 --model-path M --port 2")
    out = spec.apply(SetFlag(flag="--port", values=("3",)))
    assert out.argv() == ["python", "-m", "sglang.launch_server", "--port", "3", "--model-path", "M"]


def test_positional_to_flag():
    spec = LaunchCommand.parse("python -m sglang.launch_server /models/llama --tp-size 2")
    out = spec.apply(PositionalToFlag(value="/models/llama", flag="--model-path"))
    assert out.shell() == "python -m sglang.launch_server --model-path /models/llama --tp-size 2"


def test_diff_is_readable_and_alias_aware():
    cat = bundled()
    old = LaunchCommand.parse(
        "A=1 python -m sglang.launch_server --model-path M --tp 8 --num-speculative-tokens 16"
    )
    new = old.apply_all(
        [
            RenameFlag(flag="--tp", to="--tp-size"),
            RenameFlag(flag="--num-speculative-tokens", to="--speculative-num-draft-tokens"),
            SetEnv(name="A", value="2"),
        ],
        cat.canonical,
    )
    text = [d.text() for d in diff(old, new, cat.canonical)]
    assert "~ env A 1 → 2" in text
    assert "~ --tp → --tp-size 8" in text
    assert "- --num-speculative-tokens 16" in text and "+ --speculative-num-draft-tokens 16" in text


@pytest.mark.parametrize(
    ("command", "says"),
    [
        ("", "empty launch command"),
        ("   ", "empty launch command"),
        ("python -m sglang.launch_server --model-path 'M", "check its quotes"),
        ("CUDA_VISIBLE_DEVICES=0", "no program"),
        ("vllm serve meta-llama/Llama-3.1-8B", "vLLM launches are not supported"),
        ("python -m vllm.entrypoints.openai.api_server --model x", "vLLM"),
        ("python serve.py --port 1", "runs a script"),
        ("python -c 'import sglang'", "not a launch command"),
        ("sglang version", "does not launch a server"),
        ("torchrun --nproc 8 x.py", "unknown engine `torchrun`"),
        ("python", "runs a script"),
    ],
)
def test_malformed_commands_get_one_clear_line(command, says):
    with pytest.raises(CommandError) as err:
        LaunchCommand.parse(command)
    message = str(err.value)
    assert says in message and "\n" not in message


def test_option_tokens_render_inline_only_for_one_value():
    assert Option(name="--x", values=("1",), inline=True).tokens() == ["--x=1"]
    assert Option(name="--x", values=("1", "2"), inline=True).tokens() == ["--x", "1", "2"]


def test_backslash_continuations_read_like_a_shell():
    pasted = (
        "CUDA_VISIBLE_DEVICES=0,1 python -m sglang.launch_server \\\n  --model-path M \\\r\n  --tp-size 2"
    )
    spec = LaunchCommand.parse(pasted)
    assert spec.argv() == ["python", "-m", "sglang.launch_server", "--model-path", "M", "--tp-size", "2"]


def test_sglangs_own_launcher_script_in_a_source_checkout_is_sglang():
    spec = LaunchCommand.parse("python3 python/sglang/launch_server.py --model-path M --enable-memory-saver")
    assert spec.has("--model-path") and spec.has("--enable-memory-saver")
    with pytest.raises(CommandError, match="runs a script"):
        LaunchCommand.parse("python3 other/launch_server.py --model-path M")
