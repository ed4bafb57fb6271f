"""`during:` rules: the hours and days in which a tool rule applies, judged at the call's request
(the night's on-call recipe); every mistake named by `approval-bot check` with its line."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from bot.service.policy.during import During
from bot.service.policy.rules import parse_policy
from bot.slack.blocks import APPROVE
from bot.testing.harness import BotHarness
from tests.agents_for_tests import Ledger, function_call
from tests.test_authorization import no_server_errors
from tests.test_policy_rules import BASE, check_names, deploy_agent

NIGHTS = During(hours="19:00-07:00", days=["fri"], timezone="Europe/Berlin")
OFFICE = During(hours="09:00-17:00")  # UTC: the default zone

# (window, an instant with its UTC offset, inside?). Berlin is UTC+1 in December.
WINDOW_CASES = [
    (NIGHTS, "2026-12-04T18:59+01:00", False),  # a Friday, before the night
    (NIGHTS, "2026-12-04T19:00+01:00", True),
    (NIGHTS, "2026-12-05T06:59+01:00", True),  # Saturday morning: still Friday's night
    (NIGHTS, "2026-12-05T07:00+01:00", False),
    (NIGHTS, "2026-12-05T19:30+01:00", False),  # Saturday's night is not listed
    (NIGHTS, "2026-12-04T03:00+01:00", False),  # Friday 03:00 is Thursday's night
    (NIGHTS, "2026-12-04T18:30+00:00", True),  # 19:30 in Berlin
    (OFFICE, "2026-12-02T09:00+01:00", False),  # 08:00 UTC
    (OFFICE, "2026-12-02T16:59+00:00", True),
    (OFFICE, "2026-12-02T17:00+00:00", False),  # the end is out
    (During(days=["sat", "sun"]), "2026-12-06T23:59+00:00", True),  # a whole Sunday
    (During(days=["sat", "sun"]), "2026-12-07T00:00+00:00", False),
    (During(hours="22:00-24:00", timezone="Europe/Berlin"), "2026-12-02T23:59+01:00", True),
    # Daylight saving time moves with the zone: on 2026-03-29 Berlin skips 02:00-03:00, so
    # 01:30 UTC is 03:30 there (summer time, UTC+2), inside 03:00-04:00.
    (During(hours="03:00-04:00", timezone="Europe/Berlin"), "2026-03-29T01:30+00:00", True),
    (During(hours="03:00-04:00", timezone="Europe/Berlin"), "2026-03-28T02:30+00:00", True),
    (During(hours="03:00-04:00", timezone="Europe/Berlin"), "2026-03-29T02:30+00:00", False),
]


@pytest.mark.parametrize(("window", "instant", "inside"), WINDOW_CASES)
def test_a_window_holds_at_the_instants_it_names(
    window: During, instant: str, inside: bool
) -> None:
    assert window.holds(datetime.fromisoformat(instant).timestamp()) is inside


def test_an_unknown_request_time_is_outside_every_window() -> None:
    for unknown in (None, 0, -5, "1796232485", True):
        assert not NIGHTS.holds(unknown)
    policy = parse_policy(
        BASE + "tools:\n  - match: deploy\n    during: {days: [mon, tue, wed, thu, fri, sat, sun]}"
        "\n    auto: approve\n"
    )
    rule = policy.rule_for(channel="C1", agent="ops", tool="deploy", subject={"args": {}})
    assert rule is not None and rule.source == "channels.C1"  # no time: the rule does not apply


def _hours_around_now(zone: str, start: int, end: int) -> str:
    """`HH:00-HH:00` from `start` to `end` hours after the current hour in `zone`."""
    hour = datetime.fromtimestamp(time.time(), ZoneInfo(zone)).hour
    return f"{(hour + start) % 24:02}:00-{(hour + end) % 24:02}:00"


async def test_the_rule_whose_window_holds_routes_the_call_the_other_does_not_apply(
    redis_url: str,
) -> None:
    """Two rules for one tool: an automatic approval outside the current hours, the on-call
    group's routing inside them (in Kolkata's time, UTC+5:30): the call goes to the on-call,
    and a channel approver may not decide it."""
    zone = "Asia/Kolkata"
    policy = BASE + (
        "tools:\n"
        "  - name: daytime-free\n    match: deploy\n"
        f"    during: {{hours: '{_hours_around_now(zone, 3, 5)}', timezone: {zone}}}\n"
        "    auto: approve\n"
        "  - name: nights-to-oncall\n    match: deploy\n"
        f"    during: {{hours: '{_hours_around_now(zone, -1, 2)}', timezone: {zone}}}\n"
        "    approvers: [U7]\n"
    )
    ledger = Ledger()
    agent, _ = deploy_agent([function_call("deploy", {"env": "prod-1"}, call_id="d1")], ledger)
    async with BotHarness(redis_url, agent, policy) as bot:
        await bot.slack.command("deploy", user="U1", channel="C1")
        [card] = await bot.wait_for_approvals(1)
        assert "rule `nights-to-oncall`" in card.all_text()
        await bot.click(card, APPROVE, user="U2")  # the channel's approver, not the on-call
        await bot.idle()
        assert "not among" in " ".join(bot.slack_api.ephemeral_to("U2"))
        await bot.click(card, APPROVE, user="U7")
        await bot.wait_for_status("finished")
        await bot.idle()
        audit = await bot.audit()
        no_server_errors(bot)
    assert [e["env"] for _, e in ledger.executed] == ["prod-1"]
    decided = [e for e in audit if e["kind"] == "decided"]
    assert [(e.get("user"), e["rule"]) for e in decided] == [("U7", "nights-to-oncall")]


def test_check_names_each_during_mistake_with_its_line(tmp_path: Path) -> None:
    policy = """\
channels:
  C1:
    approvers: [U2]
tools:
  - match: deploy
    during: {hours: "25:00-07:00"}
  - match: restart
    during:
      timezone: Mars/Olympus
      days: [mon, funday]
  - match: other
    during: {}
  - match: more
    during: {hours: "07:00-07:00", weekends: true}
"""
    stderr = check_names(tmp_path, policy, {
        6: "tools.0.during.hours: '25:00-07:00' is not HH:MM-HH:MM",
        9: "tools.1.during.timezone: 'Mars/Olympus' is not a time zone this machine knows",
        10: "tools.1.during.days.1: Input should be 'mon', 'tue'",
        12: "tools.2.during: during: give `hours`, `days` or both",
        14: "tools.3.during.hours: '07:00-07:00' starts where it ends",
    })  # fmt: skip
    assert "policy.yml:14: tools.3.during.weekends: unknown key 'weekends'" in stderr
