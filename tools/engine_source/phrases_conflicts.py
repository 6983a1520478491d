"""The phrases that name a condition rather than an action: `--x requires --y`, `only supported with
--z`, `--a is incompatible with --b`, a message about one flag, and environment variables to set."""

from __future__ import annotations

import re

from specdoctor.tools.engine_source.phrases import (
    BOUND_OP,
    BOUND_WORDS,
    FLAG_RX,
    LIST_RX,
    VALUE_RX,
    Found,
    rx,
)
from specdoctor.tools.engine_source.remedy_model import (
    FlagReader,
    bound_remedy,
    direction_remedy,
    env_remedy,
    one_of_remedies,
    remove_remedy,
    set_remedy,
)

_REQUIRES = rx(
    r"\b(?:requires?|needs|must be used with|only works with|depends on|has no effect without|"
    r"(?:is|are) only supported with)\s+(?:either\s+)?(?:the\s+)?{obj}(?:\s*/\s*--[a-z0-9-]+)*(?P<rest>[^.;]{{0,80}})",
    obj=FLAG_RX,
)
_REST_CMP = re.compile(r"\s*(>=|<=|==|>|<)\s*(-?\d+(?:\.\d+)?)")
_REST_WORDS = re.compile(r"\s+(?:to be\s+)?" + BOUND_OP + r"\s+(-?\d+(?:\.\d+)?)", re.I)
_REST_POSITIVE = re.compile(r"\s+to be\s+(?:a\s+)?positive", re.I)
_REST_LIST = re.compile(r"\s+in\s+" + LIST_RX.format("items"), re.I)
# `requires --x NEXTN or EAGLE`: the values written out as alternatives, no `in`.
_REST_EITHER = re.compile(r"^\s+(?:either\s+)?(?P<items>[\w.-]+(?:,\s*[\w.-]+)*,?\s+or\s+[\w.-]+)\b", re.I)
_REST_VALUE = re.compile(r"^" + VALUE_RX.format("value"), re.I)
_REST_MORE = rx(r"(?:\band\b|,)\s+(?:the\s+)?{flag}(?:{value})?", flag=FLAG_RX, value=VALUE_RX)
_REST_STOP = re.compile(r"\(|\bor\b|;|,\s*got\b|\bbut\b|\bwhen\b|\bif\b", re.I)


def requires(msg: str, reader: FlagReader) -> Found:
    """`--x requires --y`, `requires --y 1`, `requires --y > 1`, `requires --y in (a, b)`, `and --z v`."""
    for m in _REQUIRES.finditer(msg):
        yield from _required(reader, m["obj"], m["rest"], m.group())
        head = _REST_STOP.split(m["rest"], maxsplit=1)[0]
        for more in _REST_MORE.finditer(head):
            yield set_remedy(reader, more["flag"], more["value"], "requires", m.group())


def _required(reader: FlagReader, obj: str, rest: str, phrase: str) -> Found:
    if cmp := _REST_CMP.match(rest):
        yield bound_remedy(reader, obj, cmp.group(1), cmp.group(2), "requires", phrase)
    elif words := _REST_WORDS.match(rest):
        yield bound_remedy(reader, obj, BOUND_WORDS[words["op"].lower()], words.group(2), "requires", phrase)
    elif _REST_POSITIVE.match(rest):
        yield direction_remedy(reader, obj, False, "requires", phrase)
    elif items := _REST_LIST.match(rest) or _REST_EITHER.match(rest):
        yield from one_of_remedies(reader, obj, items["items"], "requires", phrase)
    else:
        value = _REST_VALUE.match(rest)
        yield set_remedy(reader, obj, value["value"] if value else None, "requires", phrase)


# A clause (lists kept whole; a period inside a number or `e.g.` does not end it).
_CLAUSE = r"(?P<obj>(?:\[[^\]]*\]|\([^)]*\)|\{[^}]*\}|[^.;,\[({]|\.(?=\w))+)"
_ONLY = re.compile(
    r"\b(?:(?:is|are)\s+only\s+(?:supported|available|valid|allowed|compatible|implemented)\s+"
    r"(?:with|on|for|when|by|in|if|under)|only\s+supports?)\s+" + _CLAUSE,
    re.I,
)
_FLAG_VALUE = re.compile(FLAG_RX.format("flag") + "(?:" + VALUE_RX.format("value") + ")?", re.I)
_ANY_LIST = re.compile(LIST_RX.format("items"), re.I)
_ANY_FLAG = re.compile(FLAG_RX.format("flag"), re.I)


def only(msg: str, reader: FlagReader) -> Found:
    """`only supported with --x`: that flag; `only supported on ['a', 'b']; got attention_backend=...`:
    each listed value of the flags the message names, where the catalog accepts it."""
    mentioned = [m["flag"] for m in _ANY_FLAG.finditer(msg)]
    for m in _ONLY.finditer(msg):
        for f in _FLAG_VALUE.finditer(m["obj"]):
            yield set_remedy(reader, f["flag"], f["value"], "only", m.group())
        for items in _ANY_LIST.finditer(m["obj"]):
            for token in mentioned:
                yield from one_of_remedies(reader, token, items["items"], "only", m.group())


_SUBJECT = re.compile(r"\s*(?:using|enabling|setting)?\s*" + FLAG_RX.format("flag"), re.I)
_TROUBLE = re.compile(
    r"^[^.;]{0,60}?\b(?:requires?|needs|is only|are only|only supports?|only works|is not supported|"
    r"are not supported|is unsupported|is incompatible|are incompatible|is not compatible|conflicts?|"
    r"cannot be|can't be|has no effect without)\b",
    re.I,
)
_CONFLICT = (
    r"(?:incompatible|not compatible|conflicts?|cannot be (?:used|combined|enabled)(?: together)?|"
    r"can't be used|(?:is|are) not supported (?:together )?with|mutually exclusive)"
)
_INCOMPATIBLE = rx(r"{a}[^.;,]{{0,80}}?\b(?:is\s+|are\s+)?" + _CONFLICT, a=FLAG_RX)
_INCOMPATIBLE_WITH = rx(_CONFLICT + r"\s+(?:with\s+)?[^.;,]{{0,40}}?{b}", b=FLAG_RX)
_BOTH = rx(
    r"{a}\s+and\s+{b}\s+(?:are|is)\s+(?:mutually exclusive|incompatible|not compatible)", a=FLAG_RX, b=FLAG_RX
)


def conflicts(msg: str, reader: FlagReader) -> Found:
    """A message about one flag (`--x requires ...`, `--x is only supported ...`): dropping it is a
    remedy; `--a is incompatible with --b`: dropping either is."""
    head = _SUBJECT.match(msg)
    if head is not None and head["flag"].startswith("--") and _TROUBLE.match(msg[head.end() :]):
        yield remove_remedy(reader, head["flag"], "subject", msg[:80])
    for m in _INCOMPATIBLE.finditer(msg):
        yield remove_remedy(reader, m["a"], "incompatible", m.group())
    for m in _INCOMPATIBLE_WITH.finditer(msg):
        yield remove_remedy(reader, m["b"], "incompatible", m.group())
    for m in _BOTH.finditer(msg):
        yield remove_remedy(reader, m["a"], "incompatible", m.group())
        yield remove_remedy(reader, m["b"], "incompatible", m.group())


_ENV_VERB = re.compile(r"\b(?:set|export|use|pass|enable)\b", re.I)
_ENV_ASSIGN = re.compile(
    r"\b(?P<env>(?:SGLANG|SGL)_[A-Z0-9_]+)\s*=\s*['\"`]?(?P<val>\d+|true|false|True|False)\b"
)


def envs(msg: str) -> Found:
    """`set the env var SGLANG_X=1` (a literal number or boolean only), in a sentence that says to set it."""
    for clause in re.split(r"(?<=[.;])\s+", msg):
        verb = _ENV_VERB.search(clause)
        if verb is not None:
            for m in _ENV_ASSIGN.finditer(clause, verb.end()):
                yield env_remedy(m["env"], m["val"], m.group())
