"""The model architectures a release serves natively: each `srt/models/*.py` names its classes in a
module-level `EntryClass` (one class or a list), which SGLang's model registry collects. A config's
`architectures` entry outside this set is loaded through transformers, or not at all."""

from __future__ import annotations

import ast
from collections.abc import Mapping

REGISTERING: tuple[str, ...] = ("srt/models/*.py",)


def entry_classes(trees: Mapping[str, ast.Module]) -> list[str]:
    """Every class name the given model files export as `EntryClass`, sorted."""
    names: set[str] = set()
    for tree in trees.values():
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "EntryClass" for t in node.targets
            ):
                names |= _class_names(node.value)
    return sorted(names)


def _class_names(value: ast.expr) -> set[str]:
    if isinstance(value, ast.Name):
        return {value.id}
    if isinstance(value, ast.List | ast.Tuple):
        return {e.id for e in value.elts if isinstance(e, ast.Name)}
    return set()


def registered_architectures(version: str | None) -> frozenset[str]:
    """The architectures the indexed release nearest `version` serves natively (empty when unindexed)."""
    from specdoctor.tools.engine_source.index import bundled_index

    index = bundled_index()
    release = index.release(version)
    return index.architectures(release) if release else frozenset()
