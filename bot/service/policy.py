"""Who may start runs and decide tool calls, read from the policy YAML file.

The policy is closed by default: channels that are not listed accept no runs, and a run's starter
may not decide its own calls unless the file says so. Per-tool rules (matched by tool name glob,
and optionally agent name glob and channel) refine what a channel allows: their own approvers,
a quorum of distinct approvers, whether Always is offered, or an automatic decision.

The first version of the file (only `defaults` and `channels`) is still valid as it was.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

CHANNEL_ID = r"^[CGD][A-Z0-9]+$"
# A user id (U…/W…), a user group id (S…), a user group handle (@name) or "*" (anyone).
PRINCIPAL = r"^([UW][A-Z0-9]+|S[A-Z0-9]+|@[a-z0-9][a-z0-9._-]*|\*)$"
TEAM_ID = r"^T[A-Z0-9]+$"
ENTERPRISE_ID = r"^E[A-Z0-9]+$"

Principal = Annotated[str, StringConstraints(pattern=PRINCIPAL)]
ChannelId = Annotated[str, StringConstraints(pattern=CHANNEL_ID)]

POLICY_EXAMPLE = """\
defaults:
  allow_self_approval: false   # may the person who started a run decide its calls?
channels:
  C0123ABC:                    # runs may start, and approvals are posted, only in listed channels
    starters: ["*"]            # user ids allowed to start runs here; "*" = anyone
    approvers: [U111, U222]    # user ids allowed to decide the calls of runs started here
"""


class PolicyError(Exception):
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


class Defaults(_Strict):
    allow_self_approval: bool = False
    allow_always: bool = True


class ChannelRule(_Strict):
    starters: list[Principal] = Field(default_factory=lambda: ["*"])
    approvers: list[Principal] = Field(min_length=1)
    agents: list[str] | None = None  # agent names that may be started here; None = all
    allow_self_approval: bool | None = None


class ToolRule(_Strict):
    """A rule for calls whose tool name matches `match` (a glob), optionally narrowed."""

    match: str = Field(min_length=1)
    agent: str | None = None  # glob on the agent name
    channel: ChannelId | None = None
    approvers: list[Principal] | None = Field(default=None, min_length=1)
    required_approvals: int = Field(default=1, ge=1, le=20)
    allow_self_approval: bool | None = None
    allow_always: bool | None = None
    auto: Literal["approve", "reject"] | None = None


class Policy(_Strict):
    """The parsed policy file."""

    workspace: Workspace = Field(default_factory=Workspace)
    defaults: Defaults = Field(default_factory=Defaults)
    channels: dict[ChannelId, ChannelRule] = Field(min_length=1)
    tools: list[ToolRule] = Field(default_factory=list)

    def rule_for(self, *, channel: str, agent: str, tool: str) -> CallRule | None:
        """The rule that governs a call of `tool` by `agent` in `channel` (None: not allowed)."""
        base = self.channels.get(channel)
        if base is None:
            return None
        for index, rule in enumerate(self.tools):
            if not fnmatch.fnmatchcase(tool, rule.match):
                continue
            if rule.agent is not None and not fnmatch.fnmatchcase(agent, rule.agent):
                continue
            if rule.channel is not None and rule.channel != channel:
                continue
            return CallRule(
                approvers=tuple(rule.approvers or base.approvers),
                required=rule.required_approvals,
                allow_self=_first(
                    rule.allow_self_approval,
                    base.allow_self_approval,
                    self.defaults.allow_self_approval,
                ),
                allow_always=_first(rule.allow_always, self.defaults.allow_always),
                auto=rule.auto,
                source=f"tools[{index}] ({rule.match})",
            )
        return CallRule(
            approvers=tuple(base.approvers),
            required=1,
            allow_self=_first(base.allow_self_approval, self.defaults.allow_self_approval),
            allow_always=self.defaults.allow_always,
            auto=None,
            source=f"channels.{channel}",
        )

    def channel_approvers(self, channel: str) -> tuple[str, ...]:
        """Everyone who approves some call in `channel`: the channel's approvers and those of
        every tool rule that applies there (unscoped, or scoped to this channel)."""
        base = self.channels.get(channel)
        if base is None:
            return ()
        found = list(base.approvers)
        for rule in self.tools:
            if rule.channel in (None, channel) and rule.approvers:
                found.extend(p for p in rule.approvers if p not in found)
        return tuple(found)


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


@dataclass(frozen=True)
class Verdict:
    """An authorization answer with the sentence to show the person when it is a no."""

    allowed: bool
    reason: str = ""


ALLOWED = Verdict(True)


def _location(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc) or "(top level)"


_WHAT = {
    CHANNEL_ID: "a channel id like C0123ABC",
    PRINCIPAL: 'a user id (U0123ABC), a user group id (S0123ABC), a group handle (@oncall) or "*"',
    TEAM_ID: "a team id like T0123ABC",
    ENTERPRISE_ID: "an enterprise id like E0123ABC",
}


def parse_policy(text: str, *, source: str = "policy") -> Policy:
    """Parse policy YAML, raising `PolicyError` with every problem found."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PolicyError([f"{source}: not valid YAML: {exc}"]) from None
    if not isinstance(data, dict):
        raise PolicyError([f"{source}: must be a mapping with a `channels:` section."])
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            message = error["msg"]
            if error["type"] == "string_pattern_mismatch":
                pattern = error.get("ctx", {}).get("pattern", "")
                message = f"{error['input']!r} is not {_WHAT.get(pattern, pattern)}"
            problems.append(f"{source}: {_location(error['loc'])}: {message}")
        raise PolicyError(problems) from None


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
