"""Authorization: may this signed-in Slack user start this run, or decide this call?

User groups are resolved through the chat surface's directory (cached briefly there). When a group
cannot be resolved the answer is "not allowed", with the reason, never "allowed".

`"*"` among a channel's approvers means anyone in that channel (its members, from the channel
directory), public or private: the people who see the card. Every surface that decides, cancels
or shows a run asks it the same way, so a private channel's runs never reach a non-member.
Among followers (who may continue a run in its thread) `"*"` is the channel's members too.
Among starters `"*"` stays anyone of the served workspace: a slash command comes from a
conversation its author is in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bot.service.policy.rules import ALLOWED, CallRule, Policy, Verdict
from bot.service.ports import Actor, ChannelDirectory, GroupDirectory, GroupLookupError
from bot.service.replies import Code, Mention, Part, Plain, joined, said


def principal_parts(principals: tuple[str, ...] | list[str]) -> tuple[Part, ...]:
    """Principals as people read them: users as people, groups by handle or id, "anyone"."""
    parts: list[Part] = []
    for p in principals:
        if parts:
            parts.append(", ")
        if p == "*":
            parts.append("anyone in the channel")
        else:
            parts.append(Mention(p) if p[0] in "UW" else Code(p))
    return tuple(parts)


@dataclass(frozen=True)
class Installation:
    """Where the bot is installed, as Slack says for its token (`auth.test`)."""

    team_id: str
    enterprise_id: str = ""
    org_wide: bool = False  # installed on a whole Enterprise Grid org, not one workspace


NOT_SERVED = "This workspace is not served by this bot."
# Installed through OAuth, the policy must name whom it serves: anyone can install a
# distributed app, and one that named nobody served every workspace that did (a Slack Connect
# partner too, by the host's rules, in the channels they share).
NOT_NAMED = (
    "This bot is installed in many workspaces and its policy names none it serves (a "
    "`workspaces:` section, or `workspace:`), so it serves nobody. Ask whoever runs it."
)
UNKNOWN_INSTALLATION = (
    "The bot has not yet confirmed with Slack which workspace it serves, so it cannot let "
    "anyone in. Try again in a moment."
)


class Authorizer:
    """Applies the policy to an actor, resolving user groups when it must.

    The served workspace is the policy's `workspace:` when it names one; otherwise the one the
    bot is installed in (`installation`, from `auth.test`), so that people of other
    organizations in a shared (Slack Connect) channel are never let in by a "*".

    `channels`: who is in a channel, for approvers "*"; without one (tools and tests with no
    Slack), "*" is anyone of the served workspace.

    `installed`: the bot is distributed (OAuth): it serves the workspaces the policy names (its
    sections, or its `workspace:`) and nobody else. Anyone can install a distributed app, so
    "installed" is no reason to serve: a policy that names none serves nobody (`NOT_NAMED`)."""

    def __init__(
        self,
        groups: GroupDirectory,
        installation: Installation | None = None,
        channels: ChannelDirectory | None = None,
        *,
        installed: bool = False,
    ) -> None:
        self.groups = groups
        self.installation = installation
        self.channels = channels
        self.installed = installed

    def served(self, policy: Policy, actor: Actor) -> Verdict:
        if policy.workspaces:  # one section per team: the actor's team must have one
            if actor.team_id not in policy.workspaces:
                return Verdict(False, NOT_SERVED)
            policy = policy.for_team(actor.team_id)
        ws = policy.workspace
        if ws.team_id is not None or ws.enterprise_id is not None:
            if ws.team_id is not None and actor.team_id != ws.team_id:
                return Verdict(False, NOT_SERVED)
            if ws.enterprise_id is not None and actor.enterprise_id != ws.enterprise_id:
                return Verdict(False, "This organization is not served by this bot.")
            return ALLOWED
        if self.installed:
            return Verdict(False, NOT_NAMED)
        home = self.installation
        if home is None:
            return Verdict(False, UNKNOWN_INSTALLATION)
        if home.org_wide:
            if not home.enterprise_id or actor.enterprise_id != home.enterprise_id:
                return Verdict(False, "This organization is not served by this bot.")
            return ALLOWED
        if actor.team_id != home.team_id:
            return Verdict(False, NOT_SERVED)
        if home.enterprise_id and actor.enterprise_id not in ("", home.enterprise_id):
            return Verdict(False, "This organization is not served by this bot.")
        return ALLOWED

    async def is_among(
        self, actor: Actor, principals: tuple[str, ...] | list[str], channel: str = ""
    ) -> Verdict:
        """Is the actor one of `principals`? Unresolvable groups never grant anything. With
        `channel`, "*" is its members (else anyone)."""
        if actor.user_id in principals:
            return ALLOWED
        failures: list[tuple[Part, ...]] = []
        if "*" in principals:
            if not channel or self.channels is None:
                return ALLOWED
            try:
                if actor.user_id in await self.channels.members(actor.team_id, channel):
                    return ALLOWED
            except GroupLookupError as exc:
                failures.append(("the channel (", Plain(str(exc)), ")"))
        for ref in principals:
            if ref[0] not in "S@":
                continue
            try:
                members = await self.groups.members(actor.team_id, ref)
            except GroupLookupError as exc:
                failures.append((Code(ref), " (", Plain(str(exc)), ")"))
                continue
            if actor.user_id in members:
                return ALLOWED
        if failures:
            return Verdict(
                False,
                said(
                    "The bot could not check your membership of {groups}, so it cannot count "
                    "you as allowed. Try again later or ask an admin.",
                    groups=joined(failures),
                ),
            )
        return Verdict(False, "")

    async def may_start(self, policy: Policy, actor: Actor, channel: str, agent: str) -> Verdict:
        served = self.served(policy, actor)
        if not served.allowed:
            return served
        rule = policy.channels.get(channel)
        if rule is None:
            return Verdict(
                False,
                "Agent runs are not enabled in this channel. Ask an admin to add it to the "
                "bot's policy file, or use a channel where the bot is set up.",
            )
        if rule.agents is not None and agent not in rule.agents:
            return Verdict(
                False,
                said(
                    "The agent {agent} may not be started in this channel (allowed: {allowed}).",
                    agent=Code(agent),
                    allowed=joined(Code(a) for a in rule.agents) or "none",
                ),
            )
        member = await self.is_among(actor, rule.starters)
        if not member.allowed:
            return Verdict(
                False,
                member.reason or "You are not among the people allowed to start agent runs here.",
            )
        return ALLOWED

    async def may_follow(
        self, policy: Policy, actor: Actor, *, run_team: str, starter: str, channel: str,
        agent: str,
    ) -> Verdict:  # fmt: skip
        """May the actor continue a run (a reply in its thread)? Its starter may, and the
        channel's `followers` (by default its starters; `"*"` is the channel's members, as
        for approvers), while the channel still runs agents and still allows the run's
        agent."""
        served = self.served(policy, actor)
        if not served.allowed:
            return served
        if actor.team_id != run_team:
            return Verdict(False, "This run belongs to another Slack workspace.")
        rule = policy.channels.get(channel)
        if rule is None:
            return Verdict(False, "Agent runs are no longer enabled in this channel.")
        if rule.agents is not None and agent not in rule.agents:
            return Verdict(
                False,
                said("The agent {agent} may no longer run in this channel.", agent=Code(agent)),
            )
        if actor.user_id == starter:
            return ALLOWED
        followers = rule.followers if rule.followers is not None else rule.starters
        member = await self.is_among(actor, followers, channel)
        if not member.allowed:
            who = (
                "the members of this channel" if "*" in followers else "the people the policy names"
            )
            return Verdict(
                False,
                member.said
                or said(
                    "Only {starter} (who started this run) and {who} may continue it.",
                    starter=Mention(starter),
                    who=who,
                ),
            )
        return ALLOWED

    async def may_decide(
        self,
        policy: Policy,
        actor: Actor,
        *,
        run_team: str,
        channel: str,
        tool: str,
        rule: CallRule | None,
    ) -> Verdict:
        """Is the actor among those who decide a call governed by `rule` (from the current
        policy)? Self-approval is judged with the rest by `bot.service.judgement`."""
        served = self.served(policy, actor)
        if not served.allowed:
            return served
        if actor.team_id != run_team:
            return Verdict(False, "This run belongs to another Slack workspace.")
        if rule is None:
            return Verdict(
                False, "This channel is no longer in the bot's policy, so nobody may decide."
            )
        member = await self.is_among(actor, rule.approvers, channel)
        if not member.allowed:
            return Verdict(
                False,
                member.said
                or said(
                    "You are not among the approvers of tool {tool} in this channel "
                    "(approvers: {approvers}).",
                    tool=Code(tool),
                    approvers=principal_parts(rule.approvers),
                ),
            )
        return ALLOWED

    async def may_manage(
        self,
        policy: Policy,
        actor: Actor,
        *,
        run_team: str,
        run_starter: str,
        channel: str,
        calls: Sequence[tuple[str, str, Mapping[str, Any]]] = (),
    ) -> Verdict:
        """May the actor cancel a run, or see its status? Its starter may; so may the
        channel's approvers and those of the rules governing the run's `calls` ((agent, tool)
        (agent, tool, subject)
        of its latest pause: `Policy.run_approvers`), never a rule of another agent's or
        another tool's calls."""
        served = self.served(policy, actor)
        if not served.allowed:
            return served
        if actor.team_id != run_team:
            return Verdict(False, "This run belongs to another Slack workspace.")
        if actor.user_id == run_starter:
            return ALLOWED
        member = await self.is_among(actor, policy.run_approvers(channel, calls), channel)
        if not member.allowed:
            return Verdict(
                False,
                member.reason
                or "Only the person who started this run, or an approver of its channel or of "
                "the calls it waits for, may do this.",
            )
        return ALLOWED
