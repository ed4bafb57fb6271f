"""Start and resume agent runs with the SDK; knows nothing of Slack or Redis.

A run either finishes, fails (with a sentence a person can read), or pauses on approvals; a pause
comes back as a checkpoint (the compressed RunState JSON plus the SDK version and the agent
fingerprint it was written with) and the calls to decide.

The caller keeps the run's task anyway (to show it), so a checkpoint does not hold it a second
time: the state's original input, when it is the task, is replaced by `TASK_REF`, and the
caller gives the task back to `resume`.
"""

from __future__ import annotations

import functools
import json
import logging
import lzma
import re
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

import agents
from agents import (
    Agent,
    FunctionTool,
    MaxTurnsExceeded,
    ModelResponse,
    RunConfig,
    RunContextWrapper,
    RunHooks,
    Runner,
    RunResult,
    RunResultStreaming,
    RunState,
    Tool,
)

from bot.checkpoint import Checkpoint as Checkpoint  # the stored pause: engine and store
from bot.engine import enabled, hooks, identities, invocations, restoring, streamed
from bot.engine.approvals import PendingApproval, arguments_sha, describe, function_tool_of
from bot.engine.arguments import Reading, receive
from bot.engine.automatic import DECIDING, AtCheck, Automatic, AutomaticDecisions
from bot.engine.context import RunContext, deserialize_context, serialize_context
from bot.engine.explain import explain
from bot.engine.journal import CURRENT, CallNeedsReview, Execution, JournalUnavailable
from bot.engine.questions import ANSWERS, is_question
from bot.engine.registry import AgentRegistry, walk, what_matters
from bot.engine.tracing import Tracing
from bot.errors import ApprovalBotError, cause_of
from bot.untrusted import redact

log = logging.getLogger(__name__)

SDK_VERSION: str = getattr(agents, "__version__", "unknown")
# A checkpoint's definitions record: NEEDS + JSON of `what_matters` (older ones: a digest).
NEEDS = "needs:"

Progress = Callable[[str], Awaitable[None]]
# Told the text of the model's response so far as it streams ("" when it turned to tools).
Stream = Callable[[str], Awaitable[None]]
# Asked before every model call: True when the run must go no further (it was cancelled).
StopCheck = Callable[[], Awaitable[bool]]


@dataclass(frozen=True)
class Paused:
    checkpoint: Checkpoint
    approvals: list[PendingApproval]


@dataclass(frozen=True)
class Finished:
    output: str
    """The turn's final output, as text."""
    history: bytes = b""
    """The conversation after this turn (the SDK's input list as JSON, packed like a state):
    the input of the run's next turn, if someone follows up. Empty if it could not be kept."""


@dataclass(frozen=True)
class Failed:
    error: str  # plain words for the run's thread; never includes secrets


@dataclass(frozen=True)
class NeedsReview:
    """An earlier attempt left a call executing: a person must say what happened."""

    call_id: str
    tool: str


@dataclass(frozen=True)
class Stopped:
    """The run was stopped from outside (cancelled) before a model call: nothing more ran."""


Outcome = Paused | Finished | Failed | NeedsReview | Stopped


class _StopRequested(ApprovalBotError):
    """Raised by the hooks before a model call of a run that must go no further."""


_XZ_MAGIC = b"\xfd7zXZ\x00"
# A state compressed with a preset dictionary: DICT_TAG, the SDK's `$schemaVersion`, b":",
# then raw deflate. The tag can be told from xz (0xfd) and from zlib's header (0x78).
DICT_TAG = b"Z"
_SCHEMA = re.compile(rb'"\$schemaVersion"\s*:\s*"([0-9A-Za-z._-]{1,16})"')
# Past this size, xz is tried as well (zlib's 32 KB window misses repeats of long arguments).
_TRY_XZ_ABOVE = 4096
# What a checkpoint's RunState JSON holds instead of its original input when that is the run's
# task (which the caller keeps and passes to `Engine.resume`); an SDK input is never an object.
INPUT = "original_input"
TASK_REF: dict[str, str] = {"$ref": "task"}
_REF_CHARS = len(json.dumps(TASK_REF))


def without_task(state_json: dict[str, Any], task: str | None) -> dict[str, Any]:
    """The serialized state with its original input replaced by `TASK_REF` when it is `task`
    (and longer than the reference)."""
    if task is None or len(task) <= _REF_CHARS or state_json.get(INPUT) != task:
        return state_json
    return {**state_json, INPUT: TASK_REF}


def with_task(data: dict[str, Any], task: str | None) -> dict[str, Any]:
    """The serialized state as the SDK wrote it: `TASK_REF` replaced by the run's `task`.
    Raises `ValueError` when the state refers to a task and none is given."""
    if data.get(INPUT) != TASK_REF:
        return data
    if not task:
        raise ValueError("the state refers to the run's task, which is no longer stored")
    return {**data, INPUT: task}


@functools.cache
def state_dictionary(schema: str) -> bytes | None:
    """A typical paused RunState JSON of this SDK schema (`bot/engine/state_dicts/`), used as
    zlib's preset dictionary: a small snapshot is mostly the SDK's field names and structure,
    which the dictionary supplies. None for a schema without one (then xz is used)."""
    name = f"{schema}.json"
    try:
        return (resources.files("bot.engine") / "state_dicts" / name).read_bytes()
    except (FileNotFoundError, OSError):
        return None


def _xz(state_json: bytes) -> bytes:
    return lzma.compress(state_json, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC32, preset=1)


def pack_state(state_json: bytes) -> bytes:
    """Compress RunState JSON: raw deflate with a preset dictionary of the state's schema (a
    minimal snapshot: about 1.3 KB with xz, a few hundred bytes with it; plain zlib for JSON
    of no known schema, such as a conversation's history), or xz (LZMA) above 4 KB when it is
    smaller: the JSON repeats each tool call's arguments up to ten times, and zlib's 32 KB
    window cannot see a repeat of a long argument; LZMA's 1 MB dictionary stores it about once."""
    match = _SCHEMA.search(state_json[:200])
    zdict = state_dictionary(match.group(1).decode()) if match else None
    if zdict is None or match is None:  # a conversation's history, or a schema with no dictionary
        # zlib, not xz, below the threshold: setting up an xz encoder alone costs about 0.6 ms
        # of CPU, paid by every finished turn's history (about 4% of a decision's CPU).
        packed = zlib.compress(state_json, 9)
    else:
        packer = zlib.compressobj(9, zlib.DEFLATED, -15, 9, zdict=zdict)
        packed = DICT_TAG + match.group(1) + b":" + packer.compress(state_json) + packer.flush()
    if len(state_json) > _TRY_XZ_ABOVE:
        other = _xz(state_json)
        if len(other) < len(packed):
            return other
    return packed


def unpack_state(blob: bytes) -> bytes:
    """Decompress a stored state: dictionary deflate, xz, or zlib (snapshots before xz, and
    histories and states of no known schema)."""
    if blob.startswith(_XZ_MAGIC):
        return lzma.decompress(blob)
    if blob.startswith(DICT_TAG):
        schema, _, body = blob[len(DICT_TAG) :].partition(b":")
        zdict = state_dictionary(schema.decode())
        if zdict is None:
            raise ValueError(f"no compression dictionary for RunState schema {schema!r}")
        unpacker = zlib.decompressobj(-15, zdict=zdict)
        return unpacker.decompress(body) + unpacker.flush()
    return zlib.decompress(blob)


@dataclass(frozen=True)
class Decision:
    """A human decision on one pending call, matched back to the restored state by call id.

    Decisions reach the SDK for their own call only. Always decisions are kept and applied by
    the service, which re-judges them against the policy in force each time a later call would
    use them; the SDK's own permanent approvals would outlive a policy change."""

    call_id: str
    approve: bool
    message: str | None = None
    # (agent, tool, arguments_sha(arguments)) as shown to the reviewer: the call must still be
    # exactly this.
    shown: tuple[str, str, str] | None = None


def without_permanent_decisions(data: Any) -> Any:
    """The serialized RunState with every permanent (Always) approval or rejection record
    emptied, so that no later call runs, or is refused, on a decision the bot did not re-judge.

    The bot never asks the SDK for permanent decisions; snapshots written by earlier versions of
    the bot may hold some. A record is any object with both `approved` and `rejected`, where
    a boolean is permanent and a list names single calls (kept)."""
    if isinstance(data, list):
        return [without_permanent_decisions(item) for item in data]
    if not isinstance(data, dict):
        return data
    cleaned = {key: without_permanent_decisions(value) for key, value in data.items()}
    if "approved" in cleaned and "rejected" in cleaned:
        for field_name in ("approved", "rejected"):
            if isinstance(cleaned[field_name], bool):
                cleaned[field_name] = []
        if cleaned.get("sticky_rejection_message") is not None:
            cleaned["sticky_rejection_message"] = None
    return cleaned


# A permanent decision record's boolean, as any JSON writer spells it (see below).
_PERMANENT = re.compile(rb'"(?:approved|rejected)"\s*:\s*(?:true|false)')


def may_hold_permanent_decisions(state_json: bytes) -> bool:
    """Whether serialized RunState JSON may hold a permanent decision record: most hold
    none, and `without_permanent_decisions` then need not copy the whole state (about 0.15 ms
    of CPU per resume)."""
    return _PERMANENT.search(state_json) is not None


class _ProgressHooks(RunHooks[Any]):
    """Reports tool calls and handoffs as they happen, in plain text; and before each model
    call asks `stop` whether the run must go no further (the tool call in progress has
    finished by then; no further model call is made)."""

    def __init__(
        self, progress: Progress | None, stop: StopCheck | None = None,
        deciding: AtCheck | None = None,
    ) -> None:  # fmt: skip
        self.progress = progress
        self.stop = stop
        self.deciding = deciding  # told whose model call comes (its calls' check needs it)

    async def on_llm_start(
        self,
        context: RunContextWrapper[Any],
        agent: Agent[Any],
        system_prompt: str | None,
        input_items: list[Any],
    ) -> None:
        if self.stop is not None and await self.stop():
            raise _StopRequested()
        if self.deciding is not None:
            self.deciding.spoke(context, agent)

    async def on_llm_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse
    ) -> None:
        if self.deciding is None:
            return
        try:
            await self.deciding.answered(context, agent, response)
        except Exception:  # its calls are decided where the run stops on them, as before
            log.exception("deciding the calls of a model response in the run failed")

    async def _say(self, text: str) -> None:
        if self.progress is None:
            return
        try:
            await self.progress(text)
        except Exception:  # progress is best effort; never let it break a run
            log.exception("progress callback failed")

    async def on_tool_start(
        self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool
    ) -> None:
        # Worded to stay true once the tool has run (the run message keeps its steps).
        await self._say(f"{agent.name} called {tool.name}")

    async def on_handoff(
        self, context: RunContextWrapper[Any], from_agent: Agent[Any], to_agent: Agent[Any]
    ) -> None:
        await self._say(f"{from_agent.name} handed off to {to_agent.name}")


async def _relay(streamed: RunResultStreaming, stream: Stream) -> None:
    """Tell `stream` the text of each model response as it grows; a response that ends in
    tool calls was not the answer: `stream` is told "" (nothing to show) after it."""
    text = ""
    async for event in streamed.stream_events():
        if event.type != "raw_response_event":
            continue
        kind = getattr(event.data, "type", "")
        if kind == "response.created":
            text = ""
        elif kind == "response.output_text.delta":
            text += str(getattr(event.data, "delta", ""))
            await stream(text)
        elif kind == "response.completed":
            output = getattr(getattr(event.data, "response", None), "output", None) or []
            if any(getattr(item, "type", "") != "message" for item in output):
                text = ""
                await stream("")


def _history(result: RunResult | RunResultStreaming) -> bytes:
    """The conversation after a finished turn, packed (empty when it cannot be serialized)."""
    try:
        items = result.to_input_list()
        return pack_state(json.dumps(items, separators=(",", ":"), default=str).encode())
    except Exception as exc:
        log.warning("cannot keep the conversation: %s", exc, exc_info=True)
        return b""


def _shown(item: Any) -> tuple[str, str, str]:
    """What a reviewer of this call was shown, as a decision names it: (agent, tool,
    `arguments_sha` of the arguments as its card shows them). Not what the tool will receive:
    that reading (the tool's parameter model, about 0.2 ms a call) judged the call at its
    pause, and the SDK reads the arguments again when it runs it (#32)."""
    now = describe(item, 0, read=False)
    return now.agent, now.tool, arguments_sha(now.arguments)


def _describe_error(exc: BaseException) -> str:
    if isinstance(exc, MaxTurnsExceeded):
        return f"The agent stopped after reaching its limit of turns ({exc})."
    text = redact(str(exc).strip()) or "no details"
    if len(text) > 500:
        text = text[:500] + "…"
    return f"The run failed: {type(exc).__name__}: {text}"


class Engine:
    """Runs the registry's agents; every method returns an Outcome and never raises."""

    def __init__(
        self,
        registry: AgentRegistry,
        *,
        rejection_text: str,
        max_turns: int,
        tracing: Tracing | None = None,
        stream_answers: bool = True,
    ) -> None:
        identities.install()  # the SDK's agent identities without needless signatures
        invocations.install()  # and its tool calls' identities each computed once
        enabled.install()  # and its enabled checks of plain booleans answered without tasks
        streamed.install()  # and its streamed run's waits without tasks to wait
        restoring.install()  # and its restore without checks and adapters made again
        hooks.install(_ProgressHooks)  # and its hook pairs without a task for each
        self.registry = registry
        self.rejection_text = rejection_text
        self.max_turns = max_turns
        self.tracing = tracing or Tracing()
        self.stream_answers = stream_answers  # off: a `stream` given is not told anything

    def run_config(self, run_id: str = "", agent_name: str = "") -> RunConfig:
        # RunConfig is not serialized with the state: it is rebuilt for every start and resume.
        text = self.rejection_text

        def rejection(_: Any) -> str:
            return text

        return RunConfig(
            tool_error_formatter=rejection,
            **self.tracing.run_config_fields(run_id, agent_name),
        )

    def fingerprint(self, agent_name: str) -> str:
        return self.registry.fingerprints.get(agent_name, "")

    def _function_tool(self, agent_name: str, agent: str, tool: str) -> FunctionTool | None:
        """Function tool `tool` of `agent` (reachable from the registry's `agent_name`), from
        the live definitions: None when there is none (another kind of tool, or gone)."""
        root = self.registry.get(agent_name)
        for each in walk(root) if root is not None else ():
            if each.name == agent:
                found = function_tool_of(each, tool)
                if found is not None:
                    return found
        return None

    def tool_schema(self, agent_name: str, agent: str, tool: str) -> dict[str, Any] | None:
        """The JSON schema of the parameters of function tool `tool` of `agent` (see
        `_function_tool`); None when there is none."""
        found = self._function_tool(agent_name, agent, tool)
        return dict(found.params_json_schema) if found is not None else None

    def receive(self, agent_name: str, agent: str, tool: str, arguments: str) -> Reading:
        """What `tool` of `agent` will receive for the JSON `arguments` (an edit's): read as
        the tool reads them, as the agent's own calls are (`bot.engine.arguments`)."""
        return receive(self._function_tool(agent_name, agent, tool), arguments)

    def definitions_changed(self, agent_name: str, checkpoint: Checkpoint) -> list[str]:
        """What changed since `checkpoint` of what the paused run needs, in words (empty: the
        live definitions are those it paused with)."""
        agent = self.registry.get(agent_name)
        if agent is None:
            return [f"agent `{agent_name}` is no longer defined"]
        return self._changed_since(agent, agent_name, checkpoint)

    def _changed_since(
        self, agent: Agent[Any], agent_name: str, checkpoint: Checkpoint
    ) -> list[str]:
        """What changed, of what this paused run needs (see `what_matters`), in words; empty
        when it can resume. A checkpoint written before this check existed holds a digest of
        every definition, so for it any change counts."""
        if not checkpoint.fingerprint.startswith(NEEDS):
            if checkpoint.fingerprint == self.fingerprint(agent_name):
                return []
            return ["agents, tools or approval settings"]
        then: dict[str, str] = json.loads(checkpoint.fingerprint[len(NEEDS) :])
        wanted = [(k.split("/", 1)[0], k.split("/", 1)[1] if "/" in k else "") for k in then]
        now = what_matters(agent, wanted)
        changed = []
        for key, was in sorted(then.items()):
            current = now.get(key, "missing")
            if current == was:
                continue
            if current == "missing":
                what = "tool" if "/" in key else "agent"
                changed.append(f"{what} `{key}` no longer exists")
            else:
                changed.append(f"the approval setting of `{key}` changed")
        return changed

    async def start(
        self,
        agent_name: str,
        task: str,
        context: RunContext,
        progress: Progress | None = None,
        execution: Execution | None = None,
        stop: StopCheck | None = None,
        stream: Stream | None = None,
        automatic: AutomaticDecisions | None = None,
    ) -> Outcome:
        agent = self.registry.get(agent_name)
        if agent is None:
            return Failed(f"No agent named {agent_name!r} is defined any more.")
        return await self._run(
            agent_name,
            agent,
            task,
            progress,
            execution,
            run_id=context.run_id,
            context=context,
            stop=stop,
            task=task,
            stream=stream,
            automatic=automatic,
        )

    async def follow_up(
        self,
        agent_name: str,
        history: bytes,
        text: str,
        context: RunContext,
        progress: Progress | None = None,
        execution: Execution | None = None,
        stop: StopCheck | None = None,
        stream: Stream | None = None,
        automatic: AutomaticDecisions | None = None,
    ) -> Outcome:
        """The next turn of a run's conversation: `history` (a `Finished.history`) and what
        someone said after it, as the model's input; the same tools, approvals and journal."""
        agent = self.registry.get(agent_name)
        if agent is None:
            return Failed(f"No agent named {agent_name!r} is defined any more.")
        try:
            items = json.loads(unpack_state(history))
        except Exception as exc:
            log.warning("cannot read the conversation of %s: %s", context.run_id, exc)
            return Failed("The conversation so far could not be read, so the run cannot go on.")
        return await self._run(
            agent_name,
            agent,
            [*items, {"role": "user", "content": text}],
            progress,
            execution,
            run_id=context.run_id,
            context=context,
            stop=stop,
            stream=stream,
            automatic=automatic,
        )

    async def _run(
        self,
        agent_name: str,
        agent: Agent[Any],
        start_from: str | list[Any] | RunState[Any, Any],
        progress: Progress | None,
        execution: Execution | None,
        *,
        run_id: str,
        context: RunContext | None = None,
        stop: StopCheck | None = None,
        task: str | None = None,
        stream: Stream | None = None,
        automatic: AutomaticDecisions | None = None,
    ) -> Outcome:
        """`Runner.run` under `execution` (so tool calls go through its journal); `task`:
        the run's task, which a checkpoint of this run refers to instead of holding it. With
        `stream`, the run is streamed and `stream` is told each model response's text so far.
        Gated calls that `automatic` decides are decided at their check or where the run stops
        on them, and the run goes on in memory (`bot.engine.automatic`): it pauses only for a
        person, on the calls a person decides."""
        token = CURRENT.set(execution)
        deciding = AtCheck(automatic) if automatic is not None else None
        checking = DECIDING.set(deciding)
        state: RunState[Any, Any] | None = None  # a pause's state, some of its calls decided
        pending: list[int] | None = None  # the calls of the pause left to people
        try:
            while True:
                options: dict[str, Any] = {
                    "context": context,
                    "max_turns": self.max_turns,
                    "run_config": self.run_config(run_id, agent_name),
                    "hooks": _ProgressHooks(progress, stop, deciding),
                }
                result: RunResult | RunResultStreaming
                if stream is None or not self.stream_answers:
                    result = await Runner.run(agent, start_from, **options)
                else:
                    streamed = Runner.run_streamed(agent, start_from, **options)
                    await _relay(streamed, stream)
                    result = streamed
                if not result.interruptions or deciding is None:
                    break
                decided = await self._decided_inside(result, deciding)
                if decided is None:
                    break
                state, pending = decided
                if pending:
                    break  # paused for people: the others are decided in its state
                start_from, context, state = state, None, None  # the state carries the context
        except _StopRequested:
            return Stopped()
        except Exception as exc:
            if cause_of(exc, _StopRequested) is not None:
                return Stopped()
            if cause_of(exc, JournalUnavailable) is not None:
                raise  # no verdict: the job is retried (see JournalUnavailable)
            return self._failure(exc)
        finally:
            DECIDING.reset(checking)
            CURRENT.reset(token)
        return await self._outcome(agent_name, result, task, state, pending)

    @staticmethod
    async def _decided_inside(
        result: RunResult | RunResultStreaming, deciding: AtCheck
    ) -> tuple[RunState[Any, Any], list[int]] | None:
        """The run's state with the calls it stopped on that no person is needed for decided
        (at their check, or now), and the positions of the others (empty: it goes on); None
        when none is decided (it pauses, as it would have). Questions (ask_human) are for
        people, asked nothing."""
        items = result.interruptions
        kept = deciding.taken()
        answers: list[Automatic | None] = [kept.get(str(item.call_id)) for item in items]
        ask = [
            i for i, item in enumerate(items)
            if str(item.call_id) not in kept and not is_question(item)
        ]  # fmt: skip
        if ask:
            decided = await deciding.automatic.decide([describe(items[i], i) for i in ask])
            if len(decided) == len(ask):
                for i, decision in zip(ask, decided, strict=True):
                    answers[i] = decision
        if all(answer is None for answer in answers):
            return None
        state = result.to_state()
        pending = []
        for i, (item, answer) in enumerate(zip(items, answers, strict=True)):
            if answer is None:
                pending.append(i)
            elif answer.approve:
                state.approve(item)
            else:
                state.reject(item, rejection_message=answer.message or None)
        return state, pending

    @staticmethod
    def _failure(exc: Exception) -> Outcome:
        review = cause_of(exc, CallNeedsReview)
        if review is not None:
            return NeedsReview(review.call_id, review.tool)
        log.warning("run failed: %s", type(exc).__name__, exc_info=True)
        return Failed(_describe_error(exc))

    async def resume(
        self,
        agent_name: str,
        checkpoint: Checkpoint,
        decisions: list[Decision],
        progress: Progress | None = None,
        execution: Execution | None = None,
        run_id: str = "",
        stop: StopCheck | None = None,
        task: str | None = None,
        stream: Stream | None = None,
        automatic: AutomaticDecisions | None = None,
    ) -> Outcome:
        """Apply `decisions` to the stored state and run on; `run_id` names the trace group;
        `task`: the run's task, which the checkpoint may refer to (see `TASK_REF`)."""
        agent = self.registry.get(agent_name)
        if agent is None:
            return Failed(
                f"The agent {agent_name!r} that this run paused in is no longer defined, so the "
                "run cannot resume. Restore that agent, or start a new run."
            )
        changed = self._changed_since(agent, agent_name, checkpoint)
        if changed:
            return Failed(
                "The agent definitions this run needs changed since it paused ("
                + "; ".join(changed)
                + "), so it was not resumed: the decisions were made about calls that may no "
                "longer mean the same thing. Restore them, or start a new run."
            )
        try:
            raw = unpack_state(checkpoint.state)
            data = with_task(json.loads(raw), task)
            if may_hold_permanent_decisions(raw):
                data = without_permanent_decisions(data)
            with restoring.restored_from(data):  # parsed just above: JSON's own types
                state = await RunState.from_json(
                    agent, data, context_deserializer=deserialize_context, strict_context=True
                )
        except Exception as exc:
            log.warning("cannot restore state of %s: %s", agent_name, exc, exc_info=True)
            versions = (
                f" It was written by openai-agents {checkpoint.sdk_version}; the bot runs "
                f"{SDK_VERSION}, which cannot read it: run the earlier version to finish it."
                if checkpoint.sdk_version != SDK_VERSION
                else ""
            )
            return Failed(
                "The stored state of this run could not be read, so it was not resumed "
                f"({type(exc).__name__}).{versions} Start a new run."
            )
        by_call = {str(item.call_id): item for item in invocations.pending(state)}
        answers: dict[str, str] = {}  # ask_human calls answered: the tool returns these
        for decision in decisions:
            item = by_call.get(decision.call_id)
            if item is None:
                return Failed(
                    "The stored state does not contain the call that was decided, so the run was "
                    "not resumed. Start a new run."
                )
            if decision.shown is not None and decision.shown != _shown(item):
                return Failed(
                    "A decided call no longer matches what its reviewer was shown (this call "
                    "changed since it was posted), so the run was not resumed. Start a new run."
                )
            if decision.approve:
                state.approve(item)
                if is_question(item):
                    answers[decision.call_id] = decision.message or ""
            else:
                state.reject(item, rejection_message=decision.message or None)
        token = ANSWERS.set(answers)
        try:
            return await self._run(
                agent_name, agent, state, progress, execution, run_id=run_id, stop=stop,
                task=task, stream=stream, automatic=automatic,
            )  # fmt: skip
        finally:
            ANSWERS.reset(token)

    async def _outcome(
        self,
        agent_name: str,
        result: RunResult | RunResultStreaming,
        task: str | None = None,
        state: RunState[Any, Any] | None = None,
        pending: list[int] | None = None,
    ) -> Outcome:
        """What the run ended with; paused, its `state` (`result`'s, unless the run decided
        some of the calls it stopped on: then only those at `pending` wait for people)."""
        if not result.interruptions:
            output = result.final_output
            text = output if isinstance(output, str) else json.dumps(output, default=str, indent=2)
            return Finished(text, _history(result))
        try:
            state_json = (state or result.to_state()).to_json(
                context_serializer=serialize_context, strict_context=True
            )
        except Exception as exc:
            log.warning("cannot serialize paused run: %s", exc, exc_info=True)
            return Failed(
                f"The run paused for approval but its state could not be saved "
                f"({type(exc).__name__}: {redact(str(exc))}). Nothing further was executed."
            )
        state_json = without_task(state_json, task)  # the caller keeps the task: not twice
        blob = pack_state(json.dumps(state_json, separators=(",", ":")).encode())
        needed = [
            (item.agent.name, str(item.name or ""))
            for item in result.interruptions
            if item.agent is not None
        ]
        root = self.registry.get(agent_name)
        matters = what_matters(root, needed) if root is not None else {}
        checkpoint = Checkpoint(
            blob, SDK_VERSION, NEEDS + json.dumps(matters, sort_keys=True, separators=(",", ":"))
        )
        waiting = range(len(result.interruptions)) if pending is None else pending
        items = [result.interruptions[i] for i in waiting]
        approvals = [describe(item, i) for i, item in zip(waiting, items, strict=True)]
        approvals = await explain(result, items, approvals, state_json)
        return Paused(checkpoint, approvals)
