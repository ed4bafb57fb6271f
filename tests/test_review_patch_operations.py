"""A patch is judged, and shown, as the editor will receive it (the security review of #32's
fast paths). The SDK runs every operation of an `apply_patch` call (`operations`, a list, read
before `operation`; a custom tool call named apply_patch* carries the model's own JSON), and
an update may move its file (`move_to`): the policy's `path` must not be read from one
operation while the editor applies others, or writes elsewhere. Such a call goes to a person,
whose card shows every operation. Through signed requests, the real bot, real Redis and the
Slack stand-in."""

from __future__ import annotations

import copy
import json
from typing import Any

from agents.testing import ScriptedModel
from openai.types.responses import ResponseCustomToolCall

from bot.testing.harness import BotHarness
from bot.testing.slack_api import Message
from tests.agents_for_tests import assistant_message
from tests.test_decided_in_run import CHANNEL, coder, finished, quiet
from tests.test_tool_kinds import done

DOCS = CHANNEL + (
    "  - name: docs-edits\n    match: apply_patch\n    when: {path: 'docs/**'}\n    auto: approve\n"
)


def custom_patch(call_id: str, payload: dict[str, Any]) -> ResponseCustomToolCall:
    """The model's apply_patch as a custom tool call (the SDK's fallback): its JSON as the
    model wrote it."""
    return ResponseCustomToolCall(
        id=call_id, call_id=call_id, type="custom_tool_call", name="apply_patch",
        input=json.dumps(payload),
    )  # fmt: skip


async def _a_person_sees(redis_url: str, payload: dict[str, Any], hidden: str) -> None:
    """The call is not approved by the docs rule: it waits on a card that shows `hidden`,
    nothing ran; rejected, nothing runs."""
    done.clear()
    model = ScriptedModel([[custom_patch("p1", payload)], [assistant_message("ok")]])
    async with BotHarness(redis_url, coder(model), DOCS) as bot:
        await bot.slack.command("go", user="U1", channel="C1")
        [card] = await bot.wait_for_approvals(1)
        seen = await quiet(bot)
        assert done == []
        assert hidden in card.all_text()
        assert not any(e["decision"] == "auto_approve" for e in seen.decided())
        await bot.reject(card, user="U2")
        await bot.wait_for_status("finished")
    assert done == []


async def test_a_patch_whose_operations_differ_from_its_operation_goes_to_a_person(
    redis_url: str,
) -> None:
    """`operation` under docs/, `operations` (what the editor runs) deletes a source file:
    before the fix the docs rule approved it in the run and the editor deleted src/main.py."""
    payload = {
        "operation": {"type": "update_file", "path": "docs/a.md", "diff": "+x\n"},
        "operations": [{"type": "delete_file", "path": "src/main.py"}],
    }
    await _a_person_sees(redis_url, payload, "src/main.py")


async def test_a_patch_that_moves_its_file_out_of_the_rules_paths_goes_to_a_person(
    redis_url: str,
) -> None:
    """An update of docs/a.md that moves it to .github/workflows/ci.yml: the rule read only
    `path`; before the fix it approved the call in the run."""
    payload = {
        "operation": {
            "type": "update_file", "path": "docs/a.md", "diff": "+x\n",
            "move_to": ".github/workflows/ci.yml",
        },
    }  # fmt: skip
    await _a_person_sees(redis_url, payload, ".github/workflows/ci.yml")


KEEP_SOURCES = CHANNEL + (
    "  - name: no-source-deletes\n    match: apply_patch\n"
    "    when: {path: 'src/**', operation: delete_file}\n    auto: reject\n"
    "  - name: other-patches\n    match: apply_patch\n    auto: approve\n"
)


async def test_a_patch_given_as_operations_is_judged_on_them(redis_url: str) -> None:
    """One operation, in `operations` only (no `operation`): the rule that rejects deleting
    sources reads its path and rejects it in the run. Before the fix the path was absent, the
    rule did not apply, and `other-patches` approved the call: the editor deleted src/main.py."""
    done.clear()
    payload = {"operations": [{"type": "delete_file", "path": "src/main.py"}]}
    model = ScriptedModel([[custom_patch("p1", payload)], [assistant_message("ok")]])
    async with BotHarness(redis_url, coder(model), KEEP_SOURCES) as bot:
        await bot.slack.command("go", user="U1", channel="C1")
        seen = await finished(bot)
    assert done == []
    assert seen.by_rule() == [("no-source-deletes", "auto_reject")]


def patch_section(card: Message) -> str:
    """The card's section that shows the patch: its `Patch:` header line, then the diff."""
    [section] = [
        b["text"]["text"]
        for b in card.blocks
        if b.get("type") == "section" and b["text"]["text"].startswith("*Patch:*")
    ]
    return str(section)


async def _card_of(redis_url: str, payload: dict[str, Any]) -> Message:
    """The pending card of a patch call the docs rule cannot decide (a person does), as Slack
    shows it once the bot is quiet; the call is then rejected and nothing ran."""
    done.clear()
    model = ScriptedModel([[custom_patch("p1", payload)], [assistant_message("ok")]])
    async with BotHarness(redis_url, coder(model), DOCS) as bot:
        await bot.slack.command("go", user="U1", channel="C1")
        [card] = await bot.wait_for_approvals(1)
        await quiet(bot)
        pending = copy.deepcopy(card)  # (the card is redrawn once decided)
        await bot.reject(card, user="U2")
        await bot.wait_for_status("finished")
    assert done == []
    return pending


async def test_the_header_of_a_patch_card_names_every_operation_and_move(
    redis_url: str,
) -> None:
    """Three operations, one of them moving its file: the `Patch:` header says what the editor
    will do for each (its action, its path, a move's destination), not the first alone (the
    others only as lines inside the diff, where diff text could imitate them); the card's
    first line counts them. Paths are escaped and cannot leave their code spans."""
    payload = {
        "operations": [
            {"type": "delete_file", "path": "src/main.py"},
            {"type": "update_file", "path": "docs/a.md", "diff": "+x\n",
             "move_to": ".github/workflows/ci.yml"},
            {"type": "create_file", "path": "notes/<!here>`x`.md", "diff": "+y\n"},
        ],
    }  # fmt: skip
    card = await _card_of(redis_url, payload)
    header = patch_section(card).partition("\n")[0]
    assert header == (
        "*Patch:* 3 operations: delete_file `src/main.py`; update_file `docs/a.md`, moved to "
        "`.github/workflows/ci.yml`; create_file `notes/&lt;!here&gt;'x'.md`"
    ), header
    first = card.blocks[0]["text"]["text"]
    assert first.startswith(":raised_hand: patch of 3 operations"), first


async def test_a_patch_of_many_operations_lists_what_fits_and_says_how_many_more(
    redis_url: str,
) -> None:
    """Sixty operations with long paths: the header lists those that fit, says how many more
    there are (Show all opens the whole call), and the section stays within Slack's 3,000
    characters."""
    long = "d/" + "x" * 300
    payload = {
        "operations": [{"type": "delete_file", "path": f"{long}{n}"} for n in range(60)],
    }
    card = await _card_of(redis_url, payload)
    section = patch_section(card)
    header = section.partition("\n")[0]
    assert header.startswith("*Patch:* 60 operations: delete_file `d/xxx"), header
    shown = header.count("delete_file")
    assert 0 < shown < 60 and header.endswith(f"; _and {60 - shown} more_"), header
    assert len(section) <= 3000 and len(header) <= 1100, (len(section), len(header))
    assert "Show all" in card.all_text()
