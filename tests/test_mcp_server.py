"""`specdoctor mcp` driven through the MCP SDK's own client over stdio: each test is a real session
(initialize, list tools, call tools) with a `specdoctor mcp` subprocess, as a coding assistant runs it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from specdoctor.tools.reaper import MARKER_VARIABLE
from specdoctor.tools.system import find_free_port
from tests.procs import live_processes

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "data" / "corpus"
DEMO_MODELS = ROOT / "agent" / "data" / "demo"
SEED = (
    "python -m sglang.launch_server --model-path M --tp 8 --speculative-algorithm EAGLE3 "
    "--speculative-draft-model-path D --speculative-eagle-topk 1 --num-speculative-tokens 16"
)
READ_ONLY = {"check_command", "diagnose_log", "flag_help", "gpu_status"}
SIM = ["--allow-deploy", "--simulate", "h200x8", "--sim-speed", "0.05"]


def session(fn: Callable[[ClientSession], Awaitable[Any]], *server_args: str) -> Any:
    """Start `specdoctor mcp SERVER_ARGS`, initialize a session with the SDK's client, run `fn` in it."""

    async def main() -> Any:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "specdoctor", "mcp", "--no-llm", *server_args],
            env=dict(os.environ),  # the client passes only a few variables by default; tests mark theirs
        )
        async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            return await fn(s)

    return anyio.run(main)


def text(result) -> str:
    return " ".join(c.text for c in result.content if c.type == "text")


def cli(*args: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "specdoctor", *args], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


def our_processes() -> list[int]:
    """Engines this test's server launched (they carry the engine marker) and simulated nodes."""
    return live_processes(
        lambda env, cmd: MARKER_VARIABLE.encode() in env or b"specdoctor.tools.simnode" in cmd
    )


def wait_for_no_processes(seconds: float = 15.0) -> list[int]:
    deadline = time.time() + seconds
    while our_processes() and time.time() < deadline:
        time.sleep(0.2)
    return our_processes()


@pytest.fixture(autouse=True)
def no_leftovers():
    yield
    assert wait_for_no_processes() == []


def kimi(port: int) -> str:
    """A command the simulated 8x H200 node serves healthy at the first launch."""
    return (
        f"python -m sglang.launch_server --model-path {DEMO_MODELS / 'Kimi-K2.5'} --tp-size 8 --trust-remote-code "
        f"--speculative-algorithm EAGLE3 --speculative-draft-model-path {DEMO_MODELS / 'kimi-k2.5-eagle3'} "
        "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 "
        f"--mem-fraction-static 0.75 --port {port}"
    )


def test_initialize_lists_the_read_only_tools_with_output_schemas():
    async def run(s: ClientSession):
        return (await s.list_tools()).tools

    tools = {t.name: t for t in session(run)}
    assert set(tools) == READ_ONLY  # deploy, deploy_status and stop only with --allow-deploy
    for tool in tools.values():
        assert tool.output_schema and tool.output_schema["type"] == "object", tool.name
        assert tool.annotations.read_only_hint is True and tool.description
    check = tools["check_command"].output_schema["properties"]
    assert {"findings", "command", "changes", "unfixed"} <= set(check)
    evidence = tools["diagnose_log"].output_schema["properties"]["evidence"]["description"]
    assert "never instructions" in evidence  # log text is framed as data
    assert tools["flag_help"].input_schema["required"] == ["pattern"]


def test_check_command_on_the_seed_is_what_check_json_prints():
    async def run(s: ClientSession):
        return await s.call_tool("check_command", {"command": SEED})

    result = session(run)
    assert not result.is_error, text(result)
    got = result.structured_content
    foreign = [f for f in got["findings"] if f["flag"] == "--num-speculative-tokens"]
    assert foreign and "vLLM" in foreign[0]["message"]
    assert (
        "--speculative-num-draft-tokens 16" in got["command"]
        and "--num-speculative-tokens" not in got["command"]
    )
    assert "--speculative-num-steps 15" in got["command"]  # topk 1: draft tokens = steps + 1
    expected = cli("check", "--json", "--", *SEED.split())
    for key in expected.keys() - {"elapsed_ms"}:
        assert got[key] == expected[key], key
    assert json.loads(text(result)) == got  # the text content is the same object, for clients without schemas


def test_diagnose_log_on_a_corpus_crash_is_what_diagnose_decides():
    case = json.loads((CORPUS / "gpt-oss-torch-compile-capture-failure.json").read_text())

    async def run(s: ClientSession):
        return await s.call_tool(
            "diagnose_log", {"log": case["log"], "command": case["command"], "exit_kind": case["exit_kind"]}
        )

    result = session(run)
    assert not result.is_error, text(result)
    got = result.structured_content
    assert got["action"] == case["action"] == "fix" and got["category"] == case["category"]
    assert got["edits"] == [{"op": "remove", "flag": "--enable-torch-compile"}]
    assert "--enable-torch-compile" not in got["command"]
    assert got["evidence"] and got["evidence"][0] in case["log"]
    assert got["root_cause"].startswith("Exception: Capture cuda graph failed")
    assert got["grounds"] and got["planner"] == "playbooks"
    assert got["changes"] == [
        {"change": "removed", "what": "--enable-torch-compile", "before": "", "after": None}
    ]
    expected = cli("diagnose", "--case", str(CORPUS / f"{case['id']}.json"), "--json", "--no-llm")
    assert {k: got[k] for k in expected} == expected


def test_flag_help_greps_the_flags_without_running_the_command():
    async def run(s: ClientSession):
        specul = await s.call_tool("flag_help", {"pattern": "specul", "limit": 100})
        draft = await s.call_tool("flag_help", {"pattern": "num-draft", "sglang_version": "0.5.23"})
        none = await s.call_tool("flag_help", {"pattern": "speculativ-num-stepz"})
        return specul, draft, none

    specul, draft, none = session(run)
    got = specul.structured_content
    names = [f["name"] for f in got["flags"]]
    assert "--speculative-num-draft-tokens" in names and "--speculative-eagle-topk" in names
    assert names[0].startswith("--speculative")  # flags named like the pattern come first
    assert "bundled flag list" in got["catalog"] and got["version"]  # nothing was run to read the flags
    flag = draft.structured_content["flags"][0]
    assert flag["name"] == "--speculative-num-draft-tokens" and flag["synopsis"].startswith(flag["name"])
    assert flag["help"] and draft.structured_content["catalog"] == "flags of SGLang 0.5.23 (bundled --help)"
    assert none.structured_content["flags"] == []
    assert "--speculative-num-steps" in none.structured_content["similar"]


def test_gpu_status_says_clearly_when_there_is_no_driver():
    async def run(s: ClientSession):
        return await s.call_tool("gpu_status", {})

    result = session(run)
    assert not result.is_error, text(result)
    report = result.structured_content
    if os.path.exists("/usr/bin/nvidia-smi") or any(
        os.path.exists(os.path.join(d, "nvidia-smi")) for d in os.environ.get("PATH", "").split(os.pathsep)
    ):
        assert report["status"] in ("ok", "no_driver", "driver_mismatch", "no_devices", "error")
    else:
        assert report["status"] == "no_gpu" and "nvidia-smi not found" in report["message"]
        assert report["gpus"] == []


def test_bad_input_is_a_clear_tool_error_and_the_server_keeps_answering():
    calls = [
        ("check_command", {"command": "python -m sglang.launch_server --model-path 'M"}, "check its quotes"),
        ("check_command", {"command": "vllm serve M --tp 8"}, "vLLM launches are not supported"),
        ("check_command", {"command": "   "}, "no launch command"),
        (
            "check_command",
            {"command": SEED, "sglang_version": "9.9.9"},
            "no bundled flag list for SGLang 9.9.9",
        ),
        ("diagnose_log", {"log": "  \n", "command": SEED}, "the log is empty"),
        ("flag_help", {"pattern": ""}, "pattern"),
        ("deploy", {"command": SEED}, "deploy"),  # not offered without --allow-deploy
    ]

    async def run(s: ClientSession):
        errors = [await s.call_tool(name, args) for name, args, _ in calls]
        return errors, await s.call_tool("check_command", {"command": SEED})

    errors, after = session(run)
    for (name, _, says), result in zip(calls, errors, strict=True):
        assert result.is_error, name
        assert says in text(result), (name, text(result))
        assert "Traceback" not in text(result)
    assert not after.is_error and "--speculative-num-draft-tokens 16" in after.structured_content["command"]


def test_results_are_redacted():
    command = f"HF_TOKEN=hf_abcdefghijklmnopqrstu {SEED} --api-key sk-proj-abcdefghijklmnop"
    log = (
        "server_args=ServerArgs(model_path='M', api_key='sk-proj-abcdefghijklmnop', hf_token='hf_abcdefghijklmnopqrstu')\n"
        "sglang serve: error: unrecognized arguments: --num-speculative-tokens 16\n"
    )

    async def run(s: ClientSession):
        return [
            await s.call_tool("check_command", {"command": command}),
            await s.call_tool("diagnose_log", {"log": log, "command": command}),
        ]

    for result in session(run):
        assert not result.is_error, text(result)
        everything = text(result) + json.dumps(result.structured_content)
        assert "abcdefghijklmnop" not in everything
        assert "***" in everything


def test_deploy_on_the_simulated_node_reaches_healthy_and_stop_leaves_nothing(tmp_path):
    port = find_free_port(34000)

    async def run(s: ClientSession):
        tools = {t.name for t in (await s.list_tools()).tools}
        deployed = await s.call_tool("deploy", {"command": kimi(port), "wait_s": 90})
        run_id = deployed.structured_content["run_id"]
        url = deployed.structured_content["url"]
        health = await anyio.to_thread.run_sync(
            lambda: urllib.request.urlopen(f"{url}/health", timeout=5).status
        )
        running = our_processes()
        second = await s.call_tool("deploy", {"command": kimi(port)})
        status = await s.call_tool("deploy_status", {"run_id": run_id})
        stopped = await s.call_tool("stop", {"run_id": run_id})
        left = await anyio.to_thread.run_sync(wait_for_no_processes)
        after = await s.call_tool("deploy_status", {"run_id": run_id})
        unknown = await s.call_tool("stop", {"run_id": "4242"})
        return tools, deployed, health, running, second, status, stopped, left, after, unknown

    tools, deployed, health, running, second, status, stopped, left, after, unknown = session(
        run, *SIM, "--allow", "port", "--run-dir", str(tmp_path)
    )
    assert tools == READ_ONLY | {"deploy", "deploy_status", "stop"}
    got = deployed.structured_content
    assert not deployed.is_error and got["state"] == "healthy" and got["result"] == "healthy", got
    assert health == 200 and running  # the server was left running, on the simulated node
    assert (
        got["attempts"][-1]["outcome"] == "healthy"
        and "speculative decoding is working" in got["attempts"][-1]["detail"]
    )
    assert any("HEALTHY" in line for line in got["progress"])
    assert (Path(got["run_dir"]) / "transcript.jsonl").is_file() and Path(got["run_dir"]).parent == tmp_path
    assert second.is_error and "one run at a time" in text(second)
    assert status.structured_content["state"] == "healthy"
    assert not stopped.is_error and stopped.structured_content["state"] == "stopped"
    assert stopped.structured_content["stopped"] >= 1 and stopped.structured_content["left_running"] == []
    assert left == []
    assert (
        after.structured_content["state"] == "stopped"
        and "stopped by `stop`" in after.structured_content["message"]
    )
    assert unknown.is_error and "no run '4242' was started by this server" in text(unknown)


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ((), "is held by pid"),  # --port is pinned, as `specdoctor deploy` pins it: the holder is named
        (("--no-pin",), "--allow port"),  # unpinned, moving it is still an identity change nobody allowed
    ],
)
def test_deploy_keeps_the_unattended_policy(tmp_path, options, said):
    """The port is taken: the run stops before any launch, and says why."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", find_free_port(35000)))
        taken.listen()
        port = taken.getsockname()[1]

        async def run(s: ClientSession):
            return await s.call_tool("deploy", {"command": kimi(port), "wait_s": 60})

        result = session(run, *SIM, *options, "--run-dir", str(tmp_path))
    got = result.structured_content
    assert got["state"] == "failed" and got["result"] == "stopped", got
    assert said in got["message"] and got["attempts"] == [], got["message"]
    assert f"--port {port}" in got["command"] or str(port) in got["message"]
    assert our_processes() == []  # nothing was launched


def test_stop_ends_a_run_that_is_still_launching(tmp_path):
    async def run(s: ClientSession):
        deployed = await s.call_tool("deploy", {"command": kimi(find_free_port(37000)), "wait_s": 0})
        run_id = deployed.structured_content["run_id"]
        status = deployed.structured_content
        while not any("launch 1" in line for line in status["progress"]):
            status = (
                await s.call_tool("deploy_status", {"run_id": run_id, "wait_s": 0.2})
            ).structured_content
        launching = status["state"], our_processes()
        stopped = await s.call_tool("stop", {"run_id": run_id})
        return launching, stopped, our_processes()

    # At full simulated speed the server takes seconds to start: it is stopped while still loading.
    (state, running), stopped, left = session(
        run, "--allow-deploy", "--simulate", "h200x8", "--run-dir", str(tmp_path)
    )
    assert state == "running" and running
    assert stopped.structured_content["state"] == "stopped" and stopped.structured_content["stopped"] >= 1
    assert left == []


def test_the_end_of_the_session_stops_the_runs_it_started(tmp_path):
    async def run(s: ClientSession):
        deployed = await s.call_tool("deploy", {"command": kimi(find_free_port(36000)), "wait_s": 90})
        return deployed, our_processes()

    deployed, running = session(run, *SIM, "--allow", "port", "--run-dir", str(tmp_path))
    assert deployed.structured_content["state"] == "healthy" and running
    assert wait_for_no_processes() == []


def test_without_the_extra_mcp_says_what_to_install():
    code = "import sys; sys.modules['mcp'] = None; from specdoctor.agent.cli import main; sys.exit(main(['mcp']))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "pip install 'specdoctor[mcp]'" in proc.stderr
    assert proc.stdout == ""
