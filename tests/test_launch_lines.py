"""Lessons of corpus-real-engine-34 (how launch lines are written in scripts, Dockerfiles and manifests; 5
of 13 on arrival, with the lessons of -33): spelling mistakes a shell, a YAML args list or a web page makes
of a meant command. Each on its blind case; each also caught before launch by `specdoctor check`."""

from __future__ import annotations

import pytest

from specdoctor.playbooks.flag_checks import check_flags
from specdoctor.tools.command import LaunchCommand
from tests.recorded import blind
from tests.test_corpus_scores import CAT

FOLDER = "corpus-real-engine-34"


@pytest.mark.parametrize(
    "name, edits",
    [
        ("exec-form-flag-and-value-in-one-argv-element", [("rename", "--port 37403")]),
        ("launch-server-given-serve-only-model-type", [("remove", "--model-type")]),
        ("json-model-override-args-unquoted-split-by-shell", [("set", "--json-model-override-args")]),
        (
            "lora-paths-equals-form-takes-one-value",
            [("positional_to_flag", "--lora-paths"), ("set", "--lora-paths")],
        ),
        ("endash-before-model-path-required-error", [("rename", "\u2013-model-path")]),
        ("serve-emdash-model-path-becomes-positional-model", [("rename", "\u2014model-path")]),
        ("host-with-trailing-comma-hangs-in-dist-init", [("set", "--host")]),
        ("model-path-curly-quotes-from-web-page", [("set", "--model-path")]),
    ],
)
def test_a_misspelt_launch_line_is_written_as_meant(name: str, edits: list[tuple[str, str | None]]) -> None:
    found = blind(FOLDER, name)
    assert [(e["op"], e.get("flag")) for e in found["edits"]] == edits


@pytest.mark.parametrize(
    "command, code",
    [
        ('python -m sglang.launch_server --model-path /m "--port 30000"', "flag-and-value-in-one-word"),
        ("python -m sglang.launch_server --model-path /m --model-type llm", "serve-only-option"),
        (
            "python -m sglang.launch_server --model-path /m --json-model-override-args {a: 1, b: 2}",
            "json-split-at-spaces",
        ),
        ("python -m sglang.launch_server --model-path /m --lora-paths=a=/p b=/q", "list-flag-with-equals"),
        ("python -m sglang.launch_server \u2014model-path /m", "underscore-flag"),
        ("python -m sglang.launch_server --model-path /m --host 0.0.0.0,", "pasted-punctuation"),
        ("python -m sglang.launch_server --model-path \u201c/m\u201d", "pasted-punctuation"),
    ],
)
def test_each_is_found_before_launch(command: str, code: str) -> None:
    assert code in [f.code for f in check_flags(LaunchCommand.parse(command), CAT)]


def test_what_is_not_such_a_mistake_is_left_alone() -> None:
    for command in (
        "sglang serve --model-path /m --model-type llm",  # sglang serve's own option
        "python -m sglang.launch_server --model-path /m --lora-paths a=/p b=/q",  # a list written with spaces
        "python -m sglang.launch_server --model-path /m --cuda-graph-bs 1,2,4",  # a comma list
    ):
        codes = [f.code for f in check_flags(LaunchCommand.parse(command), CAT)]
        assert not {"serve-only-option", "list-flag-with-equals", "pasted-punctuation"} & set(codes), command
    diffusion = check_flags(
        LaunchCommand.parse("python -m sglang.launch_server --model-path /m --model-type diffusion"), CAT
    )
    assert [f.edits for f in diffusion if f.code == "serve-only-option"] == [()]
