"""Conditions on a call's arguments: the `when:` of a policy rule, and the values they read.

A rule's `when:` maps an argument path to a condition; the rule applies only when every one
holds. The conditions read a call's *subject*: what the tool will receive, as plain JSON
values, under a few roots (`args`: the arguments as the tool reads them, `bot.engine.arguments`;
`command`: a shell call's commands; `path` and `operation`: a patch's file and kind), and the
advisor's second opinion (`advice.risk`: low, medium or high; `bot.service.oversight.advised`).

A condition has three results: it holds, it does not, or it cannot be decided (`Undecidable`):
the arguments could not be read (not JSON, too long to judge), or the value is of a type the
condition cannot test (a glob on a number, a comparison on a string, a path through a string),
or a regular expression cannot be tried on it. An undecidable condition never approves: the
policy sends the call to a person (`Policy.rule_for`). A path that is simply not there (the
model left the argument out and the tool has no default for it) is absent: only `{exists:
false}` holds on it. A root the call's kind does not have (`command` of a function call) holds
nothing: the condition is about another kind of call. Advice is never absent: until the
advisor answers, or when it gave none, `advice.risk` cannot be decided.
"""

from __future__ import annotations

import fnmatch
import json
import math
import operator
import posixpath
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import re2

from bot.engine.arguments import NotFinite, Reading, Received, read_json

ROOTS = ("args", "command", "path", "operation")
"""The subject's roots read from the call; only `args` has parts below it."""
ADVICE = "advice"
"""The root of the advisor's opinion (`advice.risk`), read from the call's advice, not its
arguments (`bot.service.oversight.advised.advice_subject`)."""
# Not roots a `when:` path may name: when the call was requested (Unix seconds), which the
# rules' `during:` read (the same instant each time the call is judged again); the roots the
# call has but that could not be read (root -> why); and why the call is refused outright
# (its arguments hold a number JSON cannot: NaN or an infinity).
REQUESTED_AT = "requested_at"
UNREADABLE = "unreadable"
REFUSED = "refused"

SUBJECT_LIMIT = 32_000
"""Characters of subject JSON kept beside a call; beyond it the arguments count as unreadable
(every condition on them is undecidable), at posting and whenever the call is judged again."""

_RE2 = re2.Options()
_RE2.log_errors = False  # a pattern it refuses is `approval-bot check`'s to say, with its line
"""`re:` conditions run on RE2 (google-re2): linear in the input, whatever the pattern (Python's
`re` backtracks: `(a+)+$` on 29 characters took 13 s of the event loop), so no string of a
subject (at most `SUBJECT_LIMIT` characters) is too long to try."""

PATH = re.compile(r"^(?:args(?:\.[^.\s]+)*|command|path|operation|advice\.risk)\Z")
COMPARISON = re.compile(r"^\s*(<=|>=|==|!=|<|>)\s*(.*?)\s*$")
_COMPARE: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
}

Scalar = str | int | float | bool


@dataclass(frozen=True)
class Undecidable:
    """A condition that cannot be evaluated on the call: `why`, in words (the audit says it)."""

    path: str
    why: str

    def said(self) -> str:
        return f"{self.path}: {self.why}"


Truth = bool | Undecidable
"""What a condition says of a call: it holds, it does not, or it cannot be decided."""


class ConditionError(ValueError):
    """A `when:` entry the bot cannot use (the message says why, for `approval-bot check`)."""


def check_path(path: str) -> str:
    """A path a condition or `confirm_value` may name, or ConditionError."""
    if not PATH.match(path):
        raise ConditionError(
            f"{path!r} is not an argument path: use args.<name>[.<name>...] (e.g. args.env, "
            "args.target.host, args.items.0), command (shell calls), path or operation "
            "(patches), or advice.risk (the advisor's opinion)"
        )
    return path


@dataclass(frozen=True)
class Condition:
    """One `path: condition` of a rule's `when:`, ready to test."""

    path: str
    kind: str  # glob | path | regex | compare | one_of | exists
    spec: Any  # the glob, the normalised path glob, the compiled pattern (RE2), (op, number),
    # the allowed values, a bool

    def test(self, subject: Mapping[str, Any]) -> Truth:
        """Whether the condition holds for `subject`, or why that cannot be decided."""
        state, value = resolve(subject, self.path)
        if state == UNREADABLE:
            return Undecidable(self.path, str(value))
        if self.kind == "exists":
            return state == (FOUND if self.spec else ABSENT)
        if state != FOUND:
            return False  # absent (only `exists: false` holds), or a root of another kind
        if self.kind == "one_of":
            return any(_same(value, allowed) for allowed in self.spec)
        if self.kind in ("glob", "path", "regex"):
            if not isinstance(value, str):
                return Undecidable(self.path, f"is {_kind_of(value)}, not text")
            if self.kind == "glob":
                return fnmatch.fnmatchcase(value, self.spec)
            if self.kind == "path":
                if ".." in value.split("/"):
                    return Undecidable(
                        self.path, "goes up a directory (`..`): where it leads depends on the "
                        "file system (symbolic links), not on the text",
                    )  # fmt: skip
                return path_matches(normal_path(value), self.spec)
            return self.spec.fullmatch(value) is not None
        if not _is_number(value):
            return Undecidable(self.path, f"is {_kind_of(value)}, not a number")
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            return Undecidable(self.path, "is a number too large to compare")
        op, bound = self.spec
        return bool(_COMPARE[op](number, bound))


def _kind_of(value: Any) -> str:
    """A JSON value's type, as the audit says it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if _is_number(value):
        return "a number"
    if isinstance(value, str):
        return "text"
    return "a list" if isinstance(value, list) else "an object"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _same(value: Any, allowed: Scalar) -> bool:
    """Equality that keeps JSON's types apart (true is not 1, "3" is not 3)."""
    if isinstance(allowed, bool) or isinstance(value, bool):
        return type(value) is type(allowed) and value == allowed
    if _is_number(allowed):
        return _is_number(value) and value == allowed
    return isinstance(value, str) and value == allowed


def parse_condition(path: str, spec: Any) -> Condition:
    """The condition `spec` (as written in the policy) on `path`, or ConditionError."""
    check_path(path)
    if isinstance(spec, str):
        if spec.startswith("re:"):
            try:
                return Condition(path, "regex", re2.compile(spec[3:], _RE2))
            except re2.error as exc:
                why = exc.args[0] if exc.args else exc
                why = why.decode(errors="replace") if isinstance(why, bytes) else str(why)
                raise ConditionError(
                    f"{spec!r} is not a valid regular expression: {why} (re: runs on RE2: no "
                    "look-around, no backreferences)"
                ) from None
        if is_path_pattern(path, spec):
            if ".." in spec.split("/"):
                raise ConditionError(
                    f"{spec!r}: a path pattern has no `..` (paths are matched normalised, and "
                    "a path that goes up a directory is never matched)"
                )
            return Condition(path, "path", normal_path(spec))
        compared = COMPARISON.match(spec)
        if compared:
            op, number = compared.groups()
            try:
                value = float(number)
            except ValueError:
                value = math.nan
            if not math.isfinite(value):
                raise ConditionError(
                    f"{spec!r} compares with {number!r}, which is not a number (write e.g. "
                    "'> 10', '<= 0', '== 3')"
                ) from None
            return Condition(path, "compare", (op, value))
        return Condition(path, "glob", spec)
    if isinstance(spec, list):
        if not spec:
            raise ConditionError("a list of allowed values must not be empty")
        for item in spec:
            if not isinstance(item, str | int | float | bool):
                raise ConditionError(
                    f"allowed values are strings, numbers or booleans, not {item!r}"
                )
        return Condition(path, "one_of", tuple(spec))
    if isinstance(spec, dict):
        unknown = sorted(str(k) for k in spec if k != "exists")
        if unknown or not isinstance(spec.get("exists"), bool):
            raise ConditionError(
                "a mapping condition is {exists: true} or {exists: false}"
                + (f" (unknown key {', '.join(unknown)})" if unknown else "")
            )
        return Condition(path, "exists", spec["exists"])
    if isinstance(spec, bool | int | float):
        return Condition(path, "one_of", (spec,))
    raise ConditionError(
        "a condition is a glob string, a list of allowed values, 're:<regex>', a comparison "
        "('> 10') or {exists: true|false}"
    )


def is_path_pattern(path: str, pattern: str) -> bool:
    """Whether a glob is matched as a path: every glob on a patch's `path`, and a glob on the
    arguments with a `/` in it (a shell's `command` is text: its globs are plain)."""
    return path == "path" or (path.startswith("args") and "/" in pattern)


def normal_path(text: str) -> str:
    """`text` as `posixpath.normpath` writes it (`//` and `/./` collapsed, a trailing `/`
    dropped, `a/../b` is `b`), and a leading `//` as `/` (POSIX leaves two to the system)."""
    normal = posixpath.normpath(text)
    return "/" + normal.lstrip("/") if normal.startswith("//") else normal


def path_matches(value: str, pattern: str) -> bool:
    """Whether the normalised path `value` matches the path glob `pattern`, one segment at a
    time: `*`, `?` and `[...]` never match a `/`; a `**` segment matches any number of segments
    (none included). Time: segments times pattern segments."""
    values = value.split("/")
    # reach[i]: the first i segments of the value match the pattern's segments so far.
    reach = [True] + [False] * len(values)
    for part in pattern.split("/"):
        if part == "**":
            for i in range(1, len(reach)):
                reach[i] = reach[i] or reach[i - 1]
        else:
            reach = [False] + [
                reach[i] and fnmatch.fnmatchcase(values[i], part) for i in range(len(values))
            ]
    return reach[-1]


FOUND, ABSENT, MISSING = "found", "absent", "missing"


def resolve(subject: Mapping[str, Any], path: str) -> tuple[str, Any]:
    """(FOUND, value); (ABSENT, None) when a part of the path is not there; (MISSING, None)
    when the call's kind has no such root; (UNREADABLE, why) when the root could not be read,
    or the path goes through a value that has no parts (a string, a number) or names a list's
    item by something else than its index."""
    root, *parts = path.split(".")
    unreadable = subject.get(UNREADABLE)
    if isinstance(unreadable, dict) and root in unreadable:
        return UNREADABLE, str(unreadable[root])
    if root not in subject:
        if root == ADVICE:  # not advised (yet): what it would say is unknown
            return UNREADABLE, "no advice (yet)"
        return MISSING, None
    value: Any = subject[root]
    for number, part in enumerate(parts):
        if isinstance(value, dict):
            if part not in value:
                return ABSENT, None
            value = value[part]
        elif isinstance(value, list) and part.isdigit():
            if int(part) >= len(value):
                return ABSENT, None
            value = value[int(part)]
        else:
            where = ".".join([root, *parts[:number]])
            return UNREADABLE, f"has no part {part!r}: {where} is {_kind_of(value)}"
    return FOUND, value


def subject_of(kind: str, reading: Reading, facts: str = "") -> dict[str, Any]:
    """What conditions read of a call: `args`, what the tool will receive (`reading`, from the
    engine), and the engine's facts of shell and patch calls (`command`, `path`,
    `operation`). Arguments that cannot be read, or too long to judge, are `unreadable`; a
    number JSON cannot hold makes the call `refused`."""
    subject: dict[str, Any] = {}
    if facts:
        try:
            known = json.loads(facts)
        except ValueError:
            known = {}
        if isinstance(known, dict):
            subject.update({k: v for k, v in known.items() if k in ROOTS and k != "args"})
            unknown = known.get(UNREADABLE)  # e.g. the one path of a patch of several files
            if isinstance(unknown, dict):
                subject[UNREADABLE] = {
                    k: str(v) for k, v in unknown.items() if k in ROOTS and k != "args"
                }
    if kind not in ("shell", "apply_patch"):
        if isinstance(reading, Received):
            subject["args"] = reading.arguments
        elif isinstance(reading, NotFinite):
            subject[UNREADABLE] = {"args": f"holds a number JSON cannot ({reading.where})"}
            subject[REFUSED] = reading.where
        else:
            subject[UNREADABLE] = {"args": reading.why}
    if len(encode_subject(subject)) > SUBJECT_LIMIT:
        too_long = "the arguments are too long to judge"
        kept = {k: v for k, v in subject.items() if k in ("path", "operation", REFUSED)}
        unknown = subject.get(UNREADABLE) or {}
        subject = {**kept, UNREADABLE: {**unknown, **{r: too_long for r in ROOTS if r in subject}}}
    return subject


def stored_subject(kind: str, arguments: str) -> dict[str, Any]:
    """The subject a stored call's display arguments give (a call stored without its own:
    its arguments were read as the JSON they are, `bot.engine.arguments.read_json`)."""
    return subject_of(kind, read_json(arguments))


def encode_subject(subject: Mapping[str, Any]) -> str:
    return json.dumps(subject, separators=(",", ":"), ensure_ascii=False)


def decode_subject(text: str) -> dict[str, Any]:
    """A stored subject; one that cannot be read makes every root unreadable."""
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if isinstance(value, dict):
        return value
    return {UNREADABLE: {root: "its stored subject cannot be read" for root in ROOTS}}


def value_to_type(subject: Mapping[str, Any], path: str) -> str | None:
    """The text a reviewer must type to confirm a call (`confirm_value`): the scalar at `path`
    as text, or None when it cannot be read (then the call cannot be confirmed)."""
    state, value = resolve(subject, path)
    if state != FOUND or isinstance(value, dict | list) or value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
