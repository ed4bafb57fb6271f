"""Decisions: who may decide a call, recording it exactly once, and what follows (a resume)."""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from bot.engine.questions import QUESTION_KIND
from bot.service.audit import AuditKind
from bot.service.conditions import value_to_type
from bot.service.core import ServiceCore
from bot.service.digest import digest_of
from bot.service.gate import Gate, rule_for, subject_of_call
from bot.service.grants import (
    ChooseScope,
    GrantScope,
    choices_up_to,
    grant_note,
    narrowable,
    scope_refusal,
)
from bot.service.policy import CallRule, grant_max_of
from bot.service.ports import Actor
from bot.service.replies import (
    Code,
    ConfirmReject,
    RejectForm,
    Reply,
    TypeToConfirm,
    already_text,
    said,
)
from bot.store import keys
from bot.store.calls import EDITED_SINCE
from bot.store.grants import Grant, GrantStore, grant_detail, grant_values, new_grant_id
from bot.store.records import (
    AlreadyDecided,
    CallRecord,
    Decided,
    DecideResult,
    Gone,
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

TYPE_FIRST = (
    "This call needs typed confirmation: click Approve on its card and type the value it asks for."
)


class Decisions:
    """Clicks, modal submissions and thread replies on pending calls."""

    def __init__(self, core: ServiceCore, gate: Gate, answer: Answer | None = None) -> None:
        self.core = core
        self.store = core.store
        self.gate = gate
        self.answer = answer  # a reply on a question's card is an answer (questions.py)

    async def check(
        self, actor: Actor, approval_id: str, *, approve: bool, audited_as: str
    ) -> tuple[CallRecord, RunRecord] | Reply:
        """The checks of a click (`_check`), for another flow that acts as a decision does (an
        edit is an approval); a refusal is audited with the decision `audited_as`."""
        checked = await self._check(
            actor, approval_id, approve=approve, always=False, audited_as=audited_as
        )
        if isinstance(checked, TypeToConfirm):  # typed confirmation is asked on Approve only
            return Reply(
                False,
                "This call needs typed confirmation, so it cannot be edited: approve or reject "
                "it from its card.",
            )
        return checked

    async def _check(
        self,
        actor: Actor,
        approval_id: str,
        *,
        approve: bool,
        always: bool,
        typed: str | None = None,
        audited_as: str = "",
        version: str = "",
    ) -> tuple[CallRecord, RunRecord] | Reply | TypeToConfirm:
        """Everything that must hold before a decision is recorded; a Reply when it does not,
        and a TypeToConfirm when the approval needs a typed value that was not given.
        `version`: the version token of the card clicked ("": not checked); a card drawn
        before an edit decides nothing, and is redrawn (decide.lua checks it again)."""
        call, stored_run = await self.store.call_and_run(approval_id)  # one round trip
        if call is None:
            return Reply(False, Gone().why)
        run, verdict = await self.gate.authorize(actor, call, stored_run)
        confirm = None
        if run is not None and verdict.allowed and approve and not call.decided:
            rule = rule_for(self.gate.policies.current().policy.for_team(run.team_id), run, call)
            confirm = self._confirmation(call, rule, always=always, typed=typed)
            if isinstance(confirm, TypeToConfirm):
                return confirm
        # The checks, in order; who decided is told only to people allowed to decide.
        if run is None or not verdict.allowed:
            reply = Reply(False, verdict.said)
        elif call.decided:
            earlier = AlreadyDecided(call.status, call.decided_by, call.decided_at, call.via)
            reply = Reply(False, already_text(earlier))
        elif call.kind == QUESTION_KIND:  # an answer is text: bot/service/questions.py
            reply = Reply(False, "This is a question from the agent: answer it with Answer.")
        elif version and version != call.version:
            await self.store.redraw_card(call.approval_id)
            reply = Reply(False, EDITED_SINCE)
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
        elif isinstance(confirm, Reply):  # Always approve, a wrong value, an unreadable one
            reply = confirm
        else:
            return call, run
        decision = ("always_" if always else "") + ("approve" if approve else "reject")
        decision = audited_as or decision
        typed_wrong = reply is confirm  # its words quote the value to type: an argument's
        await self.core.audit(
            AuditKind.REFUSED, call=call, actor=actor, decision=decision,
            detail="typed confirmation refused" if typed_wrong else reply.text,
            text=reply.text if typed_wrong else "",
        )  # fmt: skip
        return reply

    @staticmethod
    def _confirmation(
        call: CallRecord, rule: CallRule | None, *, always: bool, typed: str | None
    ) -> TypeToConfirm | Reply | None:
        """What the rule's `confirm: type` asks of an approval (by the policy in force): None
        when it asks nothing or `typed` is right; a TypeToConfirm when nothing was typed; a
        refusal for Always approve, a wrong value, or a value that cannot be read."""
        if rule is None or not rule.confirm:
            return None
        if always:
            return Reply(
                False,
                said(
                    "Always approve is not offered for tool {tool}: each of its calls needs "
                    "typed confirmation. Click Approve.",
                    tool=Code(call.tool),
                ),
            )
        what = rule.confirm_value or "tool"
        expected = call.tool if what == "tool" else value_to_type(subject_of_call(call), what)
        if expected is None:
            return Reply(
                False,
                said(
                    "This call cannot be confirmed: the value to type ({what}) cannot be read "
                    "from its arguments. It can only be rejected.",
                    what=Code(what),
                ),
            )
        if typed is None:
            return TypeToConfirm(call, expected, what)
        if typed.strip() != expected.strip():
            wrong = said("That is not {expected}: nothing was approved.", expected=Code(expected))
            return Reply(False, wrong)
        return None

    async def _settled_alongside(
        self, actor: Actor, run: RunRecord, call: CallRecord, *, approve: bool
    ) -> list[str]:
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
            if (
                rule is not None
                and rule.required == 1
                and rule.allow_always
                and verdict.allowed
                and not (approve and rule.confirm)  # each of those is approved by typing
            ):
                found.append(other.approval_id)
        return found

    async def _grant_of(
        self, actor: Actor, run: RunRecord, call: CallRecord, scope: GrantScope | None
    ) -> Grant | Reply | None:
        """The channel grant an "Always approve" of `call` makes with the `scope` its reviewer
        chose, judged against the rule in force (a longer time than its `grant_max`, or an
        argument the call does not have, is refused: a Reply); None: Always is run-only (no
        scope chosen, "this run only", or a rule without `grant_max`)."""
        policy = self.gate.policies.current().policy.for_team(run.team_id)
        rule, _ = await self.gate.judge(actor, run, call)
        lasts = grant_max_of(policy, rule)
        if scope is None or (scope.seconds == 0 and not scope.narrow):
            return None
        narrow, refusal = scope_refusal(
            call, lasts, scope, rule.source if rule is not None else "none"
        )
        if refusal is not None:
            return Reply(False, refusal)
        made = self.store.timers.clock.time()
        return Grant(
            sticky=call.sticky, team=run.team_id, user=actor.user_id, channel=run.channel_id,
            made=made, until=made + scope.seconds, approval_id=call.approval_id, narrow=narrow,
            grant_id=new_grant_id(), tool=call.tool,
        )  # fmt: skip

    async def _scope_to_choose(
        self, actor: Actor, run: RunRecord, call: CallRecord
    ) -> ChooseScope | None:
        """Always approve under a rule with `grant_max` (in force now): the scope to choose."""
        rule, _ = await self.gate.judge(actor, run, call)
        lasts = grant_max_of(self.gate.policies.current().policy.for_team(run.team_id), rule)
        if lasts <= 0:
            return None
        return ChooseScope(call, lasts, choices_up_to(lasts), narrowable(call))

    async def reject_form(
        self, actor: Actor, approval_id: str, *, always: bool
    ) -> RejectForm | Reply:
        """Check a reject click before its modal opens: the modal only opens for a live call."""
        checked = await self._check(actor, approval_id, approve=False, always=always)
        if isinstance(checked, Reply | TypeToConfirm):  # (a rejection types nothing)
            return checked if isinstance(checked, Reply) else Reply(False, TYPE_FIRST)
        call, _ = checked
        comments = await self.store.comments(approval_id)
        # Only comments by people who may decide the call pre-fill the reason the model gets.
        return RejectForm(call, "\n".join(c["text"] for c in comments if c.get("approver")))

    async def approve(
        self, actor: Actor, approval_id: str, *, always: bool, version: str = ""
    ) -> Reply | TypeToConfirm | ChooseScope:
        """An Approve (or Always approve) click: decided like `decide`, unless the rule in
        force asks for a typed value first, or (Always approve under `grant_max`) for the
        grant's scope: then nothing is decided, a form asks for it. `version`: the version
        token the clicked card carries (`CallRecord.version`): a card drawn before an edit of
        the call approves nothing."""
        checked = await self._check(
            actor, approval_id, approve=True, always=always, version=version
        )
        if isinstance(checked, Reply | TypeToConfirm):
            return checked
        call, run = checked
        if always:
            choose = await self._scope_to_choose(actor, run, call)
            if choose is not None:
                return choose
        return await self._record(
            actor, call, run, approve=True, always=always, reason="", version=version
        )

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
    ) -> Reply:
        """Authorize and record one decision; resume the run if it was the pause's last.
        `typed`: the value typed in the confirmation modal (rules with `confirm: type`).
        `scope`: what the Always approve form chose (judged against the policy in force)."""
        checked = await self._check(actor, approval_id, approve=approve, always=always, typed=typed)
        if isinstance(checked, TypeToConfirm):
            return Reply(False, TYPE_FIRST)
        if isinstance(checked, Reply):
            return checked
        call, run = checked
        grant: Grant | None = None
        if always and approve:
            chosen = await self._grant_of(actor, run, call, scope)
            if isinstance(chosen, Reply):
                await self.core.audit(
                    AuditKind.REFUSED, call=call, actor=actor, decision="always_approve",
                    detail=chosen.text,
                )  # fmt: skip
                return chosen
            grant = chosen
        return await self._record(
            actor, call, run, approve=approve, always=always, reason=reason, grant=grant
        )

    async def _record(
        self, actor: Actor, call: CallRecord, run: RunRecord, *, approve: bool, always: bool,
        reason: str, version: str = "", grant: Grant | None = None,
    ) -> Reply:  # fmt: skip
        """Record a checked decision exactly once (decide.lua), audit it, resume if it was the
        pause's last; with `grant`, the grant is recorded with it (and on the call's card)."""
        approval_id = call.approval_id
        owner = self.core.new_owner()
        # A grant narrowed to some arguments' values must not become the run's Always for
        # every call of the tool: the call is approved alone, the grant covers what it says.
        run_always = always and not (grant is not None and grant.narrow)
        also = (
            await self._settled_alongside(actor, run, call, approve=approve) if run_always else []
        )
        decision = ("always_" if always else "") + ("approve" if approve else "reject")

        def audited(pipe: Any, result: DecideResult) -> None:
            """The decision's (or vote's) audit entry, sent with the write that follows it."""
            if isinstance(result, Voted):
                kind, detail = AuditKind.APPROVAL_VOTE, f"{result.votes} of {result.required}"
            elif isinstance(result, Decided):
                kind, detail = AuditKind.DECIDED, ""
            else:
                return
            self.core.audit_in(
                pipe, kind, call=call, actor=actor, decision=decision, detail=detail,
                text=reason.strip(),  # the decider's reason: free text
            )  # fmt: skip
            if grant is not None and isinstance(result, Decided):
                GrantStore.put_in(pipe, grant)
                pipe.hset(keys.call_key(approval_id), "granted", grant_note(grant, used=False))
                card = str(keys.Target("card", approval_id))  # shown again, with the grant
                mark(pipe, call.run_id, card, self.store.retention)
                self.core.audit_in(
                    pipe, AuditKind.GRANT_MADE, call=call, actor=actor, decision="approve",
                    detail=grant_detail(grant), text=grant_values(grant),
                )  # fmt: skip

        result = await self.store.decide(
            approval_id,
            approve=approve,
            always=run_always,
            team=actor.team_id,
            user=actor.user_id,
            reason=reason.strip(),
            owner=owner,
            also=also,
            version=version,
            after=audited,
            enqueue=True,
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
                    detail=via, text=reason.strip(),
                )  # fmt: skip
        # A resume was enqueued with the decision's writes; the cards and the run message
        # follow from the outbox.
        return reply

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
                actor, approval_id, approve=False, always=False, reason=match.group(1)
            )
        if call is None or call.decided:
            return Reply(True)
        _, verdict = await self.gate.authorize(actor, call)
        if not verdict.allowed:
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
        if not await self.store.take_reply(reply_id):
            return Reply(False, "This question was already answered or has expired.")
        if not reject:
            return Reply(True, "Kept as a comment; the call was not rejected.")
        return await self.decide(
            actor, held["approval_id"], approve=False, always=False, reason=held["text"]
        )
