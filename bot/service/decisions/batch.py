"""Deciding several waiting calls at once (#33): Approve all or Reject all, on a paused run's
message (its pause's calls) or on the App Home (a selection across runs).

The form lists each call with what submitting would do to it, judged for the clicker by the
one judgement (`Way.BATCH`: a click that typed nothing): decided, a vote counted towards its
quorum, or left out with the reason (typed confirmation, other approvers, an answer, already
decided). What is submitted is only the calls' opaque ids (with the version of their
arguments that was shown): each is judged again under the policy in force, and decided on its
own (`Decisions.decide`: its own decision, audit entry and card, exactly once), as a click
would be."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum

from bot.engine.questions import QUESTION_KIND
from bot.service.core import ServiceCore
from bot.service.decisions.decide import Decisions
from bot.service.judgement import Allowed, Attempt, Judgement, Refused, Way
from bot.service.policy.rules import Verdict
from bot.service.ports import Actor
from bot.service.replies import Reply, Text, reason_too_long, said
from bot.store import keys
from bot.store.records import CallRecord, RunRecord, RunStatus

MAX_CALLS = 25
"""The most calls one batch lists (a modal holds 100 blocks; its metadata 3,000 characters)."""


class Outcome(StrEnum):
    """What submitting the batch does (or did) to one call."""

    DECIDE = "decide"
    VOTE = "vote"
    LEFT_OUT = "left_out"


@dataclass(frozen=True)
class Item:
    """One call of a batch, and what the batch does to it for this person (`why`: the reason
    it is left out)."""

    call: CallRecord
    run: RunRecord
    outcome: Outcome
    why: Text = field(default_factory=Text)


@dataclass(frozen=True)
class BatchForm:
    """What a batch would do, per call (the form shows it; only `chosen` is submitted)."""

    approve: bool
    items: list[Item]
    more: int = 0
    """Calls beyond `MAX_CALLS`, not listed (decided one by one, or in a later batch)."""

    @property
    def chosen(self) -> list[Item]:
        """The calls the batch decides or votes on: what its submission names."""
        return [i for i in self.items if i.outcome != Outcome.LEFT_OUT]


@dataclass(frozen=True)
class BatchDone:
    """What a submitted batch did: each call decided, voted on, or left out (and why)."""

    approve: bool
    items: list[Item]

    def of(self, outcome: Outcome) -> list[Item]:
        return [i for i in self.items if i.outcome == outcome]


# Whether a person may see a call's card and what lies behind it (`Details.may_view`).
MayView = Callable[[Actor, RunRecord, CallRecord], Awaitable[Verdict]]

NOT_LISTED = "It was left out when the form opened: decide it on its card."
UNSEEN = "Only a run's starter, its calls' approvers and its channel's members may see its calls."
GONE = "Nothing was decided: these calls no longer exist, or are no longer yours to see. " + UNSEEN
NOTHING = "Nothing to decide at once here: this run waits for no decision now."


class Batch:
    """Approve all and Reject all: the form, and its submission."""

    def __init__(
        self, core: ServiceCore, judgement: Judgement, decisions: Decisions, may_view: MayView
    ) -> None:
        self.core = core
        self.store = core.store
        self.judgement = judgement
        self.decisions = decisions
        self.may_view = may_view

    async def pause_form(self, actor: Actor, run_id: str, *, approve: bool) -> BatchForm | Reply:
        """Approve all (or Reject all) on a paused run's message: its pause's waiting calls."""
        run = await self.store.get_run(run_id) if keys.RUN_ID_RE.match(run_id) else None
        if run is None or run.status != RunStatus.PAUSED:
            return Reply(False, NOTHING)
        waiting = [c for c in await self.store.pause_calls(run_id) if not c.decided]
        calls = [
            (c, run, c.version) for c in waiting if (await self.may_view(actor, run, c)).allowed
        ]
        if waiting and not calls:
            verb = "approve" if approve else "reject"
            return Reply(False, f"There is nothing here you may {verb} at once. {UNSEEN}")
        return await self._form(actor, calls, approve)

    async def form(
        self, actor: Actor, chosen: list[tuple[str, str]], *, approve: bool
    ) -> BatchForm | Reply:
        """Approve or Reject the calls selected on the App Home: (approval id, version) each."""
        found = await self._read(actor, chosen)
        if not found:
            return Reply(False, "Select the calls to decide first (the boxes beside them).")
        return await self._form(actor, found, approve)

    async def _read(
        self, actor: Actor, chosen: list[tuple[str, str]]
    ) -> list[tuple[CallRecord, RunRecord, str]]:
        """The calls named, with their runs and the versions shown; unknown ids, and those of
        calls `actor` may not see, are dropped (alike: nothing tells one from the other)."""
        return [
            (call, run, version)
            for call, run, version in await self._named(chosen)
            if (await self.may_view(actor, run, call)).allowed
        ]

    async def _named(
        self, chosen: list[tuple[str, str]]
    ) -> list[tuple[CallRecord, RunRecord, str]]:
        """The calls named that exist, with their runs and the versions shown."""
        found = []
        for approval_id, version in chosen[: MAX_CALLS * 2]:
            call, run = await self.store.call_and_run(approval_id)
            if call is not None and run is not None:
                found.append((call, run, version))
        return found

    async def _form(
        self, actor: Actor, calls: list[tuple[CallRecord, RunRecord, str]], approve: bool
    ) -> BatchForm | Reply:
        if not calls:
            return Reply(False, NOTHING)
        items = [await self._judged(actor, c, r, v, approve) for c, r, v in calls[:MAX_CALLS]]
        form = BatchForm(approve, items, more=max(0, len(calls) - MAX_CALLS))
        if not form.chosen:
            first = items[0]
            return Reply(
                False,
                said(
                    "There is nothing here you may {verb} at once. {why}",
                    verb="approve" if approve else "reject",
                    why=first.why.parts,
                ),
            )
        return form

    async def _judged(
        self, actor: Actor, call: CallRecord, run: RunRecord, version: str, approve: bool
    ) -> Item:
        """What the batch would do to `call` for `actor` now (nothing is recorded)."""
        judged = await self.judgement.settle(
            actor, run, call, Attempt(Way.BATCH, approve, version=version)
        )
        if isinstance(judged, Allowed):
            # (the quorum in force when it asks more than the call was posted with)
            required = max(call.required, judged.rule.required if judged.rule else 1)
            call = dataclasses.replace(call, required=required)
            if approve and call.required > 1:
                if actor.user_id in call.voter_ids():
                    why = (
                        f"you already approved it; it needs {call.required} different "
                        f"approvers ({len(call.voter_ids())} so far)"
                    )
                    return Item(call, run, Outcome.LEFT_OUT, Text.of(why))
                return Item(call, run, Outcome.VOTE)
            return Item(call, run, Outcome.DECIDE)
        if isinstance(judged, Refused):
            return Item(call, run, Outcome.LEFT_OUT, Text.of(judged.said))
        return Item(call, run, Outcome.LEFT_OUT, Text.of(TYPED))  # (a batch types nothing)

    async def submit(
        self, actor: Actor, chosen: list[tuple[str, str]], *, approve: bool, reason: str = "",
        left: list[tuple[str, str]] | None = None,
    ) -> BatchDone | Reply:  # fmt: skip
        """The form submitted: each call named (approval id, version shown) is judged again
        under the policy in force and decided on its own, as a click (`Way.BATCH`), in order;
        one that may not be is left out, with the reason (and not shown at all when the person
        may not see it). `left`: the calls the form left out,
        said again with the reason (nothing is decided on them)."""
        too_long = reason_too_long(reason)
        if too_long is not None:  # one reason for every call: none is decided with it
            return Reply(False, too_long)
        items = []
        counted = True  # one act of review: only its first decision joins a streak
        for call, run, version in await self._named(chosen[:MAX_CALLS]):
            # Every call named is judged (a refusal is audited); one the person may not see
            # (so not decide either) is left out of what the form then shows.
            seen = (await self.may_view(actor, run, call)).allowed
            if call.kind == QUESTION_KIND:  # (the form never names one; the judgement refuses)
                if seen:
                    items.append(await self._judged(actor, call, run, version, approve))
                continue
            reply = await self.decisions.decide(
                actor, call.approval_id, approve=approve, always=False, reason=reason,
                way=Way.BATCH, version=version, counted=counted,
            )  # fmt: skip
            counted = counted and not reply.ok
            if not seen:
                continue
            if not reply.ok:
                items.append(Item(call, run, Outcome.LEFT_OUT, reply.said))
                continue
            after = await self.store.get_call(call.approval_id)
            decided = after is None or after.decided
            items.append(Item(after or call, run, Outcome.DECIDE if decided else Outcome.VOTE))
        if not items:
            return Reply(False, GONE)
        for call, run, version in await self._read(actor, (left or [])[:MAX_CALLS]):
            item = await self._judged(actor, call, run, version, approve)
            why = item.why if item.outcome == Outcome.LEFT_OUT else Text.of(NOT_LISTED)
            items.append(Item(call, run, Outcome.LEFT_OUT, why))
        return BatchDone(approve, items)


TYPED = "This call needs typed confirmation: click Approve on its card and type the value."
