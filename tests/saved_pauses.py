"""A pause saved by hand, as a worker that stopped right after saving it leaves it (its
automatic decisions not applied, its resume job unrun): what the sweeper, a reload or a later
`Runs.auto_decide` then finds. Shared by the tests of automatic decisions judged again."""

from __future__ import annotations

import time
from typing import Any

from bot.store import keys
from bot.store.records import CallRecord, RunRecord, Snapshot
from bot.testing.harness import BotHarness


async def saved_pause(bot: BotHarness, *calls: dict[str, Any]) -> tuple[str, list[CallRecord]]:
    """The bot's worker stopped, then a run of the `ops` agent in C1 paused on one call of
    delete_logs per item of `calls` (its CallRecord fields beyond the ids: arguments, rule,
    auto, approvers...): the run's id and the calls as saved."""
    runtime = bot.runtime
    assert runtime.worker is not None
    await runtime.worker.stop(runtime._worker_task, 5)  # the resume job waits, unrun
    store = runtime.service.store
    stamp = f"{time.time():.3f}"
    run = RunRecord(
        run_id=keys.new_run_id(), team_id="T0TEST", user_id="U1", channel_id="C1",
        agent_name="ops", task="t", status="running", owner="exec", message_ts="1.0",
        created_at=stamp, updated_at=stamp,
    )  # fmt: skip
    await store.create_run(run)
    await store.take(run.run_id, run.owner, "1-0", run.owner + "/w")

    def call(index: int, fields: dict[str, Any]) -> CallRecord:
        return CallRecord(
            approval_id=keys.new_approval_id(run.run_id), run_id=run.run_id, index=index,
            call_id=f"c{index}", agent="ops", tool="delete_logs", kind="function",
            sticky="ops::delete_logs", channel_id="C1", **fields,
        )  # fmt: skip

    saved = [call(index, fields) for index, fields in enumerate(calls)]
    await store.save_pause(
        run.run_id, run.owner + "/w", Snapshot(b"x", "0", "f"), saved, float(stamp)
    )
    return run.run_id, saved
