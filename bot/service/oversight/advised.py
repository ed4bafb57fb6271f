"""What the advisor said of a call, as kept with it (`CallRecord.advice`), and what the
policy's conditions read of it (`advice.risk`).

Kept with the call so that every judgement of it reads the advice as it stands, in the read
that fetches the call (no round trip more): a rule that routes on advice is judged again at
each decision. Advice that is not there (not yet, or the advisor gave none) leaves
`advice.risk` undecidable, and an undecidable condition never approves.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from bot.engine.advisor import RISKS, Advice
from bot.service.policy.conditions import ADVICE, UNREADABLE
from bot.store.records import CallRecord

# Why there is no advice: the advisor failed, did not answer in time, answered out of shape.
FAILED, TIMED_OUT, OUT_OF_SHAPE = "failed", "timed_out", "out_of_shape"
NONE_SAID = {
    FAILED: "the advisor failed",
    TIMED_OUT: "the advisor did not answer in time",
    OUT_OF_SHAPE: "the advisor's answer was not advice",
}


@dataclass(frozen=True)
class Advised:
    """A call's stored advice: the advice, or why there is none (`none`)."""

    advice: Advice | None
    none: str = ""

    @property
    def said(self) -> str:
        """Why there is no advice, in words."""
        return NONE_SAID.get(self.none, "no advice")


def encode_advice(advice: Advice) -> str:
    data = {"risk": advice.risk, "rationale": advice.rationale, "concerns": advice.concerns}
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def encode_none(why: str) -> str:
    return json.dumps({"none": why})


def read_advised(call: CallRecord) -> Advised | None:
    """The call's advice as stored (None: not advised yet)."""
    if not call.advice:
        return None
    try:
        data: Any = json.loads(call.advice)
    except ValueError:
        data = None
    if not isinstance(data, dict) or data.get("risk") not in RISKS:
        why = data.get("none") if isinstance(data, dict) else None
        return Advised(None, str(why) if why in NONE_SAID else FAILED)
    concerns = data.get("concerns")
    return Advised(
        Advice(
            risk=str(data["risk"]),
            rationale=str(data.get("rationale", "")),
            concerns=tuple(str(c) for c in concerns) if isinstance(concerns, list) else (),
        )
    )


def advice_subject(call: CallRecord, subject: dict[str, Any]) -> dict[str, Any]:
    """`subject` with what the conditions read of the call's advice: `advice.risk` when the
    advisor gave advice on the arguments the call stands for; otherwise why it cannot be read
    (no advice, none given, or given on the arguments before an edit)."""
    advised = read_advised(call)
    why = ""
    if advised is None:
        why = "no advice (yet)"
    elif advised.advice is None:
        why = f"no advice ({advised.said})"
    elif call.edited_sha:
        why = "the advice is on the arguments before the edit"
    if not why:
        assert advised is not None and advised.advice is not None
        return {**subject, ADVICE: {"risk": advised.advice.risk}}
    unreadable = subject.get(UNREADABLE)
    found = dict(unreadable) if isinstance(unreadable, dict) else {}
    return {**subject, UNREADABLE: {**found, ADVICE: why}}


def without_advice(subject: dict[str, Any]) -> dict[str, Any]:
    """`subject` as the call's arguments alone give it (what an edit's, or the audit's, is)."""
    kept = {k: v for k, v in subject.items() if k != ADVICE}
    unreadable = kept.get(UNREADABLE)
    if isinstance(unreadable, dict) and ADVICE in unreadable:
        rest = {k: v for k, v in unreadable.items() if k != ADVICE}
        if rest:
            kept[UNREADABLE] = rest
        else:
            del kept[UNREADABLE]
    return kept
