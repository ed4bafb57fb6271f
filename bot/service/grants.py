"""Grants people look at and take back: `/agent grants` lists the channel's grants, `/agent
revoke <agent>::<tool>` drops one (its grantor, or an approver of the channel, may). Making and
using grants is part of deciding (`Decisions`) and of a pause (`Runs`)."""

from __future__ import annotations

import time

from bot.service.audit import AuditKind
from bot.service.core import ServiceCore
from bot.service.ports import Actor
from bot.service.replies import Code, Mention, Part, Reply, Text, said
from bot.store.grants import Grant, GrantStore, grant_detail


def _until(grant: Grant) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(grant.until))


class Grants:
    """List and revoke the grants of a channel."""

    def __init__(self, core: ServiceCore) -> None:
        self.core = core
        self.store = GrantStore(core.store.redis)

    async def list_grants(self, actor: Actor, channel: str) -> Reply:
        """The channel's grants in force (expired ones are not shown; the next use drops them)."""
        now = self.core.store.timers.clock.time()
        found = [g for g in await self.store.in_channel(actor.team_id, channel) if g.until > now]
        if not found:
            return Reply(True, "No grants in this channel: every call waits for a decision.")
        parts: list[Part] = ["Grants in this channel (a call they cover needs no click):"]
        for grant in sorted(found, key=lambda g: g.sticky):
            parts += ["\n• ", Code(grant.sticky), " by ", Mention(grant.user),
                      f", until {_until(grant)}"]  # fmt: skip
        parts.append("\nRevoke one with `/agent revoke <agent>::<tool>`.")
        return Reply(True, Text(tuple(parts)))

    async def revoke_grant(self, actor: Actor, channel: str, sticky: str) -> Reply:
        """Drop the channel's grant for `sticky` (`<agent>::<tool>`): its grantor may, and so
        may the channel's approvers under the policy in force."""
        grant = await self.store.get(actor.team_id, channel, sticky.strip().strip("`"))
        if grant is None:
            return Reply(
                False, said("There is no grant for {key} in this channel.", key=Code(sticky))
            )
        if actor.user_id != grant.user:
            policy = self.core.policies.current().policy
            base = policy.channels.get(channel)
            member = (
                await self.core.authorizer.is_among(actor, base.approvers, channel)
                if base is not None
                else None
            )
            if member is None or not member.allowed:
                reply = Reply(
                    False, "Only the person who made a grant, or an approver of this channel, "
                    "may revoke it.",
                )  # fmt: skip
                await self.core.audit(
                    AuditKind.REFUSED, actor=actor, decision="revoke", detail=reply.text
                )
                return reply
        if await self.store.drop(grant):
            await self.core.audit(
                AuditKind.GRANT_REVOKED, actor=actor, decision="revoke",
                detail=grant_detail(grant),
            )  # fmt: skip
        return Reply(
            True, said("Revoked the grant for {key}: its calls wait for a decision again.",
                       key=Code(grant.sticky)),
        )  # fmt: skip
