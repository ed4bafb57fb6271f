"""Decisions: who may decide a call, recording it exactly once, and what follows (a resume)."""

from __future__ import annotations

import logging
import re
from typing import Any

from bot.service.audit import AuditKind
from bot.service.core import ServiceCore
from bot.service.digest import digest_of
from bot.service.gate import Gate
from bot.service.ports import Actor
from bot.service.replies import Code, ConfirmReject, RejectForm, Reply, already_text, said
from bot.store import keys
from bot.store.records import (
    AlreadyDecided,
    CallRecord,
    Decided,
    DecideResult,
    Gone,
    RunRecord,
    Voted,
)

log = logging.getLogger(__name__)

# `reject:` / `deny:` (any case) reject at once; a reply that merely starts with the word is asked
# about first ("Deny list looks fine to me" is not a rejection).
REJECT_REPLY = re.compile(r"^\s*(?:reject|deny)\s*:\s*(.*)$", re.IGNORECASE | re.DOTALL)
MAYBE_REJECT = re.compile(r"^\s*(?:reject|deny)\b", re.IGNORECASE)
HOLD_REPLY_SECONDS = 3600


class Decisions:
    """Clicks, modal submissions and thread replies on pending calls."""

    def __init__(self, core: ServiceCore, gate: Gate) -> None:
        self.core = core
        self.store = core.store
        self.gate = gate

    async def check(
        self, actor: Actor, approval_id: str, *, approve: bool, audited_as: str
    ) -> tuple[CallRecord, RunRecord] | Reply:
        """The checks of a click (`_check`), for another flow that acts as a decision does (an
        edit is an approval); a refusal is audited with the decision `audited_as`."""
        return await self._check(
            actor, approval_id, approve=approve, always=False, audited_as=audited_as
        )

    async def _check(
        self, actor: Actor, approval_id: str, *, approve: bool, always: bool, audited_as: str = ""
    ) -> tuple[CallRecord, RunRecord] | Reply:
        """Everything that must hold before a decision is recorded; a Reply when it does not."""
        call, stored_run = await self.store.call_and_run(approval_id)  # one round trip
        if call is None:
            return Reply(False, Gone().why)
        run, verdict = await self.gate.authorize(actor, call, stored_run)
        # The checks, in order; who decided is told only to people allowed to decide.
        if run is None or not verdict.allowed:
            reply = Reply(False, verdict.said)
        elif call.decided:
            earlier = AlreadyDecided(call.status, call.decided_by, call.decided_at, call.via)
            reply = Reply(False, already_text(earlier))
        elif always and (not call.allow_always or (approve and call.required > 1)):
            reply = Reply(
                False,
                said(
                    "Always decisions are not allowed for tool {tool}: "
                    "decide this call on its own.",
                    tool=Code(call.tool),
                ),
            )
        elif always and approve and call.edited_sha:
            reply = Reply(
                False,
                "This call was edited: approve the edited call on its own (Always approve would "
                "also cover calls nobody was shown).",
            )
        elif digest_of(call) != call.digest:
            reply = Reply(
                False, "This call changed since it was posted, so no decision can apply to it."
            )
        else:
            return call, run
        decision = ("always_" if always else "") + ("approve" if approve else "reject")
        decision = audited_as or decision
        await self.core.audit(
            AuditKind.REFUSED, call=call, actor=actor, decision=decision, detail=reply.text
        )
        return reply

    async def _settled_alongside(self, actor: Actor, run: RunRecord, call: CallRecord) -> list[str]:
        """The pause's other pending calls an Always decision on `call` also settles: those of
        the same agent's same tool that this person may decide alone under their own rules
        (the same approvers, a quorum of one, Always allowed, and allowed by the policy now).
        Every other call stays pending, on its own card."""
        found = []
        for other in await self.store.pause_calls(call.run_id):
            if (
                other.approval_id == call.approval_id
                or other.decided
                or other.sticky != call.sticky
                or other.pause != call.pause
                or other.required != 1
                or not other.allow_always
                or other.approvers != call.approvers
                or digest_of(other) != other.digest
            ):
                continue
            rule, verdict = await self.gate.judge(actor, run, other)
            if rule is not None and rule.required == 1 and rule.allow_always and verdict.allowed:
                found.append(other.approval_id)
        return found

    async def reject_form(
        self, actor: Actor, approval_id: str, *, always: bool
    ) -> RejectForm | Reply:
        """Check a reject click before its modal opens: the modal only opens for a live call."""
        checked = await self._check(actor, approval_id, approve=False, always=always)
        if isinstance(checked, Reply):
            return checked
        call, _ = checked
        comments = await self.store.comments(approval_id)
        # Only comments by people who may decide the call pre-fill the reason the model gets.
        return RejectForm(call, "\n".join(c["text"] for c in comments if c.get("approver")))

    async def decide(
        self, actor: Actor, approval_id: str, *, approve: bool, always: bool, reason: str = ""
    ) -> Reply:
        """Authorize and record one decision; resume the run if it was the pause's last."""
        checked = await self._check(actor, approval_id, approve=approve, always=always)
        if isinstance(checked, Reply):
            return checked
        call, run = checked
        owner = self.core.new_owner()
        also = await self._settled_alongside(actor, run, call) if always else []
        decision = ("always_" if always else "") + ("approve" if approve else "reject")

        def audited(pipe: Any, result: DecideResult) -> None:
            """The decision's (or vote's) audit entry, sent with the write that follows it."""
            if isinstance(result, Voted):
                kind, detail = AuditKind.APPROVAL_VOTE, f"{result.votes} of {result.required}"
            elif isinstance(result, Decided):
                kind, detail = AuditKind.DECIDED, reason.strip()
            else:
                return
            self.core.audit_in(pipe, kind, call=call, actor=actor, decision=decision, detail=detail)

        result = await self.store.decide(
            approval_id,
            approve=approve,
            always=always,
            team=actor.team_id,
            user=actor.user_id,
            reason=reason.strip(),
            owner=owner,
            also=also,
            after=audited,
        )
        if isinstance(result, AlreadyDecided):
            reply = Reply(False, already_text(result))
        elif isinstance(result, Gone):
            reply = Reply(False, result.why)
        elif isinstance(result, Voted) and result.repeated:
            reply = Reply(
                False,
                f"You already approved this call. It needs {result.required} different "
                f"approvers; {result.votes} so far.",
            )
        else:
            reply = Reply(True)
        if not reply.ok:
            await self.core.audit(
                AuditKind.REFUSED, call=call, actor=actor, decision=decision, detail=reply.text
            )
            return reply
        if isinstance(result, Voted):
            return reply  # audited; the card shows the vote (decide.lua marked it in the outbox)
        assert isinstance(result, Decided)
        for settled in result.settled:  # this call was audited with the decision
            if settled != approval_id:
                via = f"always decision on {approval_id}"
                target = await self.store.get_call(settled)
                await self.core.audit(
                    AuditKind.DECIDED, call=target, actor=actor, decision=decision,
                    detail=reason.strip() or via,
                )  # fmt: skip
        if result.resume:  # the cards and the run message follow from the outbox
            self.core.spawn(
                self.core.enqueue("resume", run.run_id, owner), name=f"resume-{run.run_id}"
            )
        return reply

    async def thread_reply(
        self, actor: Actor, channel: str, thread_ts: str, text: str
    ) -> Reply | ConfirmReject | None:
        """A reply in an approval message's thread: a rejection with a reason, a question to its
        author (does it reject?), or a comment (kept only when an approver wrote it).

        Returns None when the thread is not an approval message's (nothing to do).
        """
        approval_id = await self.store.approval_for_message(channel, thread_ts)
        if approval_id is None:
            return None
        match = REJECT_REPLY.match(text)
        if match:
            return await self.decide(
                actor, approval_id, approve=False, always=False, reason=match.group(1)
            )
        call = await self.store.get_call(approval_id)
        if call is None or call.decided:
            return Reply(True)
        _, verdict = await self.gate.authorize(actor, call)
        if not verdict.allowed:
            return Reply(True)  # a comment by someone who may not decide: not kept
        await self.store.add_comment(approval_id, actor.user_id, text)
        if not MAYBE_REJECT.match(text):
            return Reply(True)
        reply_id = keys.new_approval_id(call.run_id)
        held = {"approval_id": approval_id, "team": actor.team_id, "user": actor.user_id}
        await self.store.hold_reply(reply_id, {**held, "text": text}, HOLD_REPLY_SECONDS)
        return ConfirmReject(reply_id, text)

    async def confirm_reply(self, actor: Actor, reply_id: str, *, reject: bool) -> Reply:
        """Its author answers the question about an ambiguous reply: reject the call with the
        reply as the reason, or keep it as a comment (it already is one)."""
        held = await self.store.held_reply(reply_id)
        if held is None:
            return Reply(False, "This question was already answered or has expired.")
        if (held["team"], held["user"]) != (actor.team_id, actor.user_id):
            return Reply(False, "Only the person who wrote that reply can answer this.")
        if not await self.store.take_reply(reply_id):
            return Reply(False, "This question was already answered or has expired.")
        if not reject:
            return Reply(True, "Kept as a comment; the call was not rejected.")
        return await self.decide(
            actor, held["approval_id"], approve=False, always=False, reason=held["text"]
        )
