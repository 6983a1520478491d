"""A model path that is neither a folder nor a Hugging Face repo id. The Hub's rule: `name` or
`namespace/name`, letters, digits, `-`, `_`, `.`, at most 96 characters, no `--` or `..`, no `-`/`.` at either
end. People also write the branch after a colon, as other tools take it (`org/model:gptq-4bit`); SGLang
reads `--revision` for that."""

from __future__ import annotations

import re

from specdoctor.playbooks.decision import Finding
from specdoctor.playbooks.view import CommandView
from specdoctor.tools.command import Edit, SetFlag

_PART = re.compile(r"^[\w.-]{1,96}$")  # `\w` as the Hub's own check reads it (Unicode letters too)
_PATH_FLAGS = ("--model-path", "--speculative-draft-model-path")
_REVISION_OF = {
    "--model-path": "--revision",
    "--speculative-draft-model-path": "--speculative-draft-model-revision",
}


def valid_repo_id(text: str) -> bool:
    parts = text.split("/")
    return (
        1 <= len(parts) <= 2
        and all(_PART.match(p) and not p.startswith(("-", ".")) and not p.endswith(("-", ".")) for p in parts)
        and "--" not in text
        and ".." not in text
    )


def looks_like_a_path(text: str) -> bool:
    """A folder, a URL of a remote loader, or a shell variable the command was written with: not a repo id."""
    return (
        text.startswith(("/", ".", "~"))
        or text.count("/") > 1
        or any(mark in text for mark in ("\\", "://", "$", "{", "%"))
    )


def check_repo_ids(view: CommandView) -> list[Finding]:
    """Model paths that are neither folders (by their look) nor valid repo ids, or that name one file of
    the model's folder."""
    found = []
    for flag in _PATH_FLAGS:
        path = view.get(flag)
        if path and _FOLDER_FILE.search(path):
            found.append(_file_in_the_folder(flag, path))
        elif path and not looks_like_a_path(path) and not valid_repo_id(path):
            found.append(_finding(view, flag, path))
    return found


# Files a checkpoint folder holds: SGLang loads a folder (or a Hub repo), never one of them (a GGUF file is a
# whole model and loads as a file).
_FOLDER_FILE = re.compile(
    r"/(?:[^/]+\.(?:safetensors|bin|pt|pth)|config\.json|tokenizer(?:_config)?\.json|"
    r"model\.safetensors\.index\.json|generation_config\.json)$"
)


def _file_in_the_folder(flag: str, path: str) -> Finding:
    folder = path.rsplit("/", 1)[0] or "/"
    return Finding(
        code="model-path-is-a-file",
        severity="error",
        category="model-path",
        flag=flag,
        message=f"{flag} {path} names one file of a checkpoint; SGLang loads the folder that holds it",
        edits=(SetFlag(flag=flag, values=(folder,)),),
        why=f"{folder} is the folder with config.json, the weights and the tokenizer",
        confidence=0.8,
    )


def _finding(view: CommandView, flag: str, path: str) -> Finding:
    repo, _, branch = path.partition(":")
    revision = _REVISION_OF[flag]
    if branch and valid_repo_id(repo) and view.catalog.get(revision) is not None:
        edits: tuple[Edit, ...] = (
            SetFlag(flag=flag, values=(repo,)),
            SetFlag(flag=revision, values=(branch,)),
        )
        return Finding(
            code="repo-id-revision",
            severity="error",
            category="model-path",
            flag=flag,
            message=f"{flag} {path}: a Hub repo id has no `:branch`; SGLang takes the branch as {revision}",
            edits=edits,
            why=f"{repo} is the repo and {branch} its branch (or tag, or commit)",
            confidence=0.8,
        )
    return Finding(
        code="repo-id-invalid",
        severity="error",
        category="model-path",
        flag=flag,
        message=f"{flag} {path} is neither a folder nor a valid Hugging Face repo id (letters, digits, -, _ and ., "
        "`namespace/name`, at most 96 characters)",
    )
