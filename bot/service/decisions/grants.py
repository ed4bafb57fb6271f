"""Grants people choose, look at and take back (#19, item 2).

Always approve on a call whose rule has `grant_max` asks its scope first (`ChooseScope`): this
run only, or this channel for a time the policy bounds, optionally narrowed to the current
values of chosen arguments. The choice comes back from a form, so it is judged again here
against the policy in force (`scope_refusal`): a longer time, or an argument the call does not
have, is refused and nothing is applied. `/agent grants` lists the channel's grants, `/agent
revoke <agent>::<tool>` drops that tool's, and the App Home lists the grants its viewer can see,
each with a Revoke button carrying only the grant's opaque id (`revoke_by_id`). A grant's
grantor may revoke it, and so may the channel's approvers. Making and using grants is part of
deciding (`Decisions`) and of a pause (`Runs`)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from bot.service.audit import AuditKind
from bot.service.core import ServiceCore
from bot.service.policy.gate import subject_of_call
from bot.service.policy.reach import decider_principals
from bot.service.policy.rules import human
from bot.service.ports import Actor
from bot.service.replies import Code, Mention, Part, Reply, Text, said
from bot.store.delivery.home import HomeIndex
from bot.store.grants import Grant, GrantStore, canonical, grant_detail, grant_values
from bot.store.records import CallRecord

DURATIONS = (3600, 4 * 3600, 8 * 3600, 86400, 3 * 86400, 7 * 86400)
"""The lengths a grant may be given (each up to the rule's `grant_max`, which is offered too)."""

NARROW_LIMIT = 10
"""Arguments offered for narrowing (a form's checkboxes hold at most 10)."""

NARROW_VALUE_LIMIT = 500
"""Characters of canonical JSON an argument's value may have to be narrowed on (a grant is a
small record; a longer value is not offered, and refused when asked for)."""


@dataclass(frozen=True)
class GrantScope:
    """What a reviewer chose in the Always approve form (untrusted: judged by the policy)."""

    seconds: int
    """How long the grant lasts in the channel; 0: this run only (no grant)."""
    narrow: tuple[str, ...] = ()
    """Top-level argument names whose current values a later call must have."""


@dataclass(frozen=True)
class ChooseScope:
    """Always approve on a call whose rule grants: nothing is decided until the reviewer
    chooses the scope in a form."""

    call: CallRecord
    """The call (its opaque id goes in the form)."""
    grant_max: int
    """The longest grant the policy in force allows (seconds)."""
    choices: tuple[int, ...]
    """The lengths offered, longest last (each at most `grant_max`)."""
    arguments: tuple[tuple[str, str], ...] = field(default=())
    """(name, current value as canonical JSON) of the arguments a grant may be narrowed on."""


def choices_up_to(grant_max: int) -> tuple[int, ...]:
    """The lengths offered for a rule's `grant_max`: the usual ones below it, and itself."""
    return (*(d for d in DURATIONS if d < grant_max), grant_max) if grant_max > 0 else ()


def narrowable(call: CallRecord) -> tuple[tuple[str, str], ...]:
    """The call's top-level arguments a grant may be narrowed on, with their values."""
    args = subject_of_call(call).get("args")
    if not isinstance(args, dict):
        return ()
    found = [(str(k), canonical(v)) for k, v in args.items()]
    return tuple((k, v) for k, v in found if len(v) <= NARROW_VALUE_LIMIT)[:NARROW_LIMIT]


def scope_refusal(
    call: CallRecord, grant_max: int, scope: GrantScope, source: str
) -> tuple[dict[str, Any], Text | None]:
    """The narrowing `scope` asks for (argument -> value), or why the policy refuses it."""
    if scope.seconds < 0 or scope.seconds > grant_max:
        if grant_max <= 0:
            return {}, said(
                "The policy in force allows no grant for tool {tool} (rule {rule}): choose "
                "this run only. Nothing was approved.", tool=Code(call.tool), rule=Code(source),
            )  # fmt: skip
        return {}, said(
            "A grant for tool {tool} lasts at most {max} (rule {rule}), not {asked}. Nothing "
            "was approved.", tool=Code(call.tool), max=Code(human(grant_max)),
            rule=Code(source), asked=Code(human(scope.seconds)),
        )  # fmt: skip
    if scope.narrow and scope.seconds == 0:
        return {}, said(
            "Narrowing to arguments applies to a grant for the channel; for this run only, "
            "Always approve covers every call of {tool}. Nothing was approved.",
            tool=Code(call.tool),
        )
    offered = dict(narrowable(call))
    narrow: dict[str, Any] = {}
    for name in scope.narrow:
        if name not in offered:
            return {}, said(
                "This call has no argument {name} a grant can be narrowed on. Nothing was "
                "approved.", name=Code(name),
            )  # fmt: skip
        narrow[name] = json.loads(offered[name])
    return narrow, None


def until_text(moment: float) -> str:
    """14:05 UTC (today), else 2026-12-03 14:05 UTC."""
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(moment))


def scope_parts(grant: Grant, tool: str) -> tuple[Part, ...]:
    """E.g. `this channel, 4h, delete_logs where path = "/x"` (for replies and the Home)."""
    parts: list[Part] = [f"this channel, {human(round(grant.until - grant.made))}, ",
                         Code(tool or grant.sticky)]  # fmt: skip
    for number, (name, value) in enumerate(sorted(grant.narrow.items())):
        parts += [" where " if number == 0 else " and ", Code(name), " = ", Code(canonical(value))]
    return tuple(parts)


def grant_note(grant: Grant, *, used: bool) -> str:
    """What a call's card says of the grant it made or was settled by (`CallRecord.granted`)."""
    return json.dumps(
        {"by": grant.user, "made": grant.made, "until": grant.until, "narrow": grant.narrow,
         "used": used},
        sort_keys=True,
    )  # fmt: skip


@dataclass(frozen=True)
class GrantView:
    """A grant as the App Home lists it."""

    grant: Grant
    revocable: bool
    """The viewer is its grantor or an approver of its channel (checked again on Revoke)."""


class Grants:
    """List and revoke grants."""

    def __init__(self, core: ServiceCore) -> None:
        self.core = core
        self.store = GrantStore(core.store.redis)

    def _now(self) -> float:
        return self.core.store.timers.clock.time()

    async def list_grants(self, actor: Actor, channel: str) -> Reply:
        """The channel's grants in force (expired ones are not shown; the next use drops them)."""
        now = self._now()
        found = [g for g in await self.store.in_channel(actor.team_id, channel) if g.until > now]
        if not found:
            return Reply(True, "No grants in this channel: every call waits for a decision.")
        parts: list[Part] = ["Grants in this channel (a call they cover needs no click):"]
        for grant in sorted(found, key=lambda g: g.slot):
            parts += ["\n• ", Code(grant.sticky)]
            for name, value in sorted(grant.narrow.items()):
                parts += [" where ", Code(name), " = ", Code(canonical(value))]
            parts += [" by ", Mention(grant.user), f", until {until_text(grant.until)}"]
        parts.append("\nRevoke one with `/agent revoke <agent>::<tool>`, or from the App Home.")
        return Reply(True, Text(tuple(parts)))

    async def _may_revoke(self, actor: Actor, grant: Grant) -> bool:
        """Its grantor may, and the approvers of its channel under the policy in force."""
        if (actor.team_id, actor.user_id) == (grant.team, grant.user):
            return True
        if actor.team_id != grant.team:
            return False
        policy = self.core.policies.current().policy.for_team(grant.team)
        base = policy.channels.get(grant.channel)
        if base is None:
            return False
        verdict = await self.core.authorizer.is_among(actor, base.approvers, grant.channel)
        return verdict.allowed

    async def _refuse(self, actor: Actor) -> Reply:
        reply = Reply(
            False, "Only the person who made a grant, or an approver of its channel, may "
            "revoke it.",
        )  # fmt: skip
        await self.core.audit(AuditKind.REFUSED, actor=actor, decision="revoke", detail=reply.text)
        return reply

    async def _drop(self, actor: Actor, grant: Grant) -> None:
        if await self.store.drop(grant):
            await self.core.audit(
                AuditKind.GRANT_REVOKED, actor=actor, decision="revoke",
                detail=grant_detail(grant), text=grant_values(grant),
            )  # fmt: skip

    async def revoke_grant(self, actor: Actor, channel: str, sticky: str) -> Reply:
        """Drop the channel's grants for `sticky` (`<agent>::<tool>`, every narrowing of it):
        their grantor may, and so may the channel's approvers under the policy in force."""
        key = sticky.strip().strip("`")
        found = await self.store.for_tool(actor.team_id, channel, key)
        if not found:
            return Reply(
                False, said("There is no grant for {key} in this channel.", key=Code(sticky))
            )
        allowed = [g for g in found if await self._may_revoke(actor, g)]
        if not allowed:
            return await self._refuse(actor)
        for grant in allowed:
            await self._drop(actor, grant)
        kept = len(found) - len(allowed)
        rest = f" ({kept} made by others stay: only they or the channel's approvers may revoke)"
        return Reply(
            True, said("Revoked the grant for {key}: its calls wait for a decision again."
                       + (rest if kept else ""), key=Code(key)),
        )  # fmt: skip

    async def revoke_by_id(self, actor: Actor, grant_id: str) -> Reply:
        """The App Home's Revoke: the button carries only the grant's opaque id; who may revoke
        it is judged here. The Homes of the workspace's viewers are refreshed."""
        grant = await self.store.by_id(grant_id)
        if grant is None or grant.team != actor.team_id:
            return Reply(False, "This grant has already ended or been revoked.")
        if not await self._may_revoke(actor, grant):
            return await self._refuse(actor)
        await self._drop(actor, grant)
        index = HomeIndex(self.core.store.redis)
        await index.touch(actor.team_id, await index.viewers(actor.team_id), 0)
        return Reply(
            True, said("Revoked the grant for {key}: its calls wait for a decision again.",
                       key=Code(grant.tool or grant.sticky)),
        )  # fmt: skip

    async def visible(self, actor: Actor) -> list[GrantView]:
        """The grants in force the viewer can see on their App Home: those of the channels
        where they may decide something (as a list reads them), and those they made."""
        policy = self.core.policies.current().policy.for_team(actor.team_id)
        now = self._now()
        grants = [
            g for g in await self.store.in_channels(actor.team_id, sorted(policy.channels))
            if g.until > now
        ]  # fmt: skip
        shown: list[GrantView] = []
        seen: dict[str, bool] = {}
        for grant in sorted(grants, key=lambda g: (g.channel, g.until)):
            mine = grant.user == actor.user_id
            if grant.channel not in seen:
                principals = decider_principals(policy, grant.channel)
                seen[grant.channel] = (
                    await self.core.authorizer.is_among(actor, principals, grant.channel)
                ).allowed
            if mine or seen[grant.channel]:
                shown.append(GrantView(grant, await self._may_revoke(actor, grant)))
        return shown
