"""CEL conditions: `when: {cel: "<expression>"}`, for what the short forms cannot say.

    when: {cel: "args.amount > 10000 && args.currency == 'USD'"}

The expression is in the Common Expression Language (https://cel.dev), compiled and type-checked
once, when the policy is read, by `cel-expr-python` (Google's CEL runtime in C++; the choice,
with its figures, is in docs/policy.md). It reads the roots of a call's subject, what the tool
will receive: `args` (any JSON value: objects, lists, strings, numbers, booleans, null) and
`command`, `path`, `operation` (strings). It sits beside the short forms of the same `when:`
(every entry must hold).

It has the three results of any condition (`bot.service.policy.conditions`): true, false, or
undecidable, and an undecidable condition never approves (`Policy.rule_for` gives the call to a
person). Undecidable: an evaluation error (a field that is not there: test it with `has()`;
an operator the values' types do not have, such as `>` on a string; a division by zero; an
integer beyond 64 bits; a list too long for the runtime's iteration budget), a result that is
not true or false, or a root the call has but that could not be read. An expression that names
a root the call's kind does not have (`command` on a function call) does not hold, as a short
form on that root does not.

The package is the `cel` extra (`pip install 'slack-approval-bot[cel]'`, in the image): it has
wheels for Linux (glibc) and Windows on x86-64 and for macOS. Where it is not installed, a `cel:`
condition is a policy error that says so.
"""

from __future__ import annotations

import importlib
import platform
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from bot.service.policy.conditions import ROOTS, UNREADABLE, ConditionError, Truth, Undecidable

CEL = "cel"
"""The `when:` key of a CEL condition (not an argument path)."""

_MAX_SAID = 300  # characters of the runtime's message kept in the undecidable's reason


@cache
def _runtime() -> Any:
    """The `cel_expr_python.cel` module, or ConditionError when it is not installed here."""
    try:
        return importlib.import_module("cel_expr_python.cel")
    except ImportError:
        raise ConditionError(
            "`cel:` conditions need the cel-expr-python package, which is not installed here: "
            "pip install 'slack-approval-bot[cel]' (it has wheels for Linux with glibc and "
            f"Windows on x86-64 and for macOS; not for {platform.system()} on "
            f"{platform.machine()}, if that is this machine). The short forms need nothing"
        ) from None


@cache
def _environment(roots: frozenset[str]) -> Any:
    """A CEL environment that declares `roots` (args: dyn; the others: strings)."""
    cel = _runtime()
    declared = {root: cel.Type.DYN if root == "args" else cel.Type.STRING for root in roots}
    return cel.NewEnv(variables=declared)


def _said(message: str) -> str:
    """The runtime's message on one line: without its status, its code and its picture of
    the expression (`| args.x > | ...^`), `<input>:1:14` as `column 14`, cut."""
    text = str(message).split("\n |", 1)[0]
    text = re.sub(r"\s*\[[A-Z_]+\]\s*$", "", " ".join(text.split()))
    text = re.sub(r"(?:ERROR: )?<input>:\d+:(\d+): ", r"column \1: ", text)
    text = re.sub(r"^(?:[A-Z_]+: )+", "", text)
    return text if len(text) <= _MAX_SAID else text[: _MAX_SAID - 1] + "…"


@dataclass(frozen=True)
class CelCondition:
    """A compiled `cel:` condition, ready to test (the interface of `conditions.Condition`)."""

    expression: str
    program: Any  # the runtime's compiled, checked expression
    roots: frozenset[str]  # the subject's roots it names
    path: str = CEL

    def test(self, subject: Mapping[str, Any]) -> Truth:
        """Whether the expression is true for `subject`, or why that cannot be decided."""
        unreadable = subject.get(UNREADABLE)
        for root in sorted(self.roots):
            if isinstance(unreadable, dict) and root in unreadable:
                return Undecidable(CEL, f"{root} {unreadable[root]}")
        if any(root not in subject for root in self.roots):
            return False  # about another kind of call
        cel = _runtime()
        try:
            value = self.program.eval(data={root: subject[root] for root in self.roots})
        except Exception as exc:  # the runtime's own errors (the iteration budget, ...)
            return Undecidable(CEL, _said(str(exc)))
        if value.type() == cel.Type.ERROR:
            return Undecidable(CEL, _said(str(value.plain_value())))
        plain = value.plain_value()
        if isinstance(plain, bool):
            return plain
        return Undecidable(CEL, f"gave {value.type().name().lower()}, not true or false")


def compile_cel(expression: Any) -> CelCondition:
    """The condition `expression` (a `cel:` value as written), or ConditionError saying why
    it cannot be used: not text, not CEL, a name that is not a root of the subject, or a
    result that is not a boolean."""
    if not isinstance(expression, str) or not expression.strip():
        raise ConditionError("a `cel:` condition is a CEL expression, as text")
    try:
        program = _environment(frozenset(ROOTS)).compile(expression)
    except ConditionError:
        raise
    except Exception as exc:
        raise ConditionError(
            f"{expression!r} is not a CEL expression on args, command, path and operation: "
            f"{_said(str(exc))}"
        ) from None
    returns = program.return_type()
    cel = _runtime()
    if returns != cel.Type.BOOL and returns != cel.Type.DYN:
        raise ConditionError(
            f"{expression!r} gives {returns.name().lower()}, not true or false (compare it: "
            "e.g. `size(args.items) > 0`)"
        )
    return CelCondition(expression, program, _roots_of(expression))


def _roots_of(expression: str) -> frozenset[str]:
    """The roots `expression` names: those it cannot be compiled without."""
    named = set()
    for root in ROOTS:
        try:
            _environment(frozenset(ROOTS) - {root}).compile(expression)
        except Exception:
            named.add(root)
    return frozenset(named)
