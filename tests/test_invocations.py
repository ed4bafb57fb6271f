"""The SDK's tool-invocation work in a resume, each piece done once (#32;
`bot.engine.invocations`): a call's invocation identity is the SDK's own answer, kept; and a
resume decides the state's own pending items, not detached copies of them. What the SDK
computes is counted by wrapping its module functions (nothing of ours is replaced); that the
answers and the decided states are the SDK's own is checked against the SDK's functions."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import agents._tool_invocation as tool_invocation
import agents.run_state as run_state
import pytest
from agents import Agent, RunContextWrapper, Runner, RunState, ToolApprovalItem
from agents.testing import ScriptedModel, assistant_message, function_call
from openai.types.responses import ResponseCustomToolCall, ResponseFunctionToolCall
from openai.types.responses.response_output_item import McpApprovalRequest

from bot.engine import invocations
from bot.engine.approvals import arguments_sha
from bot.engine.context import RunContext
from bot.engine.registry import AgentRegistry
from bot.engine.runner import Decision, Engine, Finished, Paused, _shown
from tests.agents_for_tests import DEPLOYED, deploy


@pytest.fixture(autouse=True)
def _cleared() -> None:
    DEPLOYED.clear()


def _function_calls() -> list[ResponseFunctionToolCall]:
    """Function calls as models: validated, built without validation, changed afterwards;
    with fields left out, None, extra, nested or of another type than declared."""
    plain = {"type": "function_call", "call_id": "c1", "name": "deploy", "arguments": "{}"}
    model = ResponseFunctionToolCall
    changed = [model(**plain) for _ in range(5)]
    changed[0].id = "fc_late"
    changed[1].status = None
    changed[2].arguments = 5  # type: ignore[assignment]
    changed[3].namespace = "ops"
    changed[4].extra = "x"
    return [
        model(**plain),
        model(**plain, id=None, namespace=None, status=None),  # given, None
        model(**plain, **{"async": True}),
        model(**plain, **{"async": False}, id="fc_2", status="in_progress", namespace="ops"),
        model(**{**plain, "arguments": '{"target":"web","replicas":2}'}, id="fc_3"),
        model(**{**plain, "arguments": "x" * 5000}),
        model(**{**plain, "call_id": ""}),
        model(**{**plain, "name": ""}),
        model(**plain, caller={"type": "direct"}),
        model(**plain, provider_data={"type": "mcp_approval_request"}),  # extra
        model(**plain, unknown=None),  # extra, None
        model.model_construct(**plain),
        model.model_construct(call_id="c1", name="deploy", type="function_call"),  # no arguments
        model.model_construct(**{**plain, "type": "hosted_tool_call"}),
        model.model_construct(**plain, id=1),
        model.model_construct(**plain, status=True),
        model.model_construct(**plain, **{"async": "yes"}),
        model.model_construct(**{**plain, "call_id": 7}),
        model.model_construct(**plain, _fields_set={"bogus"}),
        *changed,
    ]


def _raw_items() -> list[Any]:
    call = {"type": "function_call", "call_id": "c1", "name": "deploy"}
    return [
        *_function_calls(),
        ResponseFunctionToolCall(
            type="function_call", call_id="c1", name="deploy", arguments='{"target":"web"}'
        ),
        ResponseFunctionToolCall(
            type="function_call",
            call_id="c1",
            name="deploy",
            arguments='{"target": "web"}',
            id="fc_1",
            status="completed",
            namespace="ops",
        ),
        ResponseCustomToolCall(type="custom_tool_call", call_id="c2", name="patch", input="x"),
        McpApprovalRequest(
            type="mcp_approval_request", id="m1", name="read", server_label="s", arguments="{}"
        ),
        {**call, "arguments": '{"target":"web","n":1}'},
        {**call, "arguments": '{"n":1,"target":"web"}'},  # the same call, keys in another order
        {**call, "arguments": True},  # True and 1: equal in Python, not in JSON
        {**call, "arguments": 1},
        {**call, "arguments": 1.0},
        {**call, "arguments": -0.0},
        {**call, "arguments": 0.0},
        {**call, "arguments": {"target": "web"}},
        {**call, "arguments": "x" * 5000},
        {**call, "arguments": "{}", "extra": None},
        {"type": "function_call", "call_id": "c3", "arguments": "{}"},  # no name
        {"type": "function_call", "name": "deploy", "arguments": "{}"},  # no call id
        {"type": "shell_call", "call_id": "s1", "action": {"commands": ["ls"], "timeout_ms": 5}},
        {"type": "computer_call", "call_id": "k1", "action": {"type": "click", "x": 1, "y": 2}},
        {
            "type": "hosted_tool_call",
            "id": "h1",
            "name": "hosted",
            "provider_data": {
                "type": "mcp_approval_request",
                "id": "m2",
                "name": "write",
                "server_label": "s",
                "arguments": '{"a":1}',
            },
        },
        {"type": "message", "role": "assistant", "content": []},
        {"type": "function_call", 1: "x", "call_id": "c4", "name": "d", "arguments": "{}"},
        None,
        "text",
    ]


_ARGUMENTS: list[dict[str, Any]] = [
    {},
    {"tool_lookup_key": ("bare", "deploy")},
    {"tool_lookup_key": ("namespaced", "ops", "deploy")},
    {"tool_name": "deploy"},
    {"tool_name": "other", "invocation_role": "handoff"},
]


def test_the_tool_invocation_identities_are_the_sdks_own() -> None:
    """Installed (as an Engine does), the function the SDK's modules call answers what the
    SDK's own function answers for the same call and arguments, asked first or again (kept),
    for the kinds of calls the SDK names and for what it does not."""
    assert invocations.install()
    installed = tool_invocation.tool_invocation_identity_and_scope
    for module in invocations._CALLERS:
        assert module.tool_invocation_identity_and_scope is installed
    for module in invocations._CALL_ID_CALLERS:
        read = module.tool_invocation_call_id  # type: ignore[attr-defined]
        assert getattr(read, invocations._INSTALLED) is tool_invocation.tool_invocation_call_id
    answered = 0
    for _ in range(2):
        for raw_item in _raw_items():
            for arguments in _ARGUMENTS:
                own = invocations.sdk_identity_and_scope(raw_item, **arguments)
                assert installed(raw_item, **arguments) == own, (raw_item, arguments)
                answered += own is not None
                identity = tool_invocation.tool_invocation_identity(raw_item, **arguments)
                assert identity == (None if own is None else (own[0], own[1], own[3]))
            for module in invocations._CALL_ID_CALLERS:
                call_id = module.tool_invocation_call_id(raw_item)  # type: ignore[attr-defined]
                assert call_id == invocations.sdk_call_id(raw_item), raw_item
    assert answered > 20  # most of them are calls


@pytest.mark.filterwarnings("ignore::UserWarning")  # the SDK's own dumps of odd models
def test_the_sdks_other_readings_of_a_call_are_its_own() -> None:
    """Installed, the SDK's other functions that read a call only as a mapping (an output's
    identity, an approval's scope, the sticky approvals that cover a call) answer, where its
    modules call them, what the SDK's own answer for the same call, and raise where they
    raise."""
    assert invocations.install()
    outputs = [
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        {"type": "mcp_approval_response", "approval_request_id": "m1", "approve": True},
        {"type": "function_call_output", "call_id": ""},
    ]
    for name, callers in invocations._READERS.items():
        sdk = getattr(tool_invocation, name)
        for module in callers:
            installed = getattr(module, name)
            assert getattr(installed, invocations._INSTALLED) is sdk, (name, module)
            for raw_item in [*_raw_items(), *outputs]:
                for arguments in _ARGUMENTS if name == "tool_invocation_approval_scope" else [{}]:
                    assert _answer(installed, raw_item, **arguments) == _answer(
                        sdk, raw_item, **arguments
                    ), (name, raw_item, arguments)
    agent: Agent[Any] = Agent(name="deployer", tools=[deploy])
    sticky = RunContextWrapper._matching_sticky_approval_keys
    own = getattr(sticky, invocations._INSTALLED)
    found = 0
    for always in (True, False):
        context: Any = RunContextWrapper(context=None)
        call = _function_calls()[0]  # read, not dumped
        assert invocations._function_call_fields(call) is not None
        context.approve_tool(ToolApprovalItem(agent, call, tool_name="deploy"), always)
        for raw_item in _raw_items():
            item = ToolApprovalItem(agent, raw_item, tool_name="deploy")
            for scope in ("", "s1", *(_scopes(raw_item))):
                arguments = {"tool_lookup_key": ("bare", "deploy"), "approval_scope": scope}
                answer = _answer(sticky, context, raw_item, approval_item=item, **arguments)
                assert answer == _answer(own, context, raw_item, approval_item=item, **arguments)
                found += bool(answer) and not isinstance(answer, Exception)
    assert found > 0  # some calls are covered by the Always approvals given


def _answer(function: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return function(*args, **kwargs)
    except Exception as exc:  # the same exception, as its type and text
        return (type(exc), str(exc))


def _scopes(raw_item: Any) -> list[str]:
    with contextlib.suppress(Exception):
        scope = tool_invocation.tool_invocation_approval_scope(raw_item)
        if scope is not None:
            return [scope[1]]
    return []


def test_a_function_calls_key_is_read_as_its_dump_gives_it() -> None:
    """The fields read from a function call's model for its key, where they are read, are those
    of the mapping the SDK reads it as (its model dump through `_unwrap_hosted_mcp_approval`),
    in the same order, of the same types; the common calls are read."""
    read = 0
    for call in _function_calls():
        fields = invocations._function_call_fields(call)
        if fields is not None:
            read += 1
            mapping = tool_invocation._unwrap_hosted_mcp_approval(call)
            assert fields == invocations._fields(mapping), call
            assert [(name, type(value), value) for name, value in mapping.items()] == list(
                fields
            ), call
    assert read >= 10
    common = ResponseFunctionToolCall(
        type="function_call", call_id="c1", name="d", arguments="{}", id="fc", status="completed"
    )
    assert invocations._function_call_fields(common) is not None


def _engine(*calls: tuple[str, str]) -> Engine:
    step = [function_call("deploy", {"target": t}, call_id=call_id) for call_id, t in calls]
    model = ScriptedModel([step, [assistant_message("done")]] * 50)
    agent: Agent[Any] = Agent(name="deployer", model=model, tools=[deploy])
    return Engine(AgentRegistry({"deployer": agent}), rejection_text="no", max_turns=5)


async def _paused(engine: Engine, run_id: str = "r1") -> Paused:
    context = RunContext(run_id=run_id, team_id="T1", user_id="U1", channel_id="C1")
    paused = await engine.start("deployer", "deploy web", context)
    assert isinstance(paused, Paused), paused
    return paused


async def test_a_resume_computes_each_calls_identity_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A resume asks the SDK about its one call's identity dozens of times (84 fingerprints
    before this): each answer is computed once, from one reading of the call."""
    fingerprinted: list[str] = []
    fingerprint = tool_invocation._fingerprint

    def counted(payload: Any) -> str:
        fingerprinted.append(json.dumps(payload, sort_keys=True, default=str))
        return fingerprint(payload)

    monkeypatch.setattr(tool_invocation, "_fingerprint", counted)
    engine = _engine(("c1", "web"))
    paused = await _paused(engine, "counted")
    [approval] = paused.approvals
    fingerprinted.clear()
    shown = (approval.agent, approval.tool, arguments_sha(approval.arguments))
    outcome = await engine.resume(
        "deployer", paused.checkpoint, [Decision("c1", True, shown=shown)], task="deploy web"
    )
    assert isinstance(outcome, Finished) and outcome.output == "done", outcome
    assert DEPLOYED == ["web"]
    assert 0 < len(fingerprinted) <= 10, len(fingerprinted)  # two for each reading seen


async def test_a_resume_finds_its_calls_identities_without_dumping_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A resume finds the kept identities of its call without dumping the call's model: the
    function the SDK's modules call dumps a function call only for an answer not yet kept (one
    dump a question before this: 37 a resume)."""
    engine = _engine(("c1", "web"))  # installs it
    installed = tool_invocation.tool_invocation_identity_and_scope
    assert getattr(installed, invocations._INSTALLED, None) is not None
    asked: list[Any] = []
    dumped: list[Any] = []
    dump = ResponseFunctionToolCall.model_dump

    inside: list[Any] = []

    def asking(raw_item: Any, **arguments: Any) -> Any:
        asked.append(raw_item)
        inside.append(raw_item)
        try:
            return installed(raw_item, **arguments)
        finally:
            inside.pop()

    every: list[Any] = []

    def counted(self: ResponseFunctionToolCall, **arguments: Any) -> dict[str, Any]:
        every.append(self)
        if inside:  # the installed function's (the SDK's own reads what it dumped)
            dumped.append(self)
        return dump(self, **arguments)

    paused = await _paused(engine, "dumps")
    [approval] = paused.approvals
    for module in invocations._CALLERS:
        monkeypatch.setattr(module, "tool_invocation_identity_and_scope", asking)
    monkeypatch.setattr(ResponseFunctionToolCall, "model_dump", counted)
    shown = (approval.agent, approval.tool, arguments_sha(approval.arguments))
    outcome = await engine.resume(
        "deployer", paused.checkpoint, [Decision("c1", True, shown=shown)], task="deploy web"
    )
    assert isinstance(outcome, Finished) and outcome.output == "done", outcome
    assert DEPLOYED == ["web"]
    calls = [raw_item for raw_item in asked if isinstance(raw_item, ResponseFunctionToolCall)]
    assert len(calls) > 30, len(asked)
    assert len(dumped) <= 2, (len(dumped), len(calls))
    # nor its call ids, outputs' identities, approval scopes and sticky approvals (32 + 9 + 4 +
    # 6 more dumps before: 88 dumps of the call a resume, then 23, now those of its input list)
    assert len(every) <= 4, len(every)


async def test_a_resume_decides_the_states_own_items(monkeypatch: pytest.MonkeyPatch) -> None:
    """The decided calls are the state's own items, not copies: a call alone in its pause is
    not copied (five copies before this: the state's list of its pending calls, and two in
    each of `approve`'s two searches for the state's own item); calls paused together are
    still copied where the SDK compares each with the others (8 for two, 18 before)."""
    copied: list[Any] = []
    copy = run_state._copy_tool_approval_raw_item

    def counted(raw_item: Any) -> Any:
        copied.append(raw_item)
        return copy(raw_item)

    monkeypatch.setattr(run_state, "_copy_tool_approval_raw_item", counted)
    for calls, most in (((("c1", "web"),), 0), ((("c1", "web"), ("c2", "db")), 8)):
        engine = _engine(*calls)
        paused = await _paused(engine, f"own{len(calls)}")
        copied.clear()
        DEPLOYED.clear()
        decisions = [
            Decision(a.call_id, a.call_id == "c1", None if a.call_id == "c1" else "not now",
                     shown=(a.agent, a.tool, arguments_sha(a.arguments)))
            for a in paused.approvals
        ]  # fmt: skip
        outcome = await engine.resume("deployer", paused.checkpoint, decisions, task="deploy web")
        assert isinstance(outcome, Finished) and outcome.output == "done", outcome
        assert DEPLOYED == ["web"]
        assert len(copied) <= most, len(copied)


def _nested() -> Agent[Any]:
    helper: Agent[Any] = Agent(
        name="helper",
        model=ScriptedModel(
            [[function_call("deploy", {"target": "api"}, call_id="n1")],
             [assistant_message("helped")]] * 5
        ),
        tools=[deploy],
    )  # fmt: skip
    return Agent(
        name="lead",
        model=ScriptedModel(
            [[function_call("ask", {"input": "deploy api"}, call_id="o1"),
              function_call("deploy", {"target": "web"}, call_id="o2")],
             [assistant_message("done")]] * 5
        ),
        tools=[helper.as_tool("ask", "ask helper"), deploy],
    )  # fmt: skip


async def _decided_both_ways(
    agent: Agent[Any], decide: dict[str, str | None]
) -> tuple[RunState[Any, Any], RunState[Any, Any]]:
    """One paused run's state restored twice, and `decide` (call id: None approves, text
    rejects with it) applied to the SDK's copies of its pending items in one and to its own
    items in the other."""
    paused = await Runner.run(agent, "go", context={"n": 1})
    assert paused.interruptions
    stored = paused.to_state().to_json()
    states = []
    for items_of in (RunState.get_interruptions, invocations.pending):
        state = await RunState.from_json(agent, json.loads(json.dumps(stored)))
        items = items_of(state)
        assert sorted(str(i.call_id) for i in items) == sorted(decide)
        for item in items:
            message = decide[str(item.call_id)]
            if message is None:
                state.approve(item)
            else:
                state.reject(item, rejection_message=message)
        states.append(state)
    return states[0], states[1]


@pytest.mark.parametrize(
    ("agent", "decide"),
    [
        (lambda: _engine(("c1", "web")).registry.agents["deployer"], {"c1": None}),
        (lambda: _engine(("c1", "web")).registry.agents["deployer"], {"c1": "no"}),
        (
            lambda: _engine(("c1", "web"), ("c2", "db"), ("c3", "web")).registry.agents["deployer"],
            {"c1": None, "c2": "not now", "c3": None},
        ),
        (_nested, {"n1": None, "o2": "no"}),
        (_nested, {"n1": "no", "o2": None}),
    ],
)
async def test_deciding_the_states_own_items_leaves_the_state_its_copies_leave(
    agent: Any, decide: dict[str, str | None]
) -> None:
    """The SDK's `approve` and `reject` find the state's own item for a copy of it: given the
    item itself, they decide the same. The decided states serialize alike, their pending items
    show a reviewer the same, and each runs on to the same end."""
    root = agent()
    by_copies, by_own = await _decided_both_ways(root, decide)
    assert by_copies.to_json() == by_own.to_json()
    assert sorted(map(_shown, by_copies.get_interruptions())) == sorted(
        map(_shown, invocations.pending(by_own))
    )
    DEPLOYED.clear()
    first = await Runner.run(root, by_copies)
    ran_first = sorted(DEPLOYED)
    DEPLOYED.clear()
    second = await Runner.run(root, by_own)
    assert sorted(DEPLOYED) == ran_first
    assert first.final_output == second.final_output
    assert first.to_input_list() == second.to_input_list()


def test_another_sdk_version_keeps_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """For an SDK version other than the one read, nothing is replaced, and the pending items
    are the SDK's copies."""
    import agents

    monkeypatch.setattr(agents, "__version__", "0.25.0")
    assert not invocations.install()
    state: Any = RunState(RunContextWrapper(context=None), "x", Agent(name="a"))
    assert invocations.pending(state) == []
