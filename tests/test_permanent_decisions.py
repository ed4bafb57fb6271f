"""A snapshot's permanent (Always) decision records are emptied before a resume; a snapshot
with none is not copied for it."""

from __future__ import annotations

import json

from bot.engine.runner import may_hold_permanent_decisions, without_permanent_decisions

RECORD = {"approved": True, "rejected": [], "sticky_rejection_message": None}
STATE = {
    "$schemaVersion": "1.9",
    "context": {"approvals": {"delete_logs": RECORD, "read_logs": {"approved": ["c1"]}}},
}


def test_a_permanent_record_is_found_however_the_json_is_spaced() -> None:
    for separators in ((",", ":"), (", ", ": ")):
        raw = json.dumps(STATE, separators=separators).encode()
        assert may_hold_permanent_decisions(raw)
        cleaned = without_permanent_decisions(json.loads(raw))
        approvals = cleaned["context"]["approvals"]
        assert approvals["delete_logs"] == {
            "approved": [], "rejected": [], "sticky_rejection_message": None,
        }  # fmt: skip
        assert approvals["read_logs"] == {"approved": ["c1"]}  # single calls are kept
    refused = {"approved": [], "rejected": False}
    assert may_hold_permanent_decisions(json.dumps({"r": refused}).encode())


def test_a_state_of_single_decisions_holds_none() -> None:
    single = {"approvals": {"t": {"approved": ["c1"], "rejected": ["c2"]}}, "ok": True}
    assert not may_hold_permanent_decisions(json.dumps(single).encode())
    # An argument that merely mentions the words is not a record of that shape.
    said = {"arguments": json.dumps({"note": 'approved: true, "rejected" false'})}
    assert not may_hold_permanent_decisions(json.dumps(said).encode())
