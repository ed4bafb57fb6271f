"""Whether approvals are real (#33 part 3), as it happens: who opened what lies behind a card
is audited, and an approver whose approvals come quickly many times in a row is told
privately (the rubber-stamp alarm), with the alarm in the audit trail. Through signed
requests, against the real bot."""

from __future__ import annotations

from typing import Any

from agents.testing import assistant_message, function_call

from bot import metrics
from bot.slack.blocks import APPROVE, SHOW_ALL, SHOW_CONVERSATION
from bot.store.delivery.outbox import Shown
from bot.store.trail.attention import Past, attention_of, streak_of
from bot.testing.harness import BotHarness, wait_until
from bot.testing.requests import Sent
from bot.testing.slack_api import Message
from tests.agents_for_tests import POLICY, Ledger, ops_agent

# Every approval is quick (within an hour of its card), three in a row raise the alarm.
ALARM = {"rubber_stamp_streak": 3, "rubber_stamp_seconds": 3600}


def deletes(count: int) -> list[Any]:
    """One model turn that asks to delete `count` paths at once (one pause), then an answer."""
    calls = [function_call("delete_logs", {"path": f"/var/log/{n}"}, call_id=f"d{n}")
             for n in range(count)]  # fmt: skip
    return [calls, [assistant_message("done")]]


async def show(bot: BotHarness, card: Message, action: str, user: str) -> Sent:
    """`user` clicks Show all or Show conversation on `card`."""
    approval_id = card.accessory_value(SHOW_ALL)  # (Show conversation is in the More menu)
    return await bot.slack.click(
        action, approval_id, user=user, channel=card.channel, message_ts=card.ts
    )


async def entries(bot: BotHarness, kind: str) -> list[dict[str, str]]:
    return [e for e in await bot.audit() if e["kind"] == kind]


async def decide_all(bot: BotHarness, cards: list[Message], decisions: list[str]) -> None:
    for card, decision in zip(cards, decisions, strict=True):
        if decision == "approve":
            sent = await bot.click(card, APPROVE, user="U2")
            assert sent.status == 200
        else:
            await bot.reject(card, user="U2", reason="not this one")


async def test_approvals_in_a_row_raise_the_alarm_privately(redis_url: str) -> None:
    agent, _ = ops_agent(deletes(3), Ledger())
    async with BotHarness(redis_url, agent, POLICY, settings=ALARM) as bot:
        await bot.slack.command("clean up", user="U1", channel="C1")
        cards = await bot.wait_for_cards(3)
        await decide_all(bot, cards, ["approve"] * 3)
        await bot.wait_for_status("finished")
        told = await wait_until(
            lambda: [t for t in bot.slack_api.ephemeral_to("U2") if "in a row" in t],
            what="the alarm",
        )
        assert "You have approved 3 calls in a row, each within 3600 seconds" in told[0]
        await bot.idle()
        alarms = await entries(bot, "rubber_stamp")
        assert [(a["user"], a["channel"], a["decision"]) for a in alarms] == [("U2", "C1", "alarm")]
        assert alarms[0]["detail"] == "3 approvals in a row, each within 3600 s"
        # Nobody else was told.
        assert not any("in a row" in t for t in bot.slack_api.ephemeral_to("U1"))


async def test_a_rejection_ends_the_streak(redis_url: str) -> None:
    agent, _ = ops_agent(deletes(4), Ledger())
    async with BotHarness(redis_url, agent, POLICY, settings=ALARM) as bot:
        await bot.slack.command("clean up", user="U1", channel="C1")
        cards = await bot.wait_for_cards(4)
        await decide_all(bot, cards, ["approve", "approve", "reject", "approve"])
        await bot.wait_for_status("finished")
        await bot.idle()
        decided = await entries(bot, "decided")
        assert [e["decision"] for e in decided] == ["approve", "approve", "reject", "approve"]
        assert await entries(bot, "rubber_stamp") == []
        assert not any("in a row" in t for t in bot.slack_api.ephemeral_to("U2"))


async def test_opening_show_all_or_the_conversation_is_audited(redis_url: str) -> None:
    long = "x" * 5000  # folded on the card: Show all opens the whole call
    steps = [[function_call("delete_logs", {"path": long}, call_id="d1")],
             [assistant_message("done")]]  # fmt: skip
    agent, _ = ops_agent(steps, Ledger())
    async with BotHarness(redis_url, agent, POLICY) as bot:
        card = await bot.start_and_wait("clean up", user="U1")
        approval_id = card.accessory_value(SHOW_ALL)
        for action, user in ((SHOW_ALL, "U3"), (SHOW_CONVERSATION, "U2")):
            opened = len(bot.slack_api.views) + 1
            sent = await show(bot, card, action, user)
            assert sent.status == 200
            await wait_until(lambda n=opened: len(bot.slack_api.views) >= n, what="the modal")
        viewed = await wait_until(lambda: _at_least(bot, "viewed", 2), what="two views")
        assert sorted((v["user"], v["decision"]) for v in viewed) == [
            ("U2", "conversation"),
            ("U3", "show_all"),
        ]
        assert {v["approval_id"] for v in viewed} == {approval_id}
        # Someone who may not see the card opens nothing, and nothing is audited.
        sent = await show(bot, card, SHOW_ALL, "U9")
        await wait_until(lambda: bot.slack_api.ephemeral_to("U9"), what="the refusal")
        await bot.idle()
        assert len(await entries(bot, "viewed")) == 2


async def _at_least(bot: BotHarness, kind: str, count: int) -> list[dict[str, str]] | None:
    found = await entries(bot, kind)
    return found if len(found) >= count else None


def sample(name: str, channel: str = "C1") -> float:
    return metrics.REGISTRY.get_sample_value(name, {"channel": channel}) or 0.0


async def test_a_folded_card_decided_unopened_is_counted(redis_url: str) -> None:
    """The card's reading is recorded with its ts (its characters, its arguments folded); a
    decision on a folded card without opening what it hides is counted, one after opening is
    not, and a decision quicker than the card can be read is counted as such."""
    steps = [[function_call("delete_logs", {"path": "x" * 5000}, call_id=f"d{n}")
              for n in range(2)], [assistant_message("done")]]  # fmt: skip
    agent, _ = ops_agent(steps, Ledger())
    # Nobody reads a card in a thousandth of a second: both decisions are too fast.
    slow = {"review_read_chars_per_second": 0.001}
    async with BotHarness(redis_url, agent, POLICY, settings=slow) as bot:
        await bot.slack.command("clean up", user="U1", channel="C1")
        first, second = await bot.wait_for_cards(2)
        run_id = str((first.metadata or {})["event_payload"]["run_id"])
        shown = await bot.runtime.service.store.outbox.shown(run_id)
        cards = [v for k, v in shown.items() if k.startswith("card:")]
        assert len(cards) == 2 and all(c.folded and c.card_chars > 500 for c in cards)
        posted = await wait_until(lambda: _at_least(bot, "card_shown", 2), what="cards audited")
        assert {(e["decision"], e["detail"]) for e in posted} == {
            ("folded", f"{c.card_chars} characters") for c in cards
        }
        unopened, fast = sample("approval_bot_review_unopened_total"), sample(
            "approval_bot_review_too_fast_total")  # fmt: skip
        opened = len(bot.slack_api.views) + 1
        await show(bot, first, SHOW_ALL, "U2")
        await wait_until(lambda: len(bot.slack_api.views) >= opened, what="Show all")
        await wait_until(lambda: _at_least(bot, "viewed", 1), what="the view recorded")
        for card in (first, second):
            await bot.click(card, APPROVE, user="U2")
        await bot.wait_for_status("finished")
        await bot.idle()
        assert sample("approval_bot_review_unopened_total") == unopened + 1
        assert sample("approval_bot_review_too_fast_total") == fast + 2


def test_what_a_card_asked_is_kept_within_a_compact_hash_value() -> None:
    """The reading rides with what Slack holds of the card (`Shown`), within 64 bytes, and an
    entry written before it existed still reads."""
    for shown in (
        Shown("1796568635.032562", "f" * 24, 1796568635.5, "99999f"),
        Shown("1796568635.032562", "f" * 24, 0.0, "123456f"),
    ):
        assert len(shown.encode()) <= 64
        assert Shown.decode(shown.encode()) == shown
    assert Shown.decode(Shown("1.2", "h", 0.0, "812").encode()).card_chars == 812
    old = Shown.decode("1796568635.032562 " + "f" * 24)
    assert (old.card_chars, old.folded, old.posting) == (0, False, 0.0)


def test_a_backlog_read_card_after_card_has_the_time_since_the_decision_before() -> None:
    """Cards shown long ago and approved a second apart had a second each; a rejection or a
    slow approval ends a streak."""
    latest = [  # newest first
        Past(100.0, 10.0, True, "d"),
        Past(99.0, 10.0, True, "c"),
        Past(98.0, 10.0, True, "b"),
        Past(90.0, 89.0, False, "a"),
    ]
    assert [attention_of(latest, i) for i in range(4)] == [1.0, 1.0, 8.0, 1.0]
    assert streak_of(latest, 5.0) == 2  # b had 8 s
    assert streak_of(latest, 10.0) == 3  # a was a rejection
    assert attention_of([Past(5.0, 0.0, True, "x")], 0) is None  # nothing known
