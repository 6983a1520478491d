"""The built wheel installs one import name, `specdoctor`, and lives beside a user's own `tools/` and
`agent/` packages: built for real, installed in a fresh virtualenv, run from the user's project."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for folder in ("agent", "tools", "playbooks"):
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    dist = tmp_path_factory.mktemp("dist")
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index"]
    proc = _run([*build, "-w", str(dist), str(src)], cwd=src)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (found,) = dist.glob("specdoctor-*.whl")
    return found


@pytest.fixture(scope="module")
def venv(tmp_path_factory, wheel: Path) -> Path:
    """A fresh virtualenv with the wheel; its dependencies are reached through a plain path entry, so no
    `.pth` of this checkout's editable install runs there."""
    home = tmp_path_factory.mktemp("venv")
    proc = _run([sys.executable, "-m", "venv", str(home)], cwd=home)
    assert proc.returncode == 0, proc.stderr
    python = home / "bin" / "python"
    site = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=home)
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(site.stdout.strip()) / "_deps.pth").write_text("\n".join(sorted(deps)) + "\n")
    proc = _run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], cwd=home)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return home


@pytest.fixture
def user_project(tmp_path: Path) -> Path:
    """A project with its own `tools/` (a namespace package) and `agent/` (a regular one)."""
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "mytool.py").write_text("NAME = 'mytool'\n")
    (tmp_path / "agent").mkdir()
    (tmp_path / "agent" / "__init__.py").write_text("")
    (tmp_path / "agent" / "brain.py").write_text("NAME = 'brain'\n")
    return tmp_path


def test_the_wheel_holds_only_the_specdoctor_package(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"specdoctor"}
    for needed in (
        "specdoctor/__main__.py",
        "specdoctor/agent/loop.py",
        "specdoctor/tools/simnode/__main__.py",
        "specdoctor/playbooks/registry.py",
        "specdoctor/tools/data/sglang-help/sglang-0.5.23.txt",
        "specdoctor/tools/engine_source/lookup.py",
        "specdoctor/tools/data/engine-source/sglang-checks.json.gz",
    ):
        assert needed in names


def test_pip_show_lists_only_specdoctor_modules(venv: Path) -> None:
    proc = _run([str(venv / "bin" / "python"), "-m", "pip", "show", "-f", "specdoctor"], cwd=venv)
    files = proc.stdout.split("Files:", 1)[1].split()
    modules = [f for f in files if f.endswith(".py")]
    assert modules and all(f.startswith("specdoctor/") for f in modules), modules


def test_specdoctor_and_the_users_packages_both_import(venv: Path, user_project: Path) -> None:
    check = _run(
        [
            str(venv / "bin" / "specdoctor"),
            "check",
            "--sglang-version",
            "0.5.23",
            "--",
            "python",
            "-m",
            "sglang.launch_server",
            "--model-path",
            "org/m",
            "--num-speculative-tokens",
            "3",
        ],
        cwd=user_project,
    )
    assert check.returncode == 1, check.stdout + check.stderr
    assert "--speculative-num-draft-tokens" in check.stdout
    mine = _run(
        [str(venv / "bin" / "python"), "-c", "import tools.mytool, agent.brain; print(tools.mytool.NAME)"],
        cwd=user_project,
    )
    assert mine.returncode == 0 and mine.stdout.strip() == "mytool", mine.stderr


def test_a_regular_tools_package_on_pythonpath_does_not_shadow_specdoctor(
    venv: Path, user_project: Path
) -> None:
    (user_project / "tools" / "__init__.py").write_text("")
    env = {**os.environ, "PYTHONPATH": str(user_project)}
    proc = _run([str(venv / "bin" / "python"), "-m", "specdoctor", "--version"], cwd=user_project, env=env)
    assert proc.returncode == 0 and proc.stdout.startswith("specdoctor "), proc.stderr


def test_the_demo_runs_from_the_wheel(venv: Path, tmp_path: Path) -> None:
    """Package data (bundled --help, demo models, simulated node profiles) is in the wheel."""
    proc = _run(
        [
            str(venv / "bin" / "specdoctor"),
            "demo",
            "--sim-speed",
            "0.05",
            "--quiet-stages",
            "--run-dir",
            str(tmp_path / "run"),
        ],
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "HEALTHY after 2 launch(es)" in proc.stdout
