"""The sandbox page in a real browser (Debian's chromium, driven by Playwright), through the real
bot: starting runs, cards in every state, the More menu and the details, the Reject, Answer and
Edit forms, a follow-up, `/agent list`, Cancel's confirmation, plain messages and mentions, and
who may do what.

The pictures in docs/ are taken here: `SANDBOX_SCREENSHOTS=docs` (or `make screenshots`) writes
docs/sandbox-*.png; without it they go to the test's temporary directory.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
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

APPROVE = "button[data-action-id=approval_approve]"
TASK = "/agent restart the web tier and scale it to 8 replicas"


@asynccontextmanager
async def sandbox(
    tmp_path: Path, policy: Path | None = None, write_gap: float = 0.0
) -> AsyncIterator[str]:
    """The sandbox served on a port of its own. Its demo model writes each answer at once
    (`make sandbox`'s writes a word every 0.12 s: 2-4 s of waiting for a run's end), unless
    a test looks at an answer being written."""
    stop, ready = asyncio.Event(), asyncio.get_running_loop().create_future()
    task = asyncio.create_task(
        serve(
            host="127.0.0.1",
            port=0,  # the kernel's choice: `ready` says which
            agents="bot.examples.agents:agents",
            policy_file=policy,
            offline=True,
            stop=stop,
            ready=ready,
            write_gap=write_gap,
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


@pytest.fixture
async def sandbox_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    monkeypatch.chdir(tmp_path)
    async with sandbox(tmp_path) as url:
        yield url


def shots(tmp_path: Path) -> Callable[[str], str]:
    wanted = os.environ.get("SANDBOX_SCREENSHOTS")
    folder = ROOT / wanted if wanted else tmp_path
    return lambda name: str(folder / f"sandbox-{name}.png")


@asynccontextmanager
async def browser_page(url: str) -> AsyncIterator[Page]:
    assert async_playwright is not None and CHROMIUM is not None
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = await browser.new_page(viewport={"width": 1280, "height": 900})
        try:
            await page.goto(url)
            yield page
        finally:
            await browser.close()


async def act_as(page: Page, user: str) -> None:
    await page.click(f"header button[data-user={user}]")
    await page.wait_for_selector(f"header button.me[data-user={user}]")


async def send(page: Page, text: str) -> None:
    await page.fill("#say", text)
    await page.press("#say", "Enter")


async def settled(page: Page) -> None:
    """Proof that what was done on the page has been handled to its end: every action the page
    sent answered (its `data-sent` and `data-answered`), the bot quiet (no task, job or
    delivery left: the sandbox's /api/settled), then the page showing the state from after
    that. What is missing from the page then will not come; no time is waited out."""
    await page.wait_for_function("document.body.dataset.sent === document.body.dataset.answered")
    await page.evaluate(
        "async () => { const r = await fetch('/api/settled');"
        " if (!r.ok) throw new Error(await r.text()); await refresh(); }"
    )


async def approve_count(page: Page, count: int) -> None:
    await page.wait_for_function(
        f"document.querySelectorAll('#feed {APPROVE}').length === {count}", timeout=20_000
    )


async def choose(page: Page, card: object, option: str) -> None:
    """Open a card's More menu and choose the option standing for `option` (an action id)."""
    await card.locator("button[data-action-id=approval_more]").click()  # type: ignore[attr-defined]
    await card.locator(f".menu-item[data-option^='{option} ']").click()  # type: ignore[attr-defined]


async def test_cards_from_start_to_outcome_in_the_browser(sandbox_url: str, tmp_path: Path) -> None:
    """Two cards (what, on what, who asked, why, the arguments, one line, three buttons and a
    menu); an outsider refused privately (from the bot, only to her); Bob approves; Carol
    reads the details, then rejects with a reason; the cards and the run say what happened."""
    shot = shots(tmp_path)
    async with browser_page(sandbox_url) as page:
        await send(page, TASK)
        await approve_count(page, 2)
        restart = page.locator("#feed .msg", has_text="restart_service on web").first
        scale = page.locator("#feed .msg", has_text="scale_service on web").first
        text = await restart.inner_text()
        assert "asked by @Alice" in text and "service: web" in text
        assert "digest" not in text and "Reminds" not in text  # in the details, not the card
        assert "Approve\nReject\nEdit\n⋯" in text
        assert "replicas: 8" in await scale.inner_text()
        # The demo advisor's second opinion comes once the card is shown (#33 part 2).
        await restart.locator("text=Second opinion").wait_for()
        assert "Risk: medium. It changes a running system (restart)." in await restart.inner_text()

        await page.wait_for_selector("#feed >> text=waiting for 2 approvals")

        # Mallory may not decide: the bot tells her so, privately.
        await act_as(page, "U0MALLORY")
        await restart.locator(APPROVE).click()
        refusal = page.locator("#feed .msg.private", has_text="not among the approvers")
        await refusal.wait_for()
        assert (await refusal.locator(".who").inner_text()).startswith("approval-bot")
        assert "Only visible to you" in await refusal.inner_text()
        await page.screenshot(path=shot("cards"))

        # Bob approves the restart: the header says so, the buttons are gone.
        await act_as(page, "U0BOB")
        assert await page.locator("#feed .msg.private").count() == 0  # hers alone
        await restart.locator(APPROVE).click()
        await page.wait_for_selector("#feed >> text=Approved by @Bob: restart_service on web")
        assert await restart.locator("button").count() == 0

        # Bob comments in the scaling card's thread: his reply shows there, under his name.
        await scale.locator(".thread-link").click()
        await page.fill("#reply", "8 replicas on a Friday? Carol, your call.")
        await page.press("#reply", "Enter")
        mine = page.locator("#thread-feed .msg", has_text="your call")
        await mine.wait_for()
        assert (await mine.locator(".who").inner_text()).strip() == "Bob"
        await page.screenshot(path=shot("thread"))
        await page.click("#close-thread")

        # Carol opens the details from the More menu: digest, policy, rule, the conversation.
        await act_as(page, "U0CAROL")
        await choose(page, scale, "approval_show_conversation")
        await page.wait_for_selector("#overlay.open >> text=Call digest")
        details = await page.inner_text("#modal")
        assert "Details" in details and "policy" in details and "called scale_service" in details
        assert "This call: waiting for a decision" in details
        await page.screenshot(path=shot("conversation"))
        await page.click("#overlay .mfoot button")
        await page.wait_for_selector("#overlay.open", state="detached")

        # Carol rejects the scaling, with a reason, through the form.
        await scale.locator("button[data-action-id=approval_reject]").click()
        await page.wait_for_selector("#overlay.open textarea")
        await page.fill("#overlay textarea", "8 replicas is too many on a Friday")
        await page.screenshot(path=shot("modal"))
        await page.click("#modal-submit")
        await page.wait_for_selector("#overlay.open", state="detached")

        await page.wait_for_selector("#feed >> text=Rejected by @Carol", timeout=20_000)
        await page.wait_for_selector("#feed >> text=finished", timeout=20_000)
        feed = await page.inner_text("#feed")
        assert "8 replicas is too many on a Friday" in feed and "reply in the thread" in feed
        assert "Approval needed" not in feed and "is running" not in feed
        await page.locator(".thread-link").first.click()
        await page.wait_for_selector("#thread.open >> text=What happened")
        thread = await page.inner_text("#thread-feed")
        assert "restarted web (example only)" in thread and "<@" not in thread
        await page.screenshot(path=shot("outcome"))


async def test_approve_all_in_the_browser(sandbox_url: str, tmp_path: Path) -> None:
    """A pause of two calls: the run message offers Approve all 2; its form lists each call
    with what submitting does; submitted, it shows what was done, and each card says so."""
    shot = shots(tmp_path)
    async with browser_page(sandbox_url) as page:
        await send(page, TASK)
        await approve_count(page, 2)
        await act_as(page, "U0BOB")
        run = page.locator("#feed .msg", has_text="started agent").first
        await run.locator("button[data-action-id=batch_approve]").click()
        await page.wait_for_selector("#overlay.open >> text=calls at once")
        form = await page.inner_text("#modal")
        assert "restart_service" in form and "scale_service" in form and "Approve 2" in form
        await page.screenshot(path=shot("batch"))
        await page.click("#modal-submit")
        await page.wait_for_selector("#overlay.open >> text=Approve all: done")
        assert "Approved 2" in await page.inner_text("#modal")
        await page.click("#overlay .mfoot button")
        await page.wait_for_selector("#overlay.open", state="detached")
        await page.wait_for_selector("#feed >> text=finished", timeout=20_000)
        feed = await page.inner_text("#feed")
        assert feed.count("(with other calls at once)") == 2


async def test_the_agent_asks_first_and_acts_on_the_answer_in_the_browser(
    sandbox_url: str, tmp_path: Path
) -> None:
    shot = shots(tmp_path)
    async with browser_page(sandbox_url) as page:
        await send(page, "/agent run janitor clear the old caches")
        answer = "button[data-action-id=question_answer]"
        await page.wait_for_selector(answer, timeout=20_000)
        question = page.locator("#feed .msg", has=page.locator(answer))
        text = await question.inner_text()
        assert "Question from the agent janitor" in text and "Who may answer" in text
        assert "❓" in text and ":question:" not in text  # emoji as Slack shows them
        # It asks alone: no deletion waits beside the question it should inform.
        assert await page.locator(f"#feed {APPROVE}").count() == 0
        await page.wait_for_selector("#feed >> text=waiting for 1 answer")  # not "approval"
        await page.screenshot(path=shot("question"))

        await act_as(page, "U0MALLORY")
        await question.locator(answer).click()
        await page.wait_for_selector("text=You may not answer this question")
        assert await page.locator("#overlay.open").count() == 0

        await act_as(page, "U0ALICE")
        await question.locator(answer).click()
        await page.wait_for_selector("#overlay.open textarea")
        await page.fill("#overlay textarea", "Keep /var/log; the rest may go")
        await page.screenshot(path=shot("answer"))
        await page.click("#modal-submit")
        await page.wait_for_selector("#overlay.open", state="detached")
        await page.wait_for_selector("#feed >> text=Answered by @Alice", timeout=20_000)

        # Then, and only then, the deletion: a path the answer does not forbid.
        delete = page.locator("#feed .msg", has_text="delete_path on /var/cache/app")
        await delete.wait_for(timeout=20_000)
        assert "You answered “Keep /var/log; the rest may go”" in await delete.inner_text()
        await act_as(page, "U0BOB")
        await delete.locator(APPROVE).click()
        await page.wait_for_selector("#feed >> text=finished", timeout=20_000)
        await page.locator(".thread-link").first.click()
        await page.wait_for_selector("#thread.open >> text=What happened")
        thread = await page.inner_text("#thread-feed")
        assert "You told me: “Keep /var/log; the rest may go”" in thread
        assert "deleted /var/cache/app (example only)" in thread


async def test_edit_then_approve_in_the_browser(sandbox_url: str, tmp_path: Path) -> None:
    """Bob edits the restart's service; the run resumes, the demo model calls the tool again
    as edited, it runs with Bob's arguments without a new card, and the summary says so in
    words."""
    shot = shots(tmp_path)
    async with browser_page(sandbox_url) as page:
        await send(page, TASK)
        await approve_count(page, 2)
        ts = await page.locator("#feed .msg", has_text="restart_service on web").get_attribute(
            "data-ts"
        )
        restart = page.locator(f"#feed .msg[data-ts='{ts}']")  # its header changes on edit
        scale = page.locator("#feed .msg", has_text="scale_service on web").first

        await act_as(page, "U0BOB")
        await restart.locator("button[data-action-id=approval_edit]").click()
        field = "#overlay.open textarea[data-block='field:service']"
        await page.wait_for_selector(field)
        assert await page.input_value(field) == "web"
        await page.fill(field, "api")
        await page.screenshot(path=shot("edit"))
        await page.click("#modal-submit")
        await page.wait_for_selector("#overlay.open", state="detached")
        await page.wait_for_selector("#feed >> text=Edited by @Bob")
        assert "restart_service on api" in await restart.inner_text()

        await act_as(page, "U0CAROL")
        await scale.locator(APPROVE).click()
        await page.wait_for_selector("#feed >> text=finished", timeout=20_000)
        assert await page.locator("#feed .msg", has_text="restart_service on").count() == 1
        await page.locator(".thread-link").first.click()
        await page.wait_for_selector("#thread.open >> text=What happened")
        thread = await page.inner_text("#thread-feed")
        assert "restarted api (example only)" in thread and "restarted web" not in thread
        assert "Not run as proposed" not in thread and "U0BOB" not in thread
        assert "the arguments @Bob edited" in thread  # the note: a mention, not an id
        await page.screenshot(path=shot("edited"))


async def test_a_follow_up_in_the_run_thread_in_the_browser(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Alice's run finished; Mallory, an outsider, may not continue it; Alice replies in its
    thread, and the agent takes that up as the run's next turn: a new card, Bob's approval, a
    second answer in the same thread, shown while it is written (as `make sandbox` writes it,
    a word every 0.12 s), then finalized."""
    shot = shots(tmp_path)
    monkeypatch.chdir(tmp_path)
    async with sandbox(tmp_path, write_gap=0.12) as url, browser_page(url) as page:
        await send(page, "/agent restart the web tier")
        await approve_count(page, 1)
        await act_as(page, "U0BOB")
        await page.locator(APPROVE).first.click()
        await page.wait_for_selector("#feed >> text=finished", timeout=20_000)

        # Mallory, an outsider, may not continue it: told so, privately, in the thread.
        await act_as(page, "U0MALLORY")
        await page.locator(".thread-link").first.click()
        await page.wait_for_selector("#thread.open >> text=What happened")
        await page.fill("#reply", "now restart everything")
        await page.press("#reply", "Enter")
        await page.wait_for_selector("#thread-feed .msg.private >> text=may continue it")
        await page.click("#close-thread")

        await act_as(page, "U0ALICE")
        await page.locator(".thread-link").first.click()
        await page.wait_for_selector("#thread.open >> text=What happened")
        assert await page.locator(f"#feed {APPROVE}").count() == 0  # Mallory's started nothing
        await page.fill("#reply", "now restart the api tier")
        await page.press("#reply", "Enter")
        await page.click("#close-thread")
        await approve_count(page, 1)
        card = page.locator("#feed .msg", has=page.locator(APPROVE))
        assert "restart_service on api" in await card.inner_text()
        await act_as(page, "U0BOB")
        await card.locator(APPROVE).click()
        await page.locator(".thread-link").first.click()
        await page.wait_for_selector("#thread-feed >> text=still writing", timeout=20_000)
        await page.screenshot(path=shot("streaming"))
        await page.wait_for_function(
            "[...document.querySelectorAll('#thread-feed .msg')]"
            ".filter(m => m.innerText.includes('What happened')).length === 2",
            timeout=20_000,
        )
        thread = await page.inner_text("#thread-feed")
        assert thread.index("now restart the api tier") < thread.rindex("What happened")
        await page.screenshot(path=shot("follow-up"))


async def test_the_page_behaves_like_slack(sandbox_url: str, tmp_path: Path) -> None:
    """A plain message is only a message; a mention starts a run; `/agent list` shows its
    blocks, privately, in its place; Cancel asks first; an outsider starts nothing."""
    shot = shots(tmp_path)
    async with browser_page(sandbox_url) as page:
        await send(page, "hello everyone")
        await settled(page)
        feed = await page.inner_text("#feed")
        assert "hello everyone" in feed and "started agent" not in feed

        # Mallory, an outsider, starts nothing: by command or by mention.
        await act_as(page, "U0MALLORY")
        await send(page, "/agent restart the web tier")
        await page.wait_for_selector("#feed .msg.private >> text=not among the people allowed")
        await send(page, "@approval-bot restart the web tier")
        await settled(page)
        feed = await page.inner_text("#feed")
        assert "@approval-bot restart the web tier" in feed and "started agent" not in feed

        # Alice mentions the bot: that starts a run, as in Slack.
        await act_as(page, "U0ALICE")
        await send(page, "@approval-bot restart the web tier")
        await approve_count(page, 1)
        await page.wait_for_selector("#feed >> text=waiting for 1 approval")
        feed = await page.inner_text("#feed")
        assert "started agent ops" in feed and "@approval-bot restart the web tier" in feed

        # `/agent list`: the blocks, not only the fallback text; from the bot, to Alice only,
        # and not pinned below the messages that come after it.
        await send(page, "/agent list")
        listed = page.locator("#feed .msg.private", has_text="Unfinished runs in this channel")
        await listed.wait_for()
        assert "call(s) waiting for you" not in await listed.inner_text()
        await page.screenshot(path=shot("list"))
        await send(page, "after the list")
        await page.wait_for_selector("#feed .msg >> text=after the list")
        rows = await page.locator("#feed .msg").all_inner_texts()
        listed_at = next(i for i, r in enumerate(rows) if "Unfinished runs" in r)
        assert listed_at < next(i for i, r in enumerate(rows) if "after the list" in r)
        assert ":pencil2:" not in "".join(rows) and ":raised_hand:" not in "".join(rows)

        # Cancel asks first: "Keep it" sends nothing; "Cancel run" cancels.
        cancel = page.locator("#feed button[data-action-id=run_cancel]")
        sent = await page.get_attribute("body", "data-sent")
        await cancel.click()
        await page.wait_for_selector("#confirm.open >> text=Cancel this run?")
        await page.screenshot(path=shot("cancel"))
        await page.click("#confirm-no")
        await settled(page)
        assert await page.get_attribute("body", "data-sent") == sent  # the page sent nothing
        assert await cancel.count() == 1 and await page.locator(f"#feed {APPROVE}").count() == 1
        await cancel.click()
        await page.click("#confirm-yes")
        await page.wait_for_selector("#feed >> text=Cancelled by @Alice with its run")
        await cancel.wait_for(state="detached")  # the run message too: ended, nothing to click
        assert "cancelled by @Alice" in await page.inner_text("#feed")
        feed = await page.inner_text("#feed")
        assert "reply in the thread" not in feed
        await page.screenshot(path=shot("cancelled"))


async def test_with_a_policy_the_people_are_its_principals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--policy`: the page's people are the policy's, labelled with what it lets them do; no
    one gets a made-up id that the policy then refuses."""
    monkeypatch.chdir(tmp_path)
    policy = tmp_path / "policy.yml"
    policy.write_text(
        "channels:\n  C0OPS:\n    starters: [U0DAN]\n    approvers: [U0EVE]\n", encoding="utf-8"
    )
    async with sandbox(tmp_path, policy) as url, browser_page(url) as page:
        await page.wait_for_selector("header button[data-user=U0DAN].me")
        people = await page.inner_text("#people")
        assert "Alice starter" in people and "Bob approver" in people
        assert "Carol" not in people and "Mallory outsider" in people
        await send(page, "/agent restart the web tier")
        await approve_count(page, 1)
        await act_as(page, "U0EVE")
        await page.locator(APPROVE).first.click()
        await page.wait_for_selector("#feed >> text=Approved by @Bob", timeout=20_000)
