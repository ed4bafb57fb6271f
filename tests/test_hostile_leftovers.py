"""What the hostile review of #33 and #34 left: limits that only Slack's client kept,
validators that let a trailing newline through, Slack's own error text shown to people. Signed
HTTP into the real app, real Redis, the Slack stand-in, scripted models."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from bot import metrics
from bot.learning.reviews import USER_ID
from bot.service.replies import REASON_LIMIT
from bot.slack.blocks import APPROVE, BATCH_REJECT, REASON_BLOCK, REJECT, REPLY_REJECT
from bot.slack.installs.oauth import BOT_SCOPES as INSTALL_SCOPES
from bot.slack.installs.oauth import install_scopes
from bot.store import keys
from bot.store.records import CallStatus
from bot.testing.advisors import scripted_advisor
from bot.testing.harness import BotHarness, wait_until
from bot.testing.slack_api import FakeSlackAPI
from tests.agents_for_tests import (
    POLICY,
    Ledger,
    assistant_message,
    delete_then_say,
    function_call,
    ops_agent,
    tool_outputs,
)
from tests.test_advisor import by_tool, card_saying
from tests.test_batch import PLAIN, open_batch, statuses, submit_batch, view_text
from tests.test_hostile_review import button, question_to
from tests.test_oauth import POLICY as OAUTH_POLICY
from tests.test_oauth import TEAM_A, distributed, install
from tests.test_policy_rules import check_names
from tests.test_security import call_status

TOO_LONG = "The reason is too long"


def one_call(ledger: Ledger) -> tuple[object, object]:
    return ops_agent(delete_then_say("/"), ledger)


# 1. A rejection's reason is bounded on the server -----------------------------------------------


async def test_a_reject_form_with_a_reason_longer_than_the_limit_rejects_nothing(
    redis_url: str,
) -> None:
    """Slack's form stops at its max_length, but a crafted view_submission is not the form:
    the field says why, nothing is decided, and a reason at the limit still rejects."""
    ledger = Ledger()
    agent, model = one_call(ledger)
    async with BotHarness(redis_url, agent, POLICY) as bot:
        card = await bot.start_and_wait("clean", user="U1")
        approval_id = card.button_value(APPROVE)
        sent = await bot.reject(card, user="U2", reason="x" * (REASON_LIMIT + 1))
        answer = sent.json()
        assert answer["response_action"] == "errors"
        assert TOO_LONG in answer["errors"][REASON_BLOCK]
        assert f"{REASON_LIMIT + 1:,} characters" in answer["errors"][REASON_BLOCK]
        await bot.idle()
        assert await call_status(redis_url, approval_id) == CallStatus.PENDING
        assert not [e for e in await bot.audit() if e["kind"] == "decided"]
        # At the limit (surrounding blanks do not count) the rejection goes through.
        reason = "y" * REASON_LIMIT
        sent = await bot.reject(card, user="U2", reason=f"  {reason}\n")
        assert sent.status == 200 and sent.text == ""
        await bot.wait_for_status("finished")
        await bot.idle()
    assert ledger.executed == []
    assert tool_outputs(model) == {"c1": reason}


async def test_a_reject_reply_longer_than_the_limit_rejects_nothing_and_says_why(
    redis_url: str,
) -> None:
    """`reject: <reason>` in the card's thread, and an ambiguous reply confirmed as a
    rejection: both refused with the sentence, the call still waits; the held reply can still
    be kept as a comment."""
    ledger = Ledger()
    agent, model = one_call(ledger)
    async with BotHarness(redis_url, agent, POLICY) as bot:
        card = await bot.start_and_wait("clean", user="U1")
        approval_id = card.button_value(APPROVE)
        await bot.reply(card, "reject: " + "x" * (REASON_LIMIT + 1), user="U2")
        await bot.idle()
        assert await call_status(redis_url, approval_id) == CallStatus.PENDING
        assert TOO_LONG in bot.slack_api.ephemeral_to("U2")[-1]
        await bot.reply(card, "deny " + "z" * REASON_LIMIT, user="U3")
        await bot.idle()
        reply_id = button(question_to(bot, "U3"), REPLY_REJECT)
        await bot.slack.click(REPLY_REJECT, reply_id, user="U3", channel="C1")
        await bot.idle()
        assert await call_status(redis_url, approval_id) == CallStatus.PENDING
        assert TOO_LONG in bot.slack_api.ephemeral_to("U3")[-1]
        assert not [e for e in await bot.audit() if e["kind"] == "decided"]
        await bot.reply(card, "reject: not the root", user="U2")
        await bot.wait_for_status("finished")
        await bot.idle()
    assert tool_outputs(model) == {"c1": "not the root"}


async def test_reject_all_with_a_reason_longer_than_the_limit_rejects_none_of_the_calls(
    redis_url: str,
) -> None:
    ledger = Ledger()
    agent, _ = ops_agent(
        delete_then_say(["/a", "/b"], "done"),
        ledger,
    )
    async with BotHarness(redis_url, agent, PLAIN) as bot:
        await bot.slack.command("clean", user="U1", channel="C1")
        await bot.wait_for_approvals(2)
        view = await open_batch(bot, "U2", BATCH_REJECT)
        [field] = [b for b in view["blocks"] if b.get("block_id") == REASON_BLOCK]
        assert field["element"]["max_length"] == REASON_LIMIT
        sent = await submit_batch(bot, view, "U2", reason="x" * (REASON_LIMIT + 1))
        answer = sent.json()
        assert answer["response_action"] == "errors"
        assert TOO_LONG in answer["errors"][REASON_BLOCK]
        await bot.idle()
        assert set((await statuses(bot)).values()) == {CallStatus.PENDING}
        assert not [e for e in await bot.audit() if e["kind"] == "decided"]
    assert ledger.executed == []


# 2. A validator's `$` let a final newline through ------------------------------------------------


def test_check_refuses_a_condition_path_and_hours_that_end_in_a_newline(tmp_path: Path) -> None:
    """A Python `$` matches before a final "\\n": `args.env\\n` passed as a path (one that names
    an argument no call has), and `hours` took a trailing newline. Ids and user ids are checked
    with `\\Z` alike (bot/store/keys.py, bot/learning/reviews.py)."""
    policy = """\
channels:
  C1:
    approvers: [U2]
tools:
  - match: deploy
    when: {"args.env\\n": prod}
    required_approvals: 2
  - match: restart
    during: {hours: "09:00-17:00\\n"}
"""
    check_names(tmp_path, policy, {
        6: "tools.0.when.args.env\n: 'args.env\\n' is not an argument path",
        9: "tools.1.during.hours: '09:00-17:00\\n' is not HH:MM-HH:MM",
    })  # fmt: skip


def test_ids_and_user_ids_with_a_final_newline_are_not_ids() -> None:
    run_id = keys.new_run_id()
    approval_id = keys.new_approval_id(run_id)
    assert keys.run_of(approval_id) == run_id and keys.RUN_ID_RE.match(run_id)
    assert keys.run_of(approval_id + "\n") is None
    assert keys.RUN_ID_RE.match(run_id + "\n") is None
    assert USER_ID.match("U2") and USER_ID.match("U2\n") is None


# 3. Slack's error text is never shown as it came ---------------------------------------------


async def test_what_slack_answers_in_place_of_an_error_code_is_never_shown_as_it_came(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A proxy's page or a wrong SLACK_API_URL may answer anything where Slack puts its error
    code (here: markup that pings the channel, and a token): the person is told our sentence
    with `unreadable_answer`, /readyz and the logs say the same, nothing of that text."""
    slack = FakeSlackAPI()
    slack.fail_error = "<!channel> xoxb-1-LEAKED-TOKEN is not `valid`"
    failing = {"auth.test"}
    slack.fail_when = lambda method, _: method in failing
    ledger = Ledger()
    agent, _ = one_call(ledger)
    with caplog.at_level(logging.INFO):
        async with BotHarness(redis_url, agent, POLICY, slack=slack) as bot:
            refused = (await bot.slack.command("hi", user="U1", channel="C1")).json()["text"]
            assert "Slack does not accept its token (unreadable_answer)" in refused
            assert bot.runtime.slack_problem() == "token refused: unreadable_answer"
            failing.clear()
            authorizer = bot.runtime.service.authorizer
            await wait_until(
                lambda: authorizer.installation is not None, timeout=30, what="auth.test"
            )
            card = await bot.start_and_wait("clean", user="U1")
            failing.add("views.open")  # the reject form cannot be opened
            await bot.click(card, REJECT, user="U2")
            told = await wait_until(
                lambda: bot.slack_api.ephemeral_to("U2"), what="U2 told the form failed"
            )
            assert "(Slack answered `unreadable_answer`)" in told[-1]
            failing.clear()
            await bot.idle()
    for said in (refused, *told):
        assert "xoxb" not in said and "<!channel>" not in said, said
    assert "LEAKED" not in caplog.text
    errors = metrics.REGISTRY.get_sample_value(
        "approval_bot_slack_api_errors_total",
        {"method": "views.open", "error": "unreadable_answer"},
    )
    assert errors, "counted under our word, not the text that came"


# 4. The advisor's second opinion on the batch form -------------------------------------------


async def test_the_batch_form_shows_each_call_s_advice_escaped_as_its_card_does(
    redis_url: str,
) -> None:
    ledger = Ledger()
    agent, _ = ops_agent(
        [
            [
                function_call("delete_logs", {"path": "/var/log/app"}, call_id="d1"),
                function_call("restart_service", {"service": "web"}, call_id="r1"),
            ],
            [assistant_message("done")],
        ],
        ledger,
    )
    async with BotHarness(redis_url, agent, PLAIN, advisor=scripted_advisor(by_tool)) as bot:
        await bot.slack.command("clean", user="U1", channel="C1")
        cards = await bot.wait_for_approvals(2)
        for card in cards:
            await card_saying(bot, card, "Second opinion")
        listed = view_text(await open_batch(bot, "U2"))
        assert "Risk: *high*. Deletes the only copy of the logs &lt;!channel&gt;." in listed
        assert "ping &lt;@U2&gt;" in listed and "<!channel>" not in listed
        assert "Risk: *low*. A restart." in listed
    assert ledger.executed == []


# 5. A batch is one act of review --------------------------------------------------------------


async def test_approve_all_counts_once_toward_the_rubber_stamp_streak(redis_url: str) -> None:
    """Every approval is quick here (within an hour of its card) and two in a row raise the
    alarm: Approve all of three calls is one (no alarm, where it counted three), and a click on
    the next call's card then makes two."""
    ledger = Ledger()
    three = [function_call("delete_logs", {"path": f"/{n}"}, call_id=f"d{n}") for n in range(3)]
    agent, _ = ops_agent(
        [three, [function_call("delete_logs", {"path": "/z"}, call_id="dz")],
         [assistant_message("done")]],
        ledger,
    )  # fmt: skip
    quick = {"rubber_stamp_streak": 2, "rubber_stamp_seconds": 3600}
    async with BotHarness(redis_url, agent, PLAIN, settings=quick) as bot:
        await bot.slack.command("clean", user="U1", channel="C1")
        await bot.wait_for_approvals(3)
        view = await open_batch(bot, "U2")
        assert (await submit_batch(bot, view, "U2")).json()["response_action"] == "update"
        [last] = await bot.wait_for_approvals(1)
        await bot.idle()
        assert [e for e in await bot.audit() if e["kind"] == "rubber_stamp"] == []
        await bot.click(last, APPROVE, user="U2")
        await bot.wait_for_status("finished")
        await bot.idle()
        alarms = [e for e in await bot.audit() if e["kind"] == "rubber_stamp"]
    assert [(a["user"], a["detail"]) for a in alarms] == [
        ("U2", "2 approvals in a row, each within 3600 s")
    ]
    assert len(ledger.executed) == 4


# 6. Reactions in a workspace that installed the app through OAuth -------------------------------


async def test_with_reactions_on_an_installation_asks_their_scopes_and_a_reaction_decides(
    redis_url: str,
) -> None:
    """A workspace installed through /slack/install is granted the scopes its link asked for:
    with APPROVAL_BOT_REACTIONS on, those include reactions:read and users:read, so a reaction
    there decides as a click does (without users:read nothing could tell who reacted)."""
    ledger = Ledger()
    agent, _ = ops_agent(
        [[function_call("restart_service", {"service": "a"}, call_id="c1")],
         [assistant_message("done")]],
        ledger,
    )  # fmt: skip
    settings = {**distributed(), "reactions": True}
    async with BotHarness(redis_url, agent, OAUTH_POLICY, settings=settings) as bot:
        await install(bot, TEAM_A)
        [token] = [t for t, team in bot.slack_api.issued.items() if team == TEAM_A]
        assert {"reactions:read", "users:read"} <= set(bot.slack_api.granted[token])
        bot.slack_api.user_teams["UA2"] = TEAM_A
        await bot.slack.command("restart a", user="UA1", channel="C0AAA", team=TEAM_A)
        [card] = await bot.wait_for_approvals(1)
        event = {
            "type": "reaction_added", "user": "UA2", "reaction": "white_check_mark",
            "item_user": "UBOT", "item": {"type": "message", "channel": card.channel,
                                          "ts": card.ts},
            "event_ts": "1.0",
        }  # fmt: skip
        await bot.slack.send_json(bot.slack.event_payload(event, team=TEAM_A))
        await bot.wait_for_status("finished")
        await bot.idle()
        [decided] = [e for e in await bot.audit() if e["kind"] == "decided"]
    assert (decided["user"], decided["detail"]) == ("UA2", "by reaction")
    assert ledger.names() == ["restart_service"]


def test_without_reactions_an_installation_asks_no_more_than_it_needs() -> None:
    assert install_scopes(reactions=False) == list(INSTALL_SCOPES)
    assert set(install_scopes(reactions=True)) - set(INSTALL_SCOPES) == {
        "reactions:read",
        "users:read",
    }
