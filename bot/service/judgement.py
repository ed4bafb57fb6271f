"""One judgement for every way a call is settled: may this actor settle this version of this
call, this way, now?

Every way a call can be approved or rejected asks `Judgement.settle`, naming its way
(`Way`): a click on the card or on the App Home (and a quorum's vote, which is a click), Always
and the grant it may make, an Always decision made earlier in the run or a channel grant
settling a later call, an edit and the agent's re-proposed call its one-shot approval settles,
`reject:` in the card's thread, the policy's automatic decision, a batch (Approve all or Reject
all: each of its calls judged as a click that typed nothing) and a reaction on a card (the
same).

The judgement reads the policy in force, the call as stored (its subject: what the tool will
receive), and checks, in one order: who (the served workspace, the run's, the rule's approvers,
widened once an escalation fired), self-approval (one place: against whoever asked for the
call, `requester_of`), the call's state and version, what this way may settle (Always and
grants: allowed by the rule, a quorum of one; an edit: the rule offers Edit, and the call as
edited is one the editor could approve by a click), typed confirmation (only a typed value on a
click counts: no other way can stand for it), and a grant's scope and length. A rule in force
that rejects the call by itself (`auto: reject`) lets no way approve it (a person may still
reject it): the refusal says so (`Refused.overruled`), and the call is rejected by that rule.
The answer is a `Verdict`: `Allowed` (with the rule in force, and the grant a decision makes),
`Refused` (the sentence to show, or for a standing decision the reason it does not settle this
call), `TypeFirst` (the value to type before the click counts). Recording the decision is the
caller's, through the store's atomic transitions.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from bot.clock import Clock
from bot.engine.questions import QUESTION_KIND
from bot.service.authorize import Authorizer, principal_parts
from bot.service.decisions.grants import GrantScope, scope_refusal
from bot.service.digest import digest_of
from bot.service.policy.conditions import value_to_type
from bot.service.policy.gate import rule_for, subject_of_call
from bot.service.policy.rules import CallRule, Policy, Verdict, grant_max_of, human
from bot.service.policy.source import PolicySource
from bot.service.ports import Actor
from bot.service.replies import Code, Mention, Text, already_text, said, when
from bot.store.grants import Grant, new_grant_id
from bot.store.parts.calls import EDITED_SINCE
from bot.store.records import AlreadyDecided, CallRecord, RunRecord


class Way(StrEnum):
    """How a call is being settled."""

    CLICK = "click"
    """Approve or Reject on the card or on the App Home (the same buttons); under a quorum, a
    vote. Approve under `confirm: type` counts only with the typed value."""
    ALWAYS = "always"
    """Always approve or Always reject: this run's later calls of the agent's tool too (and
    the pause's other calls of it, each judged this way)."""
    GRANT = "grant"
    """Always approve for the channel: the grant it makes, with the scope chosen in a form."""
    EARLIER_ALWAYS = "earlier_always"
    """An Always decision made earlier in the run settling a later call (actor: its decider)."""
    GRANT_USE = "grant_use"
    """A channel grant settling a later run's call (actor: its grantor)."""
    EDIT = "edit"
    """An edit: the editor's approval of the call as edited."""
    EDITED_CALL = "edited_call"
    """The agent's re-proposed call settled by an edit's one-shot approval (actor: the
    editor)."""
    REPLY = "reply"
    """`reject:` in the card's thread (a rejection only)."""
    RULE = "rule"
    """The policy's automatic decision (no actor)."""
    BATCH = "batch"
    """Approve all or Reject all (#33): each call of the batch as a click that typed nothing;
    under a quorum, a vote; a call that needs a typed value is left out."""
    REACTION = "reaction"
    """A reaction on a card (#33, `APPROVAL_BOT_REACTIONS`): a click that typed nothing, by
    the person who reacted, on that card's call."""


STANDING = (Way.EARLIER_ALWAYS, Way.GRANT_USE, Way.EDITED_CALL)
"""Ways that settle a call nobody looked at, by a decision made before: a refusal says why
that decision no longer holds (`Refused.said`): it is dropped, and the call waits for a
person."""


UNTYPED = (Way.BATCH, Way.REACTION)
"""Ways that act as a click but cannot carry a typed value: a call under `confirm: type` is
refused (left out of a batch), never approved."""


@dataclass(frozen=True)
class Attempt:
    """What is being asked: settle the call this way."""

    way: Way
    approve: bool = True
    typed: str | None = None
    """The value typed in the confirmation form (`confirm: type`); None: nothing typed."""
    version: str = ""
    """The version token the clicked card (or form) carries ("": not checked)."""
    scope: GrantScope | None = None
    """GRANT: what the Always approve form chose (untrusted: judged here)."""
    grant: Grant | None = None
    """GRANT_USE: the grant that would settle the call."""
    edit_required: int = 0
    """EDITED_CALL: the approvals the edited call needed (its quorum, met by the edit)."""
    edited: dict[str, Any] | None = None
    """EDIT: the subject of the call as edited (what the tool would receive)."""


@dataclass(frozen=True)
class Allowed:
    """The actor may settle the call this way now."""

    rule: CallRule | None
    """The rule in force (RULE: None when the channel left the policy: rejected)."""
    grant: Grant | None = None
    """GRANT: the grant the decision makes."""
    auto: str = ""
    """RULE: the automatic decision, `approve` or `reject`."""


@dataclass(frozen=True)
class Refused:
    """The actor may not: `said` is the sentence to show them (for a standing way, why the
    earlier decision does not settle this call)."""

    said: str | Text
    rule: CallRule | None = None
    stale: bool = False
    """The card (or form) was drawn before an edit of the call: it is to be redrawn."""
    quotes: bool = False
    """Its words may quote the call's arguments (the value to type): free text, which the
    audit keeps apart (`text`)."""
    overruled: bool = False
    """An approval of a call the rule in force rejects by itself (`auto: reject`): the call is
    to be rejected so, through the policy's automatic decisions (`Runs.auto_decide`), not left
    waiting for an approval that can never count."""

    @property
    def reason(self) -> str:
        return Text.of(self.said).plain()


@dataclass(frozen=True)
class TypeFirst:
    """An approval that counts only with a typed value (`confirm: type`): nothing is decided;
    the confirmation form asks for `expected` (the value at `what`, or the tool name)."""

    expected: str
    what: str


Judged = Allowed | Refused | TypeFirst


@dataclass(frozen=True)
class Ruled:
    """The policy in force and the rule it gives a call (worked out once for many people)."""

    policy: Policy
    rule: CallRule | None


def requester_of(run: RunRecord, call: CallRecord | None = None) -> str:
    """Who asked for `call` (a call of `run`; None: for the turn going on): its turn's
    requester (the starter's first turn, a follow-up's author's later ones), the person
    self-approval is judged against."""
    return call.asked_by(run) if call is not None else run.asked_by


def asks_self(actor: Actor, asked_by: str, rule: CallRule) -> bool:
    """Whether `actor` would approve a call they asked for (`asked_by`), which `rule` does not
    allow: self-approval, judged here only."""
    return actor.user_id == asked_by and not rule.allow_self


class Judgement:
    """Judges every way of settling a call against the policy in force."""

    def __init__(self, policies: PolicySource, authorizer: Authorizer, clock: Clock) -> None:
        self.policies = policies
        self.authorizer = authorizer
        self.clock = clock

    def policy_for(self, run: RunRecord) -> Policy:
        return self.policies.current().policy.for_team(run.team_id)

    def rule(self, run: RunRecord, call: CallRecord) -> CallRule | None:
        """The rule the policy in force gives `call` (`gate.rule_for`)."""
        return rule_for(self.policy_for(run), run, call)

    async def person(
        self, policy: Policy, rule: CallRule | None, actor: Actor, run: RunRecord, tool: str,
        *, asked_by: str,
    ) -> Verdict:  # fmt: skip
        """Whether `actor` may decide a call of `tool` under `rule`: the workspace, the run's,
        the rule's approvers, and self-approval: the one place where whoever asked for a call
        (`asked_by`) is kept from approving it alone, unless the rule allows it."""
        verdict = await self.authorizer.may_decide(
            policy, actor, run_team=run.team_id, channel=run.channel_id, tool=tool, rule=rule
        )
        if not verdict.allowed or rule is None:
            return verdict
        if asks_self(actor, asked_by, rule):
            return Verdict(
                False,
                said(
                    "You asked for this call, and self-approval is not allowed for tool "
                    "{tool}: ask another approver.",
                    tool=Code(tool),
                ),
            )
        return verdict

    async def may_decide(
        self, actor: Actor, run: RunRecord, call: CallRecord, ruled: Ruled | None = None
    ) -> bool:
        """Whether `actor` is one who decides `call` now (what the lists of what waits for whom
        show, and who sees what lies behind a card; they list pending calls only): the who of
        `settle`. `ruled`: worked out once for many people."""
        if ruled is None:
            policy = self.policy_for(run)
            ruled = Ruled(policy, rule_for(policy, run, call))
        asked_by = requester_of(run, call)
        verdict = await self.person(
            ruled.policy, ruled.rule, actor, run, call.tool, asked_by=asked_by
        )
        return verdict.allowed

    async def settle(
        self, actor: Actor | None, run: RunRecord, call: CallRecord, attempt: Attempt,
        ruled: Ruled | None = None,
    ) -> Judged:  # fmt: skip
        """May `actor` settle this version of `call`, this way, now? (`ruled`: the policy in
        force and the rule it gives the call, when the caller worked them out.)"""
        if ruled is None:
            policy = self.policy_for(run)
            ruled = Ruled(policy, rule_for(policy, run, call))
        policy, rule = ruled.policy, ruled.rule
        way = attempt.way
        if way == Way.RULE or actor is None:
            return self._automatic(rule, call)
        if way in STANDING:
            return await self._standing(policy, rule, actor, run, call, attempt)
        asked_by = requester_of(run, call)
        who = await self.person(policy, rule, actor, run, call.tool, asked_by=asked_by)
        if not who.allowed:
            return Refused(who.said, rule)
        state = self._state(call, attempt)
        if state is not None:
            return Refused(state, rule, stale=state == EDITED_SINCE)
        assert rule is not None  # (the person check refuses a call without a rule)
        if attempt.approve and rule.auto == "reject":
            return Refused(
                said(
                    "The policy in force rejects this call automatically (rule {rule}), so "
                    "nobody can approve it: it is rejected now.",
                    rule=Code(rule.source),
                ),
                rule,
                overruled=True,
            )
        offered = self._offered(rule, call, attempt)
        if offered is not None:
            return Refused(offered, rule)
        if attempt.approve and rule.confirm:
            typed = self._typed(rule, call, attempt)
            if typed is not None:
                return typed
        if way == Way.EDIT and attempt.edited is not None:
            edited = await self._as_edited(policy, rule, actor, run, call, attempt.edited)
            if edited is not None:
                return Refused(edited, rule)
        if way == Way.GRANT and attempt.scope is not None:
            return self._granting(policy, rule, actor, run, call, attempt.scope)
        return Allowed(rule)

    @staticmethod
    def _automatic(rule: CallRule | None, call: CallRecord) -> Judged:
        """The policy's automatic decision, judged again by the policy in force: it stands
        only if that policy still decides the call automatically the same way; an automatic
        rejection always stands, also on a call posted for people (the policy in force now
        rejects it: nobody may approve it, `settle`); otherwise a person decides."""
        auto = "reject" if rule is None else (rule.auto or "")
        if not auto or (auto != call.auto and auto != "reject"):
            return Refused("the policy in force decides it no longer", rule)
        return Allowed(rule, auto=auto)

    @staticmethod
    def _state(call: CallRecord, attempt: Attempt) -> str | Text | None:
        """Whether the call, as stored, can still be settled by this attempt."""
        if call.decided:
            earlier = AlreadyDecided(call.status, call.decided_by, call.decided_at, call.via)
            return already_text(earlier)
        if call.kind == QUESTION_KIND:  # an answer is text: bot/service/decisions/questions.py
            return "This is a question from the agent: answer it with Answer."
        if attempt.version and attempt.version != call.version:
            if attempt.way == Way.EDIT and call.edited_by:
                return said(
                    "This form is out of date: {who} edited this call at {at}, after you opened "
                    "it (their arguments are on the card). Nothing was changed: click Edit again "
                    "to start from their edit.",
                    who=Mention(call.edited_by),
                    at=when(call.edited_at),
                )
            return EDITED_SINCE
        return None

    @staticmethod
    def _offered(rule: CallRule, call: CallRecord, attempt: Attempt) -> str | Text | None:
        """What this way may settle under `rule` (in force) and as the call was offered."""
        way, approve = attempt.way, attempt.approve
        if way in (Way.ALWAYS, Way.GRANT):
            if (
                not call.allow_always
                or not rule.allow_always
                or (approve and (call.required > 1 or rule.required > 1))
            ):
                return said(
                    "Always decisions are not allowed for tool {tool}: decide this call on "
                    "its own.",
                    tool=Code(call.tool),
                )
            if approve and call.edited_sha:
                return (
                    "This call was edited: approve the edited call on its own (Always "
                    "approve would also cover calls nobody was shown)."
                )
        if digest_of(call) != call.digest:
            return "This call changed since it was posted, so no decision can apply to it."
        if way == Way.EDIT and (not call.allow_edit or not rule.editable(call.kind)):
            return said(
                "Editing is not allowed for tool {tool}: approve or reject the call as proposed.",
                tool=Code(call.tool),
            )
        return None

    @staticmethod
    def _typed(rule: CallRule, call: CallRecord, attempt: Attempt) -> Judged | None:
        """What `confirm: type` asks of an approval: only a value typed in the confirmation
        form, on a click, counts; None when it was typed right."""
        tool = Code(call.tool)
        if attempt.way in (Way.ALWAYS, Way.GRANT):
            return Refused(
                said(
                    "Always approve is not offered for tool {tool}: each of its calls needs "
                    "typed confirmation. Click Approve.",
                    tool=tool,
                ),
                rule,
                quotes=True,
            )
        if attempt.way == Way.EDIT:
            return Refused(
                "This call needs typed confirmation, so it cannot be edited: approve or reject "
                "it from its card.",
                rule,
            )
        if attempt.way in UNTYPED:
            return Refused(
                "This call needs typed confirmation: click Approve on its card and type the "
                "value it asks for.",
                rule,
            )
        what = rule.confirm_value or "tool"
        expected = call.tool if what == "tool" else value_to_type(subject_of_call(call), what)
        if expected is None:
            return Refused(
                said(
                    "This call cannot be confirmed: the value to type ({what}) cannot be read "
                    "from its arguments. It can only be rejected.",
                    what=Code(what),
                ),
                rule,
                quotes=True,
            )
        if attempt.typed is None:
            return TypeFirst(expected, what)
        if attempt.typed.strip() != expected.strip():
            return Refused(
                said("That is not {expected}: nothing was approved.", expected=Code(expected)),
                rule,
                quotes=True,
            )
        return None

    async def _as_edited(
        self, policy: Policy, rule: CallRule, actor: Actor, run: RunRecord, call: CallRecord,
        subject: dict[str, Any],
    ) -> str | Text | None:  # fmt: skip
        """Why the editor could not approve the call as edited (its arguments `subject`) as a
        click would: the rule its new arguments fall under must let them, with no typed value
        (an edit types nothing) and no more approvals than the call had; None: they could."""
        edited = rule_for(policy, run, call, subject)
        if edited is None or edited.auto == "approve":
            return None  # (the channel is the same; the policy approves it by itself)
        why: str | Text = ""
        if edited.auto == "reject":
            why = "which rejects it automatically"
        elif edited.undecidable:
            why = f"whose conditions cannot be judged on them ({edited.undecidable})"
        elif edited.confirm:
            why = "which asks for typed confirmation of each call: an edit cannot give it"
        elif edited.required > rule.required:
            why = f"which needs {edited.required} approvers"
        elif not edited.editable(call.kind):
            why = "which does not offer Edit"
        else:
            asked_by = requester_of(run, call)
            verdict = await self.person(policy, edited, actor, run, call.tool, asked_by=asked_by)
            if not verdict.allowed:
                why = said(
                    "which you may not approve (approvers: {approvers})",
                    approvers=principal_parts(edited.approvers),
                )
        if not why:
            return None
        return said(
            "With these arguments the call falls under rule {rule}, {why}. Nothing was "
            "changed: approve or reject it as proposed, or edit it differently.",
            rule=Code(edited.source),
            why=Text.of(why).parts,
        )

    def _granting(
        self, policy: Policy, rule: CallRule, actor: Actor, run: RunRecord, call: CallRecord,
        scope: GrantScope,
    ) -> Judged:  # fmt: skip
        """Always approve with a scope chosen in the form: the grant it makes, within what the
        rule in force allows (`grant_max`, arguments the call has); "this run only": none."""
        if scope.seconds == 0 and not scope.narrow:
            return Allowed(rule)
        narrow, refusal = scope_refusal(call, grant_max_of(policy, rule), scope, rule.source)
        if refusal is not None:
            return Refused(refusal, rule)
        made = self.clock.time()
        grant = Grant(
            sticky=call.sticky, team=run.team_id, user=actor.user_id, channel=run.channel_id,
            made=made, until=made + scope.seconds, approval_id=call.approval_id, narrow=narrow,
            grant_id=new_grant_id(), tool=call.tool,
        )  # fmt: skip
        return Allowed(rule, grant=grant)

    async def _standing(
        self, policy: Policy, rule: CallRule | None, actor: Actor, run: RunRecord,
        call: CallRecord, attempt: Attempt,
    ) -> Judged:  # fmt: skip
        """A decision made before (an earlier Always, a grant, an edit) settling a call nobody
        looked at: it must be one the policy in force would let its maker make on this call,
        as they would by a click (the same approvers, self-approval, quorum, typed value)."""
        way, approve, grant = attempt.way, attempt.approve, attempt.grant
        why = ""
        if way == Way.GRANT_USE and grant is not None and grant.until <= self.clock.time():
            why = "it expired"
        elif rule is None:
            why = "the channel is no longer in the policy"
        elif approve and rule.auto == "reject":
            why = "the policy in force rejects this call automatically"
        elif rule.undecidable:
            why = f"the policy cannot judge this call's arguments ({rule.undecidable})"
        elif way == Way.EARLIER_ALWAYS and not rule.allow_always:
            why = "the policy no longer allows Always decisions for this tool"
        elif way == Way.GRANT_USE and grant_max_of(policy, rule) <= 0:
            why = "the policy no longer allows grants for this tool"
        elif (
            way == Way.GRANT_USE
            and grant is not None
            and grant.until - grant.made > grant_max_of(policy, rule) + 1
        ):
            why = f"the policy now allows grants of at most {human(grant_max_of(policy, rule))}"
        elif way == Way.EDITED_CALL and not rule.editable(call.kind):
            why = "the policy no longer offers Edit for this tool"
        elif rule.required > (attempt.edit_required if way == Way.EDITED_CALL else 1):
            why = f"the policy now requires {rule.required} approvers for this tool"
        elif approve and rule.confirm:
            why = "the policy asks for typed confirmation of each call of this tool"
        if why:
            return Refused(why, rule)
        assert rule is not None
        asked_by = requester_of(run, call)
        verdict = await self.person(policy, rule, actor, run, call.tool, asked_by=asked_by)
        if not verdict.allowed:
            mine = asks_self(actor, asked_by, rule)
            return Refused(
                f"{actor.user_id} asked for this call, and may not approve it alone" if mine
                else f"{actor.user_id} may no longer decide it",
                rule,
            )  # fmt: skip
        if digest_of(call) != call.digest:
            return Refused("the call changed since it was posted", rule)
        return Allowed(rule)
