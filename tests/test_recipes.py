"""The policy recipes of docs/policy.md, as printed: each loads, and each does what its text
says."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from bot.service.policy.conditions import REQUESTED_AT
from bot.service.policy.rules import Policy, parse_policy
from tests.docs_samples import DOCS, blocks, section

RECIPES = blocks(section(DOCS / "policy.md", "## Recipes"), "yaml")


def recipe(containing: str) -> Policy:
    [text] = [r for r in RECIPES if containing in r]
    return parse_policy(text, source="docs/policy.md recipe")


def routed(policy: Policy, tool: str, *, at: str = "", **args: Any) -> str:
    subject: dict[str, Any] = {"args": args}
    if at:
        subject[REQUESTED_AT] = datetime.fromisoformat(at).timestamp()
    rule = policy.rule_for(channel="C0123ABC", agent="ops", tool=tool, subject=subject)
    assert rule is not None
    return f"{rule.source} auto={rule.auto}" if rule.auto else rule.source


def test_the_five_recipes_are_there_and_every_policy_among_them_loads() -> None:
    assert len(RECIPES) == 4, "four policy recipes, and the SIEM webhook's relay"
    for text in RECIPES:
        parse_policy(text, source="docs/policy.md recipe")
    siem = section(DOCS / "webhooks.md", "## Recipe: a webhook into a SIEM")
    [relay] = [b for b in blocks(siem, "python") if "web.run_app" in b]
    compile(relay, "relay.py", "exec")


def test_read_only_tools_are_free_and_the_rest_goes_to_the_channel() -> None:
    policy = recipe("read-only-get")
    assert routed(policy, "get_user") == "read-only-get auto=approve"
    assert routed(policy, "run_query", read_only=True, sql=" SELECT 1") == (
        "read-only-queries auto=approve"
    )
    assert routed(policy, "run_query", read_only=True, sql="select 1; drop table x") == (
        "channels.C0123ABC"
    )
    assert routed(policy, "delete_user") == "channels.C0123ABC"


def test_staging_is_free_and_production_takes_two_leads() -> None:
    policy = recipe("staging-deploys")
    assert routed(policy, "deploy", env="staging-2") == "staging-deploys auto=approve"
    rule = policy.rule_for(channel="C0123ABC", agent="ops", tool="deploy",
                           subject={"args": {"env": "prod-eu"}})  # fmt: skip
    assert rule is not None and rule.required == 2 and rule.approvers == ("@sre-leads",)
    assert routed(policy, "deploy", env="qa") == "other-deploys auto=reject"


def test_deletes_are_typed_and_the_root_never() -> None:
    policy = recipe("typed-deletes")
    assert routed(policy, "delete_files", path="/") == "no-root auto=reject"
    rule = policy.rule_for(channel="C0123ABC", agent="ops", tool="delete_files",
                           subject={"args": {"path": "/srv/x"}})  # fmt: skip
    assert rule is not None and rule.confirm and rule.confirm_value == "args.path"


# Berlin: UTC+1 in December. 2026-12-04 is a Friday.
NIGHTS = [
    ("2026-12-01T10:00+01:00", "channels.C0123ABC"),  # a Tuesday morning: the team
    ("2026-12-01T19:00+01:00", "weeknights-to-oncall"),
    ("2026-12-02T07:59+01:00", "weeknights-to-oncall"),  # Wednesday early: Tuesday's night
    ("2026-12-02T08:00+01:00", "channels.C0123ABC"),
    ("2026-12-04T18:59+01:00", "channels.C0123ABC"),  # Friday, before the weekend
    ("2026-12-04T23:00+01:00", "weekends-to-oncall"),
    ("2026-12-05T03:00+01:00", "weekend-days-to-oncall"),
    ("2026-12-06T22:00+01:00", "weekend-days-to-oncall"),
    ("2026-12-07T07:59+01:00", "monday-early-to-oncall"),
    ("2026-12-07T08:00+01:00", "channels.C0123ABC"),
    ("2026-12-07T19:30+01:00", "weeknights-to-oncall"),
    ("2026-07-07T05:59+00:00", "weeknights-to-oncall"),  # summer time: 07:59 in Berlin
    ("2026-07-07T06:00+00:00", "channels.C0123ABC"),  # 08:00 in Berlin (in winter, 07:00)
]


@pytest.mark.parametrize(("instant", "source"), NIGHTS)
def test_nights_and_weekends_go_to_the_on_call(instant: str, source: str) -> None:
    assert routed(recipe("weeknights-to-oncall"), "restart", at=instant) == source
