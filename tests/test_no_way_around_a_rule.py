"""No way of approving a call skips what its rule asks (issue #29, cases 4 and 5): an edit
that moves a call under a rule with `confirm: type` approves nothing by itself, and a grant
made before the policy asked for typed confirmation no longer settles a call. Signed HTTP into
the real bot, a real Redis, the Slack stand-in."""

from __future__ import annotations

from pathlib import Path

from bot.service.policy.source import PolicySource
from bot.slack.blocks import APPROVE
from bot.store.records import CallStatus
from bot.testing.harness import BotHarness, edit_values
from tests.agents_for_tests import POLICY, Ledger, ops_agent
from tests.test_edit import edited_then
from tests.test_grants import GRANTING, cards, grant_in_first_run, two_runs

# Deletions under /srv need the path typed; the channel's approvers decide the rest.
TYPED_SRV = (
    POLICY
    + """
tools:
  - name: typed-srv
    match: delete_logs
    when: {args.path: "/srv/*"}
    confirm: type
    confirm_value: args.path
"""
)


async def test_an_edit_that_moves_a_call_under_typed_confirmation_approves_nothing(
    redis_url: str,
) -> None:
    """Case 4: U2 edits `/var/log/a` to `/srv/db`, which the policy wants typed: the form says
    so, nothing is recorded, the call still waits, and the tool never runs untyped."""
    ledger = Ledger()
    agent, _ = ops_agent(edited_then({"path": "/var/log/a"}, {"path": "/srv/db"}), ledger)
    async with BotHarness(redis_url, agent, TYPED_SRV) as bot:
        card = await bot.start_and_wait("clean", user="U1")
        approval_id = card.button_value(APPROVE)
        view = await bot.open_edit(card, user="U2")
        sent = await bot.slack.submit(view, edit_values(view, {"field:path": "/srv/db"}),
                                      user="U2")  # fmt: skip
        await bot.idle()
        call = await bot.runtime.service.store.get_call(approval_id)
        audit = await bot.audit()
    answer = sent.json() if sent.text else None
    assert answer is not None and answer["response_action"] == "errors", sent.text
    [said] = answer["errors"].values()
    assert "rule typed-srv" in said and "typed confirmation" in said, said
    assert call is not None and call.status == CallStatus.PENDING and not call.edited_arguments
    assert ledger.executed == []
    assert not [e for e in audit if e["kind"] in ("edited", "decided")]
    assert [(e["user"], e["decision"]) for e in audit if e["kind"] == "refused"] == [("U2", "edit")]


async def test_a_grant_made_before_the_policy_asked_for_typing_settles_nothing(
    redis_url: str, tmp_path: Path
) -> None:
    """Case 5: U2's grant of the first run; then the policy adds `confirm: type` to the rule.
    The second run's call waits on its card for the typed value; the grant is dropped, said in
    the thread and audited."""
    path = tmp_path / "policy.yml"
    path.write_text(GRANTING)
    source = PolicySource.from_file(path)
    ledger = Ledger()
    async with BotHarness(redis_url, two_runs(ledger), source) as bot:
        await grant_in_first_run(bot)
        path.write_text(
            GRANTING.replace("    grant_max: 8h\n", "    grant_max: 8h\n    confirm: type\n")
        )
        assert source.reload()
        await bot.slack.command("clean b", user="U1", channel="C1")
        await bot.wait_for_approvals(1)
        waiting = [m for m in cards(bot) if m.action_ids()]
        notes = [m.text for m in bot.run_thread()]
        entries = await bot.audit()
    assert ledger.names() == ["delete_logs"]  # the first run's call only
    assert len(waiting) == 1 and "/var/log/b" in waiting[0].all_text()
    assert "type the tool name" in waiting[0].all_text()
    assert not [e for e in entries if e["kind"] == "grant_used"]
    [dropped] = [e for e in entries if e["kind"] == "grant_dropped"]
    assert "typed confirmation" in dropped["detail"]
    assert any("no longer holds" in n and "typed confirmation" in n for n in notes), notes
