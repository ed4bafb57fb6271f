"""Who may start runs and decide tool calls, read from the policy YAML file.

The policy is deliberately closed by default: channels that are not listed accept no runs, and a
run's starter may not decide its own calls unless the file says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

CHANNEL_ID = r"^[CGD][A-Z0-9]+$"
USER_ID = r"^([UW][A-Z0-9]+|\*)$"

UserId = Annotated[str, StringConstraints(pattern=USER_ID)]

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


class Defaults(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    allow_self_approval: bool = False


class ChannelRule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    starters: list[UserId] = Field(default_factory=lambda: ["*"])
    approvers: list[UserId] = Field(min_length=1)
    allow_self_approval: bool | None = None


class Policy(BaseModel):
    """The parsed policy file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    defaults: Defaults = Field(default_factory=Defaults)
    channels: dict[Annotated[str, StringConstraints(pattern=CHANNEL_ID)], ChannelRule] = Field(
        min_length=1
    )


@dataclass(frozen=True)
class Verdict:
    """An authorization answer with the sentence to show the person when it is a no."""

    allowed: bool
    reason: str = ""


ALLOWED = Verdict(True)


def _lists(user: str, members: list[str]) -> bool:
    return "*" in members or user in members


def may_start(policy: Policy, *, user: str, channel: str) -> Verdict:
    """May `user` start a run in `channel`?"""
    rule = policy.channels.get(channel)
    if rule is None:
        return Verdict(
            False,
            "Agent runs are not enabled in this channel. Ask an admin to add it to the "
            "bot's policy file, or use a channel where the bot is set up.",
        )
    if not _lists(user, rule.starters):
        return Verdict(False, "You are not among the people allowed to start agent runs here.")
    return ALLOWED


def may_decide(
    policy: Policy,
    *,
    actor_team: str,
    actor_user: str,
    run_team: str,
    run_starter: str,
    channel: str,
) -> Verdict:
    """May this Slack user decide a call of a run started by `run_starter` in `channel`?"""
    if actor_team != run_team:
        return Verdict(False, "This run belongs to another Slack workspace.")
    rule = policy.channels.get(channel)
    if rule is None:
        return Verdict(
            False, "This channel is no longer in the bot's policy, so nobody may decide."
        )
    if not _lists(actor_user, rule.approvers):
        return Verdict(False, "You are not among the approvers for agent runs in this channel.")
    self_ok = (
        rule.allow_self_approval
        if rule.allow_self_approval is not None
        else policy.defaults.allow_self_approval
    )
    if actor_user == run_starter and not self_ok:
        return Verdict(
            False,
            "You started this run, and self-approval is not allowed here: ask another approver.",
        )
    return ALLOWED


def _location(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc) or "(top level)"


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
                what = "a channel id like C0123ABC" if pattern == CHANNEL_ID else None
                what = what or 'a user id like U0123ABC, or "*"'
                message = f"{error['input']!r} is not {what}"
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
