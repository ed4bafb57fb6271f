"""A decision made on a card drawn before an edit counts for nothing (issue #18, Edit).

The approving buttons carry the version token of the call's arguments (its edit count);
decide.lua refuses a token that is not the current one, atomically, and the card is redrawn.
Signed HTTP into the real Bolt app, real Redis, the Slack Web API stand-in at the edge."""

from __future__ import annotations

import json

from bot.slack.blocks import APPROVE, approval_and_version
from bot.store.delivery.outbox import Shown
from bot.store.parts.calls import EDITED_SINCE
from bot.store.records import CallStatus, Gone
from bot.testing.harness import BotHarness, edit_values, wait_until
from tests.agents_for_tests import Ledger, ops_agent
from tests.test_edit import QUORUM, edited_then
from tests.test_home import home_click, home_of, open_home


async def test_a_pre_edit_approve_is_refused_and_the_fresh_card_runs_the_edit_once(
    redis_url: str,
) -> None:
    ledger = Ledger()
    agent, _ = ops_agent(edited_then({"path": "/"}, {"path": "/var/log/app"}), ledger)
    async with BotHarness(redis_url, agent, QUORUM) as bot:
        card = await bot.start_and_wait("clean", user="U1")
        stale = card.button_value(APPROVE)  # the card as drawn before the edit
        approval_id, version = approval_and_version(stale)
        assert (stale, version) == (approval_id, "0")  # unedited: the plain opaque id
        await open_home(bot, "U4")
        await wait_until(
            lambda: "U4" in bot.slack_api.home_views and APPROVE in home_of(bot, "U4").action_ids(),
            what="U4's Home with the call",
        )
        stale_home = home_of(bot, "U4").button_value(APPROVE)
        assert stale_home == stale

        view = await bot.open_edit(card, user="U3")  # U3's edit is the first of 2 approvals
        sent = await bot.slack.submit(
            view, edit_values(view, {"field:path": "/var/log/app"}), user="U3"
        )
        assert sent.text == "", sent
        await bot.idle()
        await wait_until(lambda: card.button_value(APPROVE) != stale, what="the redrawn card")
        assert approval_and_version(card.button_value(APPROVE)) == (approval_id, "1")

        # U2 approves from the card as it was drawn before the edit: nothing is counted.
        await bot.slack.click(APPROVE, stale, user="U2", channel="C1", message_ts=card.ts)
        await bot.idle()
        assert any(
            "edited since this card was drawn" in t for t in bot.slack_api.ephemeral_to("U2")
        )
        call = await bot.runtime.service.store.get_call(approval_id)
        assert call is not None and call.status == CallStatus.PENDING
        assert call.voter_ids() == ["U3"]
        # The same from the App Home as it was published before the edit.
        await bot.slack.send_interaction(home_click(bot, APPROVE, stale_home, "U4"))
        await bot.idle()
        call = await bot.runtime.service.store.get_call(approval_id)
        assert call is not None and call.voter_ids() == ["U3"]
        assert ledger.executed == []
        refused = [e for e in await bot.audit() if e["kind"] == "refused"]
        assert {e["user"] for e in refused if EDITED_SINCE in e.get("detail", "")} == {"U2", "U4"}
        # The Home is republished with the new token too.
        await wait_until(
            lambda: home_of(bot, "U4").button_value(APPROVE) == card.button_value(APPROVE),
            what="U4's Home redrawn",
        )

        # The fresh card's Approve is the second approval of the edited call: it runs, once.
        await bot.click(card, APPROVE, user="U2")
        await bot.wait_for_status("finished")
        await bot.idle()
    assert ledger.executed == [("delete_logs", {"path": "/var/log/app"})]
    assert len(bot.slack_api.approval_messages()) == 1


async def test_decide_lua_refuses_an_old_version_atomically(redis_url: str) -> None:
    """The service checks the token before it records; the script checks it again in the
    transition (an edit can land between the two): refused, nothing counted, card redrawn."""
    ledger = Ledger()
    agent, _ = ops_agent(edited_then({"path": "/"}, {"path": "/var/log/app"}), ledger)
    async with BotHarness(redis_url, agent, QUORUM) as bot:
        card = await bot.start_and_wait("clean", user="U1")
        approval_id = card.button_value(APPROVE)
        view = await bot.open_edit(card, user="U3")
        await bot.slack.submit(view, edit_values(view, {"field:path": "/var/log/app"}), user="U3")
        await bot.idle()
        store = bot.runtime.service.store
        run_id, target = approval_id.partition(".")[0], f"card:{approval_id}"
        updates = bot.slack_api.messages[(card.channel, card.ts)].updates
        before = (await store.outbox.shown(run_id))[target].hash
        # A card is updated only when drawn differently from what Slack holds: say Slack holds
        # something else (an old card), so the redraw shows.
        await store.outbox.set_shown(run_id, target, Shown(card.ts, "old", 0.0))
        result = await store.decide(
            approval_id, approve=True, always=False, team="T0TEST", user="U2", reason="",
            owner="o-test", version="0",
        )  # fmt: skip
        assert result == Gone(EDITED_SINCE)
        call = await store.get_call(approval_id)
        assert call is not None and call.voter_ids() == ["U3"]
        assert call.status == CallStatus.PENDING
        await wait_until(
            lambda: bot.slack_api.messages[(card.channel, card.ts)].updates > updates,
            what="the card redrawn",
        )
        await bot.idle()
        assert (await store.outbox.shown(run_id))[target].hash == before
    assert ledger.executed == []


async def test_an_edit_form_opened_before_another_edit_is_refused_and_replaces_nothing(
    redis_url: str,
) -> None:
    """Case 6 of #29: U2 opens Edit; U3 edits and so votes; U2 then submits the form opened
    before U3's edit. It is refused with a sentence naming U3's edit; U3's arguments and vote
    stand, and U3's edit is not lost to anyone."""
    ledger = Ledger()
    agent, _ = ops_agent(edited_then({"path": "/"}, {"path": "/var/log/app"}), ledger)
    async with BotHarness(redis_url, agent, QUORUM) as bot:
        card = await bot.start_and_wait("clean", user="U1")
        approval_id = card.button_value(APPROVE)
        stale = await bot.open_edit(card, user="U2")
        fresh = await bot.open_edit(card, user="U3")
        sent = await bot.slack.submit(
            fresh, edit_values(fresh, {"field:path": "/var/log/app"}), user="U3"
        )
        assert sent.status == 200 and not sent.text, sent.text
        await bot.idle()
        late = await bot.slack.submit(
            stale, edit_values(stale, {"field:path": "/var/log/other"}), user="U2"
        )
        await bot.idle()
        call = await bot.runtime.service.store.get_call(approval_id)
        audit = await bot.audit()
    answer = late.json() if late.text else None
    assert answer is not None and answer["response_action"] == "errors", late.text
    [said] = answer["errors"].values()
    assert "out of date" in said and "U3" in said and "edited this call" in said, said
    assert call is not None and call.status == CallStatus.PENDING
    assert json.loads(call.edited_arguments) == {"path": "/var/log/app"}
    assert (call.edited_by, call.voter_ids(), call.edits) == ("U3", ["U3"], 1)
    assert [e["user"] for e in audit if e["kind"] == "edited"] == ["U3"]
    assert [(e["user"], e["decision"]) for e in audit if e["kind"] == "refused"] == [("U2", "edit")]
    assert ledger.executed == []
