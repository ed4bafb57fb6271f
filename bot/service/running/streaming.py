"""A turn's answer, shown while the model writes it: the text so far is written to the run's
store at most every WRITE_EVERY seconds, in the background (neither Redis nor Slack ever
holds up the model). Its message is posted when the model is still writing FIRST_SHOW seconds
after its first words (an answer done by then is posted once, whole: no more Slack calls than
unstreamed), then updated at most every UPDATE_EVERY seconds through the outbox (so within
Slack's pacing, on whichever replica delivers the run). A worker that dies mid-answer leaves
the message saying it is still being written, never an answer that looks complete: the retry
writes it again, or the run's end replaces it.

Until FIRST_SHOW has passed nothing is written, so the writer is not started before then: a
timer starts it (`loop.call_later`), and closing an answer done by then cancels the timer, with
no task started, run and stopped for it (three event-loop iterations, a task and three timers
per decision before this, #32)."""

from __future__ import annotations

import asyncio
import logging
from logging import WARNING

from bot.outage import log_failure
from bot.stopping import cancel_and_wait
from bot.store.parts.turns import Turns

log = logging.getLogger(__name__)

WRITE_EVERY = 0.5  # seconds between two writes of the text so far
FIRST_SHOW = 0.5  # seconds of writing before the first words are shown
UPDATE_EVERY = 2.0  # seconds a later change of the text waits to be shown


class AnswerStream:
    """The stream of one execution's answer (see the module docstring); `close()` before the
    execution's end is recorded."""

    def __init__(self, turns: Turns, run_id: str, turn: int) -> None:
        self.turns = turns
        self.run_id = run_id
        self.turn = max(turn, 1)
        self._latest = ""
        self._written: str | None = None
        self._shown = False  # a text was written: its message exists (or is due)
        self._writer: asyncio.Task[None] | None = None
        self._due: asyncio.TimerHandle | None = None  # starts the writer after FIRST_SHOW

    async def __call__(self, text: str) -> None:
        self._latest = text
        if self._due is not None or (self._writer is not None and not self._writer.done()):
            return  # the writer (due to start, or running) writes it
        if self._shown:
            self._start()
        else:  # an answer the model finishes by then is shown once, whole
            self._due = asyncio.get_running_loop().call_later(FIRST_SHOW, self._start)

    def _start(self) -> None:
        self._due = None
        self._writer = asyncio.create_task(self._write(), name=f"stream-{self.run_id}")

    async def _write(self) -> None:
        while self._latest != self._written:
            text = self._latest
            if text or self._shown:  # no message for a response that only called tools
                try:
                    await self.turns.stream(
                        self.run_id, self.turn, text, UPDATE_EVERY if self._shown else 0.0
                    )
                    self._shown = True
                except Exception:
                    log_failure(
                        log, "could not record the answer of run %s so far", self.run_id,
                        level=WARNING,
                    )  # fmt: skip
            self._written = text
            await asyncio.sleep(WRITE_EVERY)

    async def close(self) -> None:
        """No more writes (the end of the execution shows the whole answer)."""
        if self._due is not None:
            self._due.cancel()
            self._due = None
        if self._writer is not None:
            await cancel_and_wait(self._writer)
