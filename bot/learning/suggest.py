"""Suggested rules: what people keep approving, as `auto: approve` rules to try in shadow mode.

A suggestion is a tool, called by one agent in one channel, with a pattern on its arguments,
that people approved at least `min_approvals` times (on the call's own card, as proposed: no
edit, grant, quorum or typed confirmation counted), by at least two different people, and that
matches no call that was rejected (by a person or a rule) or edited before approval. Calls that
expired undecided do not count against it (nobody decided them); the evidence says how many.

Patterns are conservative. An argument present in every approved call it covers is pinned:
to its one value, to the few values seen (at most `MAX_VALUES`, each exact: a list in the
policy, equal in type and value), or for paths to the directory they share (`/srv/logs/*`).
An argument that varies beyond that is left free, and the suggestion says so. Candidates are
each approved value of an argument that takes few values, and all the approved calls of the
tool together; each is checked against every call of that tool (by `Policy.rule_for`, with the
suggested rule first in the policy), and dropped if it would match one that was rejected or
edited. Each suggestion carries its evidence and its own backtest, and is printed as YAML with
`mode: shadow`: it decides nothing until someone removes that line.
"""

from __future__ import annotations

import math
import posixpath
import re
import secrets
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import yaml

from bot.learning.backtest import Backtest, backtest, judged, section_for
from bot.learning.history import DecidedCall, History
from bot.learning.text import compact, count, printable, when
from bot.service.policy.conditions import PATH, ROOTS, UNREADABLE
from bot.service.policy.rules import Policy, ToolRule

MAX_VALUES = 5  # an argument seen with more values than this is not pinned to a list
MAX_PER_TOOL = 3  # suggestions for one tool of one agent in one channel
EXAMPLES = 3

Scalar = str | int | float | bool
Leaves = dict[str, tuple[type, Scalar]]  # path -> (type, value): JSON's types kept apart


def leaves(subject: dict[str, Any]) -> Leaves:
    """The scalar values of a subject by the path a condition names them with (`args.env`,
    `args.target.host`, `args.items.0`, `command`, `path`, `operation`); values under a key
    no path can name (a dot or a space in it), nulls and empty containers are left out."""
    found: Leaves = {}

    def walk(path: str, value: Any) -> None:
        if isinstance(value, dict):
            if path != "args" and not path.startswith("args."):
                return  # only `args` has parts below it
            for key, item in value.items():
                if key and not any(c == "." or c.isspace() for c in key):
                    walk(f"{path}.{key}", item)
        elif isinstance(value, list):
            if path == "args" or path.startswith("args."):
                for index, item in enumerate(value):
                    walk(f"{path}.{index}", item)
        elif isinstance(value, str | bool | int | float) and PATH.match(path):
            if isinstance(value, float) and not math.isfinite(value):
                return
            found[path] = (type(value), value)

    for root in ROOTS:  # not what could not be read, nor when it was requested
        if root in subject:
            walk(root, subject[root])
    return found


def _glob_escape(text: str) -> str:
    """`text` as a glob that matches only itself."""
    return re.sub(r"([*?\[])", r"[\1]", text)


def _common_directory(values: list[str]) -> str | None:
    """The directory every one of `values` (absolute paths, none with `..`) lies under, at
    least one level below the root: `/srv/logs/` for `/srv/logs/a` and `/srv/logs/b/c`."""
    if not all(v.startswith("/") and ".." not in v.split("/") for v in values):
        return None
    parts = [posixpath.normpath(v).split("/")[1:] for v in values]
    shared: list[str] = []
    for names in zip(*(p[:-1] for p in parts), strict=False):
        if len(set(names)) != 1:
            break
        shared.append(names[0])
    if not shared:
        return None
    return "/" + "/".join(shared) + "/"


def condition_for(values: list[tuple[type, Scalar]]) -> tuple[Any, str] | None:
    """A short-form condition that holds for every one of `values` (what one argument took in
    the calls a pattern covers) and as little else as can be said: the values themselves, or
    the directory shared by paths. None: it varies too much to pin (the argument stays free).
    The second item describes it for the evidence."""
    distinct = list(dict.fromkeys(values))
    if len(distinct) <= MAX_VALUES:
        listed = [value for _, value in sorted(distinct, key=lambda v: (v[0].__name__, v[1]))]
        return listed, "exactly " + " or ".join(compact(v, 60) for v in listed)
    texts = [v for t, v in distinct if t is str]
    if len(texts) == len(distinct):
        directory = _common_directory([str(v) for v in texts])
        if directory is not None:
            return _glob_escape(directory) + "*", f"under {printable(directory, 80)}"
    return None


@dataclass
class Suggestion:
    """One suggested rule with its evidence and its backtest."""

    team: str
    channel: str
    agent: str
    tool: str
    when: dict[str, Any]  # path -> short-form condition
    pinned: dict[str, str]  # path -> what the condition says, in words
    free: dict[str, int]  # argument paths left free -> the number of values seen
    covered: list[DecidedCall]  # the approvals it covers (its evidence)
    expired: int = 0  # calls it covers that expired undecided
    name: str = ""
    backtest: Backtest = field(default_factory=Backtest)

    @property
    def approvers(self) -> Counter[str]:
        return Counter(c.decider for c in self.covered)

    def rule(self) -> dict[str, Any]:
        """The rule as the policy file writes it (`mode: shadow`)."""
        rule: dict[str, Any] = {"name": self.name, "match": _glob_escape(self.tool)}
        rule["agent"] = _glob_escape(self.agent)
        rule["channel"] = self.channel
        if self.when:
            rule["when"] = dict(self.when)
        rule["auto"] = "approve"
        rule["reason"] = (
            f"Approved {len(self.covered)} times by {len(self.approvers)} people, never "
            "rejected (approval-bot policy suggest)"
        )
        rule["mode"] = "shadow"
        return rule


def _tool_rule(suggestion: Suggestion) -> ToolRule:
    """The suggestion as an enforced rule, for its checks and its backtest."""
    return ToolRule.model_validate({**suggestion.rule(), "mode": "enforce"})


def with_rule_first(policy: Policy, rule: ToolRule) -> Policy:
    """`policy` (one workspace's section) with `rule` before every other tool rule."""
    return policy.model_copy(update={"tools": [rule, *policy.tools]})


def _pattern(
    seed: list[DecidedCall], split: dict[int, Leaves]
) -> tuple[dict[str, Any], dict[str, str], dict[str, int]]:
    """The conditions that hold for every call of `seed` and as little else as can be said."""
    paths = set.intersection(*(set(split[id(c)]) for c in seed))
    when: dict[str, Any] = {}
    pinned: dict[str, str] = {}
    free: dict[str, int] = {}
    for path in sorted(paths):
        values = [split[id(c)][path] for c in seed]
        condition = condition_for(values)
        if condition is None:
            free[path] = len(set(values))
        else:
            when[path], pinned[path] = condition
    for path in sorted(set().union(*(split[id(c)] for c in seed)) - paths):
        free.setdefault(path, -1)  # absent from some calls: not pinned
    return when, pinned, free


def _by_value(
    approved: list[DecidedCall], split: dict[int, Leaves]
) -> dict[str, list[list[DecidedCall]]]:
    """For each argument that takes a few values among the approved calls, the calls with each
    value; for one that takes many absolute paths, the calls under each directory (most
    approved first)."""
    by_path: dict[str, dict[Any, list[DecidedCall]]] = defaultdict(lambda: defaultdict(list))
    for call in approved:
        for path, value in split[id(call)].items():
            by_path[path][value].append(call)
    found: dict[str, list[list[DecidedCall]]] = {}
    for path, values in sorted(by_path.items()):
        groups = values
        if len(values) > 4 * MAX_VALUES and all(
            t is str and str(v).startswith("/") for t, v in values
        ):
            groups = defaultdict(list)
            for (_, value), calls in values.items():
                groups[posixpath.dirname(str(value))] += calls
        if 1 < len(groups) <= 4 * MAX_VALUES:
            found[path] = sorted(groups.values(), key=len, reverse=True)
    return found


def suggest(
    policy: Policy, history: History, *, min_approvals: int = 5, min_people: int = 2
) -> list[Suggestion]:
    """The rules the trail supports (see the module's docstring), best supported first."""
    groups: dict[tuple[str, str, str, str], list[DecidedCall]] = defaultdict(list)
    for call in history.replayable:
        groups[(call.team, call.channel, call.agent, call.tool)].append(call)
    found: list[Suggestion] = []
    for (team, channel, _, _), group in sorted(groups.items()):
        section = section_for(policy, team, channel)
        if channel in section.channels:
            found += _suggest_for(section, group, min_approvals, min_people)
    found.sort(key=lambda s: -len(s.covered))
    names: Counter[str] = Counter()
    for suggestion in found:
        section = section_for(policy, suggestion.team, suggestion.channel)
        taken = {r.name for r in section.tools}
        base = "suggested-" + re.sub(r"[^a-z0-9]+", "-", suggestion.tool.lower()).strip("-")
        while not suggestion.name or suggestion.name in taken:
            names[base] += 1
            suggestion.name = f"{base[:70]}-{names[base]}"
        group = groups[(suggestion.team, suggestion.channel, suggestion.agent, suggestion.tool)]
        suggestion.backtest = backtest(with_rule_first(section, _tool_rule(suggestion)), group)
    return found


def _suggest_for(
    section: Policy, group: list[DecidedCall], min_approvals: int, min_people: int
) -> list[Suggestion]:
    """The suggestions for one tool of one agent in one channel (`group`: its settled calls).
    Tried: all its approvals together; the approvals of each value of an argument that takes
    few values; and the values of such an argument that are clean (match no rejected or
    edited call), together."""
    # (Arguments the policy could not read are no evidence: no rule could approve them.)
    approved = [c for c in group if c.clicked and UNREADABLE not in (c.subject or {})]
    if len(approved) < min_approvals or len({c.decider for c in approved}) < min_people:
        return []
    first = group[0]
    refused = [c for c in group if c.outcome in ("rejected", "edited")]
    expired = [c for c in group if c.outcome == "expired"]
    split = {id(c): leaves(c.subject or {}) for c in group}
    trial = f"suggestion-under-trial-{secrets.token_hex(8)}"
    chosen: dict[frozenset[int], Suggestion] = {}

    def attempt(seed: list[DecidedCall]) -> bool:
        """Try the pattern of `seed`; keep it when it is enough. Whether it is clean."""
        when, pinned, free = _pattern(seed, split)
        if free and not when:
            return False  # arguments, none of them pinned: that is no pattern
        suggestion = Suggestion(
            first.team, first.channel, first.agent, first.tool, when, pinned, free, [], name=trial
        )
        try:
            candidate = with_rule_first(section, _tool_rule(suggestion))
        except ValueError:
            return False  # a value the policy cannot say
        if any(_governs(candidate, c, trial) for c in refused):
            return False  # it would also approve what people turned down: never suggested
        covered = [c for c in approved if _governs(candidate, c, trial)]
        key = frozenset(id(c) for c in covered)
        if len(covered) >= min_approvals and len({c.decider for c in covered}) >= min_people:
            suggestion.covered, suggestion.name = covered, ""
            suggestion.expired = sum(1 for c in expired if _governs(candidate, c, trial))
            chosen.setdefault(key, suggestion)
        return True

    attempt(approved)
    for values in _by_value(approved, split).values():
        clean = [calls for calls in values if attempt(calls)]
        if len(clean) > 1:
            attempt([c for calls in clean[:MAX_VALUES] for c in calls])
    ranked = sorted(chosen.values(), key=lambda s: (-len(s.covered), len(s.free), -len(s.when)))
    kept: list[Suggestion] = []
    for suggestion in ranked:
        ids = {id(c) for c in suggestion.covered}
        if any(ids <= {id(c) for c in k.covered} for k in kept):
            continue  # a broader suggestion already covers these approvals
        kept.append(suggestion)
    return kept[:MAX_PER_TOOL]


def _governs(candidate: Policy, call: DecidedCall, label: str) -> bool:
    """Whether the rule labelled `label` is the one `candidate` gives `call`."""
    rule = judged(candidate, call)
    return rule is not None and rule.source == label


def render(suggestions: Iterable[Suggestion], history: History, *, min_approvals: int) -> str:
    """The suggestions as YAML to paste at the top of `tools:`, each with its evidence and
    backtest as comments (every untrusted value escaped onto one line)."""
    lines = [
        f"# Suggested rules from {count(len(history.replayable), 'settled call')} of "
        f"{when(history.since)} to {when(history.until)} UTC: a tool and arguments approved at "
        f"least {min_approvals} times by at least two people, never rejected or edited.",
        "# Paste them at the top of `tools:` (a shadow rule decides nothing: it is judged in "
        "its place in the rule order), watch `approval-bot report shadow`, backtest, and only "
        "then remove `mode: shadow`.",
    ]
    shown = 0
    for suggestion in suggestions:
        shown += 1
        people = ", ".join(
            f"{printable(p, 30)} ({n})" for p, n in suggestion.approvers.most_common()
        )
        first = min(c.at for c in suggestion.covered)
        last = max(c.at for c in suggestion.covered)
        lines += ["", f"# {printable(suggestion.name, 80)}: {printable(suggestion.tool, 80)}"]
        lines.append(
            f"#   evidence: {count(len(suggestion.covered), 'approval')} by {people}, "
            f"{when(first)} to {when(last)}; none it matches was rejected or edited"
            + (f"; {suggestion.expired} expired undecided" if suggestion.expired else "")
        )
        for path, said in suggestion.pinned.items():
            lines.append(f"#   {printable(path, 80)}: {said}")
        for path, seen in suggestion.free.items():
            why = "absent from some calls" if seen < 0 else f"{seen} different values"
            lines.append(f"#   {printable(path, 80)}: any value ({why}; not pinned)")
        for example in suggestion.covered[-EXAMPLES:]:
            args = (example.subject or {}).get("args", example.subject)
            lines.append(
                f"#   example: {compact(args, 100)} approved by "
                f"{printable(example.decider, 30)} {when(example.at)}"
            )
        result = suggestion.backtest
        lines.append(
            f"#   backtest (this rule first, enforced): would approve automatically "
            f"{result.approves_approved:,} calls people approved, "
            f"{len(result.approves_rejected):,} that were rejected; other changes: "
            f"{len(result.other_approvers) + len(result.typed_confirmation):,} "
            f"routed or confirmed differently, {len(result.rejects_approved):,} rejected"
        )
        text = yaml.safe_dump(
            [suggestion.rule()], sort_keys=False, allow_unicode=False, width=1000,
            default_flow_style=None,
        )  # fmt: skip
        lines += ["  " + line for line in text.rstrip("\n").splitlines()]
    if not shown:
        lines += ["", "# Nothing to suggest: no tool and arguments were approved often enough."]
    return "\n".join(lines) + "\n"
