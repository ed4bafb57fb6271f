"""What people ask about their runs: cancel one, see where one stands, list what waits for them.

Cancelling is allowed to the run's starter, the approvers of the run's channel and those of the
rules governing the calls of its latest pause (`Authorizer.may_manage`): a rule scoped to another
agent, or to tools the run never waited on, gives no rights over it; seeing a run's status too.
"Waiting for me" lists exactly the calls a click by this person would decide now: the same
authorization as a click. It reads only the channels where the person could decide something
(`bot.service.policy.reach`, from each channel's index of unfinished runs), so its cost follows the
runs of those channels, not every paused run of the deployment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from bot.service.audit import AuditKind
from bot.service.core import ServiceCore
from bot.service.decisions.grants import Grants, GrantView
from bot.service.digest import digest_of
from bot.service.judgement import Judgement, Ruled
from bot.service.policy.gate import rule_for, subject_of_call
from bot.service.policy.reach import decider_principals
from bot.service.policy.rules import CallRule, Policy, Verdict
from bot.service.ports import Actor
from bot.service.replies import Code, Mention, Reply, Text, said, when
from bot.store import keys
from bot.store.parts.edits import EditRecord
from bot.store.parts.turns import FollowUp, TurnRecord
from bot.store.records import CallRecord, RunRecord, RunStatus

MAX_LISTED = 20
MAX_SCANNED = 1000  # paused runs a list or a batch of App Homes looks at (the oldest first)


@dataclass(frozen=True)
class RunView:
    """One run and the calls of its current pause still waiting for a decision."""

    run: RunRecord
    waiting: list[CallRecord] = field(default_factory=list)
    edits: list[EditRecord] = field(default_factory=list)
    """The run's edited calls (`/agent status`): who edited what, both digests."""
    turns: list[TurnRecord] = field(default_factory=list)
    """Its follow-up turns (`/agent status`): who said what in its thread, how each ended."""
    queued: list[FollowUp] = field(default_factory=list)
    """Follow-ups waiting for the turn going on to end."""


@dataclass(frozen=True)
class Waiting:
    """A call this person may decide now, with its run."""

    run: RunRecord
    call: CallRecord


@dataclass
class Pending:
    """The calls waiting for a decision, read once for many people: (run, call, the rule the
    policy in force gives it), oldest first; and every call of the runs read, by run id."""

    policy: Policy
    calls: dict[str, list[CallRecord]]
    items: list[tuple[RunRecord, CallRecord, CallRule | None]] = field(default_factory=list)


@dataclass(frozen=True)
class Overview:
    """What `/agent list` and the App Home show one person."""

    mine: list[Waiting]  # calls waiting for this person's decision, oldest first
    runs: list[RunView]  # the channel's unfinished runs (list) or the person's own (Home)
    grants: list[GrantView] = field(default_factory=list)  # the Home's: those they can see


def bad_run_id(text: str) -> Text:
    """The refusal for something that is not a run id (empty when it is one)."""
    if keys.RUN_ID_RE.match(text):
        return Text()
    example = Code("run 0123456789abcdef")
    if not text:
        return said(
            "Which run? Give its id, as shown on the run message ({example}).", example=example
        )
    return said(
        "{text} is not a run id: a run id is 16 characters of 0-9 and a-f, shown on the run "
        "message ({example}).",
        text=Code(text, 40),
        example=example,
    )


class People:
    """Cancel, status and the lists of what waits for whom."""

    def __init__(self, core: ServiceCore, judgement: Judgement) -> None:
        self.core = core
        self.store = core.store
        self.judgement = judgement
        self.grants = Grants(core)

    async def _managed(self, actor: Actor, run_id: str) -> RunRecord | Reply:
        """The run, if `actor` may cancel it or see its status; otherwise the answer."""
        refusal = bad_run_id(run_id)
        if refusal:
            return Reply(False, refusal)
        run = await self.store.get_run(run_id)
        if run is None:
            return Reply(
                False,
                said(
                    "There is no run {run} (or it is too old to be kept). Its id is shown on its "
                    "run message.",
                    run=Code(run_id),
                ),
            )
        policy = self.core.policies.current().policy.for_team(run.team_id)
        calls = [
            (c.agent, c.tool, subject_of_call(c)) for c in await self.store.pause_calls(run.run_id)
        ]
        verdict: Verdict = await self.core.authorizer.may_manage(
            policy,
            actor,
            run_team=run.team_id,
            run_starter=run.user_id,
            channel=run.channel_id,
            calls=calls,
        )
        if not verdict.allowed:
            return Reply(False, verdict.said)
        return run

    async def cancel_run(self, actor: Actor, run_id: str) -> Reply:
        """Cancel a run: its pending calls and the run become `cancelled`; an execution in
        progress stops before its next model call. Harmless when repeated."""
        run = await self._managed(actor, run_id.strip())
        if isinstance(run, Reply):
            if run_id.strip() and keys.RUN_ID_RE.match(run_id.strip()):
                known = await self.store.get_run(run_id.strip())
                if known is not None:
                    await self.core.audit(
                        AuditKind.REFUSED, run=known, actor=actor, decision="cancel",
                        detail=run.text,
                    )  # fmt: skip
            return run
        result = await self.store.cancel(
            run.run_id,
            team=actor.team_id,
            user=actor.user_id,
            pause=run.call_ids(),
            channel=run.channel_id,
        )
        if result.outcome == "already":
            return Reply(
                False,
                Text(
                    (
                        "This run was already cancelled by ",
                        Mention(result.by),
                        f" at {when(result.at)}. Nothing changed.",
                    )
                ),
            )
        if result.outcome == "ended":
            return Reply(
                False,
                f"This run already {result.status}; there is nothing left to cancel.",
            )
        if result.outcome == "missing":
            return Reply(False, said("There is no run {run} any more.", run=Code(run.run_id)))
        detail = f"was {result.status}"
        if result.calls:
            detail += f"; {len(result.calls)} pending call(s) cancelled: " + ", ".join(result.calls)
        await self.core.audit(
            AuditKind.CANCELLED, run=run, actor=actor, decision="cancel", detail=detail
        )
        for approval_id in result.calls:
            call = await self.store.get_call(approval_id)
            if call is not None:
                await self.core.audit(
                    AuditKind.CANCELLED, call=call, actor=actor, decision="cancel"
                )
        calls = f" and its {len(result.calls)} pending call(s)" if result.calls else ""
        return Reply(True, said("Cancelled run {run}{calls}.", run=Code(run.run_id), calls=calls))

    async def run_status(self, actor: Actor, run_id: str) -> RunView | Reply:
        """Where a run stands (for its starter and the channel's approvers)."""
        run = await self._managed(actor, run_id.strip())
        if isinstance(run, Reply):
            return run
        waiting = []
        if run.status == RunStatus.PAUSED:
            waiting = [c for c in await self.store.pause_calls(run.run_id) if not c.decided]
        turns, queued = await self.store.turns.conversation(run.run_id)
        return RunView(run, waiting, await self.store.edits(run.run_id), turns, queued)

    async def _unfinished(self) -> list[RunRecord]:
        runs = await self.store.get_runs(await self.store.active_runs())
        return sorted((r for r in runs if not r.ended), key=lambda r: r.created_at)

    async def _reach(self, policy: Policy, actor: Actor, sizes: dict[str, int]) -> set[str]:
        """The channels with unfinished runs where `actor` could decide something under
        `policy` (see `bot.service.policy.reach`): the only ones read for them. A superset, never a
        grant: a user group or channel lookup that fails leaves its channel out, as it would
        refuse each of its calls."""
        found = set()
        for channel, size in sizes.items():
            principals = decider_principals(policy, channel) if size else ()
            if (
                principals
                and (await self.core.authorizer.is_among(actor, principals, channel)).allowed
            ):
                found.add(channel)
        return found

    async def _gather(
        self, policy: Policy, actors: list[Actor], channel: str = ""
    ) -> tuple[Pending, list[set[str] | None], list[RunRecord]]:
        """What a list or a batch of App Homes reads, once for all of `actors`: the pending
        calls of the channels where one of them could decide something (`_reach`, each
        person's returned beside: None means every channel), and `channel`'s unfinished runs
        (for a list), oldest first. Four round trips; what is read follows the runs of those
        channels, not every paused run of the deployment. Until the channel indexes are
        complete (the first start after the upgrade), every active run is read, as before."""
        sizes = await self.store.channel_sizes(list(policy.channels))
        if sizes is None:
            runs = await self._unfinished()
            here = [r for r in runs if r.channel_id == channel] if channel else []
            return await self._pending(policy, runs, here), [None] * len(actors), here
        reaches = [await self._reach(policy, actor, sizes) for actor in actors]
        wanted = set[str]().union(*reaches)
        entries = await self.store.channel_runs(
            sorted(wanted), [channel] if channel else [], MAX_SCANNED
        )
        # And each person's own latest runs: the starter may answer their run's questions.
        own = await self.store.recent_run_ids([(a.team_id, a.user_id) for a in actors], MAX_LISTED)
        unique = list(dict.fromkeys([*(run_id for _, run_id in entries), *own]))
        found = dict(zip(unique, await self.store.runs(unique), strict=True))
        # Left by a process that stopped between a run's end and its index write: dropped.
        live = {i: r for i, r in found.items() if r is not None and not r.ended}
        await self.store.drop_from_channels([(c, i) for c, i in entries if i not in live])
        runs = sorted(live.values(), key=lambda r: r.created_at)
        judged = [r for r in runs if r.channel_id in wanted or r.run_id in own]
        here = [r for r in runs if r.channel_id == channel] if channel else []
        return await self._pending(policy, judged, here), list(reaches), here

    async def _pending(
        self, policy: Policy, runs: list[RunRecord], shown: Sequence[RunRecord] = ()
    ) -> Pending:
        """The calls waiting for a decision in these runs (whoever may decide them), oldest
        first, each with the rule the policy in force gives it: read once for everyone a list
        or a batch of App Homes is made for. At most `MAX_SCANNED` paused runs are looked at
        (the oldest). The calls of the latest `MAX_LISTED` runs of `shown` are read too (a
        list shows them)."""
        paused = [r for r in runs if r.status == RunStatus.PAUSED][:MAX_SCANNED]
        listed = [r for r in shown[-MAX_LISTED:] if r.status == RunStatus.PAUSED]
        read = list({r.run_id: r for r in [*paused, *listed]}.values())
        calls = await self.store.calls_of_pauses(read)
        pending = Pending(policy, calls)
        for run in paused:
            for call in calls[run.run_id]:
                if call.decided or call.auto or call.pause != run.pause:
                    continue
                if digest_of(call) != call.digest:
                    continue
                pending.items.append((run, call, rule_for(policy, run, call)))
        pending.items.sort(key=lambda item: (item[1].paused_at, item[1].index))
        return pending

    async def _mine(
        self, actor: Actor, pending: Pending, channels: set[str] | None = None
    ) -> list[Waiting]:
        """The first `MAX_LISTED` pending calls `actor` may decide now (only those of
        `channels`, the ones where they could decide something, when given)."""
        found: list[Waiting] = []
        for run, call, rule in pending.items:
            mine = run.user_id == actor.user_id and run.team_id == actor.team_id
            if channels is not None and run.channel_id not in channels and not mine:
                continue
            if actor.user_id in call.voter_ids():
                continue
            if await self.judgement.may_decide(actor, run, call, Ruled(pending.policy, rule)):
                found.append(Waiting(run, call))
                if len(found) == MAX_LISTED:
                    break
        return found

    async def waiting_for(self, actor: Actor, runs: list[RunRecord] | None = None) -> list[Waiting]:
        """The calls `actor` may decide now (what a click of theirs would record), oldest
        first: pending, in the run's current pause, not decided by a rule, not yet approved by
        them (quorum), and allowed by the policy in force. `runs`: look only at these."""
        policy = self.core.policies.current().policy.for_team(actor.team_id)
        if runs is not None:
            return await self._mine(actor, await self._pending(policy, runs))
        pending, (channels,), _ = await self._gather(policy, [actor])
        return await self._mine(actor, pending, channels)

    async def overview(self, actor: Actor, channel: str) -> Overview | Reply:
        """`/agent list`: first what waits for this person (anywhere), then the channel's
        unfinished runs. Nothing for a person of a workspace this bot does not serve; at most
        `lists_per_minute` lists a minute per person."""
        policy = self.core.policies.current().policy
        if not self.core.authorizer.served(policy, actor).allowed:
            return Overview([], [])
        wait = await self.core.admission.ask(
            actor.team_id, actor.user_id, self.core.limits.lists_per_minute
        )
        if wait:
            return Reply(
                False,
                f"You are asking for lists faster than this bot allows "
                f"({self.core.limits.lists_per_minute} a minute). Try again in {wait} "
                f"second{'s' if wait != 1 else ''}.",
            )
        pending, (channels,), runs = await self._gather(
            policy.for_team(actor.team_id), [actor], channel
        )
        mine = await self._mine(actor, pending, channels)
        here = [r for r in runs if r.team_id == actor.team_id]
        views = [self._view_of(r, pending.calls) for r in here[-MAX_LISTED:]]
        return Overview(mine, views)

    async def home(self, actor: Actor, recent: int = 10) -> Overview:
        """The App Home of one person: what waits for their decision, and their own runs."""
        return (await self.homes([actor], recent))[0]

    async def homes(self, actors: list[Actor], recent: int = 10) -> list[Overview]:
        """The App Homes of several people (a publisher's batch): what they could decide is
        read once for all of them."""
        policy = self.core.policies.current().policy
        served = list(
            dict.fromkeys(a for a in actors if self.core.authorizer.served(policy, a).allowed)
        )
        reach: dict[Actor, tuple[Pending, set[str] | None]] = {}
        for team in dict.fromkeys(a.team_id for a in served):  # each under its team's policy
            group = [a for a in served if a.team_id == team]
            pending, reaches, _ = await self._gather(policy.for_team(team), group)
            reach.update((a, (pending, r)) for a, r in zip(group, reaches, strict=True))
        out: list[Overview] = []
        for actor in actors:
            if actor not in reach:
                out.append(Overview([], []))
                continue
            pending, channels = reach[actor]
            mine = await self._mine(actor, pending, channels)
            own = await self.store.recent_runs(actor.team_id, actor.user_id, recent)
            grants = await self.grants.visible(actor)
            out.append(Overview(mine, [await self._view(r) for r in own], grants))
        return out

    @staticmethod
    def _view_of(run: RunRecord, calls: dict[str, list[CallRecord]]) -> RunView:
        """A run's view from calls already read."""
        waiting = []
        if run.status == RunStatus.PAUSED:
            waiting = [c for c in calls.get(run.run_id, []) if not c.decided]
        return RunView(run, waiting)

    async def _view(self, run: RunRecord) -> RunView:
        waiting = []
        if run.status == RunStatus.PAUSED:
            waiting = [c for c in await self.store.pause_calls(run.run_id) if not c.decided]
        return RunView(run, waiting)
