"""Conditions on a call's arguments: the `when:` of a policy rule, and the values they read.

A rule's `when:` maps an argument path to a condition; the rule applies only when every one
holds. The conditions read a call's *subject*: what the bot knows of the call, as plain JSON
values, under a few roots (`args`: the parsed JSON arguments of a function or MCP tool;
`command`: a shell call's commands; `path` and `operation`: a patch's file and kind).

Everything fails closed. Arguments that are not valid JSON give no `args` root; a root the call
does not have, a path that is missing, a value of the wrong type (a glob on a number, a
comparison on a string): the condition does not hold. Even `{exists: false}` holds only when
the path's parent was read and is an object without that key, so a rule never matches on what
it could not read.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import math
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

ROOTS = ("args", "command", "path", "operation")
# Not a root a `when:` path may name: when the call was requested (Unix seconds), which the
# rules' `during:` read (the same instant each time the call is judged again).
REQUESTED_AT = "requested_at"
"""The subject's roots; only `args` has parts below it."""

SUBJECT_LIMIT = 32_000
"""Characters of subject JSON kept beside a call; beyond it the arguments count as unreadable
(every condition on them fails), at posting and whenever the call is judged again."""

REGEX_INPUT_LIMIT = 4096
"""Longest string a `re:` condition is tried on (longer: it does not hold). Python's regular
expressions can backtrack for long on crafted input, and the arguments are the agent's."""

PATH = re.compile(r"^(?:args(?:\.[^.\s]+)*|command|path|operation)$")
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


class ConditionError(ValueError):
    """A `when:` entry the bot cannot use (the message says why, for `approval-bot check`)."""


def check_path(path: str) -> str:
    """A path a condition or `confirm_value` may name, or ConditionError."""
    if not PATH.match(path):
        raise ConditionError(
            f"{path!r} is not an argument path: use args.<name>[.<name>...] (e.g. args.env, "
            "args.target.host, args.items.0), or command (shell calls), path or operation "
            "(patches)"
        )
    return path


@dataclass(frozen=True)
class Condition:
    """One `path: condition` of a rule's `when:`, ready to test."""

    path: str
    kind: str  # glob | regex | compare | one_of | exists
    spec: Any  # the glob text, the compiled pattern, (op, number), the allowed values, a bool

    def holds(self, subject: Mapping[str, Any]) -> bool:
        """Whether the condition holds for `subject` (never on what could not be read)."""
        state, value = resolve(subject, self.path)
        if self.kind == "exists":
            return state == (FOUND if self.spec else ABSENT)
        if state != FOUND:
            return False
        if self.kind == "glob":
            return isinstance(value, str) and fnmatch.fnmatchcase(value, self.spec)
        if self.kind == "regex":
            if not isinstance(value, str) or len(value) > REGEX_INPUT_LIMIT:
                return False
            return self.spec.fullmatch(value) is not None
        if self.kind == "compare":
            if not _is_number(value) or not math.isfinite(value):
                return False
            op, number = self.spec
            return bool(_COMPARE[op](float(value), number))
        return any(_same(value, allowed) for allowed in self.spec)


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
                return Condition(path, "regex", re.compile(spec[3:]))
            except re.error as exc:
                raise ConditionError(f"{spec!r} is not a valid regular expression: {exc}") from None
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


FOUND, ABSENT, UNREADABLE = "found", "absent", "unreadable"


def resolve(subject: Mapping[str, Any], path: str) -> tuple[str, Any]:
    """(FOUND, value), (ABSENT, None) when the parent is an object without the last key, or
    (UNREADABLE, None): a root the call lacks, a part inside a non-container, a bad index."""
    root, *parts = path.split(".")
    if root not in subject:
        return UNREADABLE, None
    value: Any = subject[root]
    for number, part in enumerate(parts, start=1):
        last = number == len(parts)
        if isinstance(value, dict):
            if part not in value:
                return (ABSENT if last else UNREADABLE), None
            value = value[part]
        elif isinstance(value, list) and part.isdigit():
            if int(part) >= len(value):
                return (ABSENT if last else UNREADABLE), None
            value = value[int(part)]
        else:
            return UNREADABLE, None
    return FOUND, value


def subject_of(kind: str, arguments: str, facts: str = "") -> dict[str, Any]:
    """What conditions read of a call: `args` (JSON arguments that parse), and the engine's
    facts of shell and patch calls (`command`, `path`, `operation`). Too big: no `args`."""
    subject: dict[str, Any] = {}
    if facts:
        try:
            known = json.loads(facts)
        except ValueError:
            known = {}
        if isinstance(known, dict):
            subject.update({k: v for k, v in known.items() if k in ROOTS and k != "args"})
    if kind not in ("shell", "apply_patch"):
        with contextlib.suppress(ValueError):  # not JSON: no `args` (its conditions fail)
            subject["args"] = json.loads(arguments) if arguments.strip() else {}
    if len(encode_subject(subject)) > SUBJECT_LIMIT:
        subject = {k: v for k, v in subject.items() if k in ("path", "operation")}
        if len(encode_subject(subject)) > SUBJECT_LIMIT:
            subject = {}
    return subject


def encode_subject(subject: Mapping[str, Any]) -> str:
    return json.dumps(subject, separators=(",", ":"), ensure_ascii=False)


def decode_subject(text: str) -> dict[str, Any]:
    """A stored subject; anything unreadable is the empty subject (every condition fails)."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def value_to_type(subject: Mapping[str, Any], path: str) -> str | None:
    """The text a reviewer must type to confirm a call (`confirm_value`): the scalar at `path`
    as text, or None when it cannot be read (then the call cannot be confirmed)."""
    state, value = resolve(subject, path)
    if state != FOUND or isinstance(value, dict | list) or value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
