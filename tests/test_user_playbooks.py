"""User playbooks in YAML: loaded, applied before the built-in ones, and broken files named precisely."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from specdoctor.agent.diagnose import context_for, decide, default_planner
from specdoctor.playbooks.decision import Fix, Stop
from specdoctor.playbooks.user import PlaybookFileError, load_dir, load_file
from specdoctor.tools.catalog_load import bundled
from specdoctor.tools.command import LaunchCommand

DATA = Path(__file__).parent / "data"
# A real NCCL shared-memory failure (signatures.md row 38), for a site rule to recognise first.
SHM_LOG = (DATA / "signature-logs" / "row-38.txt").read_text().split("# ---\n", 1)[1].splitlines()

GOOD = """\
- id: site.shm
  category: nccl
  trigger: "NCCL WARN Error while creating shared memory segment"
  message: this cluster's containers have a 64 MB /dev/shm
  edits:
    - {op: set_env, name: NCCL_SHM_DISABLE, value: "1"}
    - {op: set, flag: --disable-custom-all-reduce}
  confidence: 0.9
- id: site.gpu4
  category: other
  trigger: "fallen off the bus"
  message: GPU 4 on this node is broken
  stop: ask the site admins to reset it
"""


def test_user_rule_runs_before_builtin_playbooks(tmp_path):
    (tmp_path / "site.yaml").write_text(GOOD)
    spec = LaunchCommand.parse("python -m sglang.launch_server --model-path M --tp-size 8")
    cat = bundled()
    decision = decide(context_for(spec, cat, SHM_LOG), default_planner(playbooks_dir=tmp_path))
    assert isinstance(decision, Fix) and decision.playbook == "site.shm"
    fixed = spec.apply_all(decision.edits, cat.canonical)
    assert fixed.env_dict() == {"NCCL_SHM_DISABLE": "1"} and fixed.has("--disable-custom-all-reduce")
    assert "NCCL WARN Error while creating shared memory segment" in decision.evidence[0]


def test_stop_rule(tmp_path):
    (tmp_path / "site.yaml").write_text(GOOD)
    log = (
        (DATA / "nvidia-smi" / "dmesg-xid" / "xid79-fallen-off-bus.txt")
        .read_text()
        .split("# ---\n", 1)[1]
        .splitlines()
    )
    decision = decide(
        context_for(LaunchCommand.parse("python -m sglang.launch_server --model-path M"), bundled(), log),
        default_planner(playbooks_dir=tmp_path),
    )
    assert isinstance(decision, Stop) and decision.playbook == "site.gpu4" and "reset" in decision.advice


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (
            "- id: x\n  category: nccl\n  trigger: '('\n  message: m\n  stop: s\n",
            "site.yaml:1: trigger: Value error, trigger is not a valid regex",
        ),
        (
            "- id: ok\n  category: nccl\n  trigger: a\n  message: m\n  stop: s\n- id: bad\n  category: nope\n  trigger: a\n  message: m\n  stop: s\n",
            "site.yaml:6: category",
        ),
        (
            "- id: x\n  category: nccl\n  trigger: a\n  message: m\n",
            "site.yaml:1: Value error, give either `edits`",
        ),
        (
            "- id: x\n  category: nccl\n  trigger: a\n  message: m\n  edits: [{op: explode}]\n",
            "site.yaml:1: edits.0",
        ),
        ("- id: x\n  category: [nccl\n", "site.yaml:3: not valid YAML"),
        ("just: a mapping\n", "site.yaml:1: expected a list of playbooks"),
        (
            "- id: x\n  category: nccl\n  trigger: a\n  message: m\n  stop: s\n  colour: red\n",
            "site.yaml:1: colour: Extra inputs",
        ),
    ],
)
def test_broken_files_name_file_and_line(tmp_path, text, says):
    path = tmp_path / "site.yaml"
    path.write_text(text)
    with pytest.raises(PlaybookFileError) as err:
        load_file(path)
    assert says in str(err.value), str(err.value)
    assert str(err.value).startswith(str(path))


def test_duplicate_ids_across_files(tmp_path):
    (tmp_path / "a.yaml").write_text(GOOD)
    (tmp_path / "b.yml").write_text(GOOD)
    with pytest.raises(PlaybookFileError, match="already defined"):
        load_dir(tmp_path)


def test_cli_reports_a_broken_playbook_in_one_line(tmp_path):
    (tmp_path / "bad.yaml").write_text("- id: x\n  category: nccl\n  trigger: '('\n  message: m\n  stop: s\n")
    case = DATA / "corpus" / "reasoning-parser-underscore.json"
    proc = subprocess.run(
        [sys.executable, "-m", "specdoctor", "diagnose", "--case", str(case), "--playbooks", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "bad.yaml:1" in proc.stderr
