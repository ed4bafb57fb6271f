"""What a reviewer may look into behind a card: the whole text of a call the card shows cut
("Show all"), and the run's conversation up to the call with the run's decisions so far ("Show
conversation"). Both are read from server-side state (the stored snapshot, through the engine; the
call records) for the people who may see the card: the run's starter, the call's deciders, and
the members of its channel. Holding the approval id is not enough; a private channel's content
never reaches a non-member.

Also where a pause's explanations (`PendingApproval`'s words and descriptions) become the stored
`CallContext` of each call."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bot.conversation import Transcript
from bot.engine.approvals import PendingApproval
from bot.engine.transcript import transcript, whole_call_text
from bot.service.core import ServiceCore
from bot.service.judgement import Judgement, Ruled
from bot.service.policy.gate import rule_for
from bot.service.policy.rules import ALLOWED, Verdict
from bot.service.ports import Actor, GroupLookupError
from bot.service.replies import Reply
from bot.store.records import (
    SHOWN_ARGUMENTS,
    ArgumentField,
    CallContext,
    CallRecord,
    PatchOperation,
    RunRecord,
)

NOT_A_MEMBER = (
    "Only the members of this run's channel, its starter and the call's approvers may see "
    "what this call holds."
)
NOT_KEPT = (
    "The run has moved on and its stored state no longer holds this call, so there is nothing "
    "more to show than the card."
)


def context_of(approval: PendingApproval) -> CallContext:
    """The stored form of what the engine found beside a call (already bounded). The fields
    are left out when the card can read them from the stored arguments (kept whole, nothing
    cut, no parameter described): a paused run stores as little as it can."""
    fields = tuple(ArgumentField(f.name, f.value, f.chars, f.about) for f in approval.fields)
    whole = len(approval.arguments) <= SHOWN_ARGUMENTS
    if whole and all(f.chars == len(f.value) and not f.about for f in fields):
        fields = ()
    return CallContext(
        said=approval.said,
        thought=approval.thought,
        description=approval.description,
        details=approval.details,
        fields=fields,
        operations=tuple(PatchOperation(o.kind, o.path, o.move_to) for o in approval.operations),
        operations_total=approval.operations_total,
    )


@dataclass(frozen=True)
class WholeCall:
    """The whole display text of one call ("Show all")."""

    call: CallRecord
    """The call, as stored."""
    text: str
    """Its whole display text: JSON arguments pretty-printed, commands, a patch."""


@dataclass(frozen=True)
class Conversation:
    """A run's conversation up to one call, and the run's decisions so far."""

    run: RunRecord
    """The run (its task, who started it)."""
    call: CallRecord
    """The call the conversation leads up to."""
    transcript: Transcript | None
    """From the stored snapshot; None when it no longer holds the run (it ended)."""
    decisions: list[CallRecord]
    """The run's calls up to this one, in the order they paused (decided or not)."""
    context: CallContext | None = None
    """What the card shows beside the call (the tool's description among it), when kept."""


class Details:
    """Show all, Show conversation."""

    def __init__(
        self,
        core: ServiceCore,
        judgement: Judgement,
        viewed: Callable[[Actor, CallRecord, str], None] | None = None,
    ) -> None:
        self.core = core
        self.store = core.store
        self.judgement = judgement
        # Told who opened what lies behind which card (`bot.service.oversight.attention`).
        self.viewed = viewed

    async def may_view(self, actor: Actor, run: RunRecord, call: CallRecord) -> Verdict:
        """May `actor` see what the card of `call` shows and what lies behind it? Its run's
        starter, who asked for it (a follow-up's author) and the call's deciders may; so may
        the members of its channel (who see the card). Nobody of another workspace or
        organization."""
        policy = self.core.policies.current().policy
        served = self.core.authorizer.served(policy, actor)
        if not served.allowed:
            return served
        if actor.team_id != run.team_id:
            return Verdict(False, "This run belongs to another Slack workspace.")
        if actor.user_id in (run.user_id, call.asked_by(run)):
            return ALLOWED
        policy = policy.for_team(run.team_id)
        ruled = Ruled(policy, rule_for(policy, run, call))
        if await self.judgement.may_decide(actor, run, call, ruled):
            return ALLOWED
        channels = self.core.authorizer.channels
        if channels is not None:
            try:
                if actor.user_id in await channels.members(actor.team_id, run.channel_id):
                    return ALLOWED
            except GroupLookupError:
                return Verdict(
                    False,
                    "The bot could not check that you are in this run's channel, so it shows "
                    "nothing. Try again in a moment.",
                )
        return Verdict(False, NOT_A_MEMBER)

    async def _allowed(
        self, actor: Actor, approval_id: str
    ) -> tuple[CallRecord, RunRecord] | Reply:
        call, run = await self.store.call_and_run(approval_id)
        if call is None or run is None:
            return Reply(False, "This approval request no longer exists.")
        verdict = await self.may_view(actor, run, call)
        if not verdict.allowed:
            return Reply(False, verdict.said or NOT_A_MEMBER)
        return call, run

    async def whole_call(self, actor: Actor, approval_id: str) -> WholeCall | Reply:
        """The whole text of a call its card shows cut, for a person who may see the card."""
        allowed = await self._allowed(actor, approval_id)
        if isinstance(allowed, Reply):
            return allowed
        call, run = allowed
        if self.viewed is not None:
            self.viewed(actor, call, "show_all")
        if call.arguments_chars <= len(call.arguments):
            return WholeCall(call, call.arguments)  # stored whole
        snapshot = await self.store.load_snapshot(run.run_id)
        text = whole_call_text(snapshot, call.call_id) if snapshot is not None else None
        if text is None:
            return Reply(False, NOT_KEPT)
        return WholeCall(call, text)

    async def conversation(self, actor: Actor, approval_id: str) -> Conversation | Reply:
        """The run's conversation up to a call, for a person who may see its card."""
        allowed = await self._allowed(actor, approval_id)
        if isinstance(allowed, Reply):
            return allowed
        call, run = allowed
        if self.viewed is not None:
            self.viewed(actor, call, "conversation")
        snapshot = await self.store.load_snapshot(run.run_id)
        found = transcript(snapshot, call.call_id, run.task) if snapshot is not None else None
        calls = await self.store.run_calls(run.run_id)
        upto = [c for c in calls if (c.pause, c.index) <= (call.pause, call.index)]
        _, context = await self.store.call_with_context(approval_id)
        return Conversation(run, call, found, upto, context)
