"""Parse argparse `--help` text into flags.

The text is what the engine prints, so this is the one source that works for every version, installed or
not. What the text cannot show (value types) comes from the probe's action list when there is one.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field

_SECTION = re.compile(r"^(\S[^:]*):\s*$")
_SPLIT_PARTS = re.compile(r", (?=-)")
_GAP = re.compile(r"\s{2,}")
_CHOICES = re.compile(r"^\{(.*)\}$")

Nargs = int | str | None
"""argparse's nargs: None (one value), an int, '?', '*', '+', or 0 for a switch."""


_BUILTINS = re.compile(r"Builtins:\s*([A-Z0-9_]+(?:,\s*[A-Z0-9_]+)*)")
_QUOTED_LIST = re.compile(r"\((?:'[\w.-]+'(?:,\s*|\s+or\s+)?){2,}\)")


class FlagInfo(BaseModel):
    """One engine flag as its `--help` describes it (plus the probe's type where known)."""

    model_config = ConfigDict(frozen=True, defer_build=True)
    name: str = Field(description="Canonical spelling: the first long option string.")
    aliases: tuple[str, ...] = Field(default=(), description="Other spellings of the same flag.")
    negation: str | None = Field(default=None, description="`--no-x` of a `--x | --no-x` pair.")
    nargs: Nargs = Field(default=None, description="0 for a switch, else argparse nargs.")
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    help: str = ""
    group: str = ""
    value_type: str | None = Field(default=None, description="int, float, str, json, ... from the probe.")
    default: str | None = Field(default=None, description="The parser default, as text, when known.")
    required: bool = False

    @property
    def spellings(self) -> tuple[str, ...]:
        return (self.name, *self.aliases, *((self.negation,) if self.negation else ()))

    @property
    def listed_values(self) -> tuple[str, ...]:
        """Values a free-text flag's help lists as its options, quoted in parentheses (--device's
        `('cuda', 'xpu', ..., 'cpu')`) or after `Builtins:` (--speculative-algorithm's, free-form since
        0.5.12): the engine's names, not a person's text."""
        if found := _QUOTED_LIST.search(self.help):
            return tuple(re.findall(r"'([\w.-]+)'", found.group(0)))
        if found := _BUILTINS.search(self.help):
            return tuple(n.strip() for n in found.group(1).split(",") if n.strip())
        return ()

    def choice_described_as(self, value: str) -> str | None:
        """The one choice whose own words in the help hold every word of `value`: `--sampling-defaults
        generation_config` is 'model' ("'model' uses the model's generation_config.json"), `--load-format
        bin` is 'pt' ("'pt' will load the weights in the pytorch bin format"); None when no choice or
        several do."""
        words = [w for w in re.split(r"[^a-z0-9]+", value.lower()) if len(w) >= 3]
        if not words or not self.choices or value in self.choices:
            return None
        found = {
            c for c in self.choices for said in _described(self.help, c, self.choices) if _holds(said, words)
        }
        return found.pop() if len(found) == 1 else None

    @property
    def deprecated(self) -> bool:
        return self.help.lstrip("( ").lower().startswith("deprecated")

    def usage(self) -> str:
        """How the flag is written, e.g. `--tp-size TP_SIZE` or `--dtype {auto,half}`."""
        if self.nargs == 0:
            return self.name
        shown = "{" + ",".join(self.choices) + "}" if self.choices else (self.metavar or "VALUE")
        return {
            "?": f"{self.name} [{shown}]",
            "*": f"{self.name} [{shown} ...]",
            "+": f"{self.name} {shown} [{shown} ...]",
        }.get(str(self.nargs), f"{self.name} {shown}")


class HelpDoc(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)
    prog: str
    flags: tuple[FlagInfo, ...]


def parse_help(text: str) -> HelpDoc:
    """Read every option entry of an argparse help text. Raises ValueError if it is not one."""
    lines = text.splitlines()
    prog = _prog(lines)
    flags: list[FlagInfo] = []
    group = ""
    entry: list[str] | None = None
    helptext: list[str] = []

    def close() -> None:
        if entry is not None:
            info = _entry(entry, _join(helptext), group)
            if info is not None:
                flags.append(info)

    for line in lines:
        if (m := _SECTION.match(line)) and not line.startswith("usage:"):
            close()
            entry, helptext, group = None, [], m.group(1)
        elif line.startswith("  -") and not line.startswith("   "):
            close()
            entry, first = _head(line)
            helptext = [first] if first else []
        elif entry is not None and line.startswith("    "):
            helptext.append(line.strip())
    close()
    if not flags:
        raise ValueError("no options found: this does not look like an argparse --help text")
    required = _required(lines)
    flags = [f.model_copy(update={"required": True}) if f.name in required else f for f in flags]
    return HelpDoc(prog=prog, flags=tuple(flags))


def _required(lines: list[str]) -> set[str]:
    """Options the usage line shows outside brackets are required."""
    usage: list[str] = []
    for line in lines:
        if line.startswith("usage:") or (usage and line.startswith(" ")):
            usage.append(line)
        elif usage:
            break
    depth, found, word = 0, set(), ""
    for ch in " ".join(usage) + " ":
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if depth == 0 and ch.isspace():
            if word.startswith("--"):
                found.add(word)
            word = ""
        elif depth == 0 and ch not in "[]()":
            word += ch
    return found


def _join(lines: list[str]) -> str:
    # argparse wraps long words after a hyphen ("--cuda-graph-" / "backend-{...}"): no space there.
    text = ""
    for line in lines:
        text += line if text.endswith("-") and not text.endswith(" -") else (" " + line if text else line)
    return text


def _head(line: str) -> tuple[list[str], str]:
    """An entry line: the invocation, then (after two spaces) the start of the help, if it fits."""
    pieces = _GAP.split(line.strip(), maxsplit=1)
    first_help = pieces[1] if len(pieces) > 1 else ""
    return _SPLIT_PARTS.split(pieces[0]), first_help


def _prog(lines: list[str]) -> str:
    for line in lines:
        if line.startswith("usage:"):
            words = line[len("usage:") :].split()
            prog = []
            for w in words:
                if w.startswith("[") or w.startswith("-"):
                    break
                prog.append(w)
            return " ".join(prog)
    return ""


def _entry(parts: list[str], help_text: str, group: str) -> FlagInfo | None:
    strings: list[str] = []
    value_words: list[str] = []
    for part in parts:
        words = part.split()
        strings.append(words[0])
        if not value_words:
            value_words = words[1:]
    longs = [s for s in strings if s.startswith("--")]
    if not longs or "--help" in longs:
        return None
    negation = next((s for s in longs[1:] if s == "--no-" + longs[0][2:]), None)
    aliases = tuple(s for s in strings if s not in (longs[0], negation))
    nargs, metavar = _nargs(value_words)
    choices = None
    if metavar and (m := _CHOICES.match(metavar)):
        choices = tuple(c for c in m.group(1).split(",") if c)
        metavar = None
    return FlagInfo(
        name=longs[0],
        aliases=aliases,
        negation=negation,
        nargs=nargs,
        metavar=metavar,
        choices=choices,
        help=help_text.strip(),
        group=group,
    )


def _nargs(words: list[str]) -> tuple[Nargs, str | None]:
    if not words:
        return 0, None
    first = words[0]
    if first.startswith("[") and words[-1] == "...]":
        return "*", first[1:]
    if first.startswith("[") and first.endswith("]"):
        return "?", first[1:-1]
    if len(words) >= 2 and words[-1] == "...]":
        return "+", first
    if len(words) == 1:
        return None, first
    return len(words), first


def _described(help_text: str, choice: str, choices: tuple[str, ...]) -> list[str]:
    """What the help says right after each quoted mention of `choice`, up to the next choice or sentence."""
    text = re.sub(r"\s+", " ", help_text)
    others = "|".join(re.escape(c) for c in choices if c != choice)
    said = []
    for m in re.finditer(rf"['\"`]{re.escape(choice)}['\"`]", text):
        rest = text[m.end() :]
        stops = [re.search(r"\.(?:\s|$)", rest)] + (
            [re.search(rf"['\"`](?:{others})['\"`]", rest)] if others else []
        )
        said.append(rest[: min((s.start() for s in stops if s), default=len(rest))])
    return said


def _holds(said: str, words: list[str]) -> bool:
    return all(re.search(rf"(?<![a-z0-9]){re.escape(w)}", said.lower()) for w in words)
