"""The store's typed edges, without Redis: each script's KEYS (the same keys, in the same order,
as the scripts' headers say), outbox target names, and records that keep their stored form."""

from __future__ import annotations

from typing import Any

import pytest

from bot.store import keys
from bot.store.delivery.outbox import Shown
from bot.store.keys import RunKeys, Target
from bot.store.parts.texts import HASH_VALUE_LIMIT, pack_text, split_run, unpack_text
from bot.store.records import CallRecord, CallStatus, RunRecord, RunStatus
from bot.store.runs import AlreadyEnded, Ended, NotOwner, RunMissing, decode_finish

RUN = "0123456789abcdef"
CALL = f"{RUN}.AAAAAAAAAAAAAAAA"
OTHER = f"{RUN}.BBBBBBBBBBBBBBBB"


def test_each_script_gets_the_keys_its_header_lists() -> None:
    k = RunKeys(RUN)
    run, state, snapshot = keys.run_key(RUN), keys.state_key(RUN), keys.snapshot_key(RUN)
    task, outbox, pause = keys.task_key(RUN), keys.outbox_key(RUN), keys.pause_key(RUN)
    turns, history = keys.turns_key(RUN), keys.history_key(RUN)
    partial = keys.partial_key(RUN)
    followups = keys.followups_key(RUN)
    assert k.finish() == [
        run, state, snapshot, task, outbox, pause, turns, history, partial, followups,
    ]  # fmt: skip
    assert k.turn() == [run, turns, keys.followups_key(RUN), outbox, keys.progress_key(RUN)]
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
    assert k.take_job([CALL, OTHER]) == [
        run, state, task, keys.call_key(CALL), keys.call_key(OTHER), keys.arguments_key(CALL),
        keys.arguments_key(OTHER),
    ]  # fmt: skip
    assert k.end_call() == [keys.journal_key(RUN), run]
    assert k.resolve_review() == [run, keys.journal_key(RUN), outbox]
    assert k.record_outcomes() == [keys.outcomes_key(RUN), outbox]


@pytest.mark.parametrize(
    "name",
    [
        "run",
        "result",
        "result:2",
        "notice",
        f"card:{CALL}",
        "review:rv1",
        "note:3",
        f"remind:{CALL}:2",
    ],
)
def test_a_target_reads_back_as_its_name(name: str) -> None:
    assert str(Target.parse(name)) == name


def test_a_reminder_and_a_note_say_what_they_are() -> None:
    assert Target.parse(f"remind:{CALL}:escalated").reminder == (CALL, "escalated")
    assert Target.parse("note:12").number == 12
    assert keys.target_kind(f"card:{CALL}") == "card"


def test_a_turns_result_is_named_as_its_end_marks_it() -> None:
    """`result` for turn 1 and `result:<n>` for a follow-up turn's, as finish.lua and turn.lua
    mark them; a long answer's further parts `result:[<n>]#<part>`, in order after it."""
    assert [keys.result_target(), keys.result_target(1), keys.result_target(3)] == [
        "result", "result", "result:3"]  # fmt: skip
    assert [keys.result_target(1, 2), keys.result_target(3, 2)] == ["result:#2", "result:3#2"]
    for name in ("result", "result:3", "result:#2", "result:3#2"):
        assert str(Target.parse(name)) == name and keys.target_kind(name) == "result"


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


def test_every_scripts_keys_lie_in_one_cluster_slot() -> None:
    """A Redis Cluster runs a script only when all its KEYS hash to one slot: every key list
    `RunKeys` gives a script (each method that returns a list) is checked, with each kind of
    argument, against the slot of the run's tag."""
    import inspect
    from collections.abc import Sequence

    from redis.crc import key_slot

    samples: dict[str, Any] = {"approval_id": CALL, "review_id": "rv1", "reply_id": f"{RUN}.R"}
    k = RunKeys(RUN)
    checked = 0
    for name, method in inspect.getmembers(k, inspect.ismethod):
        if name.startswith("_"):
            continue
        params = inspect.signature(method).parameters
        args = [
            [CALL, OTHER] if "Sequence" in str(p.annotation) else samples.get(p.name, CALL)
            for p in params.values()
        ]
        found = method(*args)
        if not isinstance(found, Sequence) or isinstance(found, str):
            continue
        slots = {key_slot(key.encode()) for key in found}
        assert slots == {key_slot(keys.run_key(RUN).encode())}, (name, found)
        checked += 1
    assert checked >= 8  # save_pause, finish, decide, fire_timers, cancel, take_job, ...


def test_long_texts_leave_their_hash_and_what_slack_shows_fits_a_compact_hash() -> None:
    """Layout 3 (#17): a text over 64 bytes (counted in UTF-8) goes to a key of its own,
    compressed when that is smaller; what Slack shows is stored within 64 bytes; layout 2's
    forms still read."""
    run = RunRecord(run_id=RUN, team_id="T", user_id="U", channel_id="C", agent_name="a",
                    task="🙂" * 20)  # fmt: skip
    stored, task = split_run(run)
    assert "task" not in stored and task is not None and unpack_text(task) == run.task
    short = RunRecord(**{**run.__dict__, "task": "x" * 64})
    assert split_run(short) == (short.to_hash(), None)
    prose = " ".join(f"word{i % 50}" for i in range(800))
    assert len(pack_text(prose)) < len(prose) / 2 and unpack_text(pack_text(prose)) == prose
    assert unpack_text(b"plain, as layout 2 stored a task") == "plain, as layout 2 stored a task"
    shown = Shown("1796184252.035090", "48e980959cb077c4a9bc8159", 1796184252.5)
    assert len(shown.encode()) <= HASH_VALUE_LIMIT and Shown.decode(shown.encode()) == shown
    assert Shown.decode(Shown(ts="1.2", hash="h").encode()) == Shown("1.2", "h", 0.0)
    old = '{"ts": "1796184252.035090", "hash": "48e9", "posting": 0.0}'
    assert Shown.decode(old) == Shown("1796184252.035090", "48e9", 0.0)
