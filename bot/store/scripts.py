"""What every store module shares about Redis: the Lua scripts' text, replies' text, the
timestamp format, and the outbox mark written inside a MULTI."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any, TypeVar

from redis.exceptions import NoScriptError

from bot.store import keys


def script(*names: str) -> str:
    """The text of `bot/store/lua/<name>.lua`, of each of `names` in turn (the fragments a
    script shares with others, `_*.lua`, before it)."""
    lua = resources.files("bot.store") / "lua"
    return "".join((lua / f"{name}.lua").read_text(encoding="utf-8") for name in names)


def marking(name: str) -> str:
    """A transition script that marks messages in its run's outbox (see `_outbox.lua`)."""
    return script("_outbox", name)


def text(value: Any) -> str:
    """A Redis reply item as text (bytes are UTF-8; lone surrogates survive the round trip)."""
    return value.decode("utf-8", "surrogatepass") if isinstance(value, bytes) else str(value)


def now() -> str:
    """Timestamps are Unix seconds with millisecond precision, as strings (Redis-native)."""
    return f"{time.time():.3f}"


def mark(pipe: Any, run_id: str, target: str, retention: int) -> None:
    """Inside a MULTI: `target` must show the state this transaction writes."""
    outbox = keys.outbox_key(run_id)
    pipe.hincrby(outbox, target, 1)
    pipe.hsetnx(outbox, target + "@", now())
    pipe.expire(outbox, retention)


class Batch:
    """Commands and scripts sent in one pipeline round trip. A script goes as EVALSHA; one the
    server does not hold yet (a new or restarted server) is run again on its own (it loads
    it), after the rest: only scripts that are safe to run after the batch's other commands
    go in one. Scripts in a batch are not confirmed by replicas (`Replicated`): only those
    whose writes may be lost in a failover at no cost."""

    def __init__(self, pipe: Any) -> None:
        self.pipe = pipe
        self._scripts: dict[int, tuple[Any, list[str], list[Any]]] = {}

    def script(self, found: Any, names: list[str], values: list[Any]) -> int:
        """Queue `found` (a registered script); the index of its reply."""
        index = len(self.pipe)
        self._scripts[index] = (found, names, values)
        self.pipe.execute_command("EVALSHA", found.sha, len(names), *names, *values)
        return index

    def truncate(self, length: int) -> None:
        """Drop what was queued from the `length`-th command on (a caller that failed while
        queueing: none of its commands may be sent)."""
        del self.pipe.command_stack[length:]
        for index in [index for index in self._scripts if index >= length]:
            del self._scripts[index]

    async def settle(self, replies: list[Any]) -> list[Any]:
        """The replies of the pipeline (executed with `raise_on_error=False`), each of this
        batch's scripts the server did not hold run again on its own. One that fails there
        has its error as its reply, as in the pipeline, and the others still run: a caller
        decodes what each took (a run's end, the claim and token its pass took after it,
        #32), not one error for all."""
        replies = list(replies)
        for index, (found, names, values) in self._scripts.items():
            if isinstance(replies[index], NoScriptError):
                try:
                    replies[index] = await found(keys=names, args=values)
                except Exception as exc:
                    replies[index] = exc
        return replies

    async def execute(self) -> list[Any]:
        replies = await self.settle(await self.pipe.execute(raise_on_error=False))
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return replies


T = TypeVar("T")
_Part = tuple[Callable[[Batch], Any], "asyncio.Future[tuple[Any, list[Any]]]"]


class Together:
    """Batches that callers queue in one iteration of the event loop, sent in one round trip
    (#32: a burst's projector passes read, take their Slack tokens and end side by side: one
    pipeline, not one each). Each caller's commands keep their order (no order between
    callers); a caller gets the whole batch's replies (its indexes are the batch's, as
    `Batch.script` gives them) or the first error among its own. Only where one server runs a
    pipeline's commands in order (`enabled`); else each batch goes on its own, as before."""

    def __init__(self, client: Any, *, enabled: Callable[[], bool]) -> None:
        self.redis = client
        self.enabled = enabled
        self._waiting: list[_Part] = []
        self._sending: set[asyncio.Task[None]] = set()

    async def run(self, queue: Callable[[Batch], T]) -> tuple[T, list[Any]]:
        """`queue(batch)` (its commands and scripts), sent with the others queued in this loop
        iteration: what it returned, and the replies."""
        if not self.enabled():
            async with self.redis.pipeline(transaction=False) as pipe:
                batch = Batch(pipe)
                queued = queue(batch)
                return queued, await batch.execute()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[Any, list[Any]]] = loop.create_future()
        self._waiting.append((queue, future))
        if len(self._waiting) == 1:
            loop.call_soon(self._flush)
        queued, replies = await future
        return queued, replies  # type: ignore[no-any-return]

    def _flush(self) -> None:
        waiting, self._waiting = self._waiting, []
        task = asyncio.ensure_future(self._send(waiting))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, waiting: list[_Part]) -> None:
        parts: list[tuple[int, int, Any, asyncio.Future[tuple[Any, list[Any]]]]] = []
        try:
            async with self.redis.pipeline(transaction=False) as pipe:
                batch = Batch(pipe)
                for queue, future in waiting:
                    if future.done():  # (its caller was cancelled: nothing of it sent)
                        continue
                    start = len(pipe)
                    try:
                        queued = queue(batch)
                    except Exception as exc:  # (nothing of it is sent: no half-applied writes)
                        batch.truncate(start)
                        if not future.done():
                            future.set_exception(exc)
                        continue
                    parts.append((start, len(pipe), queued, future))
                raw = await pipe.execute(raise_on_error=False) if len(pipe) else []
                replies = await batch.settle(raw)
        except BaseException as exc:
            for _, future in waiting:
                if future.done():
                    continue
                if isinstance(exc, Exception):
                    future.set_exception(exc)
                else:
                    future.cancel()
            if not isinstance(exc, Exception):
                raise
            return
        for start, end, queued, future in parts:
            if future.done():  # (its caller was cancelled)
                continue
            error = next((r for r in replies[start:end] if isinstance(r, Exception)), None)
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result((queued, replies))


# Commands that cannot run inside then.lua: scripts and transactions (a group holding one is
# sent as before, in a round trip of its own).
NOT_IN_SCRIPT = frozenset({"EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "MULTI", "EXEC",
                           "WATCH", "UNWATCH", "DISCARD"})  # fmt: skip

# One group of `gated_in`: the hash it checks, the (field, value) pairs it must hold, and the
# pipeline (never executed) its commands were written into.
Gate = tuple[str, Sequence[tuple[str, str]], Any]


def gated_in(batch: Batch, then: Any, groups: Sequence[Gate]) -> int | None:
    """Queue then.lua (`then`, registered) behind a transition in `batch`: each group's
    commands run only when its hash holds what it must (what only the transition writes, e.g.
    the owner token of the decision that settled a call), in the transition's round trip, not
    in one after its reply. The index of its reply (`gated_replies`); None, with nothing
    queued, when a command cannot run in a script. Only on one server without replicas to
    confirm writes (`Outbox.reads_ahead`): the commands name keys of other slots."""
    names: list[str] = []
    values: list[Any] = []
    for key, conditions, recorded in groups:
        commands = [args for args, _ in recorded.command_stack]
        if any(str(args[0]).upper() in NOT_IN_SCRIPT for args in commands):
            return None
        names.append(key)
        values.append(len(conditions))
        for field, value in conditions:
            values += [field, value]
        values.append(len(commands))
        for args in commands:
            values += [len(args), *args]
    return batch.script(then, names, values)


def gated_replies(reply: Any) -> list[list[Any] | None]:
    """then.lua's reply: each group's replies, or None when it did not run."""
    return [list(group) if isinstance(group, list) else None for group in reply]
