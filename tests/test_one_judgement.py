"""One judgement for every way a call is settled (issue #29): this table crosses each way of
approving (or rejecting) a call with each requirement the policy makes, through signed requests
against the real bot (real Redis, the Slack stand-in). Every way asks `Judgement.settle`; a way
added to `bot.service.judgement.Way` fails `test_every_way_has_a_row_for_every_requirement`
until its row says what each requirement does to it.

Requirements: `none` (the control: the way goes through under a plain policy, so a refusal
below is the requirement's), `approvers` (the actor is not among the rule's approvers),
`quorum` (the rule needs 2 approvers), `self` (the actor asked for the call), `typed`
(`confirm: type`), `scope` (a grant longer than the rule's `grant_max`), `policy_changed`
(after the card was drawn, or the standing decision made, the policy in force routes the call
by its arguments to other approvers), `advice` (the advisor rates the call high risk, and the
policy routes such calls to other approvers; for a standing decision, such a rule came since:
at the later call there is no advice yet), `auto_reject` (after the card was drawn, the policy
in force rejects the call by itself: `auto: reject`). Outcomes: the call was `decided`; a `vote`
was counted;
the confirmation form asks for `typing` (nothing decided); the actor was `refused` (nothing
decided, told why); a standing decision did not settle the later call, which `waits` for a
person on its card; the actor was refused and the call `auto_rejected` by the rule in force.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bot.service.judgement import Way
from bot.service.policy.source import PolicySource
from bot.slack.blocks import (
    ALWAYS_APPROVE,
    APPROVE,
    BATCH_APPROVE,
    BATCH_MODAL,
    CONFIRM_MODAL,
    EDIT,
    GRANT_MODAL,
)
from bot.store.records import CallStatus
from bot.testing.advisors import scripted_advisor
from bot.testing.harness import BotHarness, edit_values, status_line, wait_until
from bot.testing.slack_api import Message
from tests.agents_for_tests import Ledger, assistant_message, function_call, ops_agent, slow_check
from tests.saved_pauses import saved_pause
from tests.test_grants import submit_scope
from tests.test_home import home_click
from tests.test_policy_rules import submit_typed
from tests.test_reactions import react

DECIDED, VOTE, TYPING, REFUSED, WAITS = "decided", "vote", "typing", "refused", "waits"
AUTO = "auto_rejected"
REQUIREMENTS = (
    "none", "approvers", "quorum", "self", "typed", "scope", "policy_changed", "advice",
    "auto_reject",
)  # fmt: skip


def na(why: str) -> str:
    """A requirement that does not concern the way, and why."""
    return f"n/a: {why}"


PERSON = {"none": DECIDED, "approvers": REFUSED, "self": REFUSED, "policy_changed": REFUSED,
          "advice": REFUSED, "auto_reject": AUTO}  # fmt: skip
# A later call is posted under the policy in force, which rejects it by itself: a standing
# decision judged on a call posted before is tests/test_auto_reject.py's.
STANDING = {r: WAITS for r in REQUIREMENTS if r != "none"} | {
    "none": DECIDED, "auto_reject": na("the later call is posted rejected by the rule")
}  # fmt: skip
NO_GRANT = na("it makes no grant")

# way -> requirement -> what happens.
TABLE: dict[str, dict[str, str]] = {
    "click": {**PERSON, "quorum": VOTE, "typed": TYPING, "scope": NO_GRANT},
    # The second approval of a quorum of 2 (U3 approved first); `quorum`: U3 again.
    "vote": {**PERSON, "quorum": REFUSED, "typed": TYPING, "scope": NO_GRANT},
    "home": {**PERSON, "quorum": VOTE, "typed": TYPING, "scope": NO_GRANT},
    "always": {**PERSON, "quorum": REFUSED, "typed": REFUSED, "scope": na("run only: no grant")},
    "grant": {**PERSON, "quorum": REFUSED, "typed": REFUSED, "scope": REFUSED},
    "grant_use": STANDING,
    "earlier_always": {**STANDING, "scope": NO_GRANT},
    # `typed`: the edit would move the call under a rule with `confirm: type` (case 4).
    "edit": {**PERSON, "quorum": VOTE, "typed": REFUSED, "scope": NO_GRANT},
    "edited_call": {**STANDING, "scope": NO_GRANT},
    # `reject:` in the card's thread: one person rejects, and rejecting types nothing.
    # `auto_reject`: a person may still reject the call (theirs, not the rule's).
    "reply": {
        **PERSON,
        "quorum": DECIDED,
        "typed": DECIDED,
        "scope": NO_GRANT,
        "auto_reject": DECIDED,
    },
    # Approve all (#33): each call as a click that typed nothing; `typed`: left out.
    "batch": {**PERSON, "quorum": VOTE, "typed": REFUSED, "scope": NO_GRANT},
    # :white_check_mark: on the card (APPROVAL_BOT_REACTIONS): a click that typed nothing.
    "reaction": {**PERSON, "quorum": VOTE, "typed": REFUSED, "scope": NO_GRANT},
    "rule": {
        "none": DECIDED,
        "approvers": na("no person decides"),
        "quorum": na("no person decides"),
        "self": DECIDED,  # whoever asked, the policy decides by itself
        "typed": na("confirm with auto is a policy error"),
        "scope": NO_GRANT,
        "policy_changed": WAITS,
        "advice": WAITS,  # an auto: approve after a rule on advice: a person decides
        "auto_reject": na("an automatic rejection in force always stands (the rule's own)"),
    },
}
# Why, for a refusal (the actor's `refused` audit entry) or a standing decision that no longer
# holds (its `*_dropped` entry, or the note in the run's thread): by requirement, then by way.
WHY = {
    "approvers": {"": "not among the approvers", "standing": "may no longer decide it"},
    "quorum": {"": "Always decisions are not allowed", "vote": "already approved",
               "standing": "requires 2 approvers", "grant_use": "no longer allows grants"},
    "self": {"": "self-approval is not allowed", "standing": "asked for this call"},
    "typed": {"": "typed confirmation"},
    "scope": {"": "at most 4h"},
    "policy_changed": {"": "not among the approvers", "standing": "may no longer decide it",
                       "grant_use": "no longer allows grants", "rule": "decides it no longer"},
    "advice": {"": "not among the approvers", "standing": "cannot judge",
               "rule": "on the advisor's advice (risk high)"},
    "auto_reject": {"": "rejects this call automatically (rule no-deletes)"},
}  # fmt: skip


def why_of(way: str, requirement: str) -> str:
    found = WHY.get(requirement, {})
    standing = "standing" if way in STANDING_WAYS else ""
    return found.get(way) or found.get(standing) or found.get("", "")


# The judgement's way of each row.
WAYS = {
    "click": Way.CLICK, "vote": Way.CLICK, "home": Way.CLICK, "always": Way.ALWAYS,
    "grant": Way.GRANT, "grant_use": Way.GRANT_USE, "earlier_always": Way.EARLIER_ALWAYS,
    "edit": Way.EDIT, "edited_call": Way.EDITED_CALL, "reply": Way.REPLY, "rule": Way.RULE,
    "batch": Way.BATCH, "reaction": Way.REACTION,
}  # fmt: skip

QUORUM = "    required_approvals: 2\n"
TYPED = "    confirm: type\n"
GRANTS = "    grant_max: 8h\n"
SHORT = "    grant_max: 4h\n"
ROUTED = (
    '  - name: routed\n    match: delete_logs\n    when: {args.path: "/var/log/*"}\n'
    "    approvers: [U3]\n"
)
# The advisor rates every call high (`advice` cells): such calls are U3's alone.
ADVISED = (
    "  - name: advised\n    match: delete_logs\n    when: {advice.risk: high}\n"
    "    approvers: [U3]\n"
)
# Added once the card is drawn (`auto_reject` cells): no call of delete_logs may run.
NO_DELETES = (
    "  - name: no-deletes\n    match: delete_logs\n    auto: reject\n"
    "    reason: deleting logs is forbidden now\n"
)
TYPED_SRV = (
    '  - name: typed-srv\n    match: delete_logs\n    when: {args.path: "/srv/*"}\n'
    "    confirm: type\n"
)


def policy(
    rule: str = "", *, first: str = "", approvers: str = "[U1, U2, U3]", self_ok: bool = False
) -> str:
    """The channel C1 (U1 starts the runs and is among its approvers) and the rule `logs` for
    `delete_logs` (with `rule`'s lines), after the rules `first`."""
    return (
        f"defaults:\n  allow_self_approval: {'true' if self_ok else 'false'}\n"
        f"channels:\n  C1:\n    approvers: {approvers}\n"
        f"tools:\n{first}  - name: logs\n    match: delete_logs\n{rule}"
    )


def test_every_way_has_a_row_for_every_requirement() -> None:
    assert set(WAYS.values()) == set(Way), "a way of the judgement has no row in TABLE"
    assert set(TABLE) == set(WAYS)
    for way, row in TABLE.items():
        assert set(row) == set(REQUIREMENTS), (way, sorted(set(REQUIREMENTS) ^ set(row)))


STANDING_WAYS = ("grant_use", "earlier_always", "edited_call")


@dataclass(frozen=True)
class Cell:
    """How a cell is played: the policy at the start (`first`) and once the card is drawn or
    the standing decision made (`then`), who settles the call (for a standing way: who made
    the decision), and who starts the run the call is settled in."""

    way: str
    requirement: str
    first: str
    then: str
    actor: str = "U2"
    starter: str = "U1"


def cell_of(way: str, requirement: str) -> Cell:
    base = GRANTS if way in ("grant", "grant_use") else ""
    base += QUORUM if way == "vote" else ""
    base += "    auto: approve\n" if way == "rule" else ""
    plain = policy(base)
    standing = way in STANDING_WAYS
    made = Cell(way, requirement, plain, plain)
    if requirement == "approvers":
        if standing:  # its maker is no longer among the approvers
            return Cell(way, requirement, plain, policy(base, approvers="[U1, U3]"))
        return Cell(way, requirement, plain, plain, actor="U4")
    if requirement == "quorum":
        if way == "vote":
            return Cell(way, requirement, plain, plain, actor="U3")  # a second vote of U3
        if standing:
            return Cell(way, requirement, plain, policy(base + QUORUM))
        return Cell(way, requirement, policy(base + QUORUM), policy(base + QUORUM))
    if requirement == "self":
        if way == "grant_use":  # the grantor starts the later run
            return Cell(way, requirement, plain, plain, starter="U2")
        if standing:  # the starter made it, self-approval allowed then, no longer
            return Cell(way, requirement, policy(base, self_ok=True), plain, actor="U1")
        return Cell(way, requirement, plain, plain, actor="U1")
    if requirement == "typed":
        if way == "edit":  # the edited arguments fall under a rule with confirm: type
            typed = policy(base, first=TYPED_SRV)
            return Cell(way, requirement, typed, typed)
        if standing:
            return Cell(way, requirement, plain, policy(base + TYPED))
        return Cell(way, requirement, policy(base + TYPED), policy(base + TYPED))
    if requirement == "scope":
        if way == "grant":  # a crafted submission asks for 8h
            return Cell(way, requirement, policy(SHORT), policy(SHORT))
        return Cell(way, requirement, plain, policy(SHORT))
    if requirement == "policy_changed":
        return Cell(way, requirement, plain, policy(base, first=ROUTED))
    if requirement == "advice":  # (#33 part 2) the advisor rates the call high: U3's
        advised = policy(base, first=ADVISED + (QUORUM if way == "vote" else ""))
        if standing:  # a rule on advice since: at the later call, no advice yet
            return Cell(way, requirement, plain, advised)
        return Cell(way, requirement, advised, advised)
    if requirement == "auto_reject":
        return Cell(way, requirement, plain, policy(base, first=NO_DELETES))
    return made


@dataclass
class Bench:
    """One cell's bot, its policy file, and what the tools did."""

    bot: BotHarness
    cell: Cell
    path: Path
    source: PolicySource
    ledger: Ledger
    started: asyncio.Event
    release: asyncio.Event
    settled_before: set[str] = field(default_factory=set)
    """The calls decided before the later one (their cards may still show buttons a moment)."""

    def change(self) -> None:
        """The policy in force becomes the cell's `then`."""
        if self.cell.then != self.path.read_text():
            self.path.write_text(self.cell.then)
            assert self.source.reload()

    async def status(self, approval_id: str) -> tuple[CallStatus, list[str]]:
        call = await self.bot.runtime.service.store.get_call(approval_id)
        assert call is not None
        return call.status, call.voter_ids()

    async def seen(self, approval_id: str, views: int) -> str:
        """What the actor's attempt did to the call (`views`: forms opened before it)."""
        await self.bot.idle()
        actor = self.cell.actor
        status, voters = await self.status(approval_id)
        told = [e for e in await self.bot.audit() if e["kind"] == "refused"]
        call = await self.bot.runtime.service.store.get_call(approval_id)
        if status == CallStatus.REJECTED and call is not None and call.decided_by == "policy":
            assert [e for e in told if e.get("user") == actor], (actor, told)
            return AUTO
        if status in (CallStatus.APPROVED, CallStatus.REJECTED):
            return DECIDED
        if actor in voters and not (self.cell.way == "vote" and actor == "U3"):
            return VOTE
        opened = [v["view"]["callback_id"] for v in self.bot.slack_api.views[views:]]
        if CONFIRM_MODAL in opened:
            return TYPING
        assert [e for e in told if e.get("user") == actor], (actor, told)
        return REFUSED

    async def approved(self, approval_id: str) -> None:
        async def done() -> bool:
            return (await self.status(approval_id))[0] == CallStatus.APPROVED

        await wait_until(done, what="the standing decision's call approved")

    async def card(self) -> Message:
        [card] = await self.bot.wait_for_approvals(1)
        return card

    async def later(self) -> str:
        """The run goes on (it waited in an ungated tool) under `then`, to the call a standing
        decision is to settle: decided (the run finishes), or waiting on a card."""
        await wait_until(self.started.is_set, what="the run between its pauses")
        self.change()
        self.release.set()
        return await self.settled()

    async def settled(self, runs: int = 1) -> str:
        """Whether the later call (of the `runs`-th run) was decided or waits on a card."""

        def found() -> str:
            cards = [m for m in self.bot.slack_api.approval_messages() if m.action_ids()]
            if [m for m in cards if approval_of(m) not in self.settled_before]:
                return WAITS
            started = [m for m in self.bot.slack_api.top_level() if "started agent" in m.all_text()]
            last = started[runs - 1] if len(started) >= runs else None
            return DECIDED if last is not None and "finished" in status_line(last) else ""

        outcome: str = await wait_until(found, what="the later call settled or waiting")
        await self.bot.idle()
        return outcome


def approval_of(card: Message) -> str:
    return card.button_value(APPROVE).split(":")[0]


async def clicked(bench: Bench, action: str, *, home: bool = False) -> str:
    """The actor clicks `action` on the card drawn under `first`, once `then` is in force."""
    card = await bench.card()
    bench.change()
    value, actor, approval = card.button_value(APPROVE), bench.cell.actor, approval_of(card)
    views = len(bench.bot.slack_api.views)
    if home:
        await bench.bot.slack.send_interaction(home_click(bench.bot, action, value, actor))
    else:
        await bench.bot.slack.click(action, value, user=actor, channel="C1", message_ts=card.ts)
    return await bench.seen(approval, views)


async def approve_typed(bench: Bench, card: Message, user: str) -> None:
    """`user` approves by typing the tool's name in the confirmation form."""
    view = await bench.bot.modal(card, APPROVE, user=user)
    await submit_typed(bench.bot, view, user, "delete_logs")


async def vote(bench: Bench) -> str:
    card = await bench.card()
    if "confirm" in bench.cell.first:
        await approve_typed(bench, card, "U3")
    else:
        await bench.bot.click(card, APPROVE, user="U3")
    await bench.bot.idle()
    assert (await bench.status(approval_of(card)))[1] == ["U3"]
    return await clicked(bench, APPROVE)


async def grant(bench: Bench) -> str:
    card = await bench.card()
    views = len(bench.bot.slack_api.views)
    actor, value, approval = bench.cell.actor, card.button_value(APPROVE), approval_of(card)
    await bench.bot.slack.click(ALWAYS_APPROVE, value, user=actor, channel="C1",
                                message_ts=card.ts)  # fmt: skip
    await bench.bot.idle()
    forms = [v["view"] for v in bench.bot.slack_api.views[views:]]
    bench.change()
    if forms and forms[0]["callback_id"] == GRANT_MODAL:  # submitted as it opened, for 8h
        await submit_scope(bench.bot, forms[0], actor, str(8 * 3600))
    return await bench.seen(approval, views)


async def grant_use(bench: Bench) -> str:
    card = await bench.card()
    bench.settled_before.add(approval_of(card))
    views = len(bench.bot.slack_api.views)
    await bench.bot.click(card, ALWAYS_APPROVE, user=bench.cell.actor)
    await wait_until(lambda: len(bench.bot.slack_api.views) > views, what="the grant form")
    view = bench.bot.slack_api.views[-1]["view"]
    sent = await submit_scope(bench.bot, view, bench.cell.actor, str(8 * 3600))
    assert sent.status == 200 and not sent.text, sent.text
    await bench.bot.wait_for_status("finished")
    await bench.bot.idle()
    bench.change()
    await bench.bot.slack.command("clean b", user=bench.cell.starter, channel="C1")
    return await bench.settled(runs=2)


async def earlier_always(bench: Bench) -> str:
    card = await bench.card()
    approval = approval_of(card)
    await bench.bot.click(card, ALWAYS_APPROVE, user=bench.cell.actor)
    bench.settled_before.add(approval)
    await bench.approved(approval)  # (the run then waits in its ungated check)
    return await bench.later()


async def edit(bench: Bench) -> str:
    card = await bench.card()
    views = len(bench.bot.slack_api.views)
    actor, approval = bench.cell.actor, approval_of(card)
    await bench.bot.slack.click(EDIT, card.button_value(APPROVE), user=actor, channel="C1",
                                message_ts=card.ts)  # fmt: skip
    await bench.bot.idle()
    forms = [v["view"] for v in bench.bot.slack_api.views[views:]]
    bench.change()
    if forms:
        target = "/srv/db" if "typed-srv" in bench.cell.then else "/var/log/app"
        await bench.bot.slack.submit(forms[0], edit_values(forms[0], {"field:path": target}),
                                     user=actor)  # fmt: skip
    return await bench.seen(approval, views)


async def edited_call(bench: Bench) -> str:
    card = await bench.card()
    approval = approval_of(card)
    view = await bench.bot.open_edit(card, user=bench.cell.actor)
    sent = await bench.bot.slack.submit(
        view, edit_values(view, {"field:path": "/var/log/app"}), user=bench.cell.actor
    )
    assert sent.status == 200 and not sent.text, sent.text
    bench.settled_before.add(approval)
    await bench.approved(approval)  # (the run then waits in its ungated check)
    return await bench.later()


async def reply(bench: Bench) -> str:
    card = await bench.card()
    bench.change()
    views, approval = len(bench.bot.slack_api.views), approval_of(card)
    await bench.bot.slack.thread_reply("reject: not now", user=bench.cell.actor, channel="C1",
                                       thread_ts=card.ts)  # fmt: skip
    return await bench.seen(approval, views)


async def batch(bench: Bench) -> str:
    """Approve all on the run message (its value: the run's id), then the form submitted once
    `then` is in force; when no form opened (nothing the actor may decide), a crafted
    submission naming the call: judged again, it decides nothing."""
    card = await bench.card()
    actor, approval = bench.cell.actor, approval_of(card)
    views = len(bench.bot.slack_api.views)
    run_message = bench.bot.run_message()
    await bench.bot.slack.click(BATCH_APPROVE, approval.split(".")[0], user=actor, channel="C1",
                                message_ts=run_message.ts)  # fmt: skip
    await bench.bot.idle()
    forms = [v["view"] for v in bench.bot.slack_api.views[views:]]
    bench.change()
    calls = [card.button_value(APPROVE)]
    crafted = {"approve": True, "calls": calls, "left": [], "channel": "C1"}
    view = forms[0] if forms else {"callback_id": BATCH_MODAL,
                                   "private_metadata": json.dumps(crafted)}  # fmt: skip
    sent = await bench.bot.slack.submit(view, {}, user=actor)
    assert sent.status == 200
    return await bench.seen(approval, views)


async def reaction(bench: Bench) -> str:
    """A :white_check_mark: on the card, once `then` is in force."""
    card = await bench.card()
    bench.change()
    views, approval = len(bench.bot.slack_api.views), approval_of(card)
    sent = await react(bench.bot, card, "white_check_mark", bench.cell.actor)
    assert sent.status == 200
    return await bench.seen(approval, views)


async def rule(bench: Bench) -> str:
    if bench.cell.requirement == "advice":  # a card: a person decides
        return await bench.settled()
    if bench.cell.requirement != "policy_changed":
        await bench.bot.wait_for_status("finished")
        await bench.bot.idle()
        decided = [e["decision"] for e in await bench.bot.audit() if e["kind"] == "decided"]
        return DECIDED if decided == ["auto_approve"] else REFUSED
    # Posted for an automatic approval, applied under `then` (as the sweeper applies a pause
    # whose worker stopped after saving it): the call waits for a person.
    return await auto_decided_later(bench)


async def auto_decided_later(bench: Bench) -> str:
    run_id, _ = await saved_pause(bench.bot, {
        "arguments": json.dumps({"path": "/var/log/a"}), "auto": "approve", "rule": "logs",
    })  # fmt: skip
    service, store = bench.bot.runtime.service, bench.bot.runtime.service.store
    bench.change()
    paused = await store.get_run(run_id)
    assert paused is not None
    await service.runs.auto_decide(paused)
    [after] = await store.pause_calls(run_id)
    return WAITS if after.status == CallStatus.PENDING and after.rule == "routed" else DECIDED


DRIVERS: dict[str, Callable[[Bench], Awaitable[str]]] = {
    "click": lambda bench: clicked(bench, APPROVE),
    "vote": vote,
    "home": lambda bench: clicked(bench, APPROVE, home=True),
    "always": lambda bench: clicked(bench, ALWAYS_APPROVE),
    "grant": grant,
    "grant_use": grant_use,
    "earlier_always": earlier_always,
    "edit": edit,
    "edited_call": edited_call,
    "reply": reply,
    "rule": rule,
    "batch": batch,
    "reaction": reaction,
}


def steps(way: str) -> list[Any]:
    """What the agent does: one call, or a call, then (while the policy changes) an ungated
    check, then the call a standing decision is to settle; or two runs of one call."""
    first = [function_call("delete_logs", {"path": "/var/log/a"}, call_id="c1")]
    done = [assistant_message("done")]
    if way == "grant_use":
        again = [function_call("delete_logs", {"path": "/var/log/b"}, call_id="c2")]
        return [first, done, again, done]
    if way in ("earlier_always", "edited_call"):
        path = "/var/log/app" if way == "edited_call" else "/var/log/b"
        check = [function_call("slow_check", {"host": "h"}, call_id="s1")]
        return [first, check, [function_call("delete_logs", {"path": path}, call_id="c2")],
                done]  # fmt: skip
    return [first, done]


def high(card: dict[str, Any]) -> dict[str, Any]:
    """The advisor of the `advice` cells: every call is high risk."""
    return {"risk": "high", "rationale": "Deletes logs.", "concerns": []}


CELLS = [(w, r) for w, row in TABLE.items() for r, outcome in row.items() if "n/a" not in outcome]


@pytest.mark.parametrize(("way", "requirement"), CELLS, ids=[f"{w}-{r}" for w, r in CELLS])
async def test_each_way_under_each_requirement(
    redis_url: str, tmp_path: Path, way: str, requirement: str
) -> None:
    cell = cell_of(way, requirement)
    path = tmp_path / "policy.yml"
    path.write_text(cell.first)
    source = PolicySource.from_file(path)
    ledger, started, release = Ledger(), asyncio.Event(), asyncio.Event()
    agent, _ = ops_agent(steps(way), ledger, extra_tools=[slow_check(ledger, started, release)])
    advisor = scripted_advisor(high) if requirement == "advice" else None
    async with BotHarness(
        redis_url, agent, source, settings={"reactions": True}, advisor=advisor
    ) as bot:
        bench = Bench(bot, cell, path, source, ledger, started, release)
        if way != "rule" or requirement != "policy_changed":
            await bot.slack.command("clean", user="U1", channel="C1")
        outcome = await DRIVERS[way](bench)
        release.set()
        if (way, requirement) != ("rule", "policy_changed"):  # (its worker was stopped)
            await bot.idle()
        assert max(bot.slack.statuses or [200]) < 500, bot.slack.statuses
        told = [
            e.get("detail", "") for e in await bot.audit()
            if e["kind"] in ("refused", "always_dropped", "grant_dropped", "routed")
            and e.get("user", cell.actor) == cell.actor
        ] + [m.text for m in bot.slack_api.messages.values() if m.thread_ts]  # fmt: skip
    assert outcome == TABLE[way][requirement], (way, requirement, outcome)
    if outcome in (REFUSED, WAITS, AUTO):
        assert any(why_of(way, requirement) in t for t in told), (why_of(way, requirement), told)
    if outcome in (REFUSED, TYPING, VOTE, WAITS, AUTO) and way != "rule":
        # Nothing ran that the requirement kept back (standing ways: the later call).
        ran = [a["path"] for n, a in ledger.executed if n == "delete_logs"]
        assert ran == (["/var/log/a"] if way in ("grant_use", "earlier_always") else []), ran
