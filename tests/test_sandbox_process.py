"""`approval-bot sandbox` as a real process, no browser needed: the page is served, a run started
from it pauses on cards, bad input to the page's API is a 400 that says why, Ctrl-C stops it
cleanly, and it leaves no redis-server and no temporary files behind, even when it cannot start."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import time
from pathlib import Path
from typing import Any

import aiohttp

from bot.sandbox.server import cast, sandbox_policy
from bot.service.policy.rules import ChannelRule
from bot.service.policy.source import PolicySource
from bot.testing.harness import wait_until
from tests.forkserver import ForkedProcess, run_bot
from tests.processes import ROOT, fork_with_ports, free_port


def sandbox_env(tmp_path: Path) -> dict[str, str]:
    """No Slack, no OpenAI key, no Redis URL; temporary files under `tmp_path`."""
    drop = ("SLACK_", "APPROVAL_BOT_", "REDIS", "OPENAI_API_KEY")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(PYTHONPATH=str(ROOT), TMPDIR=str(tmp_path), OPENAI_AGENTS_DISABLE_TRACING="1")
    return env


def start_sandbox(tmp_path: Path, port: int) -> ForkedProcess:
    """`approval-bot sandbox --port <port>` (given the port's socket when it is one of
    `free_port`'s), its output in `output(tmp_path)`."""
    with (tmp_path / "sandbox.out").open("ab") as out:
        return fork_with_ports(
            ["sandbox", "--port", str(port)],
            env=sandbox_env(tmp_path),
            cwd=tmp_path,  # no .env, no policy.yml: the sandbox's own defaults
            stdout=out.fileno(),
            stderr=out.fileno(),
        )


def output(tmp_path: Path) -> str:
    path = tmp_path / "sandbox.out"
    return path.read_text(errors="replace") if path.exists() else ""


def processes_using(path: Path) -> list[str]:
    """Command lines of running processes that mention `path` (a leftover redis-server's --dir)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(path) in cmdline and "pytest" not in cmdline:
            found.append(cmdline)
    return found


def assert_nothing_left(tmp_path: Path) -> None:
    assert processes_using(tmp_path) == []  # its redis-server is gone
    assert list(tmp_path.glob("approval-bot-sandbox-*")) == []  # and its data with it


def cards(state: dict[str, Any]) -> list[dict[str, Any]]:
    """Messages on the page that show approval buttons (not the run message's Cancel run)."""
    return [
        m
        for m in state["messages"]
        if any(
            b.get("type") == "actions" and b.get("block_id") == "decision"
            for b in m.get("blocks") or []
        )
    ]


async def test_the_sandbox_serves_a_card_and_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    port = free_port()
    page = f"http://127.0.0.1:{port}"
    began = time.monotonic()
    process = start_sandbox(tmp_path, port)
    try:
        async with aiohttp.ClientSession() as http:

            async def served() -> bool:
                assert process.poll() is None, output(tmp_path)
                try:
                    async with http.get(page) as response:
                        return response.status == 200 and "approval-bot" in await response.text()
                except aiohttp.ClientError:
                    return False

            async def state(user: str) -> dict[str, Any]:
                async with http.get(f"{page}/api/state", params={"user": user}) as response:
                    assert response.status == 200
                    result: dict[str, Any] = await response.json()
                    return result

            async def post(what: str, body: Any) -> tuple[int, dict[str, Any]]:
                async with http.post(f"{page}/api/{what}", json=body) as response:
                    return response.status, await response.json()

            await wait_until(served, timeout=60, what="the sandbox page")
            served_after = time.monotonic() - began

            status, _ = await post(
                "command",
                {"user": "U0ALICE", "text": "restart the web tier and scale it to 8 replicas"},
            )
            assert status == 200

            async def two_cards() -> list[dict[str, Any]] | None:
                found = cards(await state("U0ALICE"))
                return found if len(found) == 2 else None

            shown = await wait_until(two_cards, timeout=30, what="two approval cards")
            print(f"page served after {served_after:.1f}s, first cards after "
                  f"{time.monotonic() - began:.1f}s")  # fmt: skip
            card = shown[0]
            [value] = [
                e["value"]
                for b in card["blocks"]
                if b["type"] == "actions"
                for e in b["elements"]
                if e["action_id"] == "approval_approve"
            ]
            click = {"action_id": "approval_approve", "value": value, "ts": card["ts"]}

            # Bad input from the page gets a 400 that says what is wrong, never a 500.
            assert await post("click", {"user": "U0BOB"}) == (
                400, {"ok": False, "error": "bad request: missing field 'action_id'"}
            )  # fmt: skip
            assert (await post("submit", {"user": "U0BOB", "index": 7}))[0] == 400
            assert (await post("submit", {"user": "U0BOB", "index": "x"}))[0] == 400
            assert (await post("click", ["not", "an", "object"]))[0] == 400
            assert (await post("click", {"user": "U0NOBODY", **click}))[0] == 400
            assert (await post("dance", {"user": "U0BOB"}))[0] == 404

            # Mallory is refused, privately; the card still waits for an approver.
            assert (await post("click", {"user": "U0MALLORY", **click}))[0] == 200

            async def refused() -> bool:
                private = (await state("U0MALLORY"))["private"]
                return any("not among the approvers" in p["text"] for p in private)

            await wait_until(refused, what="Mallory's private refusal")
            assert not any("not among" in p["text"] for p in (await state("U0BOB"))["private"])
            assert len(cards(await state("U0ALICE"))) == 2

            # A thread reply shows in its thread, under the person's name.
            reply = {"user": "U0BOB", "thread_ts": card["ts"], "text": "looks fine to me"}
            assert (await post("reply", reply))[0] == 200
            messages = (await state("U0CAROL"))["messages"]
            [said] = [m for m in messages if m.get("user")]
            assert (said["user"], said["text"], said["thread_ts"]) == (
                "U0BOB", "looks fine to me", card["ts"]
            )  # fmt: skip

            # `reject: <reason>` in the other card's thread rejects it, as in Slack; Bob approves
            # the first, and the run finishes.
            other = shown[1]
            reject = {"user": "U0CAROL", "thread_ts": other["ts"], "text": "reject: not today"}
            assert (await post("reply", reject))[0] == 200
            assert (await post("click", {"user": "U0BOB", **click}))[0] == 200

            async def finished() -> list[dict[str, Any]] | None:
                messages = (await state("U0ALICE"))["messages"]
                text = json.dumps(messages)
                return (
                    messages if "finished" in text and not cards({"messages": messages}) else None
                )

            text = json.dumps(await wait_until(finished, timeout=30, what="the run to finish"))
            assert "Rejected by <@U0CAROL>" in text and "not today" in text
            assert "Approved by <@U0BOB>" in text

        process.send_signal(signal.SIGINT)  # Ctrl-C
        assert process.wait(timeout=60) == 0, output(tmp_path)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert_nothing_left(tmp_path)


def test_a_taken_port_is_a_clear_error_and_leaves_nothing_running(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = start_sandbox(tmp_path, port)
        process.wait(timeout=60)
    err = output(tmp_path)
    assert process.returncode == 1
    assert f"cannot serve http://127.0.0.1:{port}" in err and "--port" in err
    assert "Traceback" not in err
    assert_nothing_left(tmp_path)


def test_a_bad_policy_is_listed_before_anything_starts(tmp_path: Path) -> None:
    (tmp_path / "bad.yml").write_text("channels:\n  C1:\n    approvers: []\n")
    result = run_bot(
        ["sandbox", "--policy", "bad.yml", "--port", "1"], cwd=tmp_path, env=sandbox_env(tmp_path)
    )
    assert result.returncode == 1
    assert "bad.yml has problems:" in result.stderr and "approvers" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_page_knows_every_emoji_the_bot_writes() -> None:
    """Every `:shortcode:` in the bot's own words is drawn on the page (not shown raw)."""
    written = set()
    for path in (ROOT / "bot").rglob("*.py"):
        written |= set(re.findall(r"(?<=[\s\"'(]):([a-z0-9_+]+):(?=[ \"'])", path.read_text()))
    written -= {"skip"}  # `# fmt: skip` is no emoji
    page = (ROOT / "bot" / "sandbox" / "page.html").read_text()
    table = page[page.index("const EMOJI") : page.index("};", page.index("const EMOJI"))]
    known = set(re.findall(r'"?([a-z0-9_+]+)"?: "', table))
    assert {"pencil2", "question", "raised_hand"} <= written
    assert written <= known, sorted(written - known)


def test_the_pages_people_are_the_policys_principals() -> None:
    """Each person is a principal of the policy, labelled with what it lets them do; nobody
    gets an id the policy does not name (or, for Mallory, one it names)."""
    rule = ChannelRule(starters=["U0DAN"], approvers=["U0EVE"])
    assert [(p.user_id, p.name, p.role) for p in cast(rule)] == [
        ("U0DAN", "Alice", "starter"),
        ("U0EVE", "Bob", "approver"),
        ("U0MALLORY", "Mallory", "outsider"),
    ]
    anyone = ChannelRule(starters=["*"], approvers=["U0BOB", "U0CAROL", "S0GROUP"])
    assert [(p.name, p.role) for p in cast(anyone)] == [
        ("Alice", "starter"), ("Bob", "approver"), ("Carol", "approver"), ("Mallory", "starter"),
    ]  # fmt: skip
    policy = PolicySource.from_text(sandbox_policy()).current().policy
    people = cast(policy.channels["C0SANDBOX"])
    assert [(p.name, p.role) for p in people] == [
        ("Alice", "starter"), ("Bob", "approver"), ("Carol", "approver"), ("Mallory", "outsider"),
    ]  # fmt: skip
