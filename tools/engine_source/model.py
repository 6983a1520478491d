"""What a check in the engine's source looks like as data: the site, what it reads, what it allows."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Literal_ = str | int | float | bool | None
"""A literal value a check compares a field with."""

Kind = Literal["raise", "assert", "error", "warning", "statement"]
Source = Literal["installed", "traceback", "index"]

_NEGATION = {
    "in": "not in",
    "not in": "in",
    "==": "!=",
    "!=": "==",
    ">": "<=",
    "<=": ">",
    "<": ">=",
    ">=": "<",
    "is None": "is not None",
    "is not None": "is None",
    "truthy": "falsy",
    "falsy": "truthy",
}

Op = Literal["in", "not in", "==", "!=", ">", "<=", "<", ">=", "is None", "is not None", "truthy", "falsy"]


class Constraint(BaseModel):
    """One field (or environment variable) compared with literals, written as the state in which the check
    fails: `attention_backend not in (flashinfer, fa3, triton)` means any other backend trips it."""

    model_config = ConfigDict(frozen=True)
    field: str = Field(description="ServerArgs field, or the environment variable's name when `env`.")
    op: Op
    values: tuple[Literal_, ...] = Field(default=(), description="The literals it is compared with.")
    other: str | None = Field(default=None, description="A second field it is compared with (`a > b`).")
    env: bool = False
    guard: bool = Field(
        default=False, description="Read by an outer condition: it puts the launch on the check's path."
    )

    def allowed(self) -> Constraint:
        """The same comparison turned around: the state in which this part of the check passes."""
        return self.model_copy(update={"op": _NEGATION[self.op]})

    def text(self) -> str:
        subject = f"env {self.field}" if self.env else self.field
        if self.op in ("is None", "is not None", "truthy", "falsy"):
            return f"{subject} {self.op}"
        if self.other is not None:
            return f"{subject} {self.op} {self.other}"
        shown = self.values[0] if len(self.values) == 1 and self.op not in ("in", "not in") else self.values
        return f"{subject} {self.op} {shown!r}"


class Site(BaseModel):
    """A statement in the engine that stops or warns a launch (or, from a traceback, any statement)."""

    model_config = ConfigDict(frozen=True)
    file: str = Field(description="Path inside the sglang package, e.g. `srt/server_args.py`.")
    line: int = Field(description="First line of the statement in `release` (the line a traceback shows).")
    end_line: int
    function: str = Field(description="Qualified name, e.g. `ServerArgs._handle_speculative_decoding`.")
    kind: Kind
    exception: str | None = Field(default=None, description="`ValueError`, `AssertionError`; None for logs.")
    template: str = Field(
        default="",
        description="The message with each interpolated expression as `{expr}` (literal braces doubled).",
    )
    condition: str | None = Field(
        default=None,
        description="For a raise or log: the test of the innermost `if` leading to it (`not (...)` for an "
        "else branch, `except T` in a handler). For an assert: the asserted test, which must hold.",
    )
    guards: tuple[str, ...] = Field(default=(), description="The outer conditions, outermost first.")
    fields: tuple[str, ...] = Field(
        default=(), description="ServerArgs fields the condition and message read."
    )
    guard_fields: tuple[str, ...] = Field(default=(), description="Fields only the outer conditions read.")
    envs: tuple[str, ...] = Field(default=(), description="Environment variables the conditions read.")
    constraints: tuple[Constraint, ...] = Field(
        default=(), description="Literal comparisons in the conditions, as the failing state."
    )
    brought_in: tuple[str, ...] = Field(
        default=(),
        description="`field=cause`: a field the function sets (`declare_resolution(..., field=...)`, "
        "`server_args.field = ...`) before this statement, under a condition reading `cause`.",
    )
    text: str = Field(default="", description="The statement's first source line, stripped.")
    release: str | None = Field(default=None, description="The SGLang release the line numbers are from.")
    source: Source = "index"

    @property
    def function_name(self) -> str:
        """The bare name a traceback shows (`in _handle_x`)."""
        return self.function.rsplit(".", 1)[-1]


class Frame(BaseModel):
    """One `File "...", line N, in f` entry of a traceback, with the source line it quotes."""

    model_config = ConfigDict(frozen=True)
    path: str = Field(description="The path as the traceback wrote it.")
    line: int
    function: str
    quoted: str = Field(default="", description="The source line the traceback printed under it, stripped.")

    @property
    def engine_file(self) -> str | None:
        """The path inside the sglang package (`srt/server_args.py`), or None outside SGLang."""
        path = self.path.replace("\\", "/")
        cut = path.rfind("/sglang/")
        if cut < 0:
            return path[len("sglang/") :] if path.startswith("sglang/") else None
        rest = path[cut + len("/sglang/") :]
        return rest if rest.endswith(".py") else None
