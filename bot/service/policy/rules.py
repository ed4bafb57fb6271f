"""Who may start runs and decide tool calls, read from the policy YAML file.

The policy is closed by default: channels that are not listed accept no runs, and a run's starter
may not decide its own calls unless the file says so. Per-tool rules (matched by tool name glob,
and optionally agent name glob, channel and conditions on what the tool will receive: `when`,
tested by `bot.service.policy.conditions`; a condition that cannot be decided never approves) refine
what a channel allows: their own approvers,
a quorum of distinct approvers, whether Always is offered, typed confirmation, or an automatic
decision with its reason.

The first version of the file (only `defaults` and `channels`) is still valid as it was.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from bot.engine.advisor import RISKS
from bot.engine.questions import TOOL_NAME as QUESTION_TOOL
from bot.errors import ApprovalBotError
from bot.service.policy.cel import CEL, CelCondition, compile_cel
from bot.service.policy.conditions import (
    ADVICE,
    REFUSED,
    REQUESTED_AT,
    Condition,
    ConditionError,
    Truth,
    Undecidable,
    check_path,
    parse_condition,
)
from bot.service.policy.during import During
from bot.service.policy.keys import meant
from bot.service.policy.lines import line_of, nodes_of
from bot.service.replies import Text

ADVICE_RISK = f"{ADVICE}.risk"
CHANNEL_ID = r"^[CGD][A-Z0-9]+$"
# A user id (U…/W…), a user group id (S…), a user group handle (@name) or "*" (anyone).
PRINCIPAL = r"^([UW][A-Z0-9]+|S[A-Z0-9]+|@[a-z0-9][a-z0-9._-]*|\*)$"
# Who may answer an agent's question (`answerers:`): a principal, or `starter` (the run's).
ANSWERER = r"^([UW][A-Z0-9]+|S[A-Z0-9]+|@[a-z0-9][a-z0-9._-]*|\*|starter)$"
TEAM_ID = r"^T[A-Z0-9]+$"
ENTERPRISE_ID = r"^E[A-Z0-9]+$"

DURATION = r"^[1-9][0-9]*[smhd]$"
MAX_EXPIRE_AFTER = 30 * 86400  # nothing waits longer than 30 days

Principal = Annotated[str, StringConstraints(pattern=PRINCIPAL)]
ChannelId = Annotated[str, StringConstraints(pattern=CHANNEL_ID)]
TeamId = Annotated[str, StringConstraints(pattern=TEAM_ID)]
Duration = Annotated[str, StringConstraints(pattern=DURATION)]
Answerer = Annotated[str, StringConstraints(pattern=ANSWERER)]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# The rule of a call whose arguments hold NaN or an infinity (`Policy._refused`).
REFUSED_SOURCE = "arguments not JSON"


def seconds(duration: str) -> int:
    """`90s`, `30m`, `4h`, `7d` as seconds."""
    return int(duration[:-1]) * _UNITS[duration[-1]]


def human(total: int) -> str:
    """Seconds as people read them: 86400 -> "24h", 172800 -> "2d", 90 -> "90s"."""
    if total >= 2 * 86400 and total % 86400 == 0:
        return f"{total // 86400}d"
    if total >= 3600 and total % 3600 == 0:
        return f"{total // 3600}h"
    if total >= 60 and total % 60 == 0:
        return f"{total // 60}m"
    return f"{total}s"


POLICY_EXAMPLE = """\
defaults:
  allow_self_approval: false   # may whoever asked for a call (its turn's requester) decide it?
channels:
  C0123ABC:                    # runs may start, and approvals are posted, only in listed channels
    starters: ["*"]            # user ids allowed to start runs here; "*" = anyone
    approvers: [U111, U222]    # user ids allowed to decide the calls of runs started here
"""


class PolicyError(ApprovalBotError):
    """The policy file is missing or invalid; `problems` lists every issue found."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Workspace(_Strict):
    """The Slack workspace (and Enterprise Grid org) this bot serves; others are refused."""

    team_id: Annotated[str, StringConstraints(pattern=TEAM_ID)] | None = None
    enterprise_id: Annotated[str, StringConstraints(pattern=ENTERPRISE_ID)] | None = None


class Timers(_Strict):
    """How long a call waits, who is reminded and when it escalates (None: the next level's)."""

    expire_after: Duration | None = None
    remind_after: Duration | None = None
    remind_max: int | None = Field(default=None, ge=0, le=20)
    escalate_after: Duration | None = None
    escalate_to: list[Principal] | None = Field(default=None, min_length=1)


class Defaults(Timers):
    allow_self_approval: bool = False
    allow_always: bool = True
    expire_after: Duration | None = "24h"
    remind_after: Duration | None = "4h"
    remind_max: int | None = Field(default=3, ge=0, le=20)


class ChannelRule(Timers):
    starters: list[Principal] = Field(default_factory=lambda: ["*"])
    # Who besides its starter may continue a run with a reply in its thread (a follow-up);
    # None: the channel's starters.
    followers: list[Principal] | None = None
    approvers: list[Principal] = Field(min_length=1)
    agents: list[str] | None = None  # agent names that may be started here; None = all
    allow_self_approval: bool | None = None
    # Who may answer the agents' questions (ask_human) here; None: the starter and approvers.
    answerers: list[Answerer] | None = Field(default=None, min_length=1)


def _condition_spec(spec: Any) -> Any:
    """A `when:` value the bot can test (checked here, compiled by the rule)."""
    parse_condition("args", spec)
    return spec


def _when_key(key: str) -> str:
    """A `when:` key: an argument path, or `cel` (a CEL expression, `bot.service.policy.cel`)."""
    return key if key == CEL else check_path(key)


ArgumentPath = Annotated[str, AfterValidator(check_path)]
WhenKey = Annotated[str, AfterValidator(_when_key)]
ConditionSpec = Annotated[Any, AfterValidator(_condition_spec)]


class ToolRule(Timers):
    """A rule for calls whose tool name matches `match` (a glob), optionally narrowed (by
    agent, channel, and conditions on the call's arguments: `when`)."""

    name: str | None = Field(default=None, min_length=1, max_length=80)
    match: str = Field(min_length=1)
    agent: str | None = None  # glob on the agent name
    channel: ChannelId | None = None
    when: dict[WhenKey, ConditionSpec] | None = Field(default=None, min_length=1)
    # When the call was requested (the rule's clock and days): e.g. nights to the on-call.
    during: During | None = None
    approvers: list[Principal] | None = Field(default=None, min_length=1)
    required_approvals: int = Field(default=1, ge=1, le=20)
    allow_self_approval: bool | None = None
    allow_always: bool | None = None
    # May a reviewer edit the arguments before approving? None: yes for function tools (they
    # have a JSON schema to check the edit against), no for shell, apply_patch and MCP calls.
    allow_edit: bool | None = None
    auto: Literal["approve", "reject"] | None = None
    # Who may answer (only on a rule matching ask_human); None: the channel's, or the default.
    answerers: list[Answerer] | None = Field(default=None, min_length=1)
    grant_max: Duration | None = None  # "Always approve" lasts in the channel up to this (#19)
    reason: str | None = Field(default=None, min_length=1, max_length=2000)
    confirm: Literal["type"] | None = None
    confirm_value: ArgumentPath | None = None
    # `shadow`: the rule decides nothing; each call it would have decided (in its place in the
    # rule order) is audited with what it would have done (bot/service/policy/shadow.py).
    mode: Literal["enforce", "shadow"] = "enforce"
    _conditions: tuple[Condition | CelCondition, ...] = PrivateAttr(default=())

    def model_post_init(self, context: Any, /) -> None:
        self._conditions = tuple(
            compile_cel(c) if p == CEL else parse_condition(p, c)
            for p, c in (self.when or {}).items()
        )

    @field_validator("when")
    @classmethod
    def _cel_compiles(cls, when: dict[str, Any] | None) -> dict[str, Any] | None:
        """A `cel:` condition is compiled and type-checked as the policy is read; what is
        wrong with it is said at its own key (and line)."""
        if when is not None and CEL in when:
            try:
                compile_cel(when[CEL])
            except ConditionError as exc:
                error = PydanticCustomError("cel", "{why}", {"why": str(exc)})
                raise ValidationError.from_exception_data(
                    "when", [InitErrorDetails(type=error, loc=(CEL,), input=when[CEL])]
                ) from None
        return when

    @model_validator(mode="after")
    def _keys_agree(self) -> ToolRule:
        if self.reason is not None and self.auto is None:
            raise ValueError("reason: only with auto (it is the automatic decision's reason)")
        if self.confirm is not None and self.auto is not None:
            raise ValueError("confirm: a rule that decides automatically has nothing to confirm")
        if self.confirm_value is not None and self.confirm is None:
            raise ValueError("confirm_value: only with confirm: type")
        if self.confirm_value == ADVICE_RISK:
            raise ValueError("confirm_value: an argument path (advice is not typed)")
        risk = (self.when or {}).get(ADVICE_RISK)
        if risk is not None:
            named = risk if isinstance(risk, list) else [risk]
            wrong = [r for r in named if r not in RISKS]
            if wrong:
                raise ValueError(
                    f"when.{ADVICE_RISK}: {wrong[0]!r} is not a risk the advisor gives (low, "
                    "medium or high; a list of them for several)"
                )
        return self

    @property
    def on_advice(self) -> bool:
        """Whether the rule reads the advisor's opinion (`advice.risk`)."""
        return ADVICE_RISK in (self.when or {})

    def applies(self, channel: str, agent: str, tool: str, subject: Mapping[str, Any]) -> Truth:
        """Whether this rule governs the call: every narrowing and every condition holds; or
        why that cannot be decided (no condition fails, and one cannot be evaluated)."""
        if not fnmatch.fnmatchcase(tool, self.match):
            return False
        if self.agent is not None and not fnmatch.fnmatchcase(agent, self.agent):
            return False
        if self.channel is not None and self.channel != channel:
            return False
        if self.during is not None and not self.during.holds(subject.get(REQUESTED_AT)):
            return False
        unknown: Undecidable | None = None
        for condition in self._conditions:
            truth = condition.test(subject)
            if truth is False:
                return False  # one condition that does not hold settles it
            if isinstance(truth, Undecidable) and unknown is None:
                unknown = truth
        return unknown if unknown is not None else True

    def label(self, index: int) -> str:
        """The rule's stable name on cards and in the audit trail."""
        return self.name or f"tools[{index}] ({self.match})"


class Policy(_Strict):
    """The parsed policy file."""

    workspace: Workspace = Field(default_factory=Workspace)
    defaults: Defaults = Field(default_factory=Defaults)
    channels: dict[ChannelId, ChannelRule] = Field(default_factory=dict)
    tools: list[ToolRule] = Field(default_factory=list)
    # A bot installed in many workspaces (OAuth): each team's own policy, a whole policy
    # (`channels`, `tools`, and `defaults`, else the top level's); a team not listed is not
    # served. Without it, the top level is the policy of every workspace the bot serves.
    workspaces: dict[TeamId, Policy] = Field(default_factory=dict)
    _teams: dict[str, Policy] = PrivateAttr(default_factory=dict)

    def for_team(self, team_id: str) -> Policy:
        """The policy that governs `team_id`'s runs and people: its `workspaces:` section, or
        (none listed) this one. A team the sections do not name gets a policy that allows
        nothing (and `Authorizer.served` tells its people the workspace is not served)."""
        if not self.workspaces:
            return self
        found = self._teams.get(team_id)
        if found is None:
            found = Policy.model_construct(  # its workspace is no team: `served` says no
                workspace=Workspace.model_construct(team_id="-"), defaults=self.defaults,
                channels={},
                tools=[], workspaces={},
            )  # fmt: skip
        return found

    @model_validator(mode="after")
    def _sections_make_sense(self) -> Policy:
        """Channels at the top level or in workspace sections, not both, and no section
        within a section; each section knows its team (`workspace.team_id`)."""
        problems = []
        if not self.channels and not self.workspaces:
            problems.append("channels: name at least one channel (or a `workspaces:` section)")
        if self.channels and self.workspaces:
            problems.append(
                "channels: with a `workspaces:` section, channels go in each workspace's "
                "section (top-level ones would govern no workspace)"
            )
        for team, section in self.workspaces.items():
            if section.workspaces:
                problems.append(f"workspaces.{team}.workspaces: a section holds no sections")
            if section.workspace.team_id not in (None, team):
                problems.append(f"workspaces.{team}.workspace.team_id: not {team}")
            update: dict[str, Any] = {"workspace": Workspace(
                team_id=team, enterprise_id=section.workspace.enterprise_id)}  # fmt: skip
            if "defaults" not in section.model_fields_set:
                update["defaults"] = self.defaults
            self._teams[team] = section.model_copy(update=update)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def rule_for(
        self,
        *,
        channel: str,
        agent: str,
        tool: str,
        subject: Mapping[str, Any] | None = None,
        enforcing: int | None = None,
    ) -> CallRule | None:
        """The rule that governs a call of `tool` by `agent` in `channel` (None: not allowed):
        the first tool rule that applies (its `when:` read from `subject`, what the call's tool
        will receive: `conditions.subject_of`), else the channel's.

        A rule whose conditions cannot be decided on `subject` (`Undecidable`) may or may not
        apply, so no rule after it may decide the call by itself: the call goes to a person
        under the strictest rule that could apply (`_undecided`). Arguments that hold a number
        JSON cannot (NaN, an infinity) are refused outright. Shadow rules are skipped, but the
        one at index `enforcing`, judged as if it were enforced (`bot/service/policy/shadow.py`)."""
        base = self.channels.get(channel)
        if base is None:
            return None
        subject = subject or {}
        if subject.get(REFUSED):
            return self._refused(channel, base, str(subject[REFUSED]))
        could: list[tuple[int, ToolRule, Undecidable]] = []
        for index, rule in enumerate(self.tools):
            if rule.mode == "shadow" and index != enforcing:
                continue
            truth = rule.applies(channel, agent, tool, subject)
            if truth is False:
                continue
            if isinstance(truth, Undecidable):
                could.append((index, rule, truth))
                continue
            found = self._of_rule(index, rule, base)
            return self._undecided(could, found, base, channel) if could else found
        found = self._of_channel(channel, base)
        return self._undecided(could, found, base, channel) if could else found

    def _of_rule(self, index: int, rule: ToolRule, base: ChannelRule) -> CallRule:
        return self._timed(
            rule,
            base,
            approvers=tuple(rule.approvers or base.approvers),
            required=rule.required_approvals,
            allow_self=_first(
                rule.allow_self_approval,
                base.allow_self_approval,
                self.defaults.allow_self_approval,
            ),
            allow_always=_first(rule.allow_always, self.defaults.allow_always),
            allow_edit=rule.allow_edit,
            auto=rule.auto,
            source=rule.label(index),
            grant_max=seconds(rule.grant_max) if rule.grant_max else 0,
            answerers=_answerers(rule.answerers or base.answerers),
            reason=rule.reason or "",
            confirm=rule.confirm == "type",
            confirm_value=rule.confirm_value or "",
            on_advice=rule.on_advice,
        )

    def _of_channel(self, channel: str, base: ChannelRule) -> CallRule:
        return self._timed(
            None,
            base,
            approvers=tuple(base.approvers),
            required=1,
            allow_self=_first(base.allow_self_approval, self.defaults.allow_self_approval),
            allow_always=self.defaults.allow_always,
            auto=None,
            source=f"channels.{channel}",
            answerers=_answerers(base.answerers),
        )

    def _undecided(
        self,
        could: list[tuple[int, ToolRule, Undecidable]],
        found: CallRule,
        base: ChannelRule,
        channel: str,
    ) -> CallRule:
        """The strictest rule that could apply, when the rules `could` (in order) may or may
        not apply and `found` is the rule that applies if none of them does: the first of
        them all that a person decides (an `auto: approve` rule asks nobody, so it is passed
        over; an `auto: reject` rule is decided by its approvers instead), and when each
        approves automatically, the first, decided by its approvers; with the highest quorum
        of those a person decides, typed confirmation if any of them asks for it, and
        self-approval only if all of them allow it. Never automatic, no Always and no grant:
        each such call is decided on its own."""
        rules = [self._of_rule(index, rule, base) for index, rule, _ in could] + [found]
        persons = [r for r in rules if r.auto != "approve"] or rules[:1]
        person = persons[0]
        # What any of them asks of its approvers holds: an agent whose arguments make a
        # condition undecidable gets no smaller quorum, no self-approval and no untyped
        # approval than the rule it would otherwise fall under.
        confirming = next((r for r in persons if r.confirm), None)
        why = "; ".join(u.said() for _, _, u in could)
        return dataclasses.replace(
            person, auto=None, allow_always=False, grant_max=0, undecidable=why, reason="",
            required=max(r.required for r in persons),
            allow_self=all(r.allow_self for r in persons),
            confirm=confirming is not None,
            confirm_value=confirming.confirm_value if confirming is not None else "",
        )  # fmt: skip

    def _refused(self, channel: str, base: ChannelRule, where: str) -> CallRule:
        """The rule of a call whose arguments hold a number JSON cannot: rejected, and the
        agent told why (its tool would have received NaN or an infinity)."""
        return dataclasses.replace(
            self._of_channel(channel, base),
            auto="reject",
            source=REFUSED_SOURCE,
            allow_always=False,
            reason=(
                f"Not run: the arguments hold a number JSON cannot carry (NaN or an infinity, "
                f"at {where}). Call the tool again with a finite number."
            ),
        )

    def _timed(self, rule: ToolRule | None, base: ChannelRule, **fields: Any) -> CallRule:
        """A CallRule with its timers: each from the most specific level that sets it."""
        levels: list[Timers] = [t for t in (rule, base, self.defaults) if t is not None]

        def pick(name: str) -> Any:
            return next((getattr(t, name) for t in levels if getattr(t, name) is not None), None)

        expire = pick("expire_after")
        remind = pick("remind_after")
        escalate = pick("escalate_after")
        return CallRule(
            **fields,
            expire_after=seconds(expire) if expire else 86400,
            remind_after=seconds(remind) if remind else 0,
            remind_max=int(pick("remind_max") or 0),
            escalate_after=seconds(escalate) if escalate else 0,
            escalate_to=tuple(pick("escalate_to") or ()),
        )

    @model_validator(mode="after")
    def _timers_make_sense(self) -> Policy:
        """Durations within bounds; an escalation names whom it escalates to, wherever it
        applies (the settings combine across levels, so each combination is checked)."""
        problems = []
        places: list[tuple[str, Timers]] = [("defaults", self.defaults)]
        places += [(f"channels.{c}", r) for c, r in self.channels.items()]
        places += [(f"tools.{i}", r) for i, r in enumerate(self.tools)]
        for where, level in places:
            if level.expire_after and seconds(level.expire_after) > MAX_EXPIRE_AFTER:
                problems.append(f"{where}.expire_after: at most 30d")
        for channel, base in self.channels.items():
            for rule in [None, *self.tools]:
                if rule is not None and rule.channel not in (None, channel):
                    continue
                timed = self._timed(rule, base, approvers=(), required=1, allow_self=False,
                                    allow_always=False, auto=None, source="")  # fmt: skip
                where = f"channels.{channel}" + (f" with tools[{self.tools.index(rule)}]"
                                                 if rule is not None else "")  # fmt: skip
                if timed.escalate_after and not timed.escalate_to:
                    problems.append(f"{where}: escalate_after needs escalate_to")
                if timed.escalate_to and not timed.escalate_after:
                    problems.append(f"{where}: escalate_to needs escalate_after")
        named: dict[str, int] = {}
        for index, rule in enumerate(self.tools):
            if rule.answerers and not fnmatch.fnmatchcase(QUESTION_TOOL, rule.match):
                problems.append(
                    f"tools.{index}.answerers: only a rule whose match covers "
                    f"{QUESTION_TOOL} takes answerers (this one matches {rule.match!r})"
                )
            if rule.name is not None and named.setdefault(rule.name, index) != index:
                problems.append(
                    f"tools.{index}.name: {rule.name!r} is already the name of the rule at "
                    f"tools.{named[rule.name]} (a rule's name must be unique)"
                )
        if problems:
            raise ValueError("; ".join(dict.fromkeys(problems)))
        return self

    def run_approvers(
        self, channel: str, calls: Iterable[tuple[str, str, Mapping[str, Any]]]
    ) -> tuple[str, ...]:
        """Who approves for one run: the channel's approvers, and the approvers of the rule
        that governs each of `calls` ((agent, tool, subject) of the calls it waits for or last
        waited for). A rule scoped to another agent, or of tools the run never waited on,
        gives none."""
        base = self.channels.get(channel)
        if base is None:
            return ()
        found = list(base.approvers)
        for agent, tool, subject in calls:
            rule = self.rule_for(channel=channel, agent=agent, tool=tool, subject=subject)
            if rule is not None:
                found.extend(p for p in rule.approvers if p not in found)
        return tuple(found)

    def channel_approvers(self, channel: str) -> tuple[str, ...]:
        """Everyone who approves some call in `channel`: the channel's approvers and those of
        every tool rule that applies there (unscoped, or scoped to this channel)."""
        base = self.channels.get(channel)
        if base is None:
            return ()
        found = list(base.approvers)
        for rule in self.tools:
            if rule.channel in (None, channel) and rule.approvers and rule.mode != "shadow":
                found.extend(p for p in rule.approvers if p not in found)
        return tuple(found)


def _answerers(named: list[str] | None) -> tuple[str, ...] | None:
    return tuple(named) if named else None


def _first(*values: bool | None) -> bool:
    return next(v for v in values if v is not None)


@dataclass(frozen=True)
class CallRule:
    """What the policy says about one call: who decides, how many, and what is offered."""

    approvers: tuple[str, ...]
    required: int
    allow_self: bool
    allow_always: bool
    auto: str | None
    source: str
    expire_after: int = 86400  # seconds a call waits before it expires (rejected, unseen)
    remind_after: int = 0  # seconds between reminders in the card's thread (0: none)
    remind_max: int = 0
    escalate_after: int = 0  # seconds before `escalate_to` may decide too (0: never)
    escalate_to: tuple[str, ...] = ()
    # Who may answer a question (ask_human) under this rule, as the policy names them (with
    # `starter`); None: the run's starter and `approvers` (bot/service/policy/answerers.py).
    answerers: tuple[str, ...] | None = None
    reason: str = ""  # an automatic decision's reason (the card shows it; a rejected agent gets it)
    confirm: bool = False  # an approval counts only with the value typed (`confirm: type`)
    confirm_value: str = ""  # the argument path whose value is typed ("": the tool name)
    grant_max: int = 0  # seconds an Always approve lasts in the channel (`grant_max`); 0: none
    allow_edit: bool | None = None  # as the rule sets it (None: by the kind of call, `editable`)
    # Why a rule before this one could not be decided on the call (`Policy._undecided`): this
    # is then the strictest rule that could apply, decided by a person; "": it applies.
    undecidable: str = ""
    # The rule applies on the advisor's opinion (`when: {advice.risk: ...}`): an automatic
    # decision it makes is audited as made on advice.
    on_advice: bool = False

    def editable(self, kind: str) -> bool:
        """Whether the Edit button is offered for a call of this kind under this rule: as the
        rule says, else for function tools only (the kinds whose arguments have a schema)."""
        if self.auto:
            return False
        return self.allow_edit if self.allow_edit is not None else kind == "function"


@dataclass(frozen=True)
class Verdict:
    """An authorization answer with the sentence to show the person when it is a no."""

    allowed: bool
    said: str | Text = ""
    """What to tell the person (a `Text` when it names people or literals)."""

    @property
    def reason(self) -> str:
        """The sentence's plain words (the audit trail, logs)."""
        return Text.of(self.said).plain()


ALLOWED = Verdict(True)


def _location(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc if part != "[key]") or "(top level)"


_WHAT = {
    CHANNEL_ID: "a channel id like C0123ABC",
    PRINCIPAL: 'a user id (U0123ABC), a user group id (S0123ABC), a group handle (@oncall) or "*"',
    TEAM_ID: "a team id like T0123ABC",
    ENTERPRISE_ID: "an enterprise id like E0123ABC",
    DURATION: "a duration like 90s, 30m, 4h or 7d",
    ANSWERER: 'a user id, a user group id, a group handle, "*" or "starter"',
}


def parse_policy(text: str, *, source: str = "policy") -> Policy:
    """Parse policy YAML, raising `PolicyError` with every problem found, each with the line
    of the file it is on (`source:line: where: what`)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PolicyError([f"{source}: not valid YAML: {exc}"]) from None
    if not isinstance(data, dict):
        raise PolicyError([f"{source}: must be a mapping with a `channels:` section."])
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        nodes = nodes_of(text)

        def at(loc: tuple[int | str, ...]) -> str:
            line = line_of(nodes, loc)
            return f"{source}:{line}" if line is not None else source

        problems: list[tuple[int, str]] = []  # (line, problem), told in the file's order
        for error in exc.errors():
            message = error["msg"]
            if error["type"] == "string_pattern_mismatch":
                pattern = error.get("ctx", {}).get("pattern", "")
                message = f"{error['input']!r} is not {_WHAT.get(pattern, pattern)}"
            if error["type"] == "value_error":
                message = str(error["ctx"]["error"])
            if error["type"] == "extra_forbidden" and error["loc"]:
                guess = meant(Policy, error["loc"])
                hint = f"did you mean `{guess}`?" if guess else "see the policy reference"
                message = f"unknown key {str(error['loc'][-1])!r} ({hint})"
            if error["type"] == "value_error" and not error["loc"]:  # _timers_make_sense
                for problem in message.split("; "):
                    place = _loc_in(problem)
                    problems.append((line_of(nodes, place) or 0, f"{at(place)}: {problem}"))
                continue
            where = f"{at(error['loc'])}: {_location(error['loc'])}: {message}"
            problems.append((line_of(nodes, error["loc"]) or 0, where))
        problems.sort(key=lambda each: each[0])  # stable: one line's problems keep their order
        raise PolicyError([problem for _, problem in problems]) from None


def _loc_in(problem: str) -> tuple[int | str, ...]:
    """The place a policy-wide problem names (`tools.3.name: ...`, `channels.C1 with
    tools[2]: ...`): the tool rule when it names one, else its leading dotted path."""
    rule = re.search(r"tools\[(\d+)\]", problem)
    if rule:
        return ("tools", int(rule.group(1)))
    head = problem.split(":", 1)[0].split(" ", 1)[0]
    return tuple(int(p) if p.isdigit() else p for p in head.split("."))


def load_policy(path: Path) -> Policy:
    """Read and validate the policy file at `path`."""
    if not path.is_file():
        raise PolicyError(
            [
                f"policy file {str(path)!r} not found. Set APPROVAL_BOT_POLICY to a YAML file like:"
                f"\n\n{POLICY_EXAMPLE}"
            ]
        )
    return parse_policy(path.read_text(encoding="utf-8"), source=str(path))


def grant_max_of(policy: Policy, rule: CallRule | None) -> int:
    """Seconds an "Always approve" under `rule` lasts in the channel (a grant); 0 when the rule
    allows none (Always is then for the run only, as without `grant_max`). Only a tool rule
    with `grant_max` that one approver may decide alone, with Always allowed, grants."""
    if rule is None or not rule.allow_always or rule.required > 1 or rule.auto is not None:
        return 0
    return rule.grant_max
