"""The package's shape: one installed name, imports that only go down the layers, short functions.

tools (evidence, actuators, engines as data) ← playbooks (the knowledge) ← agent (loop, planners, CLI).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = {"tools": 0, "playbooks": 1, "agent": 2}
MAX_FUNCTION_LINES = 60


def _modules(layer: str) -> list[Path]:
    return sorted((ROOT / layer).rglob("*.py"))


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every module this file imports, at any depth (imports inside functions count too)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module))
    return found


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_imports_only_go_down_the_layers(layer: str) -> None:
    wrong = []
    for path in _modules(layer):
        for line, module in _imports(path):
            parts = module.split(".")
            if parts[0] in LAYERS:
                wrong.append(
                    f"{path.relative_to(ROOT)}:{line} imports `{module}`: write `specdoctor.{module}`"
                )
            elif parts[0] == "specdoctor" and len(parts) > 1 and LAYERS.get(parts[1], -1) > LAYERS[layer]:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports `{module}` from a layer above")
    assert not wrong, "\n".join(wrong)


def test_tests_and_benches_import_the_installed_package() -> None:
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports `{module}`"
        for folder in ("tests", "bench")
        for path in sorted((ROOT / folder).glob("*.py"))
        for line, module in _imports(path)
        if module.split(".")[0] in LAYERS
    ]
    assert not wrong, "\n".join(wrong)


def test_no_function_is_longer_than_a_screen() -> None:
    long = []
    for layer in LAYERS:
        for path in _modules(layer):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                    if lines > MAX_FUNCTION_LINES:
                        long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} has {lines} lines")
    assert not long, "\n".join(long)


def test_the_loop_reads_in_one_screen() -> None:
    tree = ast.parse((ROOT / "agent" / "loop.py").read_text())
    (loop,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Loop"]
    assert loop.end_lineno - loop.lineno + 1 <= 150  # type: ignore[operator]


def test_every_package_folder_is_installed() -> None:
    """pyproject lists the packages by hand (the folders map to `specdoctor.*`): none may be forgotten."""
    import re

    block = re.search(r"^packages = \[(.*?)\]", (ROOT / "pyproject.toml").read_text(), re.M | re.S)
    assert block, "pyproject.toml has no [tool.setuptools] packages list"
    listed = set(re.findall(r'"([\w.]+)"', block.group(1)))
    on_disk = {
        "specdoctor." + ".".join(init.parent.relative_to(ROOT).parts)
        for layer in LAYERS
        for init in (ROOT / layer).rglob("__init__.py")
        if "_root" not in init.parts
    }
    assert on_disk <= listed, sorted(on_disk - listed)
