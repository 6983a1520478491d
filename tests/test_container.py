"""A containerised engine: what the container tells (ports, mounts, the release its tag names), what `check`
says about it, and where the loop looks for its server."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from specdoctor.agent.attempt import server_for
from specdoctor.agent.preflight import preflight
from specdoctor.playbooks.view import CommandView
from specdoctor.tools.catalog_load import bundled, for_spec, image_catalog
from specdoctor.tools.command import LaunchCommand

ENGINE = "python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --host 0.0.0.0"


def docker(options: str, engine: str = ENGINE, image: str = "lmsysorg/sglang:v0.5.6-cu129") -> LaunchCommand:
    return LaunchCommand.parse(f"docker run {options} {image} {engine}")


def specdoctor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specdoctor", *args], capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("lmsysorg/sglang:v0.5.6-cu129", "0.5.6"),
        ("lmsysorg/sglang:v0.4.6.post1-cu124", "0.4.6.post1"),
        ("registry.local:5000/lmsysorg/sglang:0.5.23", "0.5.23"),
        ("registry.local:5000/lmsysorg/sglang", None),
        ("lmsysorg/sglang:latest", None),
        ("lmsysorg/sglang@sha256:0123abcd", None),
    ],
)
def test_the_release_an_image_tag_names(image, version):
    assert docker("--rm", image=image).container.tag_version == version  # type: ignore[union-attr]


def test_check_uses_the_bundled_flags_of_the_tagged_release():
    choice = for_spec(docker("--rm -p 30000:30000"), live=False)
    assert choice.catalog.version == "0.5.6"
    assert choice.note == (
        "in a container image (lmsysorg/sglang:v0.5.6-cu129): bundled flags of SGLang 0.5.6 (its tag's release)"
    )
    post = image_catalog("img:v0.4.6.post1", "0.4.6.post1")
    assert post.catalog.version == "0.4.6" and "its tag names 0.4.6.post1" in post.note
    latest = for_spec(docker("--rm", image="lmsysorg/sglang:latest"), live=True)
    assert latest.catalog.version == "0.5.23" and "its tag names no release" in latest.note
    assert for_spec(docker("--rm"), version="0.5.4").catalog.version == "0.5.4"  # asked for wins


def test_uv_and_conda_use_the_bundled_flags_unless_a_live_read_is_asked():
    spec = LaunchCommand.parse("uv run --frozen python -m sglang.launch_server --model-path M")
    choice = for_spec(spec, live=False)
    assert choice.catalog.version == "0.5.23"
    assert "`uv run --frozen` picks its python when it runs (--live-catalog runs it to ask)" in choice.note


def test_published_ports_and_where_a_client_reaches_the_engine():
    box = docker(
        "-p 127.0.0.1:8000:30000 -p 9000-9001:31000-31001/tcp -p 40000 -p [::1]:7000:32000"
    ).container
    assert box is not None
    assert box.reach(30000) == ("127.0.0.1", 8000)
    assert box.reach(31001) == ("127.0.0.1", 9001)
    assert box.reach(32000) == ("::1", 7000)
    assert box.reach(40000) is None  # published to a port docker picks
    assert box.reach(12345) is None
    assert docker("--network host").container.reach(30000) is None  # type: ignore[union-attr]
    view = CommandView(docker("-p 8000:30000", ENGINE + " --port 30000"), bundled())
    server = server_for(view)
    assert (server.url, server.port, server.contained) == ("http://127.0.0.1:8000", 8000, True)
    plain = server_for(CommandView(LaunchCommand.parse(ENGINE + " --port 30000"), bundled()))
    assert (plain.url, plain.contained) == ("http://127.0.0.1:30000", False)


def test_bind_mounts_map_model_folders_to_this_host(tmp_path):
    model = tmp_path / "models" / "qwen"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"]}))
    box = docker(f"-v {tmp_path}/models:/models:ro --mount type=bind,src=/x,dst=/y -v named:/cache").container
    assert box is not None
    assert box.mounts() == [(f"{tmp_path}/models", "/models"), ("/x", "/y")]
    assert box.host_path("/models/qwen") == str(model)
    assert box.host_path("/cache/hub") is None and box.host_path("relative/path") is None
    inside = (
        "python3 -m sglang.launch_server --model-path /models/qwen --host 0.0.0.0 --context-length 999999999"
    )
    report = preflight(docker(f"-v {tmp_path}/models:/models -p 30000:30000", inside), bundled())
    assert not any(f.code == "model-missing" for f in report.findings)
    in_image = docker("-p 30000:30000", inside.replace("/models/qwen", "/opt/model"))
    assert not any(f.code == "model-missing" for f in preflight(in_image, bundled()).findings)
    missing = preflight(
        docker(f"-v {tmp_path}/models:/models -p 30000:30000", inside.replace("qwen", "nope")), bundled()
    )
    assert [f.message for f in missing.findings if f.code == "model-missing"] == [
        f"model folder {tmp_path}/models/nope does not exist"
    ]


def codes(spec: LaunchCommand, host: bool = False) -> dict[str, str]:
    return {f.code: f.severity for f in preflight(spec, bundled(), host=host).findings}


def test_what_keeps_specdoctor_from_watching_or_stopping_a_container():
    assert codes(docker("--rm -d -p 30000:30000")) == {"container-unwatchable": "error"}
    assert codes(docker("--rm -it -p 30000:30000")) == {"container-unwatchable": "error"}
    assert codes(LaunchCommand.parse(f"podman run --rm -it -p 30000:30000 img {ENGINE}")) == {}
    assert codes(docker("--rm --sig-proxy=false -p 30000:30000")) == {"container-no-signals": "warning"}
    assert codes(docker("--name sgl -p 30000:30000")) == {"container-name-kept": "warning"}
    assert codes(docker("--name sgl --rm -p 30000:30000")) == {}
    assert "docker run -d" in (docker("-d").launch_problem() or "")


def test_a_server_the_host_cannot_reach_is_found_and_its_host_fixed():
    assert codes(docker("--rm")) == {"container-port-unpublished": "warning"}
    assert codes(docker("--rm --network=host", ENGINE.replace(" --host 0.0.0.0", ""))) == {}
    inside = preflight(
        docker("--rm -p 30000:30000", ENGINE.replace(" --host 0.0.0.0", "")), bundled(), host=False
    )
    (finding,) = inside.findings
    assert finding.code == "container-listens-inside" and finding.severity == "error"
    assert inside.corrected.shell().endswith("--model-path Qwen/Qwen3-8B --host 0.0.0.0")
    assert inside.corrected.prefix == inside.original.prefix


def test_a_busy_published_port_is_named_not_moved():
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        busy = squatter.getsockname()[1]
        report = preflight(docker(f"--rm -p 127.0.0.1:{busy}:30000"), bundled())
    (finding,) = [f for f in report.findings if f.category == "port-in-use"]
    assert finding.code == "container-port-busy" and not finding.edits
    assert f"host port {busy} on 127.0.0.1, published to the container's port 30000" in finding.message


def test_check_on_a_docker_command(tmp_path):
    proc = specdoctor(
        "check",
        "--no-host",
        "--",
        "docker",
        "run",
        "--gpus",
        "all",
        "--shm-size",
        "32g",
        "-p",
        "30000:30000",
        "-e",
        "HF_TOKEN=hf_secret",
        "lmsysorg/sglang:v0.5.6-cu129",
        *ENGINE.split(),
        "--tp",
        "2",
        "--help",
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "in a container image (lmsysorg/sglang:v0.5.6-cu129): bundled flags of SGLang 0.5.6" in proc.stdout
    assert "`--help` prints the flags and exits; it does not launch" in proc.stdout
    # Checked against 0.5.6's own flags, where the full name was --tensor-parallel-size.
    assert "--tp is an abbreviation of --tensor-parallel-size" in proc.stdout
    assert "hf_secret" not in proc.stdout and "-e HF_TOKEN=***" in proc.stdout
    assert (
        "docker run --gpus all --shm-size 32g -p 30000:30000 -e HF_TOKEN=*** lmsysorg/sglang:v0.5.6-cu129 "
        "python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --host 0.0.0.0 --tensor-parallel-size 2"
    ) in proc.stdout


def test_check_json_on_wrapped_commands():
    proc = specdoctor("check", "--json", "--no-host", "--", f"nohup taskset -c 0-7 {ENGINE} --tp 2")
    data = json.loads(proc.stdout)
    assert data["command"] == f"nohup taskset -c 0-7 {ENGINE} --tp-size 2"
    assert data["argv"][:4] == ["nohup", "taskset", "-c", "0-7"]
    proc = specdoctor("check", "--json", "--no-host", "--", f"docker run -p 30000:30000 -e A=1 img {ENGINE}")
    data = json.loads(proc.stdout)
    assert data["ok"] is True and data["env"] == {"A": "1"}


def test_other_engines_keep_their_message():
    proc = specdoctor("check", "--", "docker", "run", "vllm/vllm-openai", "vllm", "serve", "M")
    assert proc.returncode == 2 and "vLLM launches are not supported yet" in proc.stderr
