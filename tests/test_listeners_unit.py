"""The Slack listeners alone: each module's `register(app, deps)` with fakes for the app and
for the listeners' collaborators (the service, the store, the notifier, Slack's Web API).

Unit tests of the adapter: every listener acks first, takes the Actor from the signed context
(never from what the body says the user is), answers "still working" past its deadline, and
routes each action id to its service call. The end-to-end tests (signed HTTP into the real app,
real Redis) are in the other modules."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import pytest
from slack_bolt import BoltResponse
from slack_bolt.async_app import AsyncBoltContext

from bot.service.foreground import Foreground
from bot.service.ports import Actor
from bot.service.replies import ConfirmReject, Mention, RejectForm, Reply, Text
from bot.slack import blocks
from bot.slack.listeners import actions, commands, events, middleware, views
from bot.slack.listeners.actions import FORM_FAILED
from bot.slack.listeners.commands import STILL_WORKING_COMMAND
from bot.slack.listeners.deps import ListenerDeps
from bot.slack.listeners.shared import DEADLINE, RECEIVED, STILL_WORKING, TRY_AGAIN
from bot.slack.listeners.views import STILL_WORKING_REJECTION
from bot.store.records import CallRecord

SIGNED = Actor(team_id="T1", user_id="U1", enterprise_id="E1")
# What a forged or confused body might claim; the listeners must not believe it.
BODY_USER = {"id": "U9", "team_id": "T1", "username": "mallory"}
SLOW = 0.3  # seconds a slow service call takes; deadlines below are shorter


class Timeline:
    """What happened, in order: acks and service calls alike."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, Any]] = []

    def add(self, what: str, detail: Any = None) -> None:
        self.entries.append((what, detail))

    def names(self) -> list[str]:
        return [what for what, _ in self.entries]

    def calls(self, name: str) -> list[Any]:
        return [detail for what, detail in self.entries if what == name]


class FakeAck:
    """Bolt's `ack`, recording its arguments in the timeline."""

    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline
        self.answers: list[dict[str, Any]] = []

    async def __call__(self, **kwargs: Any) -> None:
        self.answers.append(kwargs)
        self.timeline.add("ack", kwargs)


class FakeService:
    """The service interface the listeners use: records each call; answers what a test says
    (`answers[name]`: a value, or a callable of the call's arguments), after `delay` seconds."""

    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline
        self.answers: dict[str, Any] = {}
        self.delay = 0.0
        self.tasks: list[asyncio.Task[None]] = []

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        self.tasks.append(asyncio.ensure_future(coro))

    def later(self, what: str, coro: Coroutine[Any, Any, Any]) -> None:
        async def run() -> None:
            await coro

        self.spawn(run(), what)

    async def settle(self) -> None:
        """Wait until every background task (and those they started) has finished."""
        while pending := [t for t in self.tasks if not t.done()]:
            await asyncio.wait(pending)
        for task in self.tasks:
            task.result()  # a fake's failure fails the test

    def agent_names(self) -> list[str]:
        return ["ops", "db"]

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        self.timeline.add(name, (args, kwargs))
        if self.delay:
            await asyncio.sleep(self.delay)
        answer = self.answers.get(name, Reply(True))
        if isinstance(answer, Exception):
            raise answer
        return answer(*args, **kwargs) if callable(answer) else answer

    async def start_run(
        self, actor: Actor, channel: str, agent_name: str | None, task: str, delivery_id: str = ""
    ) -> Reply:
        return await self._call(
            "start_run", actor, channel, agent_name, task, delivery_id=delivery_id
        )

    async def reject_form(
        self, actor: Actor, approval_id: str, *, always: bool
    ) -> RejectForm | Reply:
        return await self._call("reject_form", actor, approval_id, always=always)

    async def decide(
        self,
        actor: Actor,
        approval_id: str,
        *,
        approve: bool,
        always: bool,
        reason: str = "",
        typed: str | None = None,
    ) -> Reply:
        extra = {} if typed is None else {"typed": typed}
        return await self._call(
            "decide", actor, approval_id, approve=approve, always=always, reason=reason, **extra
        )

    async def approve(
        self, actor: Actor, approval_id: str, *, always: bool, version: str = "",
        read: Awaitable[Any] | None = None,
    ) -> Any:  # fmt: skip
        extra = {} if read is None else {"read": await read}
        return await self._call("approve", actor, approval_id, always=always, **extra)

    def read_ahead(self, approval_id: str) -> Awaitable[Any]:
        self.timeline.add("read_ahead", approval_id)

        async def read() -> str:
            failure = self.answers.get("read_ahead")
            if isinstance(failure, Exception):
                raise failure
            return f"read {approval_id}"

        return asyncio.ensure_future(read())

    async def resolve_review(self, actor: Actor, review_id: str, *, action: str) -> Reply:
        return await self._call("resolve_review", actor, review_id, action=action)

    async def confirm_reply(self, actor: Actor, reply_id: str, *, reject: bool) -> Reply:
        return await self._call("confirm_reply", actor, reply_id, reject=reject)

    async def cancel_run(self, actor: Actor, run_id: str) -> Reply:
        return await self._call("cancel_run", actor, run_id)

    async def run_status(self, actor: Actor, run_id: str) -> Any:
        return await self._call("run_status", actor, run_id)

    async def overview(self, actor: Actor, channel: str) -> Any:
        return await self._call("overview", actor, channel)

    async def thread_reply(
        self, actor: Actor, channel: str, thread_ts: str, text: str, *, ts: str = ""
    ) -> Reply | ConfirmReject | None:
        return await self._call("thread_reply", actor, channel, thread_ts, text)


class FakeRecords:
    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline
        self.seen: set[tuple[str, str]] = set()
        self.calls: dict[str, CallRecord] = {}

    async def first_delivery(self, kind: str, delivery_id: str) -> bool:
        self.timeline.add("first_delivery", (kind, delivery_id))
        first = (kind, delivery_id) not in self.seen
        self.seen.add((kind, delivery_id))
        return first

    async def get_call(self, approval_id: str) -> CallRecord | None:
        return self.calls.get(approval_id)


class FakeNotifier:
    """Private answers: (channel, user, text, thread_ts)."""

    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline
        self.told: list[tuple[str, str, str, str]] = []

    async def tell(
        self, channel: str, user: str, text: str, thread_ts: str = "", *, team: str = ""
    ) -> None:
        self.told.append((channel, user, text, thread_ts))
        self.timeline.add("tell", text)

    def texts(self) -> list[str]:
        return [text for _, _, text, _ in self.told]


class FakeClient:
    """The two Web API methods the listeners call themselves."""

    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline
        self.views_open_error: Exception | None = None

    async def chat_postEphemeral(self, **kwargs: Any) -> dict[str, Any]:
        self.timeline.add("chat.postEphemeral", kwargs)
        return {"ok": True}

    async def views_open(self, **kwargs: Any) -> dict[str, Any]:
        self.timeline.add("views.open", kwargs)
        if self.views_open_error is not None:
            raise self.views_open_error
        return {"ok": True}


class FakeHome:
    def __init__(self) -> None:
        self.opened_by: list[Actor] = []

    async def opened(self, actor: Actor) -> None:
        self.opened_by.append(actor)


class FakeApp:
    """Records what each `register` attaches to which command, action, view or event."""

    def __init__(self) -> None:
        self.listeners: dict[tuple[str, str], Callable[..., Awaitable[Any]]] = {}
        self.middleware_list: list[Callable[..., Awaitable[Any]]] = []

    def _on(self, kind: str, key: str) -> Callable[[Any], Any]:
        def attach(listener: Callable[..., Awaitable[Any]]) -> Any:
            assert (kind, key) not in self.listeners, f"{kind} {key} registered twice"
            self.listeners[(kind, key)] = listener
            return listener

        return attach

    def command(self, name: str) -> Callable[[Any], Any]:
        return self._on("command", name)

    def action(self, action_id: str) -> Callable[[Any], Any]:
        return self._on("action", action_id)

    def view(self, callback_id: str) -> Callable[[Any], Any]:
        return self._on("view", callback_id)

    def event(self, event_type: str) -> Callable[[Any], Any]:
        return self._on("event", event_type)

    def middleware(self, function: Callable[..., Awaitable[Any]]) -> Any:
        self.middleware_list.append(function)
        return function


class Rig:
    """The listeners registered on a fake app, with fake collaborators."""

    def __init__(self, foreground: Foreground | None = None) -> None:
        self.timeline = Timeline()
        self.service = FakeService(self.timeline)
        self.records = FakeRecords(self.timeline)
        self.notifier = FakeNotifier(self.timeline)
        self.client = FakeClient(self.timeline)
        self.home = FakeHome()
        self.deps = ListenerDeps(
            service=self.service,
            records=self.records,
            notifier=self.notifier,
            client=self.client,
            foreground=foreground or Foreground(max_wait=0),
            ack_budget=1.5,
            default_agent="ops",
            home=self.home,
        )
        self.app = FakeApp()
        for module in (middleware, commands, actions, views, events):
            module.register(self.app, self.deps)
        self.ack = FakeAck(self.timeline)

    def context(self, budget: float = 1.0, **extra: Any) -> AsyncBoltContext:
        """What Bolt's context holds of a signed request, with the app's deadline."""
        now = asyncio.get_running_loop().time()
        return AsyncBoltContext(
            team_id=SIGNED.team_id, user_id=SIGNED.user_id, enterprise_id=SIGNED.enterprise_id,
            channel_id="C1", **{RECEIVED: now, DEADLINE: now + budget}, **extra,
        )  # fmt: skip

    async def command(self, text: str, budget: float = 1.0) -> None:
        listener = self.app.listeners[("command", commands.COMMAND)]
        # The payload's user fields are what the body says; only the context is signed.
        payload = {"text": text, "channel_id": "C1", "user_id": "U9", "trigger_id": "trig"}
        await listener(ack=self.ack, command=payload, context=self.context(budget))

    async def click(self, action_id: str, value: str = "a1", budget: float = 1.0) -> None:
        listener = self.app.listeners[("action", action_id)]
        body = {
            "type": "block_actions",
            "user": BODY_USER,
            "channel": {"id": "C1"},
            "trigger_id": "trig",
            "actions": [{"action_id": action_id, "value": value}],
        }
        await listener(ack=self.ack, body=body, context=self.context(budget))

    async def submit(
        self, meta: dict[str, Any] | str, reason: str = "no", budget: float = 1.0
    ) -> None:
        listener = self.app.listeners[("view", blocks.REJECT_MODAL)]
        view = {
            "private_metadata": meta if isinstance(meta, str) else json.dumps(meta),
            "state": {"values": {blocks.REASON_BLOCK: {blocks.REASON_INPUT: {"value": reason}}}},
        }
        body = {"type": "view_submission", "user": BODY_USER, "view": view}
        await listener(ack=self.ack, body=body, view=view, context=self.context(budget))

    async def event(self, kind: str, event: dict[str, Any]) -> None:
        await self.app.listeners[("event", kind)](event=event, context=self.context())


def actor_of(call: Any) -> Actor:
    args, _ = call
    return args[0]


@pytest.fixture
def rig() -> Rig:
    return Rig()


def test_register_attaches_one_listener_to_every_command_action_view_and_event(rig: Rig) -> None:
    expected = {
        ("command", "/agent"),
        *(("action", a) for a in blocks.DECISION_ACTIONS),
        ("action", blocks.CANCEL_RUN),
        ("action", blocks.REVIEW_DONE),
        ("action", blocks.REVIEW_RERUN),
        ("action", blocks.REPLY_REJECT),
        ("action", blocks.REPLY_KEEP),
        ("action", blocks.SHOW_ALL),
        ("action", blocks.SHOW_CONVERSATION),
        ("action", blocks.MORE),
        ("view", blocks.REJECT_MODAL),
        ("view", blocks.CONFIRM_MODAL),
        ("action", blocks.EDIT),
        ("view", blocks.EDIT_MODAL),
        ("action", blocks.GRANT_REVOKE),
        ("view", blocks.GRANT_MODAL),
        *(("action", a) for a in blocks.BATCH_ACTIONS),
        ("action", blocks.HOME_PICK),
        ("view", blocks.BATCH_MODAL),
        ("event", "app_home_opened"),
        ("event", "message"),
        ("event", "app_mention"),
        ("event", "reaction_added"),
    }
    assert set(rig.app.listeners) == expected
    assert len(rig.app.middleware_list) == 1


# /agent


async def test_help_is_answered_at_once_without_the_service(rig: Rig) -> None:
    await rig.command("help")
    [answer] = rig.ack.answers
    assert answer["response_type"] == "ephemeral" and "ops" in answer["text"]
    assert rig.timeline.names() == ["ack"]


async def test_a_run_is_started_for_the_signed_actor_and_acked_empty(rig: Rig) -> None:
    await rig.command("run db vacuum the tables")
    assert rig.timeline.names() == ["start_run", "ack"]
    [call] = rig.timeline.calls("start_run")
    assert call == ((SIGNED, "C1", "db", "vacuum the tables"), {"delivery_id": "trig"})
    assert rig.ack.answers == [{}]


async def test_a_refused_run_is_answered_in_the_ack(rig: Rig) -> None:
    rig.service.answers["start_run"] = Reply(False, "You may not start runs here.")
    await rig.command("clean up")
    assert rig.ack.answers == [
        {"response_type": "ephemeral", "text": "You may not start runs here."}
    ]


async def test_a_failing_start_is_answered_try_again(rig: Rig) -> None:
    rig.service.answers["start_run"] = RuntimeError("redis down")
    await rig.command("clean up")
    assert rig.ack.answers == [{"response_type": "ephemeral", "text": TRY_AGAIN}]


async def test_a_slow_start_is_answered_still_working_and_a_refusal_told_later(rig: Rig) -> None:
    rig.service.delay = SLOW
    rig.service.answers["start_run"] = Reply(False, "Quota reached.")
    started = asyncio.get_running_loop().time()
    await rig.command("clean up", budget=0.05)
    assert asyncio.get_running_loop().time() - started < SLOW
    assert rig.ack.answers == [{"response_type": "ephemeral", "text": STILL_WORKING_COMMAND}]
    await rig.service.settle()
    assert rig.notifier.told == [("C1", "U1", "Quota reached.", "")]


async def test_cancel_by_command_answers_privately_in_the_ack(rig: Rig) -> None:
    rig.service.answers["cancel_run"] = Reply(True, "Cancelled run `0123456789abcdef`.")
    await rig.command("cancel 0123456789abcdef")
    assert rig.timeline.calls("cancel_run") == [((SIGNED, "0123456789abcdef"), {})]
    assert rig.ack.answers == [
        {"response_type": "ephemeral", "text": "Cancelled run `0123456789abcdef`."}
    ]


async def test_a_slow_question_is_answered_still_working_then_posted(rig: Rig) -> None:
    rig.service.delay = SLOW
    rig.service.answers["cancel_run"] = Reply(False, "There is no run `0123456789abcdef`.")
    await rig.command("cancel 0123456789abcdef", budget=0.05)
    assert rig.ack.answers == [{"response_type": "ephemeral", "text": STILL_WORKING_COMMAND}]
    await rig.service.settle()
    [posted] = rig.timeline.calls("chat.postEphemeral")
    assert posted["channel"] == "C1" and posted["user"] == "U1"
    assert posted["text"] == "There is no run `0123456789abcdef`."


# Clicks


@pytest.mark.parametrize(
    ("action_id", "always"), [(blocks.APPROVE, False), (blocks.ALWAYS_APPROVE, True)]
)
async def test_an_approval_click_acks_first_then_decides_for_the_signed_actor(
    rig: Rig, action_id: str, always: bool
) -> None:
    await rig.click(action_id, "run1.c1")
    assert rig.timeline.names() == ["ack"]  # the decision is not awaited by the ack
    await rig.service.settle()
    assert rig.timeline.names() == ["ack", "approve"]
    [call] = rig.timeline.calls("approve")
    assert call == ((SIGNED, "run1.c1"), {"always": always})
    assert rig.notifier.told == []  # a decision made shows on the card


async def test_a_click_alone_has_its_read_sent_at_once_and_judged_after_the_lull() -> None:
    """The only request in flight (#32): the click's read of its call and run is sent before
    its ack is answered; the decision, which judges what it read, waits for the lull (the
    click's own request answered): acks first."""
    foreground = Foreground(max_wait=3600)
    rig = Rig(foreground)
    with foreground.request():  # (as the app counts each request it answers)
        await rig.click(blocks.APPROVE, "run1.c1")
        for _ in range(20):
            await asyncio.sleep(0)
        assert rig.timeline.names() == ["ack", "read_ahead"]
        assert rig.timeline.calls("read_ahead") == ["run1.c1"]
    await rig.service.settle()
    assert rig.timeline.names() == ["ack", "read_ahead", "approve"]
    [call] = rig.timeline.calls("approve")
    assert call == ((SIGNED, "run1.c1"), {"always": False, "read": "read run1.c1"})


async def test_a_click_among_other_requests_reads_after_the_lull() -> None:
    """Another request in flight (a burst): nothing of the click's decision, its read
    included, goes before the lull."""
    foreground = Foreground(max_wait=3600)
    rig = Rig(foreground)
    with foreground.request():  # another click, still being answered
        with foreground.request():
            await rig.click(blocks.APPROVE, "run1.c1")
        for _ in range(20):
            await asyncio.sleep(0)
        assert rig.timeline.names() == ["ack"]
    await rig.service.settle()
    assert rig.timeline.names() == ["ack", "approve"]
    [call] = rig.timeline.calls("approve")
    assert call == ((SIGNED, "run1.c1"), {"always": False})


async def test_a_read_ahead_that_fails_is_told_try_again() -> None:
    foreground = Foreground(max_wait=3600)
    rig = Rig(foreground)
    rig.service.answers["read_ahead"] = RuntimeError("redis down")
    with foreground.request():
        await rig.click(blocks.APPROVE)
    await rig.service.settle()
    assert rig.notifier.texts() == [TRY_AGAIN]


async def test_a_refused_decision_is_told_privately_to_the_clicker(rig: Rig) -> None:
    rig.service.answers["approve"] = Reply(False, "You are not among the approvers.")
    await rig.click(blocks.APPROVE)
    await rig.service.settle()
    assert rig.notifier.told == [("C1", "U1", "You are not among the approvers.", "")]


async def test_a_person_in_a_refusal_is_told_as_a_slack_mention(rig: Rig) -> None:
    rig.service.answers["approve"] = Reply(False, Text(("Approved by ", Mention("U2"), ".")))
    await rig.click(blocks.APPROVE)
    await rig.service.settle()
    assert rig.notifier.texts() == ["Approved by <@U2>."]


async def test_a_failing_decision_is_told_try_again(rig: Rig) -> None:
    rig.service.answers["approve"] = RuntimeError("redis down")
    await rig.click(blocks.APPROVE)
    await rig.service.settle()
    assert rig.notifier.texts() == [TRY_AGAIN]


async def test_a_slow_decision_is_told_still_working_once_then_its_outcome(rig: Rig) -> None:
    rig.service.delay = SLOW
    rig.service.answers["approve"] = Reply(False, "This call was already approved.")
    await rig.click(blocks.APPROVE, budget=0.05)
    assert rig.ack.answers == [{}]
    await rig.service.settle()
    assert rig.notifier.texts() == [STILL_WORKING, "This call was already approved."]


async def test_a_quick_decision_says_nothing_still_working(rig: Rig) -> None:
    await rig.click(blocks.APPROVE, budget=0.05)
    await rig.service.settle()
    await asyncio.sleep(0.1)  # past the deadline: the note was cancelled
    assert rig.notifier.told == []


@pytest.mark.parametrize(
    ("action_id", "always"), [(blocks.REJECT, False), (blocks.ALWAYS_REJECT, True)]
)
async def test_a_reject_click_opens_the_form_with_the_clicks_trigger(
    rig: Rig, action_id: str, always: bool
) -> None:
    call = CallRecord(
        approval_id="run1.c1", run_id="run1", index=0, call_id="c1", agent="ops",
        tool="delete_logs", kind="tool", sticky="", arguments="{}", channel_id="C1",
    )  # fmt: skip
    rig.service.answers["reject_form"] = RejectForm(call, prefill="")
    await rig.click(action_id, "run1.c1")
    await rig.service.settle()
    assert rig.timeline.names() == ["ack", "reject_form", "views.open"]
    assert rig.timeline.calls("reject_form") == [((SIGNED, "run1.c1"), {"always": always})]
    [opened] = rig.timeline.calls("views.open")
    assert opened["trigger_id"] == "trig"
    meta = json.loads(opened["view"]["private_metadata"])
    assert meta == {"approval_id": "run1.c1", "always": always, "channel": "C1"}


async def test_a_refused_reject_form_is_told_and_not_opened(rig: Rig) -> None:
    rig.service.answers["reject_form"] = Reply(False, "This call was already rejected.")
    await rig.click(blocks.REJECT)
    await rig.service.settle()
    assert "views.open" not in rig.timeline.names()
    assert rig.notifier.texts() == ["This call was already rejected."]


async def test_a_form_slack_refuses_to_open_is_told_with_slacks_error(rig: Rig) -> None:
    from slack_sdk.errors import SlackApiError

    call = CallRecord(
        approval_id="run1.c1", run_id="run1", index=0, call_id="c1", agent="ops",
        tool="delete_logs", kind="tool", sticky="", arguments="{}",
    )  # fmt: skip
    rig.service.answers["reject_form"] = RejectForm(call, prefill="")
    rig.client.views_open_error = SlackApiError("no", {"ok": False, "error": "expired_trigger_id"})
    await rig.click(blocks.REJECT)
    await rig.service.settle()
    assert rig.notifier.texts() == [FORM_FAILED.format(error="expired_trigger_id")]


@pytest.mark.parametrize(
    ("action_id", "service_call", "kwargs"),
    [
        (blocks.CANCEL_RUN, "cancel_run", {}),
        (blocks.REVIEW_DONE, "resolve_review", {"action": "done"}),
        (blocks.REVIEW_RERUN, "resolve_review", {"action": "rerun"}),
        (blocks.REPLY_REJECT, "confirm_reply", {"reject": True}),
        (blocks.REPLY_KEEP, "confirm_reply", {"reject": False}),
    ],
)
async def test_each_private_button_is_routed_to_its_service_call(
    rig: Rig, action_id: str, service_call: str, kwargs: dict[str, Any]
) -> None:
    await rig.click(action_id, "opaque-id")
    assert rig.timeline.names() == ["ack"]
    await rig.service.settle()
    assert rig.timeline.calls(service_call) == [((SIGNED, "opaque-id"), kwargs)]
    assert rig.timeline.names() == ["ack", service_call]


async def test_a_private_buttons_answer_goes_to_the_clicker_only(rig: Rig) -> None:
    rig.service.answers["confirm_reply"] = Reply(True, "Kept as a comment.")
    await rig.click(blocks.REPLY_KEEP)
    await rig.service.settle()
    assert rig.notifier.told == [("C1", "U1", "Kept as a comment.", "")]


async def test_a_cancel_click_that_worked_says_nothing(rig: Rig) -> None:
    rig.service.answers["cancel_run"] = Reply(True, "Cancelled run `0123456789abcdef`.")
    await rig.click(blocks.CANCEL_RUN, "0123456789abcdef")
    await rig.service.settle()
    assert rig.notifier.told == []  # the run message shows who cancelled


# The reject form


async def test_a_rejection_is_decided_for_the_signed_actor_and_closes_the_form(rig: Rig) -> None:
    await rig.submit({"approval_id": "run1.c1", "always": True, "channel": "C1"}, reason="risky")
    assert rig.timeline.names() == ["decide", "ack"]
    [call] = rig.timeline.calls("decide")
    assert call == ((SIGNED, "run1.c1"), {"approve": False, "always": True, "reason": "risky"})
    assert rig.ack.answers == [{}]


async def test_a_refused_rejection_is_shown_in_the_form(rig: Rig) -> None:
    rig.service.answers["decide"] = Reply(False, "This call was already approved.")
    await rig.submit({"approval_id": "run1.c1", "channel": "C1"})
    assert rig.ack.answers == [
        {
            "response_action": "errors",
            "errors": {blocks.REASON_BLOCK: "This call was already approved."},
        }
    ]


async def test_an_unreadable_form_is_answered_try_again_without_the_service(rig: Rig) -> None:
    await rig.submit("{not json")
    assert rig.timeline.names() == ["ack"]
    assert rig.ack.answers[0]["errors"] == {blocks.REASON_BLOCK: TRY_AGAIN}


async def test_a_slow_rejection_closes_the_form_and_says_still_working(rig: Rig) -> None:
    rig.service.delay = SLOW
    rig.service.answers["decide"] = Reply(False, "This call was already approved.")
    await rig.submit({"approval_id": "run1.c1", "channel": "C1"}, budget=0.05)
    assert rig.ack.answers == [{}]
    await rig.service.settle()
    assert rig.notifier.texts() == [STILL_WORKING_REJECTION, "This call was already approved."]


# Events


async def test_a_thread_reply_goes_to_the_service_with_its_authors_workspace(rig: Rig) -> None:
    event = {
        "type": "message", "channel": "C1", "user": "U5", "user_team": "T2",
        "text": "reject: not &lt;now&gt;", "ts": "2.0", "thread_ts": "1.0",
    }  # fmt: skip
    await rig.event("message", event)
    await rig.service.settle()
    [call] = rig.timeline.calls("thread_reply")
    assert call == ((Actor("T2", "U5", "E1"), "C1", "1.0", "reject: not <now>"), {})


@pytest.mark.parametrize(
    "event",
    [
        {"channel": "C1", "user": "U5", "text": "hello", "ts": "2.0"},  # not in a thread
        {"channel": "C1", "bot_id": "B1", "text": "x", "ts": "2.0", "thread_ts": "1.0"},
        {"channel": "C1", "subtype": "message_changed", "ts": "2.0", "thread_ts": "1.0"},
    ],
)
async def test_messages_that_are_not_thread_replies_are_ignored(
    rig: Rig, event: dict[str, Any]
) -> None:
    await rig.event("message", event)
    await rig.service.settle()
    assert rig.timeline.names() == []


async def test_an_ambiguous_reply_is_asked_about_privately_in_its_thread(rig: Rig) -> None:
    rig.service.answers["thread_reply"] = ConfirmReject("reply1", "reject this, it is risky")
    event = {"channel": "C1", "user": "U5", "text": "reject this", "ts": "2.0", "thread_ts": "1.0"}
    await rig.event("message", event)
    await rig.service.settle()
    [posted] = rig.timeline.calls("chat.postEphemeral")
    assert (posted["channel"], posted["user"], posted["thread_ts"]) == ("C1", "U5", "1.0")
    assert "reply1" in json.dumps(posted["blocks"])


async def test_a_refused_thread_reply_is_told_in_the_thread(rig: Rig) -> None:
    rig.service.answers["thread_reply"] = Reply(False, "You may not decide this call.")
    event = {"channel": "C1", "user": "U5", "text": "reject: no", "ts": "2.0", "thread_ts": "1.0"}
    await rig.event("message", event)
    await rig.service.settle()
    assert rig.notifier.told == [("C1", "U5", "You may not decide this call.", "1.0")]


async def test_the_home_opened_is_recorded_for_the_signed_workspace(rig: Rig) -> None:
    await rig.event("app_home_opened", {"user": "U1", "tab": "home"})
    await rig.event("app_home_opened", {"user": "U1", "tab": "messages"})
    await rig.service.settle()
    assert rig.home.opened_by == [SIGNED]


async def test_a_duplicate_event_is_acknowledged_and_dropped(rig: Rig) -> None:
    [drop_duplicates] = rig.app.middleware_list
    passed: list[str] = []

    async def next_() -> None:
        passed.append("next")

    body = {"type": "event_callback", "event_id": "Ev1"}
    assert await drop_duplicates(body=body, context=rig.context(), next=next_) is None
    second = await drop_duplicates(body=body, context=rig.context(), next=next_)
    assert isinstance(second, BoltResponse) and second.status == 200
    assert passed == ["next"]
    await drop_duplicates(body={"type": "block_actions"}, context=rig.context(), next=next_)
    assert passed == ["next", "next"]  # only events are checked
    assert rig.timeline.calls("first_delivery") == [("event", "Ev1"), ("event", "Ev1")]
