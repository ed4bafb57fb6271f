"""A scripted audit history: settled calls written into the real audit trail, in the past.

Each entry is made by the bot's own code (`bot.service.audit.audit_fields`, from a `CallRecord`
and the person who decided, as the service writes it) and appended by the real `AuditLog`, with
the time it is given, oldest first. Backtests, suggestions and reports read it as they read a
running bot's trail.

    writer = HistoryWriter(AuditLog(client))
    writer.settle("deploy", {"env": "staging-1"}, "approve", by="U2", at=time.time() - 86400)
    await writer.flush()
"""

from __future__ import annotations

import dataclasses
import json
import secrets
from dataclasses import dataclass, field
from typing import Any

from bot.engine.arguments import read_json
from bot.service.audit import AuditKind, audit_fields
from bot.service.digest import digest_of
from bot.service.policy.conditions import subject_of
from bot.service.ports import Actor
from bot.store.records import CallRecord, RunRecord
from bot.store.trail.audit import AuditLog

TEAM = "T0TEST"


@dataclass
class HistoryWriter:
    """Appends scripted entries in batches (one pipeline per `flush`)."""

    audit: AuditLog
    team: str = TEAM
    pending: list[tuple[float, str, dict[str, str]]] = field(default_factory=list)

    def call(
        self,
        tool: str,
        args: dict[str, Any] | str,
        *,
        channel: str = "C1",
        agent: str = "ops",
        kind: str = "function",
        approvers: tuple[str, ...] = ("U2", "U3"),
        required: int = 1,
        confirm: str = "",
        rule: str = "",
        requested: float = 0.0,
    ) -> CallRecord:
        """A posted call as the store keeps it (its subject read as the bot reads it)."""
        run_id = secrets.token_hex(8)
        arguments = args if isinstance(args, str) else json.dumps(args)
        call = CallRecord(
            approval_id=f"{run_id}.{secrets.token_urlsafe(12)}", run_id=run_id, index=0,
            call_id="c1", agent=agent, tool=tool, kind=kind, sticky=f"{agent}/{tool}",
            arguments=arguments, channel_id=channel, approvers=json.dumps(list(approvers)),
            required=required, confirm=confirm, rule=rule or f"channels.{channel}",
            paused_at=requested,
        )  # fmt: skip
        if kind in ("shell", "apply_patch"):
            call.subject = json.dumps(subject_of(kind, read_json(""), arguments))
        call.digest = digest_of(call)
        return call

    def settle(
        self,
        tool: str,
        args: dict[str, Any] | str,
        decision: str,
        *,
        by: str = "",
        at: float,
        **posted: Any,
    ) -> CallRecord:
        """A call settled at `at`: `decision` is what the service audits (approve, reject,
        always_approve, auto_approve, auto_reject, expired, edit); `by` who decided ("": the
        policy, or nobody). `posted`: `HistoryWriter.call`'s keywords (requested defaults to
        a minute before `at`)."""
        posted.setdefault("requested", at - 60)
        call = self.call(tool, args, **posted)
        self.record(call, decision, by=by, at=at)
        return call

    def record(self, call: CallRecord, decision: str, *, by: str = "", at: float) -> None:
        """The entry that settles `call`."""
        kind = {"expired": AuditKind.EXPIRED, "edit": AuditKind.EDITED}.get(
            decision, AuditKind.DECIDED
        )
        actor = Actor(self.team, by, "") if by else None
        run = None
        if kind == AuditKind.EXPIRED:  # the service names the run (and its starter) too
            run = RunRecord(
                run_id=call.run_id, team_id=self.team, channel_id=call.channel_id,
                user_id="U1", agent_name=call.agent, task="t",
            )  # fmt: skip
        fields = audit_fields(kind=kind, run=run, call=call, actor=actor, decision=decision)
        self.pending.append((at, kind, fields))

    def shadow(
        self,
        call: CallRecord,
        rule: str,
        would: str,
        *,
        approvers: tuple[str, ...] = ("U2", "U3"),
        at: float,
    ) -> None:
        """A shadow rule's verdict on `call` (`auto_approve`, `auto_reject` or `ask`), as the
        service audits it when the call is posted."""
        shadowed = dataclasses.replace(
            call, rule=rule, approvers=json.dumps(list(approvers)), required=1, confirm=""
        )
        detail = f"shadow rule {rule} would have ... ; the rule in force: {call.rule}"
        fields = audit_fields(kind=AuditKind.SHADOW, call=shadowed, decision=would, detail=detail)
        self.pending.append((at, AuditKind.SHADOW, fields))

    def shown(self, call: CallRecord, chars: int, *, folded: bool = False, at: float) -> None:
        """`call`'s card was posted at `at`: `chars` characters, its arguments folded or not
        (as the projector's hook audits it: `card_shown`)."""
        fields = audit_fields(kind=AuditKind.CARD_SHOWN, call=call,
                              decision="folded" if folded else "whole",
                              detail=f"{chars} characters")  # fmt: skip
        self.pending.append((at, AuditKind.CARD_SHOWN, fields))

    def person(
        self, kind: AuditKind, call: CallRecord, by: str, decision: str, *, at: float,
        detail: str = "",
    ) -> None:  # fmt: skip
        """An entry of `by` about `call`: `viewed` (show_all, conversation), `approval_vote`
        (approve), `rubber_stamp` (alarm), as the service audits them."""
        actor = Actor(self.team, by, "")
        fields = audit_fields(kind=kind, call=call, actor=actor, decision=decision, detail=detail)
        self.pending.append((at, kind, fields))

    def raw(self, at: float, kind: str, fields: dict[str, str]) -> None:
        """Any entry, as given (an entry of an older version, another kind)."""
        self.pending.append((at, kind, fields))

    async def flush(self) -> int:
        """Append what is pending, oldest first; returns how many entries were written."""
        entries = sorted(self.pending, key=lambda e: e[0])
        self.pending = []
        for start in range(0, len(entries), 1000):
            pipe = self.audit.redis.pipeline(transaction=False)
            for at, kind, fields in entries[start : start + 1000]:
                self.audit.entry_in(pipe, kind, fields, at=at)
            await pipe.execute()
        return len(entries)
