"""Every file specdoctor reads on a user's behalf, fed what a hostile or careless path can be: a symlink to
/dev/zero (an endless read), a FIFO (an open that never returns), a file far too big, a binary file. Each
must end in one line and exit 2 (a config.json, which is evidence about the launch, in a finding), fast,
never in a hang, an out-of-memory kill or exit 70."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from specdoctor.agent.cli import main
from specdoctor.tools.files import UnreadableFile, head_bytes, open_regular, read_bytes, read_text
from specdoctor.tools.system import model_facts

DATA = Path(__file__).parent / "data"
ENTRY = ["python", "-m", "sglang.launch_server"]
CASE = DATA / "corpus" / "reasoning-parser-underscore.json"
HUGE = 300 << 20  # past every cap (the largest, a transcript's, is 256 MiB); sparse, so it costs no disk
BAD_KINDS = ["dev-zero", "fifo", "huge", "binary"]

pytestmark = pytest.mark.timeout(60)


def bad_file(kind: str, where: Path, name: str) -> Path:
    path = where / name
    if kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "huge":
        with open(path, "wb") as f:
            f.truncate(HUGE)
    else:
        path.write_bytes(bytes(range(256)) * 64)
    return path


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# -- the helper ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "says"),
    [
        ("dev-zero", "it is a character device, not a regular file"),
        ("fifo", "it is a FIFO (named pipe), not a regular file"),
        ("huge", "it is 300.0 MiB, more than the 1.0 MiB a test file may be"),
        ("binary", "it is binary (it holds NUL bytes), not text"),
    ],
)
def test_read_text_refuses_each_bad_kind_with_its_reason(tmp_path, kind, says):
    path = bad_file(kind, tmp_path, "f")
    with pytest.raises(UnreadableFile) as caught:
        read_text(path, "test file", 1 << 20)
    assert caught.value.reason == says
    assert str(caught.value) == f"cannot read test file {path}: {says}"


def test_non_utf8_text_and_missing_files_are_refused(tmp_path):
    (tmp_path / "latin1").write_bytes("café".encode("latin-1"))
    with pytest.raises(UnreadableFile, match="not UTF-8 text"):
        read_text(tmp_path / "latin1", "test file", 1024)
    with pytest.raises(UnreadableFile, match="no such file or directory"):
        read_bytes(tmp_path / "missing", "test file", 1024)
    with pytest.raises(UnreadableFile, match="a directory"):
        read_bytes(tmp_path, "test file", 1024)


def test_a_regular_file_is_read_whole_and_streamed(tmp_path):
    path = tmp_path / "ok.txt"
    path.write_text("one\ntwo\n")
    assert read_text(path, "test file", 8) == "one\ntwo\n"
    with pytest.raises(UnreadableFile, match="more than the 7 bytes"):
        read_text(path, "test file", 7)
    assert head_bytes(path, "test file", 3) == b"one"
    with open_regular(path, "test file") as f:
        assert f.read() == b"one\ntwo\n"
    with pytest.raises(UnreadableFile, match="FIFO"), open_regular(bad_file("fifo", tmp_path, "p"), "log"):
        pass


# -- each input kind, through the CLI --------------------------------------------------------------


@pytest.mark.parametrize("kind", BAD_KINDS)
def test_catalog_file(tmp_path, capsys, kind):
    path = bad_file(kind, tmp_path, "help.txt")
    code, _, err = run(capsys, "check", "--catalog", str(path), "--", *ENTRY, "--model-path", "m")
    assert code == 2 and err.count("\n") == 1 and f"cannot read flag catalog {path}: it is" in err


@pytest.mark.parametrize("kind", BAD_KINDS)
def test_case_file(tmp_path, capsys, kind):
    path = bad_file(kind, tmp_path, "case.json")
    code, _, err = run(capsys, "diagnose", "--no-llm", "--case", str(path))
    assert code == 2 and err.count("\n") == 1 and f"cannot read case {path}: it is" in err


@pytest.mark.parametrize("kind", BAD_KINDS)
def test_transcript(tmp_path, capsys, kind):
    path = bad_file(kind, tmp_path, "transcript.jsonl")
    code, _, err = run(capsys, "replay", str(path))
    # Transcripts are bytes checked line by line, so a binary one is simply not a transcript.
    says = (
        "is not a specdoctor transcript" if kind == "binary" else f"cannot read the transcript {path}: it is"
    )
    assert code == 2 and err.count("\n") == 1 and says in err


@pytest.mark.parametrize("kind", BAD_KINDS)
def test_user_playbook_file(tmp_path, capsys, kind):
    folder = tmp_path / "playbooks"
    folder.mkdir()
    path = bad_file(kind, folder, "site.yaml")
    code, _, err = run(capsys, "diagnose", "--no-llm", "--case", str(CASE), "--playbooks", str(folder))
    assert code == 2 and err.count("\n") == 1 and f"{path}: cannot read it (it is" in err


@pytest.mark.parametrize("kind", BAD_KINDS)
def test_nvidia_smi_file(tmp_path, capsys, kind):
    path = bad_file(kind, tmp_path, "nvidia-smi.txt")
    code, _, err = run(
        capsys,
        "check",
        "--nvidia-smi",
        str(path),
        "--sglang-version",
        "0.5.23",
        "--",
        *ENTRY,
        "--model-path",
        "m",
    )
    assert code == 2 and err.count("\n") == 1 and f"cannot read nvidia-smi output {path}: it is" in err


@pytest.mark.parametrize("kind", ["dev-zero", "fifo"])
def test_log_file_that_is_not_a_file(tmp_path, capsys, kind):
    path = bad_file(kind, tmp_path, "attempt-1.log")
    code, _, err = run(capsys, "diagnose", "--no-llm", "--log", str(path), "--", *ENTRY, "--model-path", "m")
    assert code == 2 and err.count("\n") == 1 and f"cannot read log {path}: it is" in err


@pytest.mark.parametrize("kind", ["huge", "binary"])
def test_log_file_that_is_huge_or_binary_is_still_read(tmp_path, capsys, kind):
    # A log is streamed in bounded memory, and engines do print binary junk: both are evidence, not errors.
    path = bad_file(kind, tmp_path, "attempt-1.log")
    code, out, err = run(
        capsys, "diagnose", "--no-llm", "--json", "--log", str(path), "--", *ENTRY, "--model-path", "m"
    )
    # A decision either way (0 a fix, 3 a stop, as diagnose exits), never the usage error an unreadable file is.
    action = json.loads(out)["action"]
    assert (code, action) in ((0, "fix"), (3, "stop")), err


@pytest.mark.parametrize("kind", BAD_KINDS)
def test_config_json_is_a_finding(tmp_path, capsys, kind):
    model = tmp_path / "model"
    model.mkdir()
    bad_file(kind, model, "config.json")
    facts = model_facts(str(model))
    assert not facts.has_config and facts.error.startswith("unreadable config.json: it is")
    code, out, err = run(
        capsys, "check", "--sglang-version", "0.5.23", "--", *ENTRY, "--model-path", str(model)
    )
    assert code == 1 and err == ""
    assert f"model {model}: unreadable config.json: it is" in out


def test_a_sglang_entry_point_that_is_a_fifo_is_not_read(tmp_path, monkeypatch):
    from specdoctor.tools.catalog_load import find_interpreter

    script = bad_file("fifo", tmp_path, "sglang")
    script.chmod(0o755)
    if shutil.which("sglang", path=str(tmp_path)) is None:
        pytest.skip("which() does not list a FIFO here")
    assert find_interpreter(("sglang", "serve"), {"PATH": str(tmp_path)}) is None
