"""The SDK's streamed run without the tasks it starts only to wait (#32).

The bot runs a run streamed (`Runner.run_streamed`, `bot.engine.runner._relay`) so that an
answer grows in Slack as the model writes it. openai-agents 0.24 then spends, for each resume of
the minimal run, 13 event-loop iterations and five tasks more than `Runner.run`: the run's
background task, and, in its streamed loop, two that exist only to wait:

- between two turns (`RunResultStreaming._wait_for_turn_event_consumption`) it waits until the
  consumer has taken every event of the turn (`_event_queue.join()`) or no consumer is left
  (`_stream_consumers_stopped.wait()`): each in a task of its own, and `asyncio.wait` for the
  first of the two, six iterations in all, even when the answer is known at once;
- before a final output (`_run_output_guardrails_for_stream`) it runs the output guardrails in
  a task, `run_output_guardrails`, which returns `[]` at once when there are none (the bot's
  agents have none unless their author adds some): two iterations.

`install` replaces the two, for the SDK version the bot pins, with equivalents that answer
without a task:

- the wait returns at once where the SDK's returns as soon as its tasks run (no consumer; every
  event already taken: `join` returns; no consumer left: `wait` returns), and otherwise waits
  on one future told by either event when it is set (an `asyncio.Event` sets every future
  waiting on it, which is what its `wait` awaits), removed from both when it returns or is
  cancelled, as the SDK's cancels its two tasks. Where this Python's asyncio does not keep
  those as read here, the SDK's own waits;
- with no output guardrail (the agent's and the run config's lists, as the SDK joins them) the
  guardrails' answer is `[]` with no task (the SDK's task would return `[]` without awaiting
  anything; the task it keeps is read only to cancel it while it runs); with any, the SDK's own
  runs them.

The events, their order, the hooks and the outcome are the SDK's: only how the run loop waits
changes. Nothing else of the SDK changes.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable
from typing import Any

import agents.run_internal.run_loop as run_loop
from agents.result import RunResultStreaming

from bot.engine.identities import pinned

_INSTALLED = "_approval_bot_without_tasks"
Wait = Callable[[RunResultStreaming], Awaitable[None]]
Guardrails = Callable[..., Awaitable[list[Any]]]


def _readable() -> bool:
    """Whether this Python's asyncio keeps a queue's unfinished count and the event its
    `join` waits on, and an event's waiting futures, as `_waited` reads them."""
    queue: asyncio.Queue[Any] = asyncio.Queue()
    finished = getattr(queue, "_finished", None)
    return (
        isinstance(getattr(queue, "_unfinished_tasks", None), int)
        and isinstance(finished, asyncio.Event)
        and isinstance(getattr(finished, "_waiters", None), collections.deque)
        and isinstance(getattr(asyncio.Event(), "_waiters", None), collections.deque)
    )


def _waited(sdk: Wait) -> Wait:
    async def _wait_for_turn_event_consumption(self: RunResultStreaming) -> None:
        """Return once the turn's events are all taken or no consumer is left (the SDK's)."""
        if self._active_stream_consumers == 0:
            return
        queue = self._event_queue
        stopped = self._stream_consumers_stopped
        if queue._unfinished_tasks == 0 or stopped.is_set():  # type: ignore[attr-defined]
            return
        finished: asyncio.Event = queue._finished  # type: ignore[attr-defined]
        told = asyncio.get_running_loop().create_future()
        waiting = (finished._waiters, stopped._waiters)  # type: ignore[attr-defined]
        for waiters in waiting:
            waiters.append(told)
        try:
            await told
        finally:
            for waiters in waiting:
                waiters.remove(told)

    setattr(_wait_for_turn_event_consumption, _INSTALLED, sdk)
    return _wait_for_turn_event_consumption


def _guarded(sdk: Guardrails) -> Guardrails:
    async def _run_output_guardrails_for_stream(
        *, agent: Any, run_config: Any, output: Any, context_wrapper: Any,
        streamed_result: RunResultStreaming,
    ) -> list[Any]:  # fmt: skip
        if not agent.output_guardrails + (run_config.output_guardrails or []):
            return []
        return await sdk(
            agent=agent, run_config=run_config, output=output,
            context_wrapper=context_wrapper, streamed_result=streamed_result,
        )  # fmt: skip

    setattr(_run_output_guardrails_for_stream, _INSTALLED, sdk)
    return _run_output_guardrails_for_stream


def install() -> bool:
    """Replace the two (once; True when they are in place). Another SDK version keeps its own:
    its streamed loop may differ."""
    if not pinned("streamed runs"):
        return False
    guardrails = vars(run_loop)["_run_output_guardrails_for_stream"]
    if getattr(guardrails, _INSTALLED, None) is None:
        run_loop._run_output_guardrails_for_stream = _guarded(guardrails)  # type: ignore[assignment]
    wait = vars(RunResultStreaming)["_wait_for_turn_event_consumption"]
    if getattr(wait, _INSTALLED, None) is None and _readable():
        RunResultStreaming._wait_for_turn_event_consumption = _waited(wait)  # type: ignore[method-assign,assignment]
    return True


def sdk_own() -> tuple[Wait, Guardrails]:
    """The SDK's own two (for checking those installed)."""
    wait = vars(RunResultStreaming)["_wait_for_turn_event_consumption"]
    guardrails = vars(run_loop)["_run_output_guardrails_for_stream"]
    return getattr(wait, _INSTALLED, wait), getattr(guardrails, _INSTALLED, guardrails)
