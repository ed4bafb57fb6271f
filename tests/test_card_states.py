"""A card in each of its states, through the real bot, against golden text renderings
(`tests/golden/cards/`, written by `tests.card_text`): pending, approved, rejected, edited,
expired, cancelled; and the size of a pending card, held.

Why text and not pictures: a text rendering is exact and readable in a diff, needs no browser,
and fails on the words, which is what these tests hold (what each state says, and that nothing
says more than its state). The browser renders the same cards to PNG in
`tests/test_sandbox_page.py`. Refresh the goldens with `UPDATE_GOLDEN=1`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from agents import Agent, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from bot import ask_human
from bot.slack.blocks import APPROVE
from bot.testing.clock import SkippingClock
from bot.testing.harness import BotHarness, edit_values, wait_until
from bot.testing.slack_api import Message
from tests.agents_for_tests import POLICY
from tests.card_text import Size, render, size

GOLDEN = Path(__file__).parent / "golden" / "cards"
NAMES = {"U1": "alice", "U2": "bob", "U3": "carol"}
REASON = "web-1 answers 5xx to one request in five since 09:40; a restart clears the stuck pool."

# A typical pending call's card may not grow past this. Before #30 the same call's card was
# 730 characters in 11 lines (about 14 once Slack wraps them), with 6 buttons and the digest,
# the policy's version, the tool's description and the reply hint on it; now 377 characters,
# 6 lines, 3 buttons and the More menu.
MAX_SIZE = Size(characters=400, lines=6, buttons=3, menus=1)


def ops(restarted: list[str]) -> Agent[Any]:
    @function_tool(needs_approval=True)
    def restart_service(service: str) -> str:
        """Restart a service (its open connections are dropped)."""
        restarted.append(service)
        return f"restarted {service}"

    steps = [
        [
            assistant_message(REASON),
            function_call("restart_service", {"service": "web-1"}, call_id="r1"),
        ],
        [assistant_message("Restarted web-1.")],
    ]
    return Agent(name="ops", model=ScriptedModel(steps), tools=[restart_service])


def check_golden(name: str, message: Message) -> str:
    text = render(message.blocks, NAMES)
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8"), f"{name}: the card changed\n{text}"
    return text


def card_now(bot: BotHarness, card: Message) -> Message:
    return bot.slack_api.messages[(card.channel, card.ts)]


async def settled(bot: BotHarness, card: Message, word: str) -> Message:
    await wait_until(lambda: word in card_now(bot, card).all_text(), what=f"the card: {word}")
    await bot.idle()
    return card_now(bot, card)


async def test_a_pending_card_is_brief(redis_url: str) -> None:
    """What, on what, who asked; why; the arguments; one context line; three buttons and a
    menu. Its size is printed (pytest -s) and held."""
    async with BotHarness(redis_url, ops([]), POLICY) as bot:
        card = await bot.start_and_wait("restart the web tier", user="U1")
        text = check_golden("pending", card)
        measured = size(card.blocks, NAMES)
        print(f"\npending card: {measured}\n{text}")
        assert measured.characters <= MAX_SIZE.characters, measured
        assert measured.lines <= MAX_SIZE.lines, measured
        assert (measured.buttons, measured.menus) <= (MAX_SIZE.buttons, MAX_SIZE.menus)
        assert text.startswith(":raised_hand: *restart_service* on `web-1` · asked by @alice\n")
        for left_out in ("digest", "policy `", "Approval needed", "Reminds"):
            assert left_out not in text
        details = await bot.details(card, user="U2")
        assert "Call digest `" in details and "policy `" in details
        assert "Reminds approvers every 4h" in details


async def test_approved_and_rejected_cards_say_their_outcome(redis_url: str) -> None:
    restarted: list[str] = []
    async with BotHarness(redis_url, ops(restarted), POLICY) as bot:
        card = await bot.start_and_wait("restart the web tier", user="U1")
        await bot.click(card, APPROVE, user="U2")
        text = check_golden("approved", await settled(bot, card, "Approved by"))
        assert text.startswith(":white_check_mark: Approved by @bob: *restart_service* on")
        assert "Approval needed" not in text and "[" not in text  # no controls left
    assert restarted == ["web-1"]
    async with BotHarness(redis_url, ops(restarted), POLICY) as bot:
        card = await bot.start_and_wait("restart the web tier", user="U1")
        await bot.reject(card, user="U3", reason="Not during the sale; wait until 18:00.")
        text = check_golden("rejected", await settled(bot, card, "Rejected by"))
        assert "*Reason:*\n>Not during the sale; wait until 18:00." in text
    assert restarted == ["web-1"]


async def test_an_edited_card_shows_the_change_and_who_made_it(redis_url: str) -> None:
    async with BotHarness(redis_url, ops([]), POLICY) as bot:
        card = await bot.start_and_wait("restart the web tier", user="U1")
        view = await bot.open_edit(card, user="U2")
        values = edit_values(view, {"field:service": "web-2"})
        sent = await bot.slack.submit(view, values, user="U2")
        assert sent.status == 200
        edited = await settled(bot, card, "Edited by")
        text = check_golden("edited", edited)
        assert "on `web-2`" in text.splitlines()[0]  # the header names what will run
        assert '-  "service": "web-1"' in text and '+  "service": "web-2"' in text
        assert "U2" not in text  # people as mentions, never raw ids


async def test_an_expired_card_says_nobody_decided_and_nothing_ran(redis_url: str) -> None:
    policy = POLICY.replace(
        "allow_self_approval: false", "allow_self_approval: false\n  expire_after: 1h"
    )
    clock = SkippingClock()  # an hour skipped: real time on a loaded machine never reaches it
    restarted: list[str] = []
    async with BotHarness(redis_url, ops(restarted), policy, clock=clock) as bot:
        card = await bot.start_and_wait("restart the web tier", user="U1")
        clock.advance(3601)
        text = check_golden("expired", await settled(bot, card, "Expired"))
        assert text.startswith(":hourglass: Expired (no reviewer decided within 1h)")
        assert "not run (the agent was told)" in text
    assert restarted == []


async def test_a_cancelled_card_and_run_say_who_cancelled(redis_url: str) -> None:
    async with BotHarness(redis_url, ops([]), POLICY) as bot:
        card = await bot.start_and_wait("restart the web tier", user="U1")
        run_id = bot.run_message().all_text().split("run `")[1][:16]
        await bot.slack.command(f"cancel {run_id}", user="U1", channel="C1")
        text = check_golden("cancelled", await settled(bot, card, "Cancelled"))
        assert text.startswith(":no_entry_sign: Cancelled by @alice with its run")
        await bot.wait_for_status("cancelled")
        run = render(bot.run_message().blocks, NAMES)
        assert "cancelled by @alice" in run and "continue" not in run and "[" not in run


async def test_the_run_message_says_what_is_true_in_each_state(redis_url: str) -> None:
    """Waiting: for an approval and an answer (a question is no approval). Finished: the
    steps taken, in a tense that stays true, and an invitation to reply. The thread's note on
    an edit names its editor as a mention, never a raw id."""

    @function_tool(needs_approval=True)
    def restart_service(service: str) -> str:
        """Restart a service."""
        return f"restarted {service}"

    steps = [
        [
            function_call("ask_human", {"question": "Which tier?"}, call_id="q1"),
            function_call("restart_service", {"service": "web-1"}, call_id="r1"),
        ],
        [function_call("restart_service", {"service": "web-2"}, call_id="r2")],
        [assistant_message("Restarted web-2.")],
    ]
    agent = Agent(name="ops", model=ScriptedModel(steps), tools=[restart_service, ask_human])
    async with BotHarness(redis_url, agent, POLICY) as bot:
        await bot.slack.command("restart the web tier", user="U1", channel="C1")
        [card] = await bot.wait_for_approvals(1)
        [question] = await bot.wait_for_questions(1)
        await wait_until(lambda: "Waiting for:" in bot.run_message().all_text(), what="links")
        waiting = render(bot.run_message().blocks, NAMES)
        assert "waiting for 1 approval and 1 answer" in waiting, waiting
        await bot.answer(question, user="U1", text="web")
        view = await bot.open_edit(card, user="U2")
        await bot.slack.submit(view, edit_values(view, {"field:service": "web-2"}), user="U2")
        await bot.wait_for_status("finished")
        await bot.idle()
        run = render(bot.run_message().blocks, NAMES)
        assert "finished" in run and "reply in the thread to continue" in run
        assert "ops called restart_service" in run and "is running" not in run
        notes = [m.text for m in bot.run_thread()]
        assert any("the arguments <@U2> edited" in n for n in notes), notes
        assert not any("U2 edited" in n.replace("<@U2>", "") for n in notes)
