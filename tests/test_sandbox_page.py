"""The sandbox page in a real browser (Debian's chromium, driven by Playwright): a person starts a
run, an outsider is refused, one approver approves, another rejects with a reason through the
modal, and the outcome shows. SANDBOX_SCREENSHOTS=docs refreshes the pictures in docs/."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.sandbox.server import serve
from tests.capabilities import MISSING_BROWSER
from tests.processes import ROOT

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
try:
    from playwright.async_api import Page, async_playwright
except ImportError:  # pragma: no cover - the dev extras install it
    async_playwright = None  # type: ignore[assignment]

pytestmark = pytest.mark.skipif(
    CHROMIUM is None or async_playwright is None,
    reason=f"{MISSING_BROWSER}: `apt-get install chromium` (Debian) and the `playwright` package",
)


@pytest.fixture
async def sandbox_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    monkeypatch.chdir(tmp_path)
    stop, ready = asyncio.Event(), asyncio.get_running_loop().create_future()
    task = asyncio.create_task(
        serve(
            host="127.0.0.1",
            port=0,  # the kernel's choice: `ready` says which
            agents="bot.examples.agents:agents",
            policy_file=None,
            offline=True,
            stop=stop,
            ready=ready,
        )
    )
    await asyncio.wait([ready, task], timeout=60, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        task.result()  # raises what stopped it
    if not ready.done():
        stop.set()
        await task
        raise TimeoutError("the sandbox did not serve its page within 60 s")
    port = ready.result()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop.set()
        await task


def shots(tmp_path: Path) -> Path:
    wanted = os.environ.get("SANDBOX_SCREENSHOTS")
    return ROOT / wanted if wanted else tmp_path


async def act_as(page: Page, user: str) -> None:
    await page.click(f"header button[data-user={user}]")
    await page.wait_for_selector(f"header button.me[data-user={user}]")


async def test_start_approve_and_reject_with_a_reason_in_the_browser(
    sandbox_url: str, tmp_path: Path
) -> None:
    assert async_playwright is not None and CHROMIUM is not None
    out = shots(tmp_path)
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = await browser.new_page(viewport={"width": 1280, "height": 860})
        try:
            await page.goto(sandbox_url)
            await page.fill("#say", "/agent restart the web tier")
            await page.press("#say", "Enter")
            approve = "button[data-action-id=approval_approve]"
            await page.wait_for_function(
                f"document.querySelectorAll('{approve}').length === 2", timeout=20_000
            )
            cards = page.locator(".msg", has=page.locator(approve))
            assert "restart_service" in await cards.nth(0).inner_text()
            assert "scale_service" in await cards.nth(1).inner_text()

            # Mallory may not decide: the bot says why, privately.
            await act_as(page, "U0MALLORY")
            await cards.nth(0).locator(approve).click()
            await page.wait_for_selector("text=not among the approvers")
            await page.screenshot(path=str(out / "sandbox-cards.png"))

            # Bob approves the restart.
            await act_as(page, "U0BOB")
            await cards.nth(0).locator(approve).click()
            await page.wait_for_selector("text=Approved by @Bob")

            # Bob comments in the scaling card's thread: his reply shows there, under his name.
            scale = page.locator(".msg", has_text="wants to run tool scale_service").first
            await scale.locator(".thread-link").click()
            await page.fill("#reply", "10 replicas on a Friday? Carol, your call.")
            await page.press("#reply", "Enter")
            mine = page.locator("#thread-feed .msg", has_text="your call")
            await mine.wait_for()
            assert (await mine.locator(".who").inner_text()).strip() == "Bob"
            await page.screenshot(path=str(out / "sandbox-thread.png"))
            await page.click("#close-thread")

            # Carol reads why, then the run so far, before she decides.
            await act_as(page, "U0CAROL")
            assert "Why, in the agent's words:" in await scale.inner_text()
            await scale.locator("button[data-action-id=approval_show_conversation]").click()
            await page.wait_for_selector("#overlay.open >> text=restart the web tier")
            modal = await page.inner_text("#modal")
            assert "Conversation" in modal and "called scale_service" in modal
            assert "This call: waiting for a decision" in modal
            await page.screenshot(path=str(out / "sandbox-conversation.png"))
            await page.click("#overlay .mfoot button")
            await page.wait_for_selector("#overlay.open", state="detached")

            # Carol rejects the scaling, with a reason, through the modal.
            await scale.locator("button[data-action-id=approval_reject]").click()
            await page.wait_for_selector("#overlay.open textarea")
            await page.fill("#overlay textarea", "10 replicas is too many on a Friday")
            await page.screenshot(path=str(out / "sandbox-modal.png"))
            await page.click("#modal-submit")
            await page.wait_for_selector("#overlay.open", state="detached")

            # The run resumes once and finishes; the outcome is on the run message and cards.
            await page.wait_for_selector("text=finished", timeout=20_000)
            # (the card's update and the run message's are two messages: either may come first)
            await page.wait_for_selector("#feed >> text=Rejected by @Carol", timeout=20_000)
            feed = await page.inner_text("#feed")
            assert "Rejected by @Carol" in feed and "10 replicas is too many on a Friday" in feed
            assert "Approved by @Bob" in feed
            await page.locator(".thread-link").first.click()
            await page.wait_for_selector("#thread.open >> text=Done.")
            await page.screenshot(path=str(out / "sandbox-outcome.png"))
            assert "restarted" in await page.inner_text("#thread-feed")
        finally:
            await browser.close()


async def test_the_agent_asks_and_the_starter_answers_in_the_browser(
    sandbox_url: str, tmp_path: Path
) -> None:
    assert async_playwright is not None and CHROMIUM is not None
    out = shots(tmp_path)
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = await browser.new_page(viewport={"width": 1280, "height": 860})
        try:
            await page.goto(sandbox_url)
            # The janitor's demo model asks one question (ask_human) beside its deletion.
            await page.fill("#say", "/agent run janitor clear the old caches")
            await page.press("#say", "Enter")
            answer = "button[data-action-id=question_answer]"
            await page.wait_for_selector(answer, timeout=20_000)
            question = page.locator(".msg", has=page.locator(answer))
            assert "is there anything I should know?" in await question.inner_text()
            assert "Who may answer" in await question.inner_text()

            # Mallory may not answer: no form, and the bot says why, privately.
            await act_as(page, "U0MALLORY")
            await question.locator(answer).click()
            await page.wait_for_selector("text=You may not answer this question")
            assert await page.locator("#overlay.open").count() == 0

            # Alice, who started the run, answers through the modal.
            await act_as(page, "U0ALICE")
            await question.locator(answer).click()
            await page.wait_for_selector("#overlay.open textarea")
            await page.fill("#overlay textarea", "Keep /var/log; the rest may go")
            await page.screenshot(path=str(out / "sandbox-answer.png"))
            await page.click("#modal-submit")
            await page.wait_for_selector("#overlay.open", state="detached")
            answered = page.locator(".msg", has_text="Answered by @Alice")
            await answered.wait_for(timeout=20_000)
            assert "Keep /var/log; the rest may go" in await answered.inner_text()
            assert await answered.locator(answer).count() == 0

            # Bob approves the deletion; the run resumes once, and the agent got the answer.
            await act_as(page, "U0BOB")
            approve = page.locator(".msg", has_text="delete_path").locator(
                "button[data-action-id=approval_approve]"
            )
            await approve.click()
            await page.wait_for_selector("text=finished", timeout=20_000)
            await page.locator(".thread-link").first.click()
            await page.wait_for_selector("#thread.open >> text=Done.")
            assert "Keep /var/log; the rest may go" in await page.inner_text("#thread-feed")
        finally:
            await browser.close()


async def test_edit_then_approve_in_the_browser(sandbox_url: str, tmp_path: Path) -> None:
    """Bob edits the restart's service in the Edit modal (a wrong value first: the modal says
    why); the run resumes, the demo model calls the tool again as edited, and it runs with
    Bob's arguments, without a new card."""
    assert async_playwright is not None and CHROMIUM is not None
    out = shots(tmp_path)
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = await browser.new_page(viewport={"width": 1280, "height": 860})
        try:
            await page.goto(sandbox_url)
            await page.fill("#say", "/agent restart the web tier")
            await page.press("#say", "Enter")
            edit = "button[data-action-id=approval_edit]"
            await page.wait_for_function(
                f"document.querySelectorAll('{edit}').length === 2", timeout=20_000
            )
            restart = page.locator(".msg", has_text="wants to run tool restart_service").first
            scale = page.locator(".msg", has_text="wants to run tool scale_service").first

            await act_as(page, "U0BOB")
            await restart.locator(edit).click()
            field = "#overlay.open textarea[data-block='field:service']"
            await page.wait_for_selector(field)
            assert await page.input_value(field) == "restart the web tier"
            await page.fill(field, "web")
            await page.screenshot(path=str(out / "sandbox-edit.png"))
            await page.click("#modal-submit")
            await page.wait_for_selector("#overlay.open", state="detached")
            await page.wait_for_selector("text=Edited by @Bob")

            await act_as(page, "U0CAROL")
            await scale.locator("button[data-action-id=approval_approve]").click()
            await page.wait_for_selector("text=finished", timeout=20_000)
            feed = await page.inner_text("#feed")
            assert feed.count("Approval needed") == 2  # no card for the re-proposed call
            await page.locator(".thread-link").first.click()
            await page.wait_for_selector("#thread.open >> text=Done.")
            thread = await page.inner_text("#thread-feed")
            assert "restarted web " in thread and "restarted restart the web tier" not in thread
            await page.screenshot(path=str(out / "sandbox-edited.png"))
        finally:
            await browser.close()


async def test_a_follow_up_in_the_run_thread_in_the_browser(
    sandbox_url: str, tmp_path: Path
) -> None:
    """Alice's run finished; she replies in its thread, and the agent takes that up as the
    run's next turn: new cards, Bob's approvals, a second answer in the same thread, shown
    while it is written, then finalized."""
    assert async_playwright is not None and CHROMIUM is not None
    out = shots(tmp_path)
    approve = "button[data-action-id=approval_approve]"

    async def approve_all(page: Page, count: int) -> None:
        for _ in range(count):
            await page.locator(approve).first.wait_for(timeout=20_000)
            await page.locator(approve).first.click()
            await page.wait_for_function(
                f"document.querySelectorAll('{approve}').length < {count}", timeout=20_000
            )
            count -= 1

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = await browser.new_page(viewport={"width": 1280, "height": 860})
        try:
            await page.goto(sandbox_url)
            await page.fill("#say", "/agent restart the web tier")
            await page.press("#say", "Enter")
            await page.wait_for_function(
                f"document.querySelectorAll('{approve}').length === 2", timeout=20_000
            )
            await act_as(page, "U0BOB")
            await approve_all(page, 2)
            await page.wait_for_selector("text=finished", timeout=20_000)

            # Alice follows up in the run's thread.
            await act_as(page, "U0ALICE")
            await page.locator(".thread-link").first.click()
            await page.wait_for_selector("#thread.open >> text=Done.")
            await page.fill("#reply", "now do the same for the api tier")
            await page.press("#reply", "Enter")
            await page.click("#close-thread")
            await page.wait_for_function(
                f"document.querySelectorAll('{approve}').length === 2", timeout=20_000
            )
            cards = page.locator(".msg", has=page.locator(approve))
            assert "the api tier" in await cards.nth(0).inner_text()
            await act_as(page, "U0BOB")
            await approve_all(page, 2)
            await page.locator(".thread-link").first.click()
            # The answer streams in: shown while written (the demo model writes word by word).
            await page.wait_for_selector("#thread-feed >> text=still writing", timeout=20_000)
            await page.screenshot(path=str(out / "sandbox-streaming.png"))
            await page.wait_for_function(
                "[...document.querySelectorAll('#thread-feed .msg')]"
                ".filter(m => m.innerText.includes('Done.')).length === 2",
                timeout=20_000,
            )
            thread = await page.inner_text("#thread-feed")
            assert thread.index("now do the same for the api tier") < thread.rindex("Done.")
            await page.screenshot(path=str(out / "sandbox-follow-up.png"))
        finally:
            await browser.close()
