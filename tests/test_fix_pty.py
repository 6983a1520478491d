"""`specdoctor fix` through a real pseudo-terminal: what the person sees, what they type, and the command
that was launched in the end (read back from the run's transcript). The simulated 8x H200 node runs every
launch; after every test no process of ours may be left."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import ClassVar

import pexpect
import pytest

from specdoctor.tools.reaper import MARKER_VARIABLE
from specdoctor.tools.system import find_free_port
from tests.llm_stub import StubLLM, tool_calls
from tests.procs import live_processes

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "agent" / "data" / "demo"
# The flags of the bundled SGLang 0.5.23, whatever this machine has installed; then the node profile.
SIMULATED = ("--sglang-version", "0.5.23", "--simulate")
MENU = "[q]uit"
EDIT_PROMPT = "command> "
KILL_LINE = "\x15"  # Ctrl-U: readline deletes from the cursor back to the start of the line
KILL_WORD = "\x17"  # Ctrl-W: readline deletes the word before the cursor
# Every process these tests start inherits this, so the leftover check sees only ours, not those of a
# test run beside this one.
RUN_TOKEN = ("SPECDOCTOR_TEST_RUN", f"fix-pty-{uuid.uuid4().hex}")
_ANSI = re.compile(r"\x1b(\[[0-9;?]*[ -/]*[@-~]|[@-Z\\-_])")


def our_processes() -> list[int]:
    """Live processes of these tests' launches: the engine marker or the simulated node, and our token."""
    token = "=".join(RUN_TOKEN).encode()

    def ours(env: bytes, cmd: bytes) -> bool:
        launched = MARKER_VARIABLE.encode() in env or b"specdoctor.tools.simnode" in cmd
        return launched and token in env.split(b"\0")

    return live_processes(ours)


@pytest.fixture(autouse=True)
def no_leftovers():
    yield
    for child in Fix.spawned:
        # A test that failed half-way leaves specdoctor at a prompt: hang up, as closing a terminal does.
        child.close(force=True)
    Fix.spawned.clear()
    deadline = time.time() + 10
    while our_processes() and time.time() < deadline:
        time.sleep(0.2)
    assert our_processes() == []


def command(*, algorithm: str = "EAGLE3", tp: str = "--tp-size", mem: str = "0.97") -> list[str]:
    """Kimi-K2.5 with its EAGLE-3 drafter; `--mem-fraction-static` last, so an edit at the end of the line
    changes it. 0.97 fails CUDA-graph capture on the simulated H200s."""
    return [
        *("python", "-m", "sglang.launch_server", "--model-path", str(MODELS / "Kimi-K2.5")),
        *(tp, "8", "--trust-remote-code", "--speculative-algorithm", algorithm),
        *("--speculative-draft-model-path", str(MODELS / "kimi-k2.5-eagle3")),
        *("--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"),
        *("--speculative-num-steps", "3", "--port", str(find_free_port(34000))),
        *("--mem-fraction-static", mem),
    ]


def faulty_command() -> list[str]:
    """Two faults preflight catches (abbreviated --tp, EAGLE for an EAGLE-3 draft) and the capture OOM."""
    return command(algorithm="EAGLE", tp="--tp")


def environment(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SPECDOCTOR_LLM_", "OPENAI_")) and k not in ("EDITOR", "VISUAL")
    }
    return {
        **env,
        "TERM": "xterm-256color",
        "COLUMNS": "220",
        "LINES": "50",
        RUN_TOKEN[0]: RUN_TOKEN[1],
        **extra,
    }


class Fix:
    """One `specdoctor fix` on a pseudo-terminal, with everything it printed kept for assertions."""

    spawned: ClassVar[list[pexpect.spawn]] = []

    def __init__(
        self,
        run_dir: Path,
        cmd: list[str],
        profile: str = "h200x8",
        options: tuple[str, ...] = (),
        **env: str,
    ) -> None:
        self.run_dir = run_dir
        argv = ["-m", "specdoctor", "fix", *options, *SIMULATED, profile, "--sim-speed", "0.05"]
        self.child = pexpect.spawn(
            sys.executable,
            [*argv, "--run-dir", str(run_dir), "--", *cmd],
            cwd=str(ROOT),
            env=environment(**env),
            encoding="utf-8",
            codec_errors="replace",
            dimensions=(50, 220),
            timeout=20,
        )
        self.log = io.StringIO()
        self.child.logfile_read = self.log
        Fix.spawned.append(self.child)

    def expect(self, text: str) -> None:
        self.child.expect_exact(text)

    def answer(self, text: str) -> None:
        self.expect(MENU)
        self.child.sendline(text)

    def finish(self) -> int:
        self.child.expect(pexpect.EOF)
        self.child.close()
        return self.child.exitstatus

    @property
    def screen(self) -> str:
        return _ANSI.sub("", self.log.getvalue())

    def events(self) -> list[dict]:
        lines = (self.run_dir / "transcript.jsonl").read_text().splitlines()
        return [json.loads(line) for line in lines]


def of(events: list[dict], kind: str) -> list[dict]:
    return [e for e in events if e["type"] == kind]


def mem_fraction(command: str) -> str:
    """The `--mem-fraction-static` value of a command line (the capture playbook picks how far it drops)."""
    found = re.search(r"--mem-fraction-static (\S+)", command)
    assert found, command
    return found.group(1)


def test_accepting_both_proposals_ends_healthy_with_the_fixes(tmp_path):
    run = Fix(tmp_path, faulty_command())
    run.answer("a")  # preflight: --tp → --tp-size, EAGLE → EAGLE3
    run.answer("accept")  # capture OOM: a lower --mem-fraction-static
    assert run.finish() == 0
    screen = run.screen
    assert "before launch" in screen and "2 problem(s) found before launch" in screen
    assert "~ --speculative-algorithm EAGLE → EAGLE3" in screen
    assert "diagnosis of launch 1" in screen and "CUDA graph capture ran out of memory" in screen
    assert "HEALTHY · exit 0" in screen
    events = run.events()
    assert [(a["by"], a["approved"]) for a in of(events, "approval")] == [("user", True), ("user", True)]
    final = of(events, "edit")[-1]["new_command"]
    assert "--speculative-algorithm EAGLE3" in final and "--tp-size 8" in final
    lowered = mem_fraction(final)
    assert float(lowered) < 0.97 and f"~ --mem-fraction-static 0.97 → {lowered}" in screen
    assert of(events, "launch")[-1]["command"] == final
    assert events[-1]["type"] == "stop" and events[-1]["result"] == "healthy"
    assert events[-1]["final_command"] == final


def test_an_edited_command_is_launched_exactly_as_typed(tmp_path):
    run = Fix(tmp_path, command())
    run.answer("e")
    run.expect(EDIT_PROMPT)
    # The prompt comes prefilled with the proposal, which ends in the lowered `--mem-fraction-static`.
    run.child.send(KILL_WORD + "0.7\r")
    assert run.finish() == 0
    events = run.events()
    launched = [e["command"] for e in of(events, "launch")]
    assert len(launched) == 2
    assert launched[0].endswith("--mem-fraction-static 0.97")
    assert launched[1] == launched[0].replace("0.97", "0.7")
    approval = of(events, "approval")[-1]
    assert approval["by"] == "user" and approval["edited_command"] == launched[1]
    assert of(events, "edit")[-1]["new_command"] == launched[1]
    assert events[-1]["result"] == "healthy"
    assert "the change as you edited it:" in run.screen and "~ --mem-fraction-static 0.97 → 0.7" in run.screen


def test_an_edit_must_parse_and_keep_the_program(tmp_path):
    run = Fix(tmp_path, faulty_command())
    run.answer("e")
    run.expect(EDIT_PROMPT)
    run.child.send(KILL_LINE + f"sglang serve {MODELS / 'Kimi-K2.5'} --tp-size 8\r")
    run.expect("edits may change flags and environment only")
    run.expect(EDIT_PROMPT)
    run.child.send(KILL_LINE + "python -m sglang.launch_server --model-path 'unclosed\r")
    run.expect("check its quotes")
    run.expect(EDIT_PROMPT)
    run.child.send(KILL_LINE + "\r")  # an empty line goes back to the menu
    run.answer("q")
    assert run.finish() == 130  # quitting is declining, not "no flag change can help"
    assert of(run.events(), "launch") == []


def test_quitting_at_the_first_prompt_launches_nothing_and_exits_130_declined(tmp_path):
    run = Fix(tmp_path, faulty_command())
    run.answer("q")
    assert run.finish() == 130
    events = run.events()
    [approval] = of(events, "approval")
    assert approval["approved"] is False and approval["note"] == "declined by the user"
    assert of(events, "launch") == [] and of(events, "edit") == []
    assert events[-1]["type"] == "stop" and events[-1]["result"] == "declined"
    assert events[-1]["exit_code"] == 130
    assert "DECLINED · exit 130" in run.screen and "declined by the user" in run.screen
    assert "no flag change can help" not in run.screen


def test_an_edit_with_problems_goes_back_to_the_prompt_with_both_commands_offered(tmp_path):
    cmd = command()
    run = Fix(tmp_path, cmd)
    run.answer("e")
    run.expect(EDIT_PROMPT)
    # A typo in the flag: the static check finds it before any launch, and knows its fix.
    run.child.send(
        KILL_LINE + " ".join(cmd).replace("--mem-fraction-static 0.97", "--mem-fraction-statc 0.7") + "\r"
    )
    run.expect("your edit has problems")
    run.expect("[y]our edit, with the static check's fixes:")
    run.answer("y")
    assert run.finish() == 0
    screen = run.screen
    assert "launching your command" not in screen
    # Back at the prompt: the playbook's own proposal is still the proposal, the fixed edit beside it.
    offered = screen.split("your edit has problems", 1)[1]
    proposal = offered.split("proposed command (from ", 1)[1].split("[y]our edit", 1)[0]
    assert "sglang.cuda-graph" in proposal.splitlines()[0]
    assert "--mem-fraction-statc" not in proposal and "--mem-fraction-static 0.7" not in proposal
    fixed = offered.split("[y]our edit, with the static check's fixes:", 1)[1].split(MENU, 1)[0]
    assert "--mem-fraction-static 0.7" in fixed
    events = run.events()
    launched = [e["command"] for e in of(events, "launch")]
    assert len(launched) == 2 and launched[1].endswith("--mem-fraction-static 0.7")
    assert "--mem-fraction-statc" not in " ".join(launched)
    assert events[-1]["result"] == "healthy"


def test_skip_launches_the_command_as_it_is(tmp_path):
    run = Fix(tmp_path, command())
    run.expect("[s]kip")
    run.answer("s")  # the capture OOM: relaunch unchanged
    run.expect("launching the command as it is")
    run.answer("q")  # the same failure again: decline
    assert run.finish() == 130
    events = run.events()
    launched = [e["command"] for e in of(events, "launch")]
    assert len(launched) == 2 and launched[0] == launched[1]
    assert launched[1].endswith("--mem-fraction-static 0.97")
    approvals = [(a["approved"], a["note"]) for a in of(events, "approval")]
    assert approvals == [
        (False, "skipped by the user: launched as it is"),
        (False, "declined by the user"),
    ]
    assert of(events, "edit") == []
    assert events[-1]["result"] == "declined" and events[-1]["exit_code"] == 130


def test_a_pinned_flag_is_shown_pinned_and_its_change_cannot_be_accepted(tmp_path):
    run = Fix(tmp_path, command(), options=("--pin", "mem-fraction-static"))
    run.expect("pinned: set --mem-fraction-static")
    run.answer("a")
    run.expect("the proposal changes pinned --mem-fraction-static")
    run.answer("q")
    assert run.finish() == 130
    events = run.events()
    assert len(of(events, "launch")) == 1 and of(events, "edit") == []
    assert of(events, "run_start")[0]["policy"]["pinned"] == ["--mem-fraction-static"]
    assert [a["note"] for a in of(events, "approval")] == ["declined by the user"]


def test_asking_the_llm_without_an_endpoint_says_so_and_asks_again(tmp_path):
    run = Fix(tmp_path, faulty_command())
    run.answer("l")
    run.expect("no LLM endpoint is configured")
    run.answer("q")
    assert run.finish() == 130
    assert run.screen.count(MENU) == 2
    assert of(run.events(), "launch") == []


def test_the_llm_asked_instead_of_the_playbook_proposes_its_own_change(tmp_path):
    answer = {
        "diagnosis": "CUDA graph capture needs memory outside the static pool.",
        "category": "cuda-graph",
        "evidence": ["Capture cuda graph failed: CUDA out of memory."],
        "action": "fix",
        "edits": [{"op": "set", "flag": "--mem-fraction-static", "values": ["0.85"]}],
        "why": "a lower static share leaves room for the graphs",
        "confidence": 0.8,
    }
    with StubLLM(tool_calls(("propose", answer), usage=(900, 200))) as stub:
        run = Fix(
            tmp_path,
            command(),
            SPECDOCTOR_LLM_BASE_URL=stub.url,
            SPECDOCTOR_LLM_MODEL="stub-model",
            NO_PROXY="127.0.0.1,localhost",
        )
        run.answer("l")
        run.expect("by the LLM")
        run.answer("a")
        assert run.finish() == 0
    assert len(stub.requests) == 1
    assert "~ --mem-fraction-static 0.97 → 0.85" in run.screen
    events = run.events()
    assert [d["planner"] for d in of(events, "decision")] == ["playbooks", "llm"]
    assert of(events, "launch")[-1]["command"].endswith("--mem-fraction-static 0.85")
    assert events[-1]["result"] == "healthy"


def test_the_editor_named_by_editor_changes_the_command(tmp_path):
    editor = tmp_path / "editor"
    editor.write_text(
        f"#!{sys.executable}\n"
        "import pathlib, re, sys\n"
        "p = pathlib.Path(sys.argv[1])\n"
        "p.write_text(re.sub(r'--mem-fraction-static \\S+', '--mem-fraction-static 0.8', p.read_text()))\n"
    )
    editor.chmod(0o755)
    run = Fix(tmp_path / "run", command(), EDITOR=str(editor))
    run.expect("[E]ditor > ")
    run.child.sendline("E")
    assert run.finish() == 0
    launched = [e["command"] for e in of(run.events(), "launch")]
    assert launched[-1].endswith("--mem-fraction-static 0.8")


@pytest.mark.parametrize(("answer", "exit_code", "result"), [("y", 0, "healthy"), ("n", 3, "stopped")])
def test_stopping_a_stray_gpu_process_is_asked_first(tmp_path, answer, exit_code, result):
    model = tmp_path / "Qwen3-8B"
    model.mkdir()
    (model / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["Qwen3ForCausalLM"],
                "model_type": "qwen3",
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "hidden_size": 4096,
                "num_hidden_layers": 36,
                "vocab_size": 151936,
                "max_position_embeddings": 40960,
            }
        )
    )
    cmd = ["python", "-m", "sglang.launch_server", "--model-path", str(model), "--tp-size", "2"]
    cmd += ["--port", str(find_free_port(34000))]
    run = Fix(tmp_path / "run", cmd, profile="a100x2-busy", options=("--allow-kill",))
    run.expect("stop 48213 (python3, 30720 MiB on GPU 1)")
    run.expect("[y/N] ")
    run.child.sendline(answer)
    assert run.finish() == exit_code
    events = run.events()
    assert events[-1]["result"] == result
    freed = [a for a in of(events, "approval") if a["note"].startswith("freed the GPUs")]
    assert len(freed) == (answer == "y")


def test_ctrl_c_during_a_launch_stops_the_engine_and_closes_the_transcript(tmp_path):
    profile = tmp_path / "hang.json"
    profile.write_text(
        json.dumps(
            {
                "name": "h200x8-hangs-loading-weights",
                "gpus": {
                    "count": 8,
                    "name": "NVIDIA H200",
                    "memory_mib": 143771,
                    "compute_capability": "9.0",
                    "p2p": True,
                },
                "inject": {"hang_at_stage": "weights"},
            }
        )
    )
    run = Fix(tmp_path / "run", command(mem="0.8"), profile=str(profile))
    run.expect("loading weights")
    assert our_processes() != []
    run.child.sendintr()
    assert run.finish() == 130
    events = run.events()
    assert len(of(events, "launch")) == 1 and of(events, "outcome") == []
    assert events[-1]["type"] == "stop" and events[-1]["result"] == "interrupted"
    assert events[-1]["exit_code"] == 130


@pytest.mark.parametrize("prompt", ["menu", "edit"])
def test_ctrl_c_at_a_prompt_stops_and_closes_the_transcript(tmp_path, prompt):
    run = Fix(tmp_path, faulty_command())
    run.expect(MENU)
    if prompt == "edit":
        run.child.sendline("e")
        run.expect(EDIT_PROMPT)
    # CPython's input() loses a SIGINT that lands between drawing the prompt and waiting for a key (it
    # is seen at the next key); a person is never that fast, a test reacting to the prompt is.
    time.sleep(0.3)
    run.child.sendintr()
    assert run.finish() == 130
    events = run.events()
    assert of(events, "launch") == []
    assert events[-1]["type"] == "stop" and events[-1]["result"] == "interrupted"


def test_without_a_terminal_it_runs_unattended_and_says_so(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            *("-m", "specdoctor", "fix", *SIMULATED, "h200x8", "--sim-speed", "0.05"),
            *("--run-dir", str(tmp_path), "--", *faulty_command()),
        ],
        cwd=ROOT,
        env=environment(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    assert "not a terminal: running unattended, like `specdoctor deploy --once`" in proc.stderr
    assert "[q]uit" not in proc.stdout and "\x1b[" not in proc.stdout
    events = [json.loads(line) for line in (tmp_path / "transcript.jsonl").read_text().splitlines()]
    assert {a["by"] for a in of(events, "approval")} == {"policy"}
    assert events[-1]["result"] == "healthy"
    assert float(mem_fraction(events[-1]["final_command"])) < 0.97
