"""The SDK's restore of a stored state without work it need not do (#32; `bot.engine.restoring`):
the check of a state's JSON tree answered at once for the tree the bot has just parsed, and
every other tree checked as the SDK checks it; the usage module's type adapters kept. What the
SDK does is counted by wrapping its module functions (nothing of ours is replaced)."""

from __future__ import annotations

import json
from typing import Any

import agents.run_state as run_state
import agents.usage as usage
import pytest
from agents import Agent, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails

from bot.engine import restoring
from bot.engine.approvals import arguments_sha
from bot.engine.context import RunContext
from bot.engine.registry import AgentRegistry
from bot.engine.runner import Decision, Engine, Finished, Paused


@function_tool(needs_approval=True)
def deploy(target: str) -> str:
    """Deploy a target."""
    return f"deployed {target}"


def _trees() -> list[Any]:
    """JSON trees, and trees that are not JSON's own types (each refused by the SDK)."""

    class Text(str):
        pass

    return [
        {"a": [1, 2.5, -0.0, True, None, "x", {"b": []}]},
        json.loads('{"n": NaN, "big": 1e400, "deep": [[[[{}]]]]}'),
        {"a": (1, 2)},
        {1: "x"},
        {"a": Text("x")},
        {"a": {"b": object()}},
        {"a": [b"bytes"]},
        {"a": {"b": {1.5}}},
    ]


def _verdict(check: Any, tree: Any) -> str:
    try:
        check(tree)
    except TypeError as exc:
        return str(exc)
    return "ok"


def test_every_other_tree_is_checked_as_the_sdk_checks_it() -> None:
    """Installed, the check refuses what the SDK's refuses and passes what it passes, for any
    tree but the one the bot marks; the marked tree (parsed from JSON text) passes at once."""
    assert restoring.install()
    installed = run_state._validate_run_state_json_value
    verdicts = [_verdict(installed, tree) for tree in _trees()]
    assert verdicts == [_verdict(restoring.sdk_validate, tree) for tree in _trees()]
    assert verdicts.count("ok") == 2
    parsed = json.loads('{"a": [1, {"b": "c"}]}')
    with restoring.restored_from(parsed):
        assert _verdict(installed, parsed) == "ok"
        assert _verdict(installed, {"a": object()}) != "ok"  # another tree, meanwhile
    assert _verdict(installed, {"a": {"b": object()}}) != "ok"


def test_usage_is_read_as_the_sdk_reads_it_with_its_adapters_kept() -> None:
    """The usage module's type adapters, kept, read a usage record (old and new shapes) as
    new ones do; each type's adapter is built once."""
    assert restoring.install()
    adapter = vars(usage)["TypeAdapter"]
    assert adapter(InputTokensDetails) is adapter(InputTokensDetails)
    assert adapter(OutputTokensDetails) is not adapter(InputTokensDetails)
    records: list[dict[str, Any]] = [
        {},
        {"requests": 2, "input_tokens": 5, "output_tokens": 7, "total_tokens": 12},
        {
            "input_tokens_details": [{"cached_tokens": 3}],
            "output_tokens_details": {"reasoning_tokens": 4},
            "request_usage_entries": [{"input_tokens": 1, "input_tokens_details": {"x": "y"}}],
        },
        {"input_tokens_details": {"cached_tokens": "many"}},
    ]
    for record in records:
        kept = usage.deserialize_usage(record)
        vars(usage)["TypeAdapter"] = getattr(adapter, restoring._INSTALLED)
        try:
            assert kept == usage.deserialize_usage(record), record
        finally:
            vars(usage)["TypeAdapter"] = adapter


async def test_a_resume_does_not_walk_its_state_nor_build_adapters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A resume restores its state without walking its tree (some 260 values of the minimal
    state before this) and without building a type adapter (four before this)."""
    step = [function_call("deploy", {"target": "web"}, call_id="c1")]
    model = ScriptedModel([step, [assistant_message("ok")], [assistant_message("ok")]])
    agent: Agent[Any] = Agent(name="deployer", model=model, tools=[deploy])
    engine = Engine(AgentRegistry({"deployer": agent}), rejection_text="no", max_turns=5)
    context = RunContext(run_id="r1", team_id="T1", user_id="U1", channel_id="C1")
    paused = await engine.start("deployer", "deploy web", context)
    assert isinstance(paused, Paused), paused
    walked: list[Any] = []
    check = run_state._validate_run_state_json_value

    def counted(value: Any) -> None:  # the SDK's recursion calls it by this name too
        walked.append(value)
        check(value)

    built: list[Any] = []
    adapter = vars(usage)["TypeAdapter"]
    kept = getattr(adapter, restoring._INSTALLED, None)
    sdk_adapter = kept if kept is not None else adapter

    def building(kind: Any, *args: Any, **kwargs: Any) -> Any:
        built.append(kind)
        return sdk_adapter(kind, *args, **kwargs)

    monkeypatch.setattr(run_state, "_validate_run_state_json_value", counted)
    monkeypatch.setattr(restoring, "TypeAdapter", building)  # the kept ones, built once
    restoring._kept_adapter.cache_clear()
    if kept is None:
        monkeypatch.setitem(vars(usage), "TypeAdapter", building)
    [call] = paused.approvals
    shown = (call.agent, call.tool, arguments_sha(call.arguments))
    decisions = [Decision(call.call_id, True, shown=shown)]
    for _ in range(2):
        walked.clear()
        built.clear()
        outcome = await engine.resume("deployer", paused.checkpoint, decisions, task="deploy web")
        assert isinstance(outcome, Finished) and outcome.output == "ok", outcome
        assert len(walked) == 1, len(walked)  # asked once, about the tree it was given
    assert built == []  # the second resume's: each type's built once, in the first
