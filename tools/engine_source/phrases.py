"""The phrases SGLang uses to tell a user what to do, each read into remedies.

Every function takes the message (whitespace collapsed) and a FlagReader, and yields remedies (or None
where a phrase named something the catalog does not have).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from specdoctor.tools.command import RenameFlag, SetFlag
from specdoctor.tools.engine_source.remedy_model import (
    FlagReader,
    Remedy,
    bound_remedy,
    direction_remedy,
    one_of_remedies,
    remove_remedy,
    set_remedy,
    valid_value,
)

Found = Iterator[Remedy | None]

FLAG_RX = (
    r"`?(?P<{0}>--[a-z0-9][a-z0-9-]*[a-z0-9]|[a-z][a-z0-9]*(?:_[a-z0-9]+)+|[a-z][a-z0-9]*(?:-[a-z0-9]+)+)`?"
)
"""A flag as written (`--page-size`), a field (`page_size`) or a flag without its dashes (`page-size`)."""
VALUE_RX = (
    r"(?:\s*(?:={{1,2}}|\bto be\b|\bto\b|\s)\s*)`?['\"]?(?P<{0}>-?[A-Za-z0-9_.+/-]*[A-Za-z0-9_])['\"]?`?"
)
LIST_RX = (
    r"(?P<{0}>\[[^\]]*\]|\([^)]*\)|\{{[^}}]*\}}"
    r"|(?:['\"`]?[\w.-]+['\"`]?,\s*)*['\"`]?[\w.-]+['\"`]?,?\s+or\s+['\"`]?[\w.-]+['\"`]?)"
)
_NUMBER = r"(?P<num>-?\d+(?:\.\d+)?|zero|one)\b"
_NUMBER_WORDS = {"zero": "0", "one": "1"}
BOUND_WORDS = {
    "<=": "<=",
    "at most": "<=",
    "less than or equal to": "<=",
    "smaller than or equal to": "<=",
    "no more than": "<=",
    "no larger than": "<=",
    "not exceed": "<=",
    "<": "<",
    "less than": "<",
    "smaller than": "<",
    ">=": ">=",
    "at least": ">=",
    "greater than or equal to": ">=",
    "larger than or equal to": ">=",
    ">": ">",
    "greater than": ">",
    "larger than": ">",
    "more than": ">",
    "==": "==",
    "equal to": "==",
}
BOUND_OP = "(?P<op>" + "|".join(sorted((re.escape(w) for w in BOUND_WORDS), key=len, reverse=True)) + ")"
NOT = r"(?<!not\s)(?<!n't\s)"


def rx(template: str, **names: str) -> re.Pattern[str]:
    """A pattern with named flag/value/list slots: `rx("use {flag}", flag=FLAG_RX)`."""
    return re.compile(template.format(**{k: v.format(k) for k, v in names.items()}), re.I)


_EXAMPLE = re.compile(
    r"^\s*\(e\.g\.?,?\s*(?:--[a-z0-9-]+\s*[= ]\s*)?['\"`]?(?P<example>-?[A-Za-z0-9_.+/-]*[A-Za-z0-9_])", re.I
)
_ANY_FLAG = re.compile(FLAG_RX.format("flag"), re.I)


def _example(reader: FlagReader, token: str, msg: str, end: int) -> str | None:
    """A value the message gives as an example right after the phrase: `(e.g., 0.8 or 0.7)`."""
    flag = reader.flag(token)
    m = _EXAMPLE.match(msg[end:])
    return valid_value(flag, m["example"], reader.number_type(flag)) if flag and m else None


# ---- renames -----------------------------------------------------------------------------------------

_RENAME = rx(
    r"{old}(?:\s*=\s*\S+)?\s*(?:\(deprecated\)|is deprecated|has been deprecated|was deprecated|is renamed|"
    r"has been renamed)[^;.]*?[;.,]?\s*(?:please\s+)?(?:use|using|in favou?r of|replaced by|renamed to)\s+"
    r"{new}(?:{value})?",
    old=FLAG_RX,
    new=FLAG_RX,
    value=VALUE_RX,
)
_INSTEAD_OF = rx(
    r"\buse\s+{new}(?:{value})?\s+instead\s+of\s+{old}", new=FLAG_RX, value=VALUE_RX, old=FLAG_RX
)
_THIS_DEPRECATED = rx(r"\b(?:this|it)\s+is\s+deprecated[^.;]*[.;]?\s*(?:please\s+)?use\s+{new}", new=FLAG_RX)
_DEPRECATED_FOR_ENV = rx(
    r"^{old}\s+is\s+deprecated[^.;]*[.;]?\s*(?:please\s+)?use\s+(?:SGLANG|SGL)_", old=FLAG_RX
)


def renames(msg: str, reader: FlagReader) -> Found:
    """`--old is deprecated, use --new`, `use --new instead of --old`: the old flag respelt in place."""
    for rx in (_RENAME, _INSTEAD_OF):
        for m in rx.finditer(msg):
            new, old = reader.flag(m["new"]), reader.flag(m["old"])
            if new is None or (old is None and not m["old"].startswith("--")):
                continue
            value = valid_value(new, m["value"], reader.number_type(new)) if new.nargs != 0 else None
            values = (value,) if value is not None else (() if new.nargs == 0 else None)
            edit = RenameFlag(flag=old.name if old else m["old"], to=new.name, values=values)
            yield Remedy(action="rename", flag=new.name, edit=edit, rule="rename", phrase=m.group())
    for m in _THIS_DEPRECATED.finditer(msg):
        before = [reader.flag(f["flag"]) for f in _ANY_FLAG.finditer(msg[: m.start()])]
        old, new = next((f for f in before if f is not None), None), reader.flag(m["new"])
        if old is not None and new is not None and old.name != new.name:
            edit = RenameFlag(flag=old.name, to=new.name)
            yield Remedy(action="rename", flag=new.name, edit=edit, rule="rename", phrase=m.group())
    for m in _DEPRECATED_FOR_ENV.finditer(msg):
        yield remove_remedy(reader, m["old"], "deprecated", m.group())


# ---- set, use, remove --------------------------------------------------------------------------------

_SET_CMP = rx(
    NOT + r"\bset\s+(?:a\s+|the\s+)?{flag}\s*(?P<op>>=|<=|>|<)\s*(?P<num>-?\d+(?:\.\d+)?)", flag=FLAG_RX
)
_SET_TO = rx(
    NOT + r"\bset\s+(?:the\s+|a\s+|proper\s+)?(?:flag\s+)?{flag}(?:(?:\s*(?:\bto\b|=|\bas\b)\s*|\s+)"
    r"(?!(?:a|an|the|one)\s)['\"`]?(?P<value>-?[A-Za-z0-9_.+/-]*[A-Za-z0-9_]))?",
    flag=FLAG_RX,
)
_USE = rx(
    NOT + r"\b(?:please\s+)?(?:use|try|add|pass|specify|enable|consider|(?:re-?)?(?:run|launch|start) with|"
    r"(?:start|launch|run|restart|relaunch) the (?:server|engine) with)\s+"
    r"(?:using\s+|adding\s+|setting\s+)?(?:the\s+)?{flag}(?:{value})?",
    flag=FLAG_RX,
    value=VALUE_RX,
)
_BY = rx(
    r"\b(?:disable|enable)\b[^.;,]{{0,40}}?\bby\s+(?:adding\s+|passing\s+|setting\s+)?{flag}", flag=FLAG_RX
)
_NOT_SET = rx(
    r"\b(?:do not|don't|not)\s+(?:set|use|using|pass|passing|setting)\s+{flag}(?:\s+or\s+{other})?",
    flag=FLAG_RX,
    other=FLAG_RX,
)
_WHEN_USING = rx(r"\bwhen\s+(?:using|setting|enabling)\s+{flag}", flag=FLAG_RX)
_RUN_WITHOUT = rx(
    r"\b(?:re-?launch|re-?start|restart|launch|start|run)(?:\s+(?:the\s+)?(?:server|engine))?\s+without\s+{flag}",
    flag=FLAG_RX,
)
_MUST_SET = rx(
    r"{flag}\s+(?:must|should|has to|needs to)\s+be\s+(?:set|specified|provided|given|enabled)\b"
    r"(?:\s+(?:when|if|with)\s+(?:using\s+)?{cond})?",
    flag=FLAG_RX,
    cond=FLAG_RX,
)
# `you need to specify both --max-lora-rank and --lora-target-modules`
_NEED_BOTH = rx(
    r"\b(?:need|needs|have|has)\s+to\s+(?:specify|set|provide|pass|give)\s+(?:both\s+)?{flag}"
    r"(?:\s*(?:,|and)\s*{other})?",
    flag=FLAG_RX,
    other=FLAG_RX,
)
_DISABLE = rx(
    NOT + r"\b(?:disable|turn off|remove|removing|drop|unset|omit)\s+(?:the\s+)?(?:flag\s+)?{flag}"
    r"(?:\s+or\s+{other})?",
    flag=FLAG_RX,
    other=FLAG_RX,
)


def sets(msg: str, reader: FlagReader) -> Found:
    """`set --x to v`, `please use --x v`, `try --disable-y`, `disable ... by --z`, `set --x > 1`."""
    for m in _SET_CMP.finditer(msg):
        yield bound_remedy(reader, m["flag"], m["op"], m["num"], "set-to", m.group())
    for rx, rule in ((_SET_TO, "set-to"), (_USE, "use")):
        for m in rx.finditer(msg):
            value = m["value"] or _example(reader, m["flag"], msg, m.end())
            found = set_remedy(reader, m["flag"], value, rule, m.group())
            if (
                found is not None
                and found.edit is None
                and (example := _example(reader, m["flag"], msg, m.end()))
            ):
                found = set_remedy(reader, m["flag"], example, rule, m.group())
            yield found
    for m in _BY.finditer(msg):
        yield set_remedy(reader, m["flag"], None, "use", m.group())
    for m in _NEED_BOTH.finditer(msg):
        for token in (m["flag"], m["other"]):
            yield set_remedy(reader, token, None, "must-set", m.group())
    for m in _MUST_SET.finditer(msg):
        yield set_remedy(reader, m["flag"], None, "must-set", m.group())
        yield remove_remedy(reader, m["cond"], "must-set", m.group())


def removes(msg: str, reader: FlagReader) -> Found:
    """`do not set --x`, `remove --x`, `disable --enable-x`, `... when using --x`, `relaunch without --x`."""
    for m in _RUN_WITHOUT.finditer(msg):
        yield remove_remedy(reader, m["flag"], "run-without", m.group())
    for m in _NOT_SET.finditer(msg):
        yield remove_remedy(reader, m["flag"], "do-not-set", m.group())
        yield remove_remedy(reader, m["other"], "do-not-set", m.group())
    for m in _WHEN_USING.finditer(msg):
        yield remove_remedy(reader, m["flag"], "when-using", m.group())
    for m in _DISABLE.finditer(msg):
        flag = reader.flag(m["flag"])
        switch_off = flag is not None and flag.nargs == 0 and flag.name.startswith("--disable-")
        if switch_off and m.group().lower().startswith("disable"):
            yield set_remedy(reader, m["flag"], None, "disable", m.group())
            continue
        yield remove_remedy(reader, m["flag"], "disable", m.group())
        yield remove_remedy(reader, m["other"], "disable", m.group())


# ---- directions, bounds, choices ---------------------------------------------------------------------

_DIR = r"(?P<dir>smaller|lower|larger|higher|bigger|greater|positive)"
_DIRECTIONS = (
    rx(
        r"\b(?:use|set|try|choose|pick|specify)\s+(?:a\s+)?" + _DIR + r"\s+(?:value\s+(?:for|of)\s+)?{flag}",
        flag=FLAG_RX,
    ),
    rx(r"{flag}\s+(?:to\s+)?(?:a\s+)?" + _DIR + r"\s+value", flag=FLAG_RX),
    rx(
        r"\b(?P<dir>reduce|decrease|lower|increase|raise)\s+(?:the\s+)?(?:value\s+of\s+)?{flag}", flag=FLAG_RX
    ),
)
_BOUND_HEAD = (
    r"{flag}(?:\s*/\s*--[a-z0-9-]+)*\)?(?:\s*\([^)]*\)|\s*\{{[^}}]*\}})?\s+(?:must|should|has to|needs to)\s+"
    r"(?:be\s+)?"
)
_BOUND = rx(_BOUND_HEAD + r"(?:set\s+to\s+)?" + BOUND_OP + r"\s*" + _NUMBER, flag=FLAG_RX)
# `... must be <= speculative_num_draft_tokens - 1 (11)`: the bound an f-string computed, in parentheses.
_BOUND_COMPUTED = rx(
    _BOUND_HEAD + BOUND_OP + r"\s*(?:--)?[a-z][\w-]*(?:\s*[-+*/]\s*[\w.]+)*\s*\((?P<num>-?\d+(?:\.\d+)?)\)",
    flag=FLAG_RX,
)
_BOUND_BY_FLAG = rx(
    _BOUND_HEAD + BOUND_OP + r"\s*(?:double\s+|twice\s+)?(?:--[a-z0-9]|[a-z][a-z0-9]*_[a-z])", flag=FLAG_RX
)
_ONE_OF = (
    rx(
        r"{flag}[^.;]{{0,80}}?\b(?:must|should|has to)\s+be\s+(?:one\s+of|in)\s*:?\s*{items}",
        flag=FLAG_RX,
        items=LIST_RX,
    ),
    rx(r"{flag}\s+(?:to|in|as)\s+one\s+of\s*:?\s*{items}", flag=FLAG_RX, items=LIST_RX),
    rx(r"\b(?:choose|pick|select)\s+{flag}\s+from\s*:?\s*{items}", flag=FLAG_RX, items=LIST_RX),
    # `--speculative-num-steps=6 is not in the adaptive config candidate_steps [0, 1, 3, 5, 7]`
    rx(
        r"{flag}(?:\s*=\s*[\w.-]+)?\s+is\s+not\s+(?:in|one\s+of)\b[^.;\[{{(]{{0,60}}?{items}",
        flag=FLAG_RX,
        items=LIST_RX,
    ),
)


def directions(msg: str, reader: FlagReader) -> Found:
    """`set --x to a smaller value (e.g., 0.8)`, `increase --y`: a direction, with the example as the edit."""
    for rx in _DIRECTIONS:
        for m in rx.finditer(msg):
            down = m["dir"].lower() in ("smaller", "lower", "reduce", "decrease")
            found = direction_remedy(reader, m["flag"], down, "direction", m.group())
            example = _example(reader, m["flag"], msg, m.end())
            if found is not None and found.flag is not None and example is not None:
                found = found.model_copy(update={"edit": SetFlag(flag=found.flag, values=(example,))})
            yield found


def bounds(msg: str, reader: FlagReader) -> Found:
    """`--x must be <= 8`, `--x must be >= --y`, `--x must be one of [a, b]`."""
    for m in _BOUND.finditer(msg):
        number = _NUMBER_WORDS.get(m["num"].lower(), m["num"])
        yield bound_remedy(reader, m["flag"], BOUND_WORDS[m["op"].lower()], number, "bound", m.group())
    for m in _BOUND_COMPUTED.finditer(msg):
        yield bound_remedy(reader, m["flag"], BOUND_WORDS[m["op"].lower()], m["num"], "bound", m.group())
    for m in _BOUND_BY_FLAG.finditer(msg):
        down = "<" in BOUND_WORDS[m["op"].lower()]
        yield direction_remedy(reader, m["flag"], down, "bound", m.group())
    for rx in _ONE_OF:
        for m in rx.finditer(msg):
            yield from one_of_remedies(reader, m["flag"], m["items"], "one-of", m.group())
