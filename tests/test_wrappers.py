"""Commands as people write them, wrapped: `docker run … IMAGE`, `podman run`, `uv run`, `conda run`, `nohup`,
`numactl`, `taskset`, `env`, and chains of them. The wrapper is a preserved prefix: parsed by its own
grammar, rendered back word for word, never touched by an edit but for a container's `-e`."""

from __future__ import annotations

import shlex

import pytest

from specdoctor.tools.catalog_load import bundled
from specdoctor.tools.command import (
    CommandError,
    LaunchCommand,
    RemoveFlag,
    RenameFlag,
    SetEnv,
    SetFlag,
    SetFreePort,
    UnsetEnv,
    diff,
)
from specdoctor.tools.redact import redact_command, unmask

ENGINE = "python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --tp 2 --mem-fraction-static 0.8"

# (command, the wrappers' kinds, the first word of the engine's entrypoint)
WRAPPED = [
    (
        "docker run --gpus all --shm-size 32g --ipc=host -p 30000:30000 -v /data/hf:/root/.cache/huggingface "
        f"-e HF_TOKEN=hf_x --name sgl --rm lmsysorg/sglang:v0.5.6-cu129 {ENGINE}",
        ["docker"],
    ),
    (f"docker --context gpu-box container run -itd -p8000:30000 --network=bridge img:1 {ENGINE}", ["docker"]),
    (
        f"sudo_like=1 podman --remote run --device nvidia.com/gpu=all -eA=1 --env=B=2 -- img {ENGINE}",
        ["podman"],
    ),
    (f"uv run --with 'sglang[all]' -p 3.11 --frozen {ENGINE}", ["uv"]),
    (f"uv --directory /srv/app run --extra gpu -- {ENGINE}", ["uv"]),
    (f"conda run -n sglang --no-capture-output {ENGINE}", ["conda"]),
    (f"micromamba run -p /opt/env {ENGINE}", ["conda"]),
    (f"nohup {ENGINE}", ["nohup"]),
    (f"numactl --cpunodebind=0 --membind 0 -C 0-15 {ENGINE}", ["numactl"]),
    (f"taskset -c 0-7 {ENGINE}", ["taskset"]),
    (f"taskset 0xff {ENGINE}", ["taskset"]),
    (f"env -u LD_PRELOAD NCCL_DEBUG=INFO {ENGINE}", ["env"]),
    (
        f"CUDA_VISIBLE_DEVICES=0,1 nohup numactl -N 0 -m 0 taskset -c 0-7 {ENGINE}",
        ["nohup", "numactl", "taskset"],
    ),
    (f"nohup docker run --rm img nohup env A=1 {ENGINE}", ["nohup", "docker", "nohup", "env"]),
]


@pytest.mark.parametrize(("line", "kinds"), WRAPPED, ids=[k[0][:40] for k in WRAPPED])
def test_each_wrapper_parses_and_round_trips_token_exact(line, kinds):
    spec = LaunchCommand.parse(line)
    assert [w.kind for w in spec.prefix] == kinds
    assert spec.entrypoint == ("python3", "-m", "sglang.launch_server")
    assert spec.value("--model-path") == "Qwen/Qwen3-8B" and spec.value("--tp") == "2"
    assert spec.shell() == line
    env_words = [f"{k}={v}" for k, v in spec.env]
    assert [*env_words, *spec.argv()] == shlex.split(line)
    assert LaunchCommand.parse(spec.argv()).argv() == spec.argv()
    assert LaunchCommand.parse(spec.shell()) == spec
    assert spec.arguments() == shlex.split(ENGINE)[3:]


def test_docker_options_that_take_values_are_read_as_such():
    spec = LaunchCommand.parse(
        "docker run --gpus all -e A=1 --env B=2 -eC=3 -e=D=4 --env=E=5 -v /a:/b -w /work --entrypoint= "
        "--name x --shm-size 1g --ipc host --runtime nvidia --network host -it -dp 80:80 --future-flag "
        f"--future-valued=7 img {ENGINE}"
    )
    (docker,) = spec.prefix
    assert docker.operand == ("img",)
    box = spec.container
    assert box is not None and box.image == "img"
    assert box.values("--gpus") == ["all"] and box.values("--workdir") == ["/work"]
    assert box.values("--publish") == ["80:80"] and box.switched("--detach") and box.switched("--tty")
    assert box.switched("--future-flag") and box.values("--future-valued") == ["7"]
    assert spec.env_dict() == {"A": "1", "B": "2", "C": "3", "D": "4", "E": "5"}


def test_an_unknown_docker_option_takes_no_value_unless_written_with_equals():
    # The documented rule: `--new-option value` reads `value` as the image.
    spec = LaunchCommand.parse(f"docker run --new-option value {ENGINE}")
    assert spec.container is not None and spec.container.image == "value"
    assert spec.entrypoint[0] == "python3"


def test_edits_change_only_the_engine_arguments():
    cat = bundled()
    line = f"CUDA_VISIBLE_DEVICES=0,1 nohup numactl -N 0 -m 0 taskset -c 0-7 docker run --rm -p 30000:30000 img {ENGINE} --port 30000"
    spec = LaunchCommand.parse(line)
    edited = spec.apply_all(
        [
            RenameFlag(flag="--tp", to="--tp-size"),
            SetFlag(flag="--mem-fraction-static", values=("0.7",)),
            RemoveFlag(flag="--port"),
            SetFlag(flag="--disable-cuda-graph"),
            SetFreePort(start=31000),
        ],
        cat.canonical,
    )
    assert edited.prefix == spec.prefix and edited.env == spec.env
    assert edited.argv()[: len(spec.argv()) - len(spec.arguments())] == spec.argv()[: -len(spec.arguments())]
    assert edited.arguments() == shlex.split(
        "--model-path Qwen/Qwen3-8B --tp-size 2 --mem-fraction-static 0.7 --disable-cuda-graph --port 31000"
    )
    assert [d.text() for d in diff(spec, edited, cat.canonical)] == [
        "~ --tp → --tp-size 2",
        "~ --mem-fraction-static 0.8 → 0.7",
        "~ --port 30000 → 31000",
        "+ --disable-cuda-graph",
    ]


def test_env_edits_outside_containers_stay_in_the_leading_words():
    spec = LaunchCommand.parse(f"A=1 nohup taskset -c 0 {ENGINE}")
    out = spec.apply(SetEnv(name="NCCL_P2P_DISABLE", value="1")).apply(SetEnv(name="A", value="2"))
    assert out.shell() == f"NCCL_P2P_DISABLE=1 A=2 nohup taskset -c 0 {ENGINE}"
    assert out.apply(UnsetEnv(name="A")).shell() == f"NCCL_P2P_DISABLE=1 nohup taskset -c 0 {ENGINE}"
    assert out.env_dict() == out.host_env() == {"NCCL_P2P_DISABLE": "1", "A": "2"}


def test_env_edits_go_where_an_env_wrapper_sets_them():
    spec = LaunchCommand.parse(f"A=0 nohup env -u X A=1 B=2 {ENGINE}")
    assert spec.env_dict() == {"A": "1", "B": "2"}  # the inner `env` wins over the leading words
    out = spec.apply(SetEnv(name="A", value="3")).apply(SetEnv(name="C", value="4"))
    assert out.shell() == f"nohup env -u X A=3 B=2 C=4 {ENGINE}"
    assert out.apply(UnsetEnv(name="B")).shell() == f"nohup env -u X A=3 C=4 {ENGINE}"
    bare = LaunchCommand.parse(f"nohup env A=1 {ENGINE}").apply(UnsetEnv(name="A"))
    assert bare.shell() == f"nohup {ENGINE}"  # an `env` that sets nothing goes too


def test_env_edits_inside_a_container_are_its_dash_e_options():
    line = f"HOST_ONLY=1 docker run --rm -e A=1 -eB=2 --env=C=3 -e PASSED -p 30000:30000 img {ENGINE}"
    spec = LaunchCommand.parse(line)
    # The engine sees the container's environment, never the docker client's (but `-e NAME` passes it on).
    assert spec.env_dict() == {"A": "1", "B": "2", "C": "3"}
    assert spec.host_env() == {"HOST_ONLY": "1"}
    out = spec.apply_all(
        [
            SetEnv(name="A", value="10"),
            SetEnv(name="B", value="20"),
            SetEnv(name="C", value="30"),
            SetEnv(name="PASSED", value="yes"),
            SetEnv(name="NCCL_P2P_DISABLE", value="1"),
        ]
    )
    assert out.shell() == (
        "HOST_ONLY=1 docker run --rm -e A=10 -eB=20 --env=C=30 -e PASSED=yes -p 30000:30000 "
        f"-e NCCL_P2P_DISABLE=1 img {ENGINE}"
    )
    assert out.env_dict()["NCCL_P2P_DISABLE"] == "1" and out.host_env() == {"HOST_ONLY": "1"}
    gone = (
        out.apply(UnsetEnv(name="A")).apply(UnsetEnv(name="NCCL_P2P_DISABLE")).apply(UnsetEnv(name="PASSED"))
    )
    assert gone.shell() == f"HOST_ONLY=1 docker run --rm -eB=20 --env=C=30 -p 30000:30000 img {ENGINE}"
    lines = [d.text() for d in diff(spec, out)]
    assert "+ env NCCL_P2P_DISABLE 1" in lines and "~ env A 1 → 10" in lines
    assert not any("wrapper" in d for d in lines)


def test_a_passed_on_variable_takes_the_value_docker_is_given():
    spec = LaunchCommand.parse(f"HF_TOKEN=hf_abc docker run -e HF_TOKEN img {ENGINE}")
    assert spec.env_dict() == {"HF_TOKEN": "hf_abc"}


def test_env_inside_the_container_after_the_image_is_the_engines():
    spec = LaunchCommand.parse(f"docker run -e A=1 img env A=2 B=3 {ENGINE}")
    assert spec.env_dict() == {"A": "2", "B": "3"}
    out = spec.apply(SetEnv(name="A", value="9")).apply(SetEnv(name="Z", value="0"))
    assert out.shell() == f"docker run img env A=9 B=3 Z=0 {ENGINE}"


def test_a_changed_wrapper_shows_in_the_diff():
    old = LaunchCommand.parse(f"taskset -c 0-7 {ENGINE}")
    new = LaunchCommand.parse(f"taskset -c 0-3 {ENGINE}")
    assert [d.text() for d in diff(old, new)] == ["~ wrapper taskset -c 0-7 → taskset -c 0-3"]


def test_secrets_in_wrappers_are_masked_and_restored():
    spec = LaunchCommand.parse(
        f"docker run -e HF_TOKEN=abc123 -eOPENAI_API_KEY=xyz --env=NCCL_DEBUG=INFO img env DB_PASSWORD=pw {ENGINE}"
    )
    shown = redact_command(spec)
    assert "abc123" not in shown and "xyz" not in shown and "pw " not in shown
    assert "-e HF_TOKEN=*** -eOPENAI_API_KEY=*** --env=NCCL_DEBUG=INFO" in shown
    assert unmask(LaunchCommand.parse(shown), spec) == spec


@pytest.mark.parametrize(
    ("line", "says"),
    [
        (f"sudo -E {ENGINE}", "does not launch the engine as another user"),
        (f"nohup sudo {ENGINE}", "`sudo` in the launch command"),
        ("docker exec box python3 -m sglang.launch_server", "`docker exec` does not launch a server"),
        ("docker run --rm lmsysorg/sglang", "runs the image's own command"),
        ("docker run --rm", "needs its IMAGE"),
        ("docker run --entrypoint python3 img -m sglang.launch_server", "splits the engine's command"),
        ("uv pip install sglang", "`uv pip` does not launch a server"),
        ("uv run -m sglang.launch_server --model-path M", "write `uv run python -m sglang.launch_server"),
        ("conda activate x", "`conda activate` does not launch"),
        ("taskset -p 0x1 1234", "`taskset -p` changes a running process"),
        ("taskset -c", "needs its MASK"),
        ("numactl --membind", "`--membind` needs a value"),
        ("nohup", "wraps no command"),
        (f"nohup A=1 {ENGINE}", "write `env A=1`"),
        ("env -S 'python -m sglang.launch_server'", "`env -S` splits a string"),
        ("bash -c 'python -m sglang.launch_server --model-path M'", "runs a shell line"),
        ("docker run img vllm serve M", "vLLM launches are not supported yet"),
        ("uv run vllm serve M", "vLLM launches are not supported yet"),
        ("nohup trtllm-serve M", "TensorRT-LLM launches are not supported yet"),
        ("docker run img bash", "unknown engine `bash`"),
    ],
)
def test_what_cannot_be_launched_says_why_in_one_line(line, says):
    with pytest.raises(CommandError) as err:
        LaunchCommand.parse(line)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_sglang_serve_and_interpreter_options_inside_wrappers():
    spec = LaunchCommand.parse("docker run img sglang serve Qwen/Qwen3-8B --tp-size 2")
    assert spec.is_serve_cli and spec.positionals() == ["Qwen/Qwen3-8B"]
    spec = LaunchCommand.parse("uv run /opt/venv/bin/python3.11 -u -m sglang.launch_server --model-path M")
    assert spec.interpreter == "/opt/venv/bin/python3.11" and spec.python_chooser is not None


def test_help_is_not_a_launch():
    assert "prints the flags and exits" in (LaunchCommand.parse(f"{ENGINE} --help").launch_problem() or "")
    assert "prints the flags and exits" in (LaunchCommand.parse(f"nohup {ENGINE} -h").launch_problem() or "")
    assert LaunchCommand.parse(f"nohup {ENGINE}").launch_problem() is None


def test_the_gate_lets_a_run_unset_only_what_it_set_in_the_container():
    from specdoctor.playbooks.gate import invalid_edits

    cat = bundled()
    original = LaunchCommand.parse(f"docker run --rm -e NCCL_DEBUG=INFO img {ENGINE}")
    current = original.apply(SetEnv(name="NCCL_P2P_DISABLE", value="1"))
    assert invalid_edits(current, [UnsetEnv(name="NCCL_P2P_DISABLE")], cat, original) == []
    (refused,) = invalid_edits(current, [UnsetEnv(name="NCCL_DEBUG")], cat, original)
    assert "was not set by this run" in refused.reason


def test_the_text_a_person_edits_in_fix_keeps_the_wrapper() -> None:
    from specdoctor.agent.interactive import multiline

    command = LaunchCommand.parse(
        "docker run --gpus all -e HF_TOKEN=x lmsysorg/sglang:v0.5.6 python3 -m sglang.launch_server "
        "--model-path m --tp-size 2"
    )
    assert LaunchCommand.parse(multiline(command)) == command
