"""The store's typed edges, without Redis: each script's KEYS (the same keys, in the same order,
as the scripts' headers say), outbox target names, and records that keep their stored form."""

from __future__ import annotations

import pytest

from bot.store import keys
from bot.store.keys import RunKeys, Target
from bot.store.records import CallRecord, CallStatus, RunRecord, RunStatus
from bot.store.runs import AlreadyEnded, Ended, NotOwner, RunMissing, decode_finish

RUN = "0123456789abcdef"
CALL = f"{RUN}.AAAAAAAAAAAAAAAA"
OTHER = f"{RUN}.BBBBBBBBBBBBBBBB"


def test_each_script_gets_the_keys_its_header_lists() -> None:
    k = RunKeys(RUN)
    run, state, snapshot = keys.run_key(RUN), keys.state_key(RUN), keys.snapshot_key(RUN)
    task, outbox, pause = keys.task_key(RUN), keys.outbox_key(RUN), keys.pause_key(RUN)
    assert k.finish() == [run, state, snapshot, task, outbox, pause]
    assert k.save_pause([CALL, OTHER]) == [
        run, state, snapshot, task, outbox, pause, keys.call_key(CALL), keys.call_key(OTHER),
        keys.arguments_key(CALL), keys.arguments_key(OTHER),
    ]  # fmt: skip
    assert k.decide(CALL, [OTHER]) == [
        run, keys.call_key(CALL), keys.votes_key(CALL), state, snapshot, keys.sticky_key(RUN),
        outbox, keys.call_key(OTHER),
    ]  # fmt: skip
    assert k.fire_timers(CALL, []) == [
        run, keys.call_key(CALL), outbox, state, snapshot, pause, keys.sticky_key(RUN),
        keys.votes_key(CALL),
    ]  # fmt: skip
    assert k.cancel([CALL]) == [run, pause, outbox, task, keys.call_key(CALL)]
    assert k.take_job() == [run, state, task]
    assert k.resolve_review() == [run, keys.journal_key(RUN), outbox]
    assert k.record_outcomes() == [keys.outcomes_key(RUN), outbox]


@pytest.mark.parametrize(
    "name", ["run", "result", "notice", f"card:{CALL}", "review:rv1", "note:3", f"remind:{CALL}:2"]
)
def test_a_target_reads_back_as_its_name(name: str) -> None:
    assert str(Target.parse(name)) == name


def test_a_reminder_and_a_note_say_what_they_are() -> None:
    assert Target.parse(f"remind:{CALL}:escalated").reminder == (CALL, "escalated")
    assert Target.parse("note:12").number == 12
    assert keys.target_kind(f"card:{CALL}") == "card"


def test_records_are_typed_and_stored_as_before() -> None:
    stored = {b"status": b"paused", b"created_at": b"1796095086.327", b"team_id": b"T"}
    run = RunRecord.from_hash(
        {**stored, b"user_id": b"U", b"channel_id": b"C", b"agent_name": b"a", b"task": b"t"}, RUN
    )
    assert run.status is RunStatus.PAUSED and run.status == "paused"
    assert run.created_at == 1796095086.327 and run.updated_at == 0.0
    assert run.to_hash()["created_at"] == "1796095086.327" and "updated_at" not in run.to_hash()
    call = CallRecord(
        approval_id=CALL, run_id=RUN, index=0, call_id="c", agent="a", tool="t", kind="function",
        sticky="a/t", arguments="{}", status="approved", decided_at="1796095088.589",  # type: ignore[arg-type]
    )  # fmt: skip
    assert call.status is CallStatus.APPROVED and call.decided_at == 1796095088.589


def test_finish_answers_each_case_apart() -> None:
    assert decode_finish([b"ok", b"running"], RUN) == Ended("running")
    assert decode_finish([b"already", b"failed"], RUN) == AlreadyEnded("failed")
    assert decode_finish([b"missing"], RUN) == RunMissing()
    with pytest.raises(NotOwner):
        decode_finish([b"not_owner"], RUN)
