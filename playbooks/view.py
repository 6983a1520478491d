"""Reading a command by what its flags mean: canonical names, numbers as SGLang parses them."""

from __future__ import annotations

import re

from specdoctor.tools.catalog import FlagCatalog
from specdoctor.tools.command import LaunchCommand
from specdoctor.tools.flag_synonyms import VALUE_SYNONYMS
from specdoctor.tools.sglang_facts import EngineFacts, facts_for

# SGLang's human_readable_int (srt/utils/common.py): SI k, M, G, T and IEC Ki, Mi, Gi, Ti, case-sensitive.
_SUFFIX = {
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}


def human_spelling(text: str) -> str | None:
    """The spelling SGLang reads of a count written with another tool's suffix case: vLLM reads `16K` as
    16 × 1024 (SGLang's `16Ki`), `16m` as 16 × 10^6 (`16M`)."""
    m = re.fullmatch(r"\s*(\d+)\s*([KkMmGgTt])([Ii]?)[Bb]?\s*", text)
    if not m or as_int(text) is not None:
        return None
    number, letter, binary = m.groups()
    suffix = (
        letter.upper() + "i" if letter.isupper() or binary else ("k" if letter == "k" else letter.upper())
    )
    fixed = f"{number}{suffix}"
    return fixed if fixed != text.strip() and as_int(fixed) is not None else None


_SECONDS = re.compile(
    r"\s*(\d+(?:\.\d+)?)\s*(s|sec|secs|seconds|ms|msec|milliseconds|min|m|minutes)\s*", re.IGNORECASE
)
# How many seconds each unit a person writes after a duration is.
_UNIT_SECONDS = {"ms": 0.001, "msec": 0.001, "milliseconds": 0.001, "min": 60, "m": 60, "minutes": 60}


def plain_number(text: str, kind: str, in_seconds: bool = False) -> str | None:
    """The digits argparse's int (or float) reads for a number written another way: a count with a suffix
    (`8k` as SGLang's own count flags read it), scientific notation (`1e7`), `4.0` for an int, `30s`, `2ms`
    or `5min` for a flag that takes seconds. None when the text is no such number."""
    seconds = _SECONDS.fullmatch(text) if in_seconds else None
    in_s = float(seconds.group(1)) * _UNIT_SECONDS.get(seconds.group(2).lower(), 1) if seconds else None
    if kind == "float":
        return f"{in_s:g}" if in_s is not None else None
    whole = f"{in_s:g}" if in_s is not None and in_s == int(in_s) else None
    if seconds and whole is None:
        return None  # a fraction of a second for a flag that counts whole seconds: no int says it
    number = as_int(whole or human_spelling(text) or text)
    if number is None and re.fullmatch(r"\s*\d+(?:\.\d+)?[eE]\+?\d+\s*", text):
        scientific = float(text)
        number = int(scientific) if scientific == int(scientific) else None
    return str(number) if number is not None and str(number) != text.strip() else None


def as_int(text: str | None) -> int | None:
    """An int as SGLang reads it (also `32k`, `1Mi`), or None."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*(-?\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?\s*", text)
    if not m or ("." in m.group(1) and (m.group(2) or "").endswith("i")):
        return None
    number = float(m.group(1)) * _SUFFIX.get(m.group(2) or "", 1)
    return int(number) if number == int(number) else None


def as_float(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


class CommandView:
    """Read a command by canonical flag name, whatever spelling or abbreviation it uses."""

    @property
    def facts(self) -> EngineFacts:
        """What the command's SGLang release does (speculative rules, endpoints, acceptance levels)."""
        return facts_for(self.catalog.version)

    def __init__(self, spec: LaunchCommand, catalog: FlagCatalog) -> None:
        self.spec = spec
        self.catalog = catalog

    def canon(self, name: str) -> str:
        return self.catalog.canonical(name)

    def has(self, flag: str) -> bool:
        return self.spec.has(flag, self.canon)

    def get(self, flag: str) -> str | None:
        return self.spec.value(flag, self.canon)

    def int(self, flag: str) -> int | None:
        return as_int(self.get(flag))

    def float(self, flag: str) -> float | None:
        return as_float(self.get(flag))

    def env(self, name: str) -> str | None:
        return self.spec.env_dict().get(name)

    def truthy_env(self, name: str) -> bool:
        return (self.env(name) or "").lower() in ("1", "true", "yes", "on")

    @property
    def algorithm(self) -> str | None:
        """The speculative algorithm as SGLang resolves it (upper-cased, vLLM names mapped)."""
        raw = self.get("--speculative-algorithm")
        if raw is None:
            return None
        upper = raw.upper()
        return VALUE_SYNONYMS["--speculative-algorithm"].get(upper, upper)

    @property
    def tp(self) -> int:
        return self.int("--tp-size") or 1

    @property
    def pp(self) -> int:
        return self.int("--pp-size") or 1

    @property
    def world(self) -> int:
        """GPUs one replica needs: tensor × pipeline ranks."""
        return self.tp * self.pp

    @property
    def nnodes(self) -> int:
        return max(self.int("--nnodes") or 1, 1)

    @property
    def gpus_per_node(self) -> int:
        """GPUs each node of a (possibly multi-node) launch needs: the replica's ranks spread over the nodes."""
        return -(-self.world // self.nnodes)

    @property
    def attention_dp(self) -> bool:
        return self.has("--enable-dp-attention") or (self.int("--attn-dp-size") or 1) > 1
