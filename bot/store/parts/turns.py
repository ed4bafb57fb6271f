"""A run's conversation across turns: a follow-up in the run's thread starts its next turn (or
waits in the run's queue while a turn is going), the conversation so far is kept under the
run's hash tag for the next turn's input, and each follow-up turn's answer is kept with it
until shown. Every key lives as long as the run (its retention)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import redis.asyncio as redis

from bot.store import keys
from bot.store.delivery.outbox import Outbox
from bot.store.keys import RunKeys
from bot.store.scripts import mark, marking, now, text

QUEUE_LIMIT = 5  # follow-ups waiting for a run's turn to end; more are refused


@dataclass(frozen=True)
class FollowUp:
    """What someone said in a run's thread, to the agent."""

    user: str
    """The Slack user who wrote it (from the signed event)."""
    text: str
    """The message, as the agent reads it (Slack's escaping undone)."""
    at: float
    """When it was written (Unix seconds)."""

    def to_json(self) -> str:
        return json.dumps({"user": self.user, "text": self.text, "at": self.at})

    @classmethod
    def from_json(cls, raw: str | bytes) -> FollowUp:
        data = json.loads(raw)
        return cls(str(data["user"]), str(data["text"]), float(data.get("at", 0)))


@dataclass(frozen=True)
class Started:
    """The follow-up (this one, or the oldest queued) began turn `turn`: its job is due."""

    turn: int
    """The number of the turn (the task was turn 1)."""
    follow_up: FollowUp
    """What that turn answers."""


@dataclass(frozen=True)
class Queued:
    """A turn is going: the follow-up waits for it to end."""

    position: int
    """Its place in the run's queue (1: next)."""


@dataclass(frozen=True)
class Refused:
    """The follow-up cannot be taken."""

    why: str
    """`full` (too many queued), or the run's status when it ended for good (`failed`,
    `cancelled`, `missing`)."""


TurnResult = Started | Queued | Refused


@dataclass(frozen=True)
class TurnRecord:
    """One follow-up turn of a run (2 and later; turn 1 is the run's task), as shown."""

    turn: int
    """Its number."""
    follow_up: FollowUp
    """What began it."""
    status: str = ""
    """How it ended (finished, failed), or empty while it goes on."""
    answer: str = ""
    """Its answer (or error) once it ended."""


def decode_turn(reply: list[Any]) -> TurnResult | None:
    """turn.lua's reply: {'started', turn, follow-up} | {'queued', position} | {'full'} |
    {'ended', status} | {'none'} (None: nothing was queued)."""
    kind = text(reply[0])
    if kind == "started":
        return Started(int(reply[1]), FollowUp.from_json(reply[2]))
    if kind == "queued":
        return Queued(int(reply[1]))
    if kind == "full":
        return Refused("full")
    if kind == "ended":
        return Refused(text(reply[1]))
    return None


class Turns:
    """The turns of runs' conversations (see the module docstring)."""

    def __init__(self, client: redis.Redis, *, retention_seconds: int, outbox: Outbox) -> None:
        self.redis = client
        self.retention = retention_seconds
        self.outbox = outbox
        self._turn = client.register_script(marking("turn"))

    async def stream(self, run_id: str, turn: int, said: str, due_in: float) -> None:
        """The answer of turn `turn` so far: shown by its result message in `due_in` seconds
        (sooner if something else makes the run due), so updates gather. Display data only,
        like progress lines: not a transaction (the due index is in another slot)."""
        target = keys.result_target(turn)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.set(
                keys.partial_key(run_id), json.dumps({"turn": turn, "text": said}),
                ex=self.retention,
            )  # fmt: skip
            mark(pipe, run_id, target, self.retention)
            self.outbox.schedule_in(pipe, run_id, due_in)
            await pipe.execute()
        if due_in <= 0:
            self.outbox.woken.set()

    async def partial(self, run_id: str) -> tuple[int, str] | None:
        """The answer being streamed: (its turn, the text so far), if one is."""
        raw = await self.redis.get(keys.partial_key(run_id))
        if raw is None:
            return None
        data = json.loads(raw)
        return int(data["turn"]), str(data["text"])

    async def follow(self, run_id: str, follow_up: FollowUp, execution: str) -> TurnResult:
        """A follow-up arrived: start the run's next turn (owned by `execution`), or queue it."""
        reply = await self._turn(
            keys=RunKeys(run_id).turn(),
            args=["reply", follow_up.to_json(), "", execution, now(), self.retention,
                  QUEUE_LIMIT],
        )  # fmt: skip
        result = decode_turn(reply)
        assert result is not None
        return result

    async def next_turn(self, run_id: str, execution: str) -> Started | None:
        """A turn just finished: the oldest queued follow-up starts the next one, if any."""
        reply = await self._turn(
            keys=RunKeys(run_id).turn(),
            args=["drain", "", "", execution, now(), self.retention, QUEUE_LIMIT],
        )
        result = decode_turn(reply)
        return result if isinstance(result, Started) else None

    async def follow_up(self, run_id: str, turn: int) -> FollowUp | None:
        raw = await self.redis.hget(keys.turns_key(run_id), str(turn))
        return FollowUp.from_json(raw) if raw is not None else None

    async def answer(self, run_id: str, turn: int) -> tuple[str, str] | None:
        """How turn `turn` ended and its answer (or error): (status, text)."""
        status, answer = await self.redis.hmget(  # type: ignore[misc]
            keys.turns_key(run_id), [f"{turn}:status", f"{turn}:answer"]
        )
        if status is None:
            return None
        return text(status), text(answer or "")

    async def conversation(self, run_id: str) -> tuple[list[TurnRecord], list[FollowUp]]:
        """The run's follow-up turns, in order, and the follow-ups waiting for a turn."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(keys.turns_key(run_id))
            pipe.lrange(keys.followups_key(run_id), 0, -1)
            raw, waiting = await pipe.execute()
        fields = {text(k): v for k, v in raw.items()}
        turns = [
            TurnRecord(
                int(name),
                FollowUp.from_json(value),
                text(fields.get(f"{name}:status", "")),
                text(fields.get(f"{name}:answer", "")),
            )
            for name, value in fields.items()
            if name.isdigit()
        ]
        turns.sort(key=lambda t: t.turn)
        return turns, [FollowUp.from_json(w) for w in waiting]

    async def has_history(self, run_id: str) -> bool:
        """Whether the run kept a conversation to go on with (without reading it)."""
        return bool(await self.redis.exists(keys.history_key(run_id)))

    async def history(self, run_id: str) -> bytes | None:
        value = await self.redis.get(keys.history_key(run_id))
        if value is None:
            return None
        return value if isinstance(value, bytes) else value.encode("utf-8", "surrogatepass")
