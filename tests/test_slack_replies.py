"""The service's answers carry no Slack markup; the Slack layer renders their parts."""

from __future__ import annotations

from bot.service.replies import Code, Mention, Reply, Strong, Text, already_text
from bot.slack.replies import render, shown
from bot.store.records import AlreadyDecided


def test_parts_are_rendered_as_mrkdwn_and_plain_text_has_no_markup() -> None:
    text = Text(("Run ", Code("0123456789abcdef"), " was cancelled by ", Mention("U2"), ": ",
                 Strong("Run again"), " to retry."))  # fmt: skip
    assert render(text) == ("Run `0123456789abcdef` was cancelled by <@U2>: *Run again* to retry.")
    assert text.plain() == "Run 0123456789abcdef was cancelled by U2: Run again to retry."


def test_untrusted_literals_are_made_safe_where_they_are_rendered() -> None:
    text = Text((Code("rm <!channel> `x` & co"), Mention("U2>")))
    assert render(text) == "`rm &lt;!channel&gt; 'x' &amp; co`<@U2&gt;>"


def test_a_reply_keeps_plain_strings_as_they_are() -> None:
    reply = Reply(False, "There is no run `abc` any more.")
    assert shown(reply) == reply.text == "There is no run `abc` any more."
    assert not Reply(True).said and shown(Reply(True)) == ""


def test_already_decided_names_the_decider_as_a_mention_only_in_slack() -> None:
    earlier = AlreadyDecided(status="approved", decided_by="U2", decided_at="0", via="")
    reply = Reply(False, already_text(earlier))
    assert "<@" not in reply.text and "by U2 at 1970-01-01 00:00 UTC" in reply.text
    assert shown(reply) == (
        "This call was already approved by <@U2> at 1970-01-01 00:00 UTC. Nothing changed."
    )
    nobody = AlreadyDecided(status="rejected", decided_by="", decided_at="0", via="")
    assert "by someone at" in shown(Reply(False, already_text(nobody)))
