"""Decisions: who may decide a call, recording it exactly once, and what follows (a resume)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from bot.engine.questions import QUESTION_KIND
from bot.outage import log_failure
from bot.service.audit import AuditKind
from bot.service.core import ServiceCore
from bot.service.decisions.grants import (
    ChooseScope,
    GrantScope,
    choices_up_to,
    grant_note,
    narrowable,
)
from bot.service.judgement import Allowed, Attempt, Judgement, Refused, TypeFirst, Way
from bot.service.policy.rules import CallRule, grant_max_of
from bot.service.ports import Actor
from bot.service.replies import (
    ConfirmReject,
    RejectForm,
    Reply,
    TypeToConfirm,
    already_text,
    reason_too_long,
)
from bot.store import keys
from bot.store.grants import Grant, GrantStore, grant_detail, grant_values
from bot.store.parts.calls import Then
from bot.store.records import (
    BY_BATCH,
    BY_REACTION,
    AlreadyDecided,
    CallRecord,
    Decided,
    DecideResult,
    Gone,
    Rerouted,
    RunRecord,
    Voted,
)
from bot.store.scripts import mark

log = logging.getLogger(__name__)

# `reject:` / `deny:` (any case) reject at once; a reply that merely starts with the word is asked
# about first ("Deny list looks fine to me" is not a rejection).
REJECT_REPLY = re.compile(r"^\s*(?:reject|deny)\s*:\s*(.*)$", re.IGNORECASE | re.DOTALL)
MAYBE_REJECT = re.compile(r"^\s*(?:reject|deny)\b", re.IGNORECASE)
HOLD_REPLY_SECONDS = 3600

# Records a person's answer to a question (`Questions.answer`): (actor, approval id, text).
Answer = Callable[[Actor, str, str], Awaitable[Reply]]
# Records the attention behind each decision or vote a person made, in the round trip of its
# audit entry (`bot.service.oversight.attention`): (pipeline, actor, call, decision, counted: False
# for a batch's calls after its first) -> what to do with the replies.
Attended = Callable[[Any, Actor, CallRecord, str, bool], Then]

# What a decision made another way than a click is recorded as (`CallRecord.via`, and its audit
# entry's detail: "by batch", "by reaction"): the card says so.
VIA = {Way.BATCH: BY_BATCH, Way.REACTION: BY_REACTION}

# A reaction on a card (`APPROVAL_BOT_REACTIONS`): what it decides (approve: True).
REACTIONS = {"white_check_mark": True, "x": False}

# Who reacted, as Slack's directory says: their own team, and whether they are a bot (or an
# app); None when it could not say (`Decisions.reaction`).
WhoReacted = Callable[[str], Awaitable[tuple[str, bool] | None]]
UNCHECKED_REACTION = (
    "The bot could not look up who reacted (reactions need the users:read scope too), so the "
    "reaction decides nothing: use the card's buttons."
)
SHARED_REACTION = (
    "This channel is shared with another organization, and a reaction does not say which "
    "organization its author is in, so it decides nothing here: use the card's buttons."
)

TYPE_FIRST = (
    "This call needs typed confirmation: click Approve on its card and type the value it asks for."
)


# A click's call and run, as `Calls.call_and_run` reads them (`Decisions.read_ahead`).
CallAndRun = tuple[CallRecord | None, RunRecord | None]


def _retrieved(read: asyncio.Future[CallAndRun]) -> None:
    """A read ahead whose decision never came (shutting down): its failure is not logged as
    never retrieved."""
    if not read.cancelled():
        read.exception()


def _expected(call: CallRecord, run: RunRecord, always: bool) -> Decided | None:
    """What the decision on `call` is when it is recorded, if that is known before: a call that
    needs one approval, alone in its pause, decided without Always, settles the pause (its
    run resumes). Its writes then ride on the decision's round trip (`Calls.decide`)."""
    if always or call.required > 1 or run.call_ids() != [call.approval_id]:
        return None
    return Decided(settled=[call.approval_id], resume=True, undecided=0)


class Decisions:
    """Clicks, modal submissions and thread replies on pending calls."""

    def __init__(
        self,
        core: ServiceCore,
        judgement: Judgement,
        answer: Answer | None = None,
        attended: Attended | None = None,
        reactions: bool = False,
        overruled: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self.core = core
        self.store = core.store
        self.judgement = judgement
        self.answer = answer  # a reply on a question's card is an answer (questions.py)
        self.attended = attended
        self.reactions = reactions  # reactions on a card decide it (off by default)
        # The runs' (`Runs.overruled`): a call the rule in force rejects by itself, refused an
        # approval, is rejected by that rule (`Refused.overruled`).
        self.overruled = overruled

    async def check(
        self, actor: Actor, approval_id: str, attempt: Attempt, *, audited_as: str
    ) -> tuple[CallRecord, RunRecord] | Reply:
        """The checks of a decision (`_check`), for another flow that acts as one (an edit is
        an approval); a refusal is audited with the decision `audited_as`."""
        checked = await self._check(actor, approval_id, attempt, audited_as=audited_as)
        if isinstance(checked, TypeToConfirm):  # (only a click is asked to type)
            return Reply(False, TYPE_FIRST)
        if isinstance(checked, Reply):
            return checked
        return checked[0], checked[1]

    async def refused(
        self, actor: Actor, call: CallRecord, attempt: Attempt, judged: Refused,
        audited_as: str = "",
    ) -> Reply:  # fmt: skip
        """Audit a refusal of `attempt` (redrawing a card drawn before an edit) and say it. An
        approval refused because the rule in force rejects the call by itself has the call
        rejected by that rule (the policy's automatic decision): the run goes on."""
        if judged.stale:
            await self.store.redraw_card(call.approval_id)
        always = attempt.way in (Way.ALWAYS, Way.GRANT)
        decision = ("always_" if always else "") + ("approve" if attempt.approve else "reject")
        reply = Reply(False, judged.said)
        await self.core.audit(
            AuditKind.REFUSED, call=call, actor=actor, decision=audited_as or decision,
            detail="typed confirmation refused" if judged.quotes else reply.text,
            text=reply.text if judged.quotes else "",
        )  # fmt: skip
        if judged.overruled and self.overruled is not None:
            try:
                await self.overruled(call.run_id)
            except Exception:  # (still refused: the next attempt, or a reload's pass, tries again)
                log_failure(log, "could not reject call %s by the policy in force",
                            call.approval_id)  # fmt: skip
        return reply

    def read_ahead(self, approval_id: str) -> asyncio.Future[CallAndRun]:
        """A click's read of its call and run (one round trip, the first step of `approve`),
        sent now in a task of its own; `approve(read=...)` judges what it read. A click that
        comes while nothing else is in flight has it sent while its ack is written, and its
        decision waits for the lull (acks first) with the read already answered (#32). Only a
        read: what is recorded is still decided by decide.lua's atomic, owner-checked
        transition, as when the read is slow."""
        read = asyncio.ensure_future(self.store.call_and_run(approval_id))
        read.add_done_callback(_retrieved)
        return read

    async def _check(
        self, actor: Actor, approval_id: str, attempt: Attempt, *, audited_as: str = "",
        read: Awaitable[CallAndRun] | None = None,
    ) -> tuple[CallRecord, RunRecord, Allowed] | Reply | TypeToConfirm:  # fmt: skip
        """Everything that must hold before a decision is recorded (`Judgement.settle`): the
        judgement's Allowed, a Reply when it refuses (audited), a TypeToConfirm when the
        approval needs a typed value that was not given. `read`: the call and run read ahead
        (`read_ahead`), else read now."""
        if read is None:
            read = self.store.call_and_run(approval_id)  # one round trip
        call, run = await read
        if call is None:
            return Reply(False, Gone().why)
        if run is None:
            judged: Allowed | Refused | TypeFirst = Refused("This run no longer exists.")
        else:
            judged = await self.judgement.settle(actor, run, call, attempt)
        if isinstance(judged, TypeFirst):
            return TypeToConfirm(call, judged.expected, judged.what)
        if isinstance(judged, Refused) or run is None:
            assert isinstance(judged, Refused)
            return await self.refused(actor, call, attempt, judged, audited_as)
        return await self.quorum_in_force(call, judged.rule), run, judged

    async def quorum_in_force(self, call: CallRecord, rule: CallRule | None) -> CallRecord:
        """`call` under the quorum of the policy in force when that asks more approvals than
        the call was posted with: the stored call's quorum is raised (only while it is
        pending) before a decision or vote is recorded, so the atomic transitions that count
        the votes (decide.lua, edit.lua) count to it. A quorum lowered since is not applied:
        a call keeps the stricter of the two."""
        if rule is None or rule.required <= call.required:
            return call
        await self.store.set_pending_call_fields(call.approval_id, {"required": str(rule.required)})
        return dataclasses.replace(call, required=rule.required)

    async def _settled_alongside(
        self, actor: Actor, run: RunRecord, call: CallRecord, *, approve: bool
    ) -> list[tuple[str, str]]:
        """The pause's other pending calls an Always decision on `call` also settles: those of
        the same agent's same tool, offered with the same approvers, that this person may
        settle by Always too (`Judgement.settle`, each under its own rule in force), each with
        the generation of its routing that judgement read (decide.lua leaves a call routed
        anew since pending). Every other call stays pending, on its own card."""
        found = []
        for other in await self.store.pause_calls(call.run_id):
            if (
                other.approval_id == call.approval_id
                or other.decided
                or other.sticky != call.sticky
                or other.pause != call.pause
                or other.approvers != call.approvers
            ):
                continue
            judged = await self.judgement.settle(actor, run, other, Attempt(Way.ALWAYS, approve))
            if isinstance(judged, Allowed):
                found.append((other.approval_id, str(other.routed)))
        return found

    async def reject_form(
        self, actor: Actor, approval_id: str, *, always: bool
    ) -> RejectForm | Reply:
        """Check a reject click before its modal opens: the modal only opens for a live call."""
        attempt = Attempt(Way.ALWAYS if always else Way.CLICK, approve=False)
        checked = await self._check(actor, approval_id, attempt)
        if isinstance(checked, Reply | TypeToConfirm):  # (a rejection types nothing)
            return checked if isinstance(checked, Reply) else Reply(False, TYPE_FIRST)
        call = checked[0]
        comments = await self.store.comments(approval_id)
        # Only comments by people who may decide the call pre-fill the reason the model gets.
        return RejectForm(call, "\n".join(c["text"] for c in comments if c.get("approver")))

    async def approve(
        self, actor: Actor, approval_id: str, *, always: bool, version: str = "",
        read: Awaitable[CallAndRun] | None = None,
    ) -> Reply | TypeToConfirm | ChooseScope:  # fmt: skip
        """An Approve (or Always approve) click: decided like `decide`, unless the rule in
        force asks for a typed value first, or (Always approve under `grant_max`) for the
        grant's scope: then nothing is decided, a form asks for it. `version`: the version
        token the clicked card carries (`CallRecord.version`): a card drawn before an edit of
        the call approves nothing. `read`: `read_ahead(approval_id)`, when it was sent."""
        attempt = Attempt(Way.ALWAYS if always else Way.CLICK, version=version)
        for rejudge in (True, False):
            checked = await self._check(actor, approval_id, attempt, read=read)
            if isinstance(checked, Reply | TypeToConfirm):
                return checked
            call, run, allowed = checked
            if always:
                lasts = grant_max_of(self.judgement.policy_for(run), allowed.rule)
                if lasts > 0:
                    return ChooseScope(call, lasts, choices_up_to(lasts), narrowable(call))
            recorded = await self._record(
                actor, call, run, approve=True, always=always, reason="", version=version,
                rejudge=rejudge,
            )  # fmt: skip
            if recorded is not None:
                return recorded
            read = None  # routed anew since the read: judged again on a fresh read, once
        raise AssertionError("unreachable: the second judgement's decision is recorded or not")

    async def decide(
        self,
        actor: Actor,
        approval_id: str,
        *,
        approve: bool,
        always: bool,
        reason: str = "",
        typed: str | None = None,
        scope: GrantScope | None = None,
        way: Way | None = None,
        version: str = "",
        counted: bool = True,
    ) -> Reply:
        """Authorize and record one decision; resume the run if it was the pause's last.
        `typed`: the value typed in the confirmation modal (rules with `confirm: type`).
        `scope`: what the Always approve form chose (judged against the policy in force).
        `way`: how it was asked (by default a click, Always, or a grant with a scope; a batch
        or a reaction is recorded as such: `VIA`). `version`: the version token of what the
        person saw ("": not checked). `counted`: False for a batch's calls after its first
        (one act of review: they join no streak of quick approvals,
        `bot.service.oversight.attention`)."""
        too_long = reason_too_long(reason)
        if too_long is not None:  # before anything is judged or recorded: nothing half-done
            return Reply(False, too_long)
        if way is None:
            grants = always and approve and scope is not None
            way = Way.GRANT if grants else Way.ALWAYS if always else Way.CLICK
        attempt = Attempt(way, approve, typed=typed, scope=scope, version=version)
        for rejudge in (True, False):
            checked = await self._check(actor, approval_id, attempt)
            if isinstance(checked, TypeToConfirm):
                return Reply(False, TYPE_FIRST)
            if isinstance(checked, Reply):
                return checked
            call, run, allowed = checked
            recorded = await self._record(
                actor, call, run, approve=approve, always=always, reason=reason,
                grant=allowed.grant, version=version, via=VIA.get(way, ""), counted=counted,
                rejudge=rejudge,
            )  # fmt: skip
            if recorded is not None:
                return recorded  # (else routed anew since the read: judged again, once)
        raise AssertionError("unreachable: the second judgement's decision is recorded or not")

    async def _record(
        self, actor: Actor, call: CallRecord, run: RunRecord, *, approve: bool, always: bool,
        reason: str, version: str = "", grant: Grant | None = None, via: str = "",
        counted: bool = True, rejudge: bool = False,
    ) -> Reply | None:  # fmt: skip
        """Record a checked decision exactly once (decide.lua), audit it, resume if it was the
        pause's last; with `grant`, the grant is recorded with it (and on the call's card).
        `via`: a batch's or a reaction's decision (on the call, its card and its audit entry).
        The judgement relied on the call's routing as `call` was read (`CallRecord.routed`):
        when it moved since (the advice, an escalation), decide.lua decides nothing and none
        of what rides on it is written; with `rejudge`, None then asks the caller to judge
        again on a fresh read (else the person is told to decide again, audited)."""
        approval_id = call.approval_id
        owner = self.core.new_owner()
        # A grant narrowed to some arguments' values must not become the run's Always for
        # every call of the tool: the call is approved alone, the grant covers what it says.
        run_always = always and not (grant is not None and grant.narrow)
        also = (
            await self._settled_alongside(actor, run, call, approve=approve) if run_always else []
        )
        decision = ("always_" if always else "") + ("approve" if approve else "reject")

        def audited(pipe: Any, result: DecideResult) -> Then | None:
            """The decision's (or vote's) audit entry, sent with the write that follows it, and
            (first in that round trip) what records the attention it got."""
            if isinstance(result, Voted):
                kind, detail = AuditKind.APPROVAL_VOTE, f"{result.votes} of {result.required}"
            elif isinstance(result, Decided):
                kind, detail = AuditKind.DECIDED, ""
            else:
                return None
            if via:  # "by batch", "by reaction"
                detail = ", ".join(d for d in (detail, f"by {via}") if d)
            then = self.attended(pipe, actor, call, decision, counted) if self.attended else None
            # (Their metrics move once the writes are made: they may ride on the decision's
            # own round trip, made only if it is recorded; `Calls.decide`.)
            self.core.audit_in(
                pipe, kind, call=call, actor=actor, decision=decision, detail=detail,
                text=reason.strip(), tally=False,  # the decider's reason: free text
            )  # fmt: skip
            granted = grant is not None and isinstance(result, Decided)
            if grant is not None and granted:
                GrantStore.put_in(pipe, grant)
                pipe.hset(keys.call_key(approval_id), "granted", grant_note(grant, used=False))
                card = str(keys.Target("card", approval_id))  # shown again, with the grant
                mark(pipe, call.run_id, card, self.store.retention)
                self.core.audit_in(
                    pipe, AuditKind.GRANT_MADE, call=call, actor=actor, decision="approve",
                    detail=grant_detail(grant), text=grant_values(grant), tally=False,
                )  # fmt: skip

            def written(replies: Sequence[Any]) -> None:
                kind.tally(decision, call)
                if granted:
                    AuditKind.GRANT_MADE.tally("approve", call)
                if then is not None:
                    then(replies)

            return written

        expected = _expected(call, run, run_always)
        # The resume this decision may make goes straight to this process's own worker when
        # it has a slot free: enqueued, read for it and taken in the decision's round trip.
        worker = self.core.worker if expected is not None else None
        consumer = worker.reserve() if worker is not None else None
        handoff = self.store.hand_off(consumer, self.core.new_owner()) if consumer else None
        try:
            result = await self.store.decide(
                approval_id,
                approve=approve,
                always=run_always,
                team=actor.team_id,
                user=actor.user_id,
                reason=reason.strip(),
                owner=owner,
                also=also,
                via=via,
                version=version,
                routed=str(call.routed),
                after=audited,
                enqueue=True,
                pause=run.calls,
                expected=expected,
                handoff=handoff,
            )
        finally:
            if worker is not None and consumer is not None:  # (nothing taken: the slot back)
                worker.adopt(handoff.taken if handoff is not None else [])
        if isinstance(result, Rerouted) and rejudge:
            log.info("%s was routed anew after its judgement's read: judged again", approval_id)
            return None
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
                    detail=via, text=reason.strip(),
                )  # fmt: skip
        # A resume was enqueued with the decision's writes; the cards and the run message
        # follow from the outbox.
        return reply

    async def reaction(
        self, actor: Actor, channel: str, ts: str, emoji: str, who: WhoReacted | None = None
    ) -> Reply | None:
        """A reaction added to a message: on a card whose call waits, with reactions on,
        :white_check_mark: approves and :x: rejects (without a reason) that call, as a click of
        the person who reacted would (`Way.REACTION`: judged alike, audited "by reaction"; a
        call that needs a typed value is refused). None: nothing to do (reactions off, another
        emoji, not a card, a call already settled: a reaction there is only a reaction).

        Slack's event says neither the reactor's team nor whether they are a bot (a click
        comes from a person, with their team): `who` asks the directory, once the reaction
        would decide something. A bot's reaction (another app's, a member of the channel, so
        among approvers "*") is only a reaction; the team is the directory's."""
        approve = REACTIONS.get(emoji.partition("::")[0]) if self.reactions else None
        if approve is None:
            return None
        approval_id = await self.store.approval_for_message(channel, ts)
        if approval_id is None:
            return None
        call = await self.store.get_call(approval_id)
        if call is None or call.decided:
            return None
        if who is not None:
            found = await who(actor.user_id)
            if found is None:
                return Reply(False, UNCHECKED_REACTION)
            team, bot = found
            if bot:
                return None
            actor = Actor(team, actor.user_id, actor.enterprise_id)
        if not actor.team_id:  # (a shared channel's: whose organization is not known)
            return Reply(False, SHARED_REACTION)
        return await self.decide(
            actor, approval_id, approve=approve, always=False, way=Way.REACTION
        )

    async def thread_reply(
        self, actor: Actor, channel: str, thread_ts: str, text: str, *, ts: str = ""
    ) -> Reply | ConfirmReject | None:
        """A reply in an approval message's thread: a rejection with a reason, a question to its
        author (does it reject?), or a comment (kept only when an approver wrote it). On a
        question's card (`ask_human`), the reply is an answer (`answer`).

        Returns None when the thread is not an approval message's (nothing to do). `ts` is the
        reply's own Slack timestamp: comments are kept in the thread's order, not arrival order.
        """
        approval_id = await self.store.approval_for_message(channel, thread_ts)
        if approval_id is None:
            return None
        call = await self.store.get_call(approval_id)
        if call is not None and call.kind == QUESTION_KIND and self.answer is not None:
            return await self.answer(actor, approval_id, text)
        match = REJECT_REPLY.match(text)
        if match:
            return await self.decide(
                actor, approval_id, approve=False, always=False, reason=match.group(1),
                way=Way.REPLY,
            )  # fmt: skip
        if call is None or call.decided:
            return Reply(True)
        run = await self.store.get_run(call.run_id)
        if run is None or not await self.judgement.may_decide(actor, run, call):
            return Reply(True)  # a comment by someone who may not decide: not kept
        await self.store.add_comment(approval_id, actor.user_id, text, ts=ts)
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
        too_long = reason_too_long(held["text"]) if reject else None
        if too_long is not None:  # the held reply stays: "Keep as a comment" still works
            return Reply(False, too_long)
        if not await self.store.take_reply(reply_id):
            return Reply(False, "This question was already answered or has expired.")
        if not reject:
            return Reply(True, "Kept as a comment; the call was not rejected.")
        return await self.decide(
            actor, held["approval_id"], approve=False, always=False, reason=held["text"]
        )
