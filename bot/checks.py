"""What `check`, `serve` and `worker` verify before anything starts: every problem at once.

Each problem is one line a person can act on. Nothing here prints a secret: tokens are judged,
never echoed, and a Redis URL is shown without its password.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
from typing import Any, cast
from urllib.parse import urlsplit, urlunsplit

import redis
from agents import ApplyPatchTool, FunctionTool, HostedMCPTool, ShellTool
from pydantic import ValidationError
from redis.cluster import RedisCluster
from redis.sentinel import Sentinel

from bot.config import Settings, env_file
from bot.engine.advisor import load_advisor
from bot.engine.registry import AgentLoadError, AgentRegistry, walk
from bot.service.policy.rules import Policy, PolicyError, load_policy
from bot.store.connection import SENTINEL_SCHEMES, SentinelTarget

PLACEHOLDER_MARKS = ("your", "...", "changeme", "change-me", "replace", "<", ">")
# The ids of policy.example.yml and the policy reference (docs/policy.md).
EXAMPLE_IDS = frozenset({"C0123ABC", "U111", "U222", "S0456DEF", "T0123ABC", "E0123ABC"})
TOKEN_PREFIXES = {"SLACK_BOT_TOKEN": "xoxb-", "SLACK_APP_TOKEN": "xapp-"}
REDIS_SCHEMES = ("redis", "rediss", "unix", *SENTINEL_SCHEMES)
PING_SECONDS = 2.0


def load_settings_problems() -> tuple[Settings | None, list[str]]:
    """The settings, with each badly typed variable reported and replaced by its default so
    that the other checks still run; None only if even that fails."""
    try:
        return Settings(_env_file=env_file()), []  # type: ignore[call-arg]
    except ValidationError as exc:
        errors = exc.errors()
    problems = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in errors]
    by_alias = {f.alias or name: name for name, f in Settings.model_fields.items()}
    defaults: dict[str, Any] = {}
    for error in errors:
        name = by_alias.get(str(error["loc"][0])) if error["loc"] else None
        if name is not None:
            defaults[name] = Settings.model_fields[name].get_default(call_default_factory=True)
    try:
        return Settings(_env_file=env_file(), **defaults), problems  # type: ignore[call-arg]
    except ValidationError:
        return None, problems


def looks_like_placeholder(value: str) -> bool:
    lowered = value.strip().lower()
    return (
        not lowered
        or lowered in ("xoxb-", "xapp-", "sk-")
        or any(mark in lowered for mark in PLACEHOLDER_MARKS)
    )


def _secret(value: Any) -> str | None:
    return None if value is None else str(value.get_secret_value())


def setting_problems(settings: Settings) -> list[str]:
    """Placeholders copied from `.env.example` or the docs, wrong token kinds, bad URLs."""
    found: list[str] = []
    values = {
        "SLACK_BOT_TOKEN": _secret(settings.slack_bot_token),
        "SLACK_CLIENT_SECRET": _secret(settings.slack_client_secret),
        "SLACK_SIGNING_SECRET": _secret(settings.slack_signing_secret),
        "SLACK_APP_TOKEN": _secret(settings.slack_app_token),
        "OPENAI_API_KEY": os.environ.get("OPENAI_API_KEY"),
    }
    for name, value in values.items():
        if value is None:
            continue
        if looks_like_placeholder(value):
            found.append(f"{name} still holds a placeholder: set the real value.")
        elif name in TOKEN_PREFIXES and not value.startswith(TOKEN_PREFIXES[name]):
            found.append(f"{name} should start with {TOKEN_PREFIXES[name]} (is it another token?)")
    api = urlsplit(settings.slack_api_url)
    if api.scheme not in ("http", "https") or not api.hostname:
        found.append(
            f"SLACK_API_URL={settings.slack_api_url!r} must be an http(s) URL such as "
            "https://slack.com/api/ (GovSlack: https://slack-gov.com/api/)."
        )
    elif looks_like_placeholder(api.netloc):
        found.append(f"SLACK_API_URL={settings.slack_api_url!r} still holds a placeholder host.")
    return found


def redacted(url: str) -> str:
    """`url` without its password."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def redis_problems(settings: Settings) -> list[str]:
    """REDIS_URL is a Redis URL that answers PING within a moment, or the bot can start its own."""
    url = settings.redis_url
    if url is None:
        if shutil.which("redis-server") is None:
            return [
                "REDIS_URL is not set and no `redis-server` is on PATH. Either install Redis "
                "(Debian/Ubuntu: `apt-get install redis-server`; macOS: `brew install redis`) so "
                "the bot can start its own, or set REDIS_URL=redis://host:6379/0."
            ]
        return []
    shown = redacted(url)
    if urlsplit(url).scheme not in REDIS_SCHEMES or looks_like_placeholder(urlsplit(url).netloc):
        return [
            f"REDIS_URL={shown!r} is not a Redis URL: use redis://host:6379/0 (TLS: rediss://, "
            "a socket: unix:///path, Sentinel: redis+sentinel://host:26379/mymaster), or leave "
            "it unset to let the bot run its own redis-server."
        ]
    try:
        client = _sync_client(url)
    except ValueError as exc:
        return [f"REDIS_URL={shown!r} cannot be used: {exc}"]
    try:
        client.ping()
    except redis.AuthenticationError:
        return [f"REDIS_URL={shown!r}: Redis refused the credentials in the URL."]
    except (redis.RedisError, OSError) as exc:
        return [
            f"REDIS_URL={shown!r}: Redis does not answer ({type(exc).__name__}: {exc}). Start it, "
            "fix the URL, or leave REDIS_URL unset to let the bot run its own redis-server."
        ]
    finally:
        client.close()
    return []


def _sync_client(url: str) -> redis.Redis:
    """A short-timeout client for `url`; for a Sentinel URL, the primary the sentinels name."""
    if urlsplit(url).scheme in SENTINEL_SCHEMES:
        target = SentinelTarget.parse(url)
        sentinel = Sentinel(  # type: ignore[no-untyped-call]
            target.sentinels, socket_connect_timeout=PING_SECONDS, socket_timeout=PING_SECONDS
        )
        return cast(
            redis.Redis,
            sentinel.master_for(  # type: ignore[no-untyped-call]
                target.service,
                db=target.db,
                username=target.username,
                password=target.password,
                ssl=target.tls,
                socket_connect_timeout=PING_SECONDS,
                socket_timeout=PING_SECONDS,
            ),
        )
    return redis.Redis.from_url(
        url, socket_connect_timeout=PING_SECONDS, socket_timeout=PING_SECONDS
    )


def redis_survey(url: str) -> str:
    """What `approval-bot check` found at `url`: standalone or cluster (and how many primaries
    and replicas), the version, and the settings that matter to the bot on every primary:
    `maxmemory-policy` (anything but `noeviction` may drop pending approvals) and persistence
    (without AOF or RDB a restart of Redis loses every paused run)."""
    kind = "standalone"
    plain = _sync_client(url)
    try:
        if urlsplit(url).scheme in SENTINEL_SCHEMES:
            kind = "sentinel"
        elif str(plain.info("cluster").get("cluster_enabled", 0)) == "1":
            kind = "cluster"
    except redis.ResponseError:
        pass
    finally:
        plain.close()
    primaries: list[dict[str, Any]]  # per primary: its INFO server/persistence and CONFIG
    if kind == "cluster":
        cluster = RedisCluster.from_url(
            url, socket_connect_timeout=PING_SECONDS, socket_timeout=PING_SECONDS
        )
        try:
            where = RedisCluster.PRIMARIES
            parts: list[Any] = [
                cluster.info("server", target_nodes=where),
                cluster.info("persistence", target_nodes=where),
                cluster.config_get("maxmemory-policy", target_nodes=where),
                cluster.config_get("save", target_nodes=where),
            ]
            replicas = len(cluster.get_replicas())  # type: ignore[no-untyped-call]
        finally:
            cluster.close()
        primaries = [{k: v for part in parts for k, v in part[node].items()} for node in parts[0]]
        head = f"Redis Cluster of {len(primaries)} primaries and {replicas} replica(s)"
    else:
        client = _sync_client(url)
        try:
            one: dict[str, Any] = {**client.info("server"), **client.info("persistence")}
            one.update(_config(client, "maxmemory-policy") | _config(client, "save"))
            replicas = int(client.info("replication").get("connected_slaves", 0))
        finally:
            client.close()
        primaries = [one]
        head = "standalone Redis"
        if kind == "sentinel":
            target = SentinelTarget.parse(url)
            head = (
                f"Redis via Sentinel ({len(target.sentinels)} sentinel(s) given, service "
                f"{target.service}): a primary with {replicas} replica(s)"
            )

    def each(name: str) -> list[str]:
        return sorted({str(node.get(name, "?")) for node in primaries})

    versions, policies, aof, saves = (
        each("redis_version"),
        each("maxmemory-policy"),
        each("aof_enabled"),
        each("save"),
    )
    kept = "AOF on" if aof == ["1"] else "AOF off" if aof == ["0"] else "AOF mixed"
    kept += "; RDB saves off" if saves == [""] else f"; RDB saves {', '.join(saves)}"
    if aof != ["1"] and saves == [""]:
        kept += " (a restart of Redis would lose every paused run)"
    policy = ", ".join(policies)
    if policies != ["noeviction"]:
        policy += " (set noeviction: others may drop pending approvals)"
    return f"{head}, version {', '.join(versions)}; maxmemory-policy {policy}; persistence: {kept}."


def _config(client: redis.Redis, name: str) -> dict[str, str]:
    """`CONFIG GET name`, empty when CONFIG is not allowed (managed Redis)."""
    try:
        return {str(k): str(v) for k, v in dict(client.config_get(name)).items()}
    except redis.ResponseError:
        return {}


def policy_placeholders(policy: Policy) -> list[str]:
    """Ids copied from policy.example.yml: the bot would serve a channel nobody has."""
    found: set[str] = set()

    def visit(value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                visit(key)
                visit(item)
        elif isinstance(value, list | tuple | set):
            for item in value:
                visit(item)
        elif isinstance(value, str) and value in EXAMPLE_IDS:
            found.add(value)

    visit(policy.model_dump())
    if not found:
        return []
    return [
        f"the policy still has the example ids {', '.join(sorted(found))}: put your own channel "
        "and people's ids in it (a channel's id is at the bottom of its details; a person's under "
        "Profile > ... > Copy member ID)."
    ]


def edit_problems(policy: Policy, registry: AgentRegistry) -> list[str]:
    """`allow_edit: true` on a rule that governs no tool an Edit can be offered for: a function
    tool (checked against its JSON schema), a shell or apply_patch tool (the commands, the
    diff), a hosted MCP server's tools (`<server label>/<tool>`: JSON arguments). Local MCP
    servers' tools are not editable: their calls run through the SDK's MCP tool wrappers, whose
    schemas the bot does not read."""
    names: set[str] = set()
    labels: set[str] = set()
    for root in registry.agents.values():
        for agent in walk(root):
            for tool in agent.tools:
                if isinstance(tool, FunctionTool | ShellTool | ApplyPatchTool):
                    names.add(str(tool.name))
                elif isinstance(tool, HostedMCPTool):
                    labels.add(str(tool.tool_config.get("server_label") or ""))

    def editable(match: str) -> bool:
        if any(fnmatch.fnmatchcase(n, match) for n in names):
            return True
        server, slash, _ = match.partition("/")
        return any(
            fnmatch.fnmatchcase(label, server if slash else match) for label in labels if label
        )

    sections = [("", policy)] + [(f"workspaces.{t}.", p) for t, p in policy.workspaces.items()]
    return [
        f"policy: {where}tools[{index}] ({rule.match}): allow_edit: true, but it matches no "
        "function, shell, apply_patch or hosted MCP tool of the agents; Edit is offered only "
        "for those (local MCP servers' tools cannot be edited)."
        for where, section in sections
        for index, rule in enumerate(section.tools)
        if rule.allow_edit and not editable(rule.match)
    ]


def advice_problems(policy: Policy, settings: Settings) -> list[str]:
    """The advisor named but not loadable, or rules on its advice with none named (its advice
    never comes: each call such a rule could govern goes to a person, under the strictest
    rule that could apply)."""
    if settings.advisor:
        try:
            load_advisor(settings.advisor)
        except AgentLoadError as exc:
            return [f"APPROVAL_BOT_ADVISOR: {exc}"]
        return []
    sections = [("", policy)] + [(f"workspaces.{t}.", p) for t, p in policy.workspaces.items()]
    return [
        f"policy: {where}tools[{index}] ({rule.match}): when: advice.risk, but "
        "APPROVAL_BOT_ADVISOR is not set: no advice ever comes, so every call this rule could "
        "govern waits for a person (docs/advisor.md)."
        for where, section in sections
        for index, rule in enumerate(section.tools)
        if rule.on_advice and rule.mode != "shadow"
    ]


def served_problems(policy: Policy, settings: Settings) -> list[str]:
    """Installed through OAuth, a policy that names no workspace serves nobody: anyone can
    install a distributed app, so being installed lets no one in (`Authorizer.served`)."""
    ws = policy.workspace
    if not settings.distributed or policy.workspaces or ws.team_id or ws.enterprise_id:
        return []
    return [
        "policy: names no workspace, and the bot is installed through OAuth (SLACK_CLIENT_ID): "
        "anyone can install it, so it serves only the workspaces the policy names. Put each "
        "workspace's channels in a `workspaces:` section keyed by its team id, or name one "
        "workspace (`workspace: {team_id: T...}`) or a Grid org (`workspace: {enterprise_id: "
        "E...}`). Until then the bot does not start (a reloaded policy that names none has "
        "every request refused): docs/workspaces.md."
    ]


def collect_problems(
    *, socket_mode: bool, slack_transport: bool = True
) -> tuple[Settings | None, list[str]]:
    """Every configuration, Redis, agent and policy problem found, each as one actionable line.
    A worker posts to Slack but receives nothing from it: it needs no signing secret."""
    settings, problems = load_settings_problems()
    if settings is None:
        return None, problems
    found = settings.problems(socket_mode=socket_mode) + setting_problems(settings)
    if not slack_transport:
        found = [p for p in found if "SLACK_SIGNING_SECRET" not in p]
    problems += found
    problems += redis_problems(settings)
    policy: Policy | None = None
    try:
        policy = load_policy(settings.policy_file)
        problems += policy_placeholders(policy)
        problems += advice_problems(policy, settings)
        problems += served_problems(policy, settings)
    except PolicyError as exc:
        problems += exc.problems
    try:
        registry = AgentRegistry.load(settings.agents)
    except AgentLoadError as exc:
        problems.append(f"APPROVAL_BOT_AGENTS: {exc}")
    else:
        if policy is not None:
            problems += edit_problems(policy, registry)
        needing = registry.agents_needing_openai_key()
        if needing:
            problems.append(
                f"OPENAI_API_KEY is not set, and agent(s) {', '.join(needing)} use an OpenAI "
                "model (a model name, or none). Set OPENAI_API_KEY (OPENAI_BASE_URL for a "
                "compatible server), or give those agents a Model instance."
            )
    return settings, problems
