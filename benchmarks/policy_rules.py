"""What rules on the arguments cost, printed as figures (run: `python -m benchmarks.policy_rules`).

- CPU per judgement (`Policy.rule_for`) with a policy of N tool rules whose `when:` conditions
  (a glob, a regex, a comparison, an exists) read a call's arguments, the matching rule last:
  the worst case, as every click, list and timer asks it. CPU time (time.process_time), so the
  figure holds on a busy machine.
- Bytes a call keeps for its conditions (`CallRecord.subject`): none for a function call whose
  arguments are stored whole; the JSON for a cut display copy or a shell / patch call's facts.
"""

from __future__ import annotations

import json
import time

from bot.engine.arguments import read_json
from bot.service.policy.conditions import encode_subject, subject_of
from bot.service.policy.gate import keep_subject
from bot.service.policy.rules import parse_policy
from bot.store.records import SHOWN_ARGUMENTS, CallRecord

JUDGEMENTS = 20_000


def policy_with(rules: int) -> str:
    text = "channels:\n  C1:\n    approvers: [U1]\ntools:\n"
    for n in range(rules - 1):
        text += (
            f"  - match: deploy\n    when: {{args.env: 'env-{n}-*', args.replicas: '> {n}', "
            f"args.ticket: 're:T-{n}[0-9]+', args.target.host: {{exists: true}}}}\n"
            "    auto: approve\n"
        )
    return text + "  - match: deploy\n    when: {args.env: 'prod-*'}\n    required_approvals: 2\n"


def judgement_cpu(rules: int) -> float:
    policy = parse_policy(policy_with(rules))
    subject = subject_of(
        "function",
        read_json(
            json.dumps({"env": "prod-1", "replicas": 3, "ticket": "T-77", "target": {"host": "h"}})
        ),
    )
    start = time.process_time()
    for _ in range(JUDGEMENTS):
        rule = policy.rule_for(channel="C1", agent="ops", tool="deploy", subject=subject)
    spent = time.process_time() - start
    assert rule is not None and rule.required == 2
    return spent / JUDGEMENTS * 1e6


def kept_bytes(kind: str, arguments: str, facts: str = "") -> int:
    call = CallRecord("r.a", "r", 0, "c", "ops", "t", kind, "s", arguments[:SHOWN_ARGUMENTS])
    keep_subject(call, subject_of(kind, read_json(arguments), facts))
    return len(call.subject.encode())


def main() -> None:
    for rules in (1, 10, 50):
        cpu = judgement_cpu(rules)
        print(f"rule_for, {rules:>2} rules with 4 conditions each: {cpu:.1f} µs CPU")
    small = json.dumps({"env": "prod-1", "replicas": 3})
    big = json.dumps({"env": "prod-1", "blob": "x" * 10_000})
    print(f"subject kept, function call, {len(small)} chars of arguments: "
          f"{kept_bytes('function', small)} bytes")  # fmt: skip
    print(f"subject kept, function call, {len(big):,} chars (display copy cut): "
          f"{kept_bytes('function', big):,} bytes")  # fmt: skip
    facts = encode_subject({"path": "src/app.py", "operation": "delete_file"})
    print(f"subject kept, patch call: {kept_bytes('apply_patch', 'delete_file src/app.py', facts)} "
          "bytes")  # fmt: skip


if __name__ == "__main__":
    main()
