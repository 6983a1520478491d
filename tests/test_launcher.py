"""Wrapped commands launched for real: `deploy` runs `docker run … IMAGE …`, `nohup`, `taskset` as given (a
fake `docker` and a fake `python3`, first on PATH, record what they were asked and run the simulated node),
a container's environment edits reach the engine, stopping the launch stops the container, and no process
is left behind. The simulated launcher drops the wrappers: the simulated node stands in for them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specdoctor.agent.launcher import RealLauncher, SimulatedLauncher
from specdoctor.tools.command import LaunchCommand, SetEnv, UnsetEnv
from specdoctor.tools.system import find_free_port
from tests.procs import live_processes

DEMO = Path(__file__).resolve().parent.parent / "agent" / "data" / "demo"

FAKE_DOCKER = """#!{python}
# A fake `docker`: records its argv and environment, then has the container's command run as dockerd would:
# by a process that is no descendant of this one (a double fork, in its own session), with only the image's
# and -e's environment. Like `docker run` it stays attached: it passes SIGTERM and SIGINT on to the container
# (--sig-proxy), waits for it and exits with its status; it never kills it itself.
import json, os, signal, subprocess, sys, time

VALUED = {{"-e", "--env", "-p", "--publish", "-v", "--name", "--gpus", "--shm-size", "--ipc", "-w", "--network"}}
IMAGES = {{
    "fake/sglang:v0.5.23": ["{python}", "-m", "specdoctor.tools.simnode"],
    "fake/printenv": ["{python}", "-c", "import json, os; print(json.dumps(dict(os.environ)))"],
}}
argv = sys.argv[1:]
with open("{record}", "a") as f:
    f.write(json.dumps({{"argv": argv, "env": dict(os.environ)}}) + "\\n")
assert argv[0] == "run", argv
env = {{"PATH": os.environ["PATH"], "SPECDOCTOR_SIM_PROFILE": "h200x8", "SPECDOCTOR_SIM_SPEED": "0.05"}}
env["TEST_RUN_TOKEN"] = os.environ["TEST_RUN_TOKEN"]  # so the test can count what it started
i = 1
while argv[i].startswith("-"):
    opt, eq, inline = argv[i].partition("=")
    value = inline if eq else (argv[i + 1] if opt in VALUED else None)
    i += 1 if eq or opt not in VALUED else 2
    if opt in ("-e", "--env"):
        name, eq, val = value.partition("=")
        env[name] = val if eq else os.environ.get(name, "")
image, command = argv[i], argv[i + 1 :]
assert command[:3] == ["python3", "-m", "sglang.launch_server"], command
status = "{record}.%d.status" % os.getpid()
init = (
    "import signal, subprocess, sys\\n"
    "child = subprocess.Popen(sys.argv[2:])\\n"
    "for sig in (signal.SIGTERM, signal.SIGINT):\\n"
    "    signal.signal(sig, lambda s, _f: child.send_signal(s))\\n"
    "code = child.wait()\\n"
    "open(sys.argv[1] + '.tmp', 'w').write(str(code))\\n"
    "import os; os.rename(sys.argv[1] + '.tmp', sys.argv[1])\\n"
)
read_end, write_end = os.pipe()
if os.fork() == 0:
    os.setsid()
    container = subprocess.Popen(["{python}", "-c", init, status, *IMAGES[image], *command[3:]], env=env)
    os.write(write_end, str(container.pid).encode())
    os._exit(0)
os.wait()
container = int(os.read(read_end, 32))
for sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, lambda s, _f: os.kill(container, s))
while not os.path.exists(status):
    time.sleep(0.05)
sys.exit(int(open(status).read()))
"""

FAKE_PYTHON = """#!{python}
# A fake `python3` with SGLang: records how it was started (CPU affinity, SIGHUP ignored), then runs the
# simulated node in its place; anything else goes to the real python.
import json, os, signal, sys

if sys.argv[1:3] != ["-m", "sglang.launch_server"]:
    os.execv("{python}", ["{python}", *sys.argv[1:]])
with open("{record}", "a") as f:
    state = {{"cpus": sorted(os.sched_getaffinity(0)), "sighup_ignored": signal.getsignal(signal.SIGHUP) == signal.SIG_IGN}}
    f.write(json.dumps(state) + "\\n")
os.environ.update(SPECDOCTOR_SIM_PROFILE="h200x8", SPECDOCTOR_SIM_SPEED="0.05")
os.execv("{python}", ["{python}", "-m", "specdoctor.tools.simnode", *sys.argv[3:]])
"""

FAKE_UV = """#!{python}
# A fake `uv`: records its argv, then runs the command after `run` and its `--` options.
import json, os, sys

with open("{record}", "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
assert sys.argv[1] == "run"
words = [w for w in sys.argv[2:] if not w.startswith("--")]
os.execvp(words[0], words)
"""


@pytest.fixture
def fakes(tmp_path, monkeypatch) -> Path:
    """A folder first on PATH with the fake `docker`, `python3` and `uv`; their records go next to them."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for name, text in (("docker", FAKE_DOCKER), ("python3", FAKE_PYTHON), ("uv", FAKE_UV)):
        script = folder / name
        script.write_text(text.format(python=sys.executable, record=tmp_path / f"{name}.jsonl"))
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return tmp_path


@pytest.fixture(autouse=True)
def no_leftovers(tmp_path):
    yield
    deadline = time.time() + 10
    while ours(tmp_path) and time.time() < deadline:
        time.sleep(0.2)
    assert ours(tmp_path) == []


def ours(tmp_path: Path) -> list[int]:
    """This test's fakes and simulated nodes still alive (only those with this test's token)."""
    return live_processes(
        lambda env, cmd: b"specdoctor.tools.simnode" in cmd or str(tmp_path).encode() in cmd
    )


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def deploy(*args: str, run_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "specdoctor",
            "deploy",
            "--once",
            "--no-llm",
            "--run-dir",
            str(run_dir),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )


def seed_engine(port: int) -> list[str]:
    """The demo's launch: a vLLM flag, the wrong algorithm for its draft, too much static memory."""
    return (
        f"python3 -m sglang.launch_server --model-path {DEMO / 'Kimi-K2.5'} --tp 8 --trust-remote-code "
        f"--speculative-algorithm EAGLE --speculative-draft-model-path {DEMO / 'kimi-k2.5-eagle3'} "
        f"--speculative-eagle-topk 1 --num-speculative-tokens 16 --mem-fraction-static 0.97 "
        f"--host 0.0.0.0 --port {port}"
    ).split()


def test_deploy_runs_docker_as_given_fixes_only_the_engine_and_stops_the_container(fakes, monkeypatch):
    monkeypatch.setenv("DOCKER_CLIENT_ONLY", "yes")
    port = find_free_port(32000)
    prefix = ["docker", "run", "--rm", "--gpus", "all", "--shm-size", "32g", "-p", f"{port}:{port}"]
    prefix += ["-e", "NCCL_DEBUG=INFO", "fake/sglang:v0.5.23"]
    proc = deploy("--", *prefix, *seed_engine(port), run_dir=fakes / "run")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "in a container image (fake/sglang:v0.5.23): bundled flags of SGLang 0.5.23" in proc.stdout
    assert "HEALTHY: EAGLE3 accept length" in proc.stdout
    runs = records(fakes / "docker.jsonl")
    assert len(runs) == 2  # preflight's fixes, then a runtime fix (CUDA graph memory), both through docker
    for run in runs:
        assert ["docker", *run["argv"][: len(prefix) - 1]] == prefix
        assert run["env"]["DOCKER_CLIENT_ONLY"] == "yes"
    engine = [r["argv"][len(prefix) - 1 :] for r in runs]
    assert "--speculative-num-draft-tokens" in engine[0] and "--num-speculative-tokens" not in engine[0]
    assert engine[0][engine[0].index("--mem-fraction-static") + 1] == "0.97"
    assert engine[1][engine[1].index("--mem-fraction-static") + 1] == "0.91"
    working = proc.stdout.split("working command:\n", 1)[1].splitlines()[0].strip()
    assert working.startswith(" ".join(prefix) + " python3 -m sglang.launch_server ")


def test_env_edits_reach_the_engine_inside_the_container_not_the_docker_client(fakes, tmp_path):
    spec = LaunchCommand.parse(
        "HOST_ONLY=1 docker run --rm -e KEEP=1 -e DROP=1 fake/printenv python3 -m sglang.launch_server --model-path M"
    )
    spec = spec.apply(SetEnv(name="NCCL_P2P_DISABLE", value="1")).apply(UnsetEnv(name="DROP"))
    engine = RealLauncher().start(spec, tmp_path / "engine.log")
    assert engine.wait(timeout=30) == 0
    engine.stop()
    seen = json.loads(next(line for line in engine.tail() if line.startswith("{")))
    assert seen["NCCL_P2P_DISABLE"] == "1" and seen["KEEP"] == "1"
    assert "DROP" not in seen and "HOST_ONLY" not in seen
    (run,) = records(fakes / "docker.jsonl")
    assert run["env"]["HOST_ONLY"] == "1"
    assert run["argv"][:7] == ["run", "--rm", "-e", "KEEP=1", "-e", "NCCL_P2P_DISABLE=1", "fake/printenv"]


@pytest.mark.skipif(shutil.which("taskset") is None, reason="taskset is not installed")
def test_deploy_runs_nohup_and_taskset_as_given(fakes):
    port = find_free_port(32100)
    engine = f"python3 -m sglang.launch_server --model-path {DEMO / 'Kimi-K2.5'} --tp 8 --trust-remote-code --port {port}"
    proc = deploy("--", "nohup", "taskset", "-c", "0", *engine.split(), run_dir=fakes / "run")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (
        f"nohup taskset -c 0 python3 -m sglang.launch_server --model-path {DEMO / 'Kimi-K2.5'} --tp-size 8"
        in proc.stdout
    )
    (started,) = records(fakes / "python3.jsonl")
    assert started == {"cpus": [0], "sighup_ignored": True}


def test_deploy_refuses_what_does_not_launch_in_one_line(tmp_path):
    engine = f"python3 -m sglang.launch_server --model-path {DEMO / 'Kimi-K2.5'}"
    for words, says in (
        (["nohup", *engine.split(), "--help"], "`--help` prints the flags and exits; it does not launch"),
        (["docker", "run", "-d", "img", *engine.split(), "-h"], "`-h` prints the flags and exits"),
        (["docker", "run", "-d", "-p", "1:1", "img", *engine.split()], "`docker run -d` returns at once"),
        (["sudo", *engine.split()], "`sudo` in the launch command"),
    ):
        proc = deploy("--simulate", "h200x8", "--", *words, run_dir=tmp_path / "run")
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert says in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_the_simulated_node_stands_in_for_the_wrappers(tmp_path):
    launcher = SimulatedLauncher("h200x8")
    engine = "python3 -m sglang.launch_server --model-path M --port 30000 --tp-size 8"
    node = [sys.executable, "-m", "specdoctor.tools.simnode"]
    args = engine.split()[3:]
    assert launcher.argv(LaunchCommand.parse(f"nohup numactl -N 0 taskset -c 0-7 {engine}")) == [*node, *args]
    # Reached through the port the container publishes, where the simulated node then listens.
    mapped = launcher.argv(LaunchCommand.parse(f"docker run --rm -p 8000:30000 -e A=1 img {engine}"))
    assert mapped == [*node, "--model-path", "M", "--port", "8000", "--tp-size", "8"]
    served = launcher.argv(LaunchCommand.parse("docker run --network host img sglang serve M --tp-size 8"))
    assert served == [*node, "--model-path", "M", "--tp-size", "8"]


def test_simulated_deploy_of_a_docker_command_keeps_its_prefix(tmp_path):
    port = find_free_port(32200)
    prefix = f"docker run --rm -p {port}:{port} -e NCCL_DEBUG=INFO lmsysorg/sglang:v0.5.23-cu129"
    proc = deploy(
        "--simulate",
        "h200x8",
        "--sim-speed",
        "0.05",
        "--",
        *prefix.split(),
        *seed_engine(port),
        run_dir=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    working = proc.stdout.split("working command:\n", 1)[1].splitlines()[0].strip()
    assert working.startswith(prefix + " python3 -m sglang.launch_server ")
    launches = [json.loads(line) for line in (tmp_path / "transcript.jsonl").read_text().splitlines()]
    argvs = [e["argv"] for e in launches if e["type"] == "launch"]
    assert argvs and all(a[: len(prefix.split())] == prefix.split() for a in argvs)


def test_a_live_catalog_asks_uv_which_python_it_runs(fakes):
    from specdoctor.tools.catalog_load import for_spec

    spec = LaunchCommand.parse("uv run --frozen python3 -m sglang.launch_server --model-path M")
    assert for_spec(spec, live=False).interpreter is None and records(fakes / "uv.jsonl") == []
    choice = for_spec(spec, live=True)
    (asked,) = records(fakes / "uv.jsonl")
    assert asked == ["run", "--frozen", "python3", "-c", "import sys; print(sys.executable)"]
    assert choice.interpreter == sys.executable
    assert f"SGLang is not installed for {sys.executable}" in choice.note
