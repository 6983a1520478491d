"""Parse a launch command exactly as SGLang 0.5.23's argparse does, with its real flag catalog.

`python -m tools.simnode ARGS` stands for `python -m sglang.launch_server ARGS` (stderr banner, no
positional model); `python -m tools.simnode serve [MODEL] ARGS` stands for `sglang serve`.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from decimal import Decimal
from functools import cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tools.catalog_load import bundled
from tools.help_parser import FlagInfo
from tools.simnode.tracebacks import SITE, serve_missing_model

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


_SI = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_IEC = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


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
    """The catalog's parser, with SGLang's own size converter (and its exact error messages)."""
    parser = _catalog().build_parser()
    for action in parser._actions:
        flag = _catalog().get(action.option_strings[0]) if action.option_strings else None
        if flag is not None and flag.value_type == "human_readable_int":
            action.type = human_readable_int  # with SGLang's own error messages
    return parser


def human_readable_int(value: str) -> int:
    """sglang/srt/utils/common.py: plain integers, SI (1k, 25.6k) and IEC (1Ki) suffixes."""
    value = value.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", value)
    if match:
        number, suffix = match.groups()
        if suffix in _IEC:
            if "." in number:
                raise argparse.ArgumentTypeError(
                    f"Decimals are not allowed with IEC suffixes like '{suffix}'. "
                    f"Use an integer IEC value such as '{int(Decimal(number))}{suffix}', "
                    f"or an SI value such as '{number}{suffix[0]}'."
                )
            return int(number) * _IEC[suffix]
        return int(Decimal(number) * _SI[suffix])
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"Invalid integer value: '{value}'. "
            "Use a plain integer, SI suffixes (1k, 1M), or IEC suffixes (1Ki, 1Mi). "
            "Suffixes are case-sensitive."
        ) from None


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
