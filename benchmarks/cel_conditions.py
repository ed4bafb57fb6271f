"""CEL for `when: {cel: ...}` (#34 part 4), as figures: `python -m benchmarks.cel_conditions`.

Each of the three maintained CEL packages for Python that is installed is measured on our rules
(five expressions of the kind a policy holds, on one call's arguments): compile (and check)
time per rule, evaluation CPU per rule, a comprehension inside a comprehension over 5,000 items
(the agent chooses a list's length; 2,000 items for the package that has no iteration budget,
whose time grows as the square), and what it says in the cases where typing decides
(`int` against `double`, `true` against `1`, a missing field, a string where a number is
compared, an integer beyond 64 bits, a non-boolean result, an undeclared name). Then the bot's
own condition (`bot.service.policy.cel.compile_cel`, on `cel-expr-python`) beside a short form.

The bot installs only `cel-expr-python`; to compare, install the others in the same venv:
`pip install common-expression-language cel-python`.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable
from typing import Any

from bot.service.policy.cel import compile_cel
from bot.service.policy.rules import parse_policy

RULES = [
    "args.amount > 10000 && args.currency == 'USD'",
    "args.env.startsWith('prod-') && args.replicas > 3",
    "args.path.startsWith('/srv/logs/') && !args.path.contains('..')",
    "size(args.recipients) <= 10 && !args.recipients.exists(r, r.endsWith('@evil.example'))",
    "args.target.host.endsWith('.internal') && args.ticket.matches('^T-[0-9]+$')",
]
SUBJECT = {
    "args": {
        "amount": 50000.0, "currency": "USD", "env": "prod-1", "replicas": 5,
        "path": "/srv/logs/a.log", "recipients": ["a@x.com", "b@y.com"],
        "target": {"host": "db.internal"}, "ticket": "T-77",
    }
}  # fmt: skip
TYPING = [
    ("int literal, double value", "args.amount > 10000", {"args": {"amount": 50000.0}}),
    ("double literal, int value", "args.amount > 10000.0", {"args": {"amount": 50000}}),
    ("true == 1", "args.flag == 1", {"args": {"flag": True}}),
    ("a missing field", "args.currency == 'USD'", {"args": {"amount": 1}}),
    ("a string where a number", "args.amount > 10000", {"args": {"amount": "50000"}}),
    ("an integer beyond 64 bits", "args.n > 1", {"args": {"n": 10**30}}),
    ("a result that is no boolean", "args.amount", {"args": {"amount": 3}}),
    ("an undeclared name", "foo.bar == 1", {"args": {}}),
]
NESTED = "args.l.all(x, args.l.exists(y, y == x))"
# Items of the list for the nested comprehension, by package (its cost grows as their square).
NESTED_ITEMS = {"cel-expr-python": 5000, "common-expression-language": 2000}
EVALUATIONS = 20_000

Compile = Callable[[str], Any]
Evaluate = Callable[[Any, dict[str, Any]], Any]


def cel_expr_python() -> tuple[Compile, Evaluate]:
    from cel_expr_python import cel  # type: ignore[import-untyped,import-not-found,unused-ignore]

    env = cel.NewEnv(variables={"args": cel.Type.DYN})

    def evaluate(program: Any, data: dict[str, Any]) -> Any:
        value = program.eval(data=data)
        if value.type() == cel.Type.ERROR:
            raise RuntimeError(value.plain_value())
        return value.plain_value()

    return env.compile, evaluate


def common_expression_language() -> tuple[Compile, Evaluate]:
    import cel  # type: ignore[import-untyped,import-not-found,unused-ignore]

    return cel.compile, lambda program, data: program.execute(data)


def cel_python() -> tuple[Compile, Evaluate]:
    import celpy  # type: ignore[import-untyped,import-not-found,unused-ignore]

    env = celpy.Environment()

    def evaluate(program: Any, data: dict[str, Any]) -> Any:
        result = program.evaluate(celpy.json_to_cel(data))
        if isinstance(result, Exception):
            raise result
        return result

    return lambda text: env.program(env.compile(text)), evaluate


PACKAGES = [
    ("cel-expr-python", "cel_expr_python", cel_expr_python),
    ("common-expression-language", "cel", common_expression_language),
    ("cel-python", "celpy", cel_python),
]


def said(work: Callable[[], Any]) -> str:
    try:
        return repr(work())
    except Exception as exc:
        return f"error: {' '.join(str(exc).split())[:70]}"


def measure(name: str, compile_: Compile, evaluate: Evaluate) -> None:
    started = time.process_time()
    for _ in range(50):
        programs = [compile_(rule) for rule in RULES]
    compiled = (time.process_time() - started) / (50 * len(RULES)) * 1e6
    assert all(evaluate(p, SUBJECT) == True for p in programs)  # noqa: E712 (BoolType)
    started = time.process_time()
    for _ in range(EVALUATIONS // len(RULES)):
        for program in programs:
            evaluate(program, SUBJECT)
    spent = (time.process_time() - started) / EVALUATIONS * 1e6
    print(f"{name}: compile {compiled:.0f} µs CPU per rule, evaluate {spent:.1f} µs CPU per rule")
    for what, expression, data in TYPING:

        def typed(e: str = expression, d: Any = data) -> Any:
            return evaluate(compile_(e), d)

        print(f"  {what:30} {said(typed)}")
    items = NESTED_ITEMS.get(name, 0)
    if items:  # the agent chooses a list's length; cel-python, pure Python, is left out
        nested = {"args": {"l": list(range(items))}}
        started = time.perf_counter()
        outcome = said(lambda: evaluate(compile_(NESTED), nested))
        print(f"  nested comprehension, {items:,} items: {time.perf_counter() - started:.3f} s "
              f"of wall clock: {outcome}")  # fmt: skip


def main() -> None:
    for name, module, make in PACKAGES:
        if importlib.util.find_spec(module) is None:
            print(f"{name}: not installed")
            continue
        compile_, evaluate = make()
        measure(name, compile_, evaluate)
    condition = compile_cel(RULES[0])
    short = parse_policy(
        "channels:\n  C1:\n    approvers: [U1]\ntools:\n  - match: pay\n"
        "    when: {args.amount: '> 10000', args.currency: [USD]}\n    auto: approve\n"
    ).tools[0]
    tests: list[tuple[str, Callable[[], Any]]] = [
        ("the bot's cel: condition", lambda: condition.test(SUBJECT)),
        ("the same as short forms", lambda: short.applies("C1", "a", "pay", SUBJECT)),
    ]
    for what, test in tests:
        started = time.process_time()
        for _ in range(EVALUATIONS):
            test()
        spent = (time.process_time() - started) / EVALUATIONS * 1e6
        print(f"{what} (amount and currency): {spent:.1f} µs CPU per judgement")


if __name__ == "__main__":
    main()
