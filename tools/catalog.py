"""FlagCatalog: the flags an SGLang version accepts, and what a written flag resolves to.

Resolution follows argparse exactly (exact spelling, then unique prefix, else "ambiguous"), then adds what
argparse does not do: `_` spellings, vLLM and renamed-flag synonyms, and scored similarity that survives
words in another order. A suggestion below the threshold is withheld: no confident wrong guess.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable
from decimal import Decimal
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from specdoctor.tools.flag_synonyms import BY_WRITTEN, Synonym
from specdoctor.tools.help_parser import FlagInfo
from specdoctor.tools.redact import learn_secret_flags
from specdoctor.tools.similarity import score

SUGGEST_MIN = 0.6
"""Below this a similar-looking flag is not even mentioned."""
CONFIDENT_MIN = 0.82
"""At or above this (and clearly ahead of the runner-up) a rename is proposed as a fix."""
CONFIDENT_MARGIN = 0.06

Status = Literal["exact", "prefix", "ambiguous", "underscore", "synonym", "similar", "unknown"]


class Suggestion(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)
    flag: str
    score: float
    reason: str = ""


class Resolution(BaseModel):
    """What a flag as written means to this engine version."""

    model_config = ConfigDict(frozen=True, defer_build=True)
    written: str
    status: Status
    flag: FlagInfo | None = Field(default=None, description="The flag meant, when it is certain.")
    negated: bool = Field(default=False, description="Written as the `--no-x` half of a pair.")
    candidates: tuple[str, ...] = Field(
        default=(), description="For an ambiguous prefix: what it could match."
    )
    suggestions: tuple[Suggestion, ...] = ()
    synonym: Synonym | None = None

    @property
    def accepted_by_engine(self) -> bool:
        """Would the engine's own argparse take this spelling (exactly or as an abbreviation)?"""
        return self.status in ("exact", "prefix")

    @property
    def confident(self) -> Suggestion | None:
        """The one suggestion good enough to act on, if any."""
        if not self.suggestions or self.suggestions[0].score < CONFIDENT_MIN:
            return None
        runner_up = self.suggestions[1].score if len(self.suggestions) > 1 else 0.0
        return self.suggestions[0] if self.suggestions[0].score - runner_up >= CONFIDENT_MARGIN else None


class FlagCatalog:
    """The flags of one SGLang version. Built from its `--help` (and the probe's types when known)."""

    def __init__(
        self,
        flags: Iterable[FlagInfo],
        *,
        version: str,
        prog: str = "sglang serve",
        source: str = "bundled",
        hidden: Iterable[FlagInfo] = (),
    ) -> None:
        self.flags: tuple[FlagInfo, ...] = tuple(flags)
        self.hidden: tuple[FlagInfo, ...] = tuple(hidden)
        self.version = version
        self.prog = prog
        self.source = source
        self.authoritative = True
        """False for a stand-in (the bundled flags of some release, because the SGLang that runs is not
        known): a flag it lacks may exist in the release that really runs."""
        self._by_spelling: dict[str, FlagInfo] = {}
        for f in (*self.flags, *self.hidden):
            for s in f.spellings:
                self._by_spelling.setdefault(s, f)
        self._spellings = sorted(self._by_spelling)
        self._canon: dict[str, str] = {}
        # A newer engine's new key or password flag is masked from the moment its catalog is read.
        learn_secret_flags((*self.flags, *self.hidden))

    def __len__(self) -> int:
        return len(self.flags)

    def __contains__(self, name: str) -> bool:
        return name in self._by_spelling

    def get(self, name: str) -> FlagInfo | None:
        """The flag with exactly this spelling (canonical, alias or `--no-` form)."""
        return self._by_spelling.get(name)

    # ---- resolution --------------------------------------------------------------------------
    def resolve(self, written: str) -> Resolution:
        name = written.split("=", 1)[0]
        if (hit := self._argparse_match(name)) is not None:
            return hit
        plain = re.sub(r"^[-\u2013\u2014]+", "--", name) if name.startswith(("\u2013", "\u2014")) else name
        fixed = plain.replace("_", "-").lower() if plain.startswith("--") else plain
        if fixed != name and (hit := self._argparse_match(fixed)) is not None and hit.flag is not None:
            return Resolution(written=name, status="underscore", flag=hit.flag, negated=hit.negated)
        synonym = BY_WRITTEN.get(name) or BY_WRITTEN.get(fixed)
        if synonym is not None and (synonym.target is None or synonym.target in self):
            return Resolution(
                written=name, status="synonym", synonym=synonym, flag=self.get(synonym.target or "")
            )
        suggestions = self.suggest(name)
        ambiguous = self._prefix_candidates(name)
        if len(ambiguous) > 1:
            return Resolution(written=name, status="ambiguous", candidates=ambiguous, suggestions=suggestions)
        return Resolution(
            written=name, status="similar" if suggestions else "unknown", suggestions=suggestions
        )

    def _argparse_match(self, name: str) -> Resolution | None:
        if (flag := self.get(name)) is not None:
            return Resolution(written=name, status="exact", flag=flag, negated=name == flag.negation)
        candidates = self._prefix_candidates(name)
        if len(candidates) == 1:
            flag = self._by_spelling[candidates[0]]
            return Resolution(
                written=name, status="prefix", flag=flag, negated=candidates[0] == flag.negation
            )
        return None

    def _prefix_candidates(self, name: str) -> tuple[str, ...]:
        # Python 3.11's argparse counts every option string with this prefix, even two of one flag.
        if not name.startswith("--") or len(name) < 3:
            return ()
        return tuple(s for s in self._spellings if s.startswith(name) and s != name)

    def canonical(self, written: str) -> str:
        """The canonical name a spelling means (for matching flags in a command); itself when unknown.

        Called for every flag of a command on every edit, so it is memoised and never scores similarity."""
        name = written.split("=", 1)[0]
        if (hit := self._canon.get(name)) is not None:
            return hit
        r = self._argparse_match(name)
        if r is None and name.startswith("--"):
            r = self._argparse_match(name.replace("_", "-").lower())
        result = name
        if r is not None and r.flag is not None:
            result = r.flag.negation if r.negated and r.flag.negation else r.flag.name
        self._canon[name] = result
        return result

    def suggest(self, written: str, limit: int = 3) -> tuple[Suggestion, ...]:
        """Flags that `written` was probably meant to be, best first; nothing under SUGGEST_MIN."""
        best: dict[str, float] = {}
        for f in self.flags:
            s = max(score(written, spelling, SUGGEST_MIN) for spelling in (f.name, *f.aliases))
            if s >= SUGGEST_MIN:
                best[f.name] = s
        ranked = sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
        return tuple(Suggestion(flag=n, score=s, reason="similar name") for n, s in ranked)

    def grep(self, pattern: str, limit: int = 20) -> list[FlagInfo]:
        """Flags whose name or help matches a regex (case-insensitive); plain text if it is not a regex."""
        try:
            rx = re.compile(pattern, re.I)
        except re.error:
            rx = re.compile(re.escape(pattern), re.I)
        return [
            f
            for f in self.flags
            if rx.search(f.name) or any(rx.search(a) for a in f.aliases) or rx.search(f.help)
        ][:limit]

    # ---- an argparse parser equal to the engine's, for the simulated engine --------------------
    def build_parser(self) -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(prog=self.prog)
        for f in self.flags:
            _add_argument(parser, f)
        for f in self.hidden:
            _add_argument(parser, f, hidden=True)
        return parser


_SI = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_IEC = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


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


_TYPES = {"int": int, "float": float, "human_readable_int": human_readable_int}


def _add_argument(parser: argparse.ArgumentParser, f: FlagInfo, hidden: bool = False) -> None:
    strings = [f.name, *f.aliases]
    help_text = argparse.SUPPRESS if hidden else (f.help.replace("%", "%%") or None)
    if f.negation:
        parser.add_argument(*strings, action=argparse.BooleanOptionalAction, help=help_text)
        return
    if f.nargs == 0:
        parser.add_argument(*strings, action="store_true", help=help_text, required=f.required)
        return
    kind = _TYPES.get(f.value_type or "")
    choices = (
        [kind(c) for c in f.choices]
        if f.choices and kind is not None
        else (list(f.choices) if f.choices else None)
    )
    parser.add_argument(
        *strings,
        nargs=f.nargs,
        type=kind,
        choices=choices,
        metavar=f.metavar if not f.choices else None,
        help=help_text,
        required=f.required,
    )
