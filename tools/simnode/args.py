"""Parse a launch command exactly as SGLang 0.5.23's argparse does, with its real flag catalog.

`python -m specdoctor.tools.simnode ARGS` stands for `python -m sglang.launch_server ARGS` (stderr banner, no
positional model); `python -m specdoctor.tools.simnode serve [MODEL] ARGS` stands for `sglang serve`.
"""

from __future__ import annotations

import argparse
import ast
import sys
from functools import cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from specdoctor.tools.catalog_load import bundled
from specdoctor.tools.help_parser import FlagInfo
from specdoctor.tools.simnode.tracebacks import SITE, serve_missing_model

VERSION = "0.5.23"
BANNER = (
    f"{SITE}/sglang/launch_server.py:71: UserWarning: 'python -m sglang.launch_server' is still supported, "
    "but 'sglang serve' is the recommended entrypoint.\n"
    "  Example: sglang serve --model-path <model> [options]\n"
    "  warnings.warn(\n"
)
_DEPRECATED = {
    "disable_cuda_graph": ("--disable-cuda-graph", "--cuda-graph-backend-{decode,prefill}=disabled"),
    "enable_dp_attention": ("--enable-dp-attention", "--attn-dp-size <dp-size>"),
}


class UsageExit(Exception):
    """The command line is refused before SGLang resolves it; `text` is what SGLang prints."""

    def __init__(self, text: str, code: int) -> None:
        super().__init__(text)
        self.text = text
        self.code = code


class Invocation(BaseModel):
    """A parsed command line."""

    model_config = ConfigDict(frozen=True)
    launch_command: str = Field(description="argv as given (`sglang serve M` normalised to --model-path M).")
    args: dict[str, Any] = Field(description="Every server arg, SGLang's default where not given.")


def parse(argv: list[str]) -> Invocation:
    """Raises SystemExit(2) with argparse's own output for a bad command line, like SGLang."""
    if argv[:1] == ["serve"]:
        argv = argv[1:]
        if argv and not argv[0].startswith("-"):
            argv = ["--model-path", argv[0], *argv[1:]]
        elif not any(a.split("=", 1)[0] in ("--model-path", "--model", "-h", "--help") for a in argv):
            raise UsageExit(serve_missing_model(), 1)
    else:
        sys.stderr.write(BANNER)
        sys.stderr.flush()
    parser = _parser()
    namespace = parser.parse_args(argv)
    given = {k for k, v in vars(namespace).items() if v != parser.get_default(k)}
    args = {**defaults(), **{k: v for k, v in vars(namespace).items() if k in given}}
    for dest, (flag, new) in _DEPRECATED.items():
        if dest in given:
            # argparse_actions.print_deprecated_warning logs before logging is configured: the bare message.
            sys.stderr.write(
                f"\033[1;33m'{flag}' is deprecated and will be removed in a future release. Use '{new}' instead.\033[0m\n"
            )
    return Invocation(launch_command=" ".join(argv), args=args)


@cache
def _catalog():
    return bundled(VERSION)


def _parser() -> argparse.ArgumentParser:
    return _catalog().build_parser()


@cache
def defaults() -> dict[str, Any]:
    """Every server arg at its SGLang default (the parser the catalog builds has none of them)."""
    cat = _catalog()
    return {_dest(f): _value(f) for f in (*cat.flags, *cat.hidden)}


def _dest(f: FlagInfo) -> str:
    return f.name.lstrip("-").replace("-", "_")


def _value(f: FlagInfo) -> Any:
    if f.default is None:
        return False if f.nargs == 0 and not f.negation else None
    text = f.default
    if f.value_type in ("str", "nullable_str", "json") and f.nargs not in ("+", "*"):
        return None if text == "None" else text
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text
