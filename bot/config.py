"""Process configuration, read once from the environment (and an optional `.env` file).

Secrets are `SecretStr` so that printing or logging the settings never shows them.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path
from typing import Literal
from urllib.parse import urlparse

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from bot.weekly import parse_schedule

ENV_FILE_VARIABLE = "APPROVAL_BOT_ENV_FILE"
DEFAULT_REJECTION_TEXT = (
    "A human reviewer rejected this tool call. Do not retry it; "
    "continue without it or explain what you could not do."
)


class Settings(BaseSettings):
    """Everything the bot reads from its environment."""

    model_config = SettingsConfigDict(env_file=".env", extra="ignore", populate_by_name=True)

    slack_bot_token: SecretStr | None = Field(default=None, alias="SLACK_BOT_TOKEN")
    slack_signing_secret: SecretStr | None = Field(default=None, alias="SLACK_SIGNING_SECRET")
    slack_app_token: SecretStr | None = Field(default=None, alias="SLACK_APP_TOKEN")
    slack_api_url: str = Field(default="https://slack.com/api/", alias="SLACK_API_URL")
    # OAuth distribution (many workspaces): set the app's client id and secret instead of
    # SLACK_BOT_TOKEN; each workspace installs the app at /slack/install and its token is kept
    # in Redis, encrypted with the first of APPROVAL_BOT_TOKEN_KEYS (comma-separated Fernet
    # keys; the others still decrypt, for rotating the key).
    slack_client_id: str | None = Field(default=None, alias="SLACK_CLIENT_ID")
    slack_client_secret: SecretStr | None = Field(default=None, alias="SLACK_CLIENT_SECRET")
    token_keys: SecretStr | None = Field(default=None, alias="APPROVAL_BOT_TOKEN_KEYS")
    # Where /slack/install sends the installer (default: Slack's page on the host of
    # SLACK_API_URL, e.g. https://slack.com/oauth/v2/authorize), and the redirect URL to name
    # there (default: the one the app's settings list).
    slack_authorize_url: str | None = Field(default=None, alias="APPROVAL_BOT_SLACK_AUTHORIZE_URL")
    slack_redirect_uri: str | None = Field(default=None, alias="SLACK_REDIRECT_URI")
    # With Slack's token rotation on: a workspace's token is refreshed this long before expiry.
    token_rotate_minutes: int = Field(
        default=120, alias="APPROVAL_BOT_TOKEN_ROTATE_MINUTES", ge=1, le=600
    )

    agents: str = Field(default="bot.examples.agents:agents", alias="APPROVAL_BOT_AGENTS")
    policy_file: Path = Field(default=Path("policy.yml"), alias="APPROVAL_BOT_POLICY")
    rejection_text: str = Field(
        default=DEFAULT_REJECTION_TEXT, alias="APPROVAL_BOT_REJECTION_TEXT", min_length=1
    )

    redis_url: str | None = Field(default=None, alias="REDIS_URL")
    redis_max_connections: int = Field(default=64, alias="APPROVAL_BOT_REDIS_MAX_CONNECTIONS", ge=4)
    # What REDIS_URL names: `auto` asks the server (INFO cluster); `standalone` or `cluster`
    # say it (a managed service that hides INFO).
    redis_mode: Literal["auto", "standalone", "cluster"] = Field(
        default="auto", alias="APPROVAL_BOT_REDIS_MODE"
    )
    # Each state transition answers only once this many replicas hold it (WAIT), so a
    # failover to one of them loses no acknowledged decision; 0: asynchronous replication.
    redis_wait_replicas: int = Field(default=0, alias="APPROVAL_BOT_REDIS_WAIT_REPLICAS", ge=0)
    redis_wait_ms: int = Field(default=1000, alias="APPROVAL_BOT_REDIS_WAIT_MS", ge=1)
    data_dir: Path = Field(default=Path(".approval-bot"), alias="APPROVAL_BOT_DATA_DIR")
    run_retention_days: int = Field(default=30, alias="APPROVAL_BOT_RUN_RETENTION_DAYS", ge=1)
    audit_retention_days: int = Field(default=400, alias="APPROVAL_BOT_AUDIT_RETENTION_DAYS", ge=0)
    job_lease_seconds: float = Field(default=30.0, alias="APPROVAL_BOT_JOB_LEASE_SECONDS", gt=0)
    worker_concurrency: int = Field(default=8, alias="APPROVAL_BOT_WORKER_CONCURRENCY", ge=1)
    max_turns: int = Field(default=20, alias="APPROVAL_BOT_MAX_TURNS", ge=1)
    # Answers shown while the model writes them (runs streamed). Off: each answer is posted
    # once, whole (fewer Slack calls; and the SDK's ScriptedModel cannot stream every item
    # kind, e.g. MCP approval requests and shell calls, so the test harness runs unstreamed).
    stream_answers: bool = Field(default=True, alias="APPROVAL_BOT_STREAM_ANSWERS")
    # Slack's agent surface: `auto` streams answers with Slack's chat streaming
    # (chat.startStream/appendStream/stopStream) and sets the run thread's status line
    # (assistant.threads.setStatus) where the workspace offers them, else posts the answer so
    # far and updates it; `off`: neither.
    slack_streaming: Literal["auto", "off"] = Field(
        default="auto", alias="APPROVAL_BOT_SLACK_STREAMING"
    )
    slack_timeout_seconds: int = Field(default=10, alias="APPROVAL_BOT_SLACK_TIMEOUT_SECONDS", ge=1)
    # The longest Slack's HTTP request waits for its answer, whatever Redis or Slack do (Slack
    # gives up at three seconds): work not done by then goes on and its result is told privately.
    ack_budget_seconds: float = Field(
        default=1.5, alias="APPROVAL_BOT_ACK_BUDGET_SECONDS", gt=0, le=2.5
    )
    # Acks first: work that can wait (a click's decision, the worker's next jobs, the Slack
    # messages' next delivery) waits for a moment with no Slack request in flight, at most this
    # long (0: it never waits). Below the ack budget, so a click is never told "still working"
    # only because its decision waited.
    lull_max_seconds: float = Field(default=0.5, alias="APPROVAL_BOT_LULL_MAX_SECONDS", ge=0)
    # Slack allows about one post per second per channel and ~50 updates a minute per workspace.
    slack_posts_per_second: float = Field(
        default=1.0, alias="APPROVAL_BOT_SLACK_POSTS_PER_SECOND", gt=0
    )
    slack_updates_per_minute: float = Field(
        default=50.0, alias="APPROVAL_BOT_SLACK_UPDATES_PER_MINUTE", gt=0
    )

    # Windows and polls. Production wants the defaults; they are settings so that tests (the
    # test kit's `BotHarness` and the bots tests start as processes) need not wait them out.
    # A run message update waits this long after its first change, so the changes of a resume
    # (status, progress) become one `chat.update`.
    projector_coalesce_seconds: float = Field(
        default=1.0, alias="APPROVAL_BOT_PROJECTOR_COALESCE_SECONDS", ge=0
    )
    # While the projector is busy (8 or more runs with messages due: a
    # burst of decisions), a resuming or running run's message waits for the run to end, up to
    # this long, so that a burst costs no more updates per decision than a quiet decision.
    projector_busy_coalesce_seconds: float = Field(
        default=60.0, alias="APPROVAL_BOT_PROJECTOR_BUSY_COALESCE_SECONDS", ge=0
    )
    # A card whose decision resumed the run waits this long for the resume, so that a quick
    # resume's card, result and run message go out in one pass.
    projector_gather_seconds: float = Field(
        default=0.25, alias="APPROVAL_BOT_PROJECTOR_GATHER_SECONDS", ge=0
    )
    # Between looks at the outbox index when nothing in this process woke the projector (the
    # delay before another process's change is shown).
    projector_poll_seconds: float = Field(
        default=0.05, alias="APPROVAL_BOT_PROJECTOR_POLL_SECONDS", gt=0
    )
    # ... while those looks find another process's work; else its looks (and the App Home
    # publisher's) grow apart up to this (an idle look costs CPU): another process's change is
    # then shown within it (every process's own changes wake its projector and publisher at
    # once, and what it made due for later wakes them then: a Slack request does not make the
    # looks frequent, #32).
    projector_idle_poll_seconds: float = Field(
        default=0.5, alias="APPROVAL_BOT_PROJECTOR_IDLE_POLL_SECONDS", gt=0
    )
    # A progress line makes its run message due this much later (coalesced like a change).
    progress_due_seconds: float = Field(
        default=1.0, alias="APPROVAL_BOT_PROGRESS_DUE_SECONDS", ge=0
    )
    # The policy file is looked at (stat) at most this often: a change takes effect within it.
    policy_check_seconds: float = Field(
        default=1.0, alias="APPROVAL_BOT_POLICY_CHECK_SECONDS", ge=0
    )
    # Between looks at the App Home index while they find Homes another process made due.
    home_poll_seconds: float = Field(default=0.1, alias="APPROVAL_BOT_HOME_POLL_SECONDS", gt=0)
    # The timer loop looks for due timers at least this often (and wakes for the earliest one
    # it knows of): the delay before a timer set by another process, or moved, fires.
    timers_poll_seconds: float = Field(default=1.0, alias="APPROVAL_BOT_TIMERS_POLL_SECONDS", gt=0)
    # While Slack refuses the bot token (auth.test), it is asked again this often.
    slack_auth_retry_seconds: float = Field(
        default=5.0, alias="APPROVAL_BOT_SLACK_AUTH_RETRY_SECONDS", gt=0
    )

    # What one person or one channel may cost (0: no limit).
    user_starts_per_minute: float = Field(
        default=10, alias="APPROVAL_BOT_USER_STARTS_PER_MINUTE", ge=0
    )
    user_start_burst: int = Field(default=5, alias="APPROVAL_BOT_USER_START_BURST", ge=0)
    channel_starts_per_minute: float = Field(
        default=30, alias="APPROVAL_BOT_CHANNEL_STARTS_PER_MINUTE", ge=0
    )
    channel_start_burst: int = Field(default=10, alias="APPROVAL_BOT_CHANNEL_START_BURST", ge=0)
    user_open_runs: int = Field(default=10, alias="APPROVAL_BOT_USER_OPEN_RUNS", ge=0)
    channel_open_runs: int = Field(default=50, alias="APPROVAL_BOT_CHANNEL_OPEN_RUNS", ge=0)
    max_task_chars: int = Field(default=4000, alias="APPROVAL_BOT_MAX_TASK_CHARS", ge=0)
    user_lists_per_minute: int = Field(default=10, alias="APPROVAL_BOT_USER_LISTS_PER_MINUTE", ge=0)

    # People: the requester's message about their run's outcomes (a direct message, an
    # ephemeral in the run's channel, or none), sent this many seconds after the first outcome
    # not yet told (a burst is one message); the App Home is published at most this often.
    requester_notice: Literal["dm", "ephemeral", "off"] = Field(
        default="dm", alias="APPROVAL_BOT_REQUESTER_NOTICE"
    )
    requester_notice_seconds: float = Field(
        default=3.0, alias="APPROVAL_BOT_REQUESTER_NOTICE_SECONDS", ge=0
    )
    home_refresh_seconds: float = Field(
        default=5.0, alias="APPROVAL_BOT_HOME_REFRESH_SECONDS", ge=0
    )

    # Whether approvals are real (docs/review.md): a card of N characters takes N / this many
    # seconds to read (a decision in less is counted as made faster than its card can be
    # read); an approver whose approvals each come within RUBBER_STAMP_SECONDS, STREAK times in
    # a row, is told privately and the alarm is in the channel's report (STREAK 0: never).
    review_read_chars_per_second: float = Field(
        default=500.0, alias="APPROVAL_BOT_REVIEW_READ_CHARS_PER_SECOND", gt=0
    )
    rubber_stamp_seconds: float = Field(
        default=5.0, alias="APPROVAL_BOT_RUBBER_STAMP_SECONDS", ge=0
    )
    rubber_stamp_streak: int = Field(default=30, alias="APPROVAL_BOT_RUBBER_STAMP_STREAK", ge=0)
    # A reaction on a card decides it (#33): :white_check_mark: approves, :x: rejects, as a
    # click of the person who reacted. Off by default: it needs the `reactions:read` scope and
    # the `reaction_added` event in the app's manifest (docs/slack-app.md).
    reactions: bool = Field(default=False, alias="APPROVAL_BOT_REACTIONS")
    # The weekly review digest to each channel (bot/service/oversight/review_digest.py): off, weekly
    # (Monday 09:00 UTC) or a day and a UTC time (fri 16:30).
    review_digest: str = Field(default="off", alias="APPROVAL_BOT_REVIEW_DIGEST")

    # A second opinion on each card (docs/review.md): an Agents SDK agent
    # (`package.module:attr`) asked about each call once its card is posted; its advice is on
    # the card and in the audit, and the policy may route on it (`advice.risk`). No answer
    # within TIMEOUT seconds: no advice. CONCURRENCY: calls asked about at once per process.
    advisor: str | None = Field(default=None, alias="APPROVAL_BOT_ADVISOR", min_length=1)
    advisor_timeout_seconds: float = Field(
        default=30.0, alias="APPROVAL_BOT_ADVISOR_TIMEOUT_SECONDS", gt=0
    )
    advisor_concurrency: int = Field(default=4, alias="APPROVAL_BOT_ADVISOR_CONCURRENCY", ge=1)

    # Operations: shutdown budget, logs, the metrics/health port of worker and Socket Mode.
    drain_seconds: float = Field(default=20.0, alias="APPROVAL_BOT_DRAIN_SECONDS", gt=0)
    # `serve --http` in this many processes on one socket, each a whole bot (0: one per core,
    # within the CPU quota, at most 4; `--processes` says it instead): one process does at most
    # one core of work, and a burst of decisions needs every core (#32, docs/benchmarks.md).
    processes: int = Field(default=0, alias="APPROVAL_BOT_PROCESSES", ge=0)
    log_level: str = Field(default="INFO", alias="APPROVAL_BOT_LOG_LEVEL")
    log_format: Literal["text", "json"] = Field(default="text", alias="APPROVAL_BOT_LOG_FORMAT")
    metrics_host: str = Field(default="127.0.0.1", alias="APPROVAL_BOT_METRICS_HOST")
    metrics_port: int = Field(default=9090, alias="APPROVAL_BOT_METRICS_PORT", ge=0, le=65535)
    # The event loop: asyncio's own, or uvloop (the `uvloop` extra). Measured (#32,
    # docs/benchmarks.md), uvloop cost more CPU per decision in bursts: asyncio stays the default.
    event_loop: Literal["asyncio", "uvloop"] = Field(
        default="asyncio", alias="APPROVAL_BOT_EVENT_LOOP"
    )

    # Decision webhooks: every audit entry POSTed, signed, to this URL (unset: none). A
    # receiver's failures are retried with backoff from `retry` up to `retry_max` seconds; an
    # entry still undelivered after `max_age_hours` is skipped (and that skip audited).
    webhook_url: str | None = Field(default=None, alias="APPROVAL_BOT_WEBHOOK_URL")
    webhook_secret: SecretStr | None = Field(default=None, alias="APPROVAL_BOT_WEBHOOK_SECRET")
    webhook_timeout_seconds: float = Field(
        default=10.0, alias="APPROVAL_BOT_WEBHOOK_TIMEOUT_SECONDS", gt=0
    )
    webhook_retry_seconds: float = Field(
        default=1.0, alias="APPROVAL_BOT_WEBHOOK_RETRY_SECONDS", gt=0
    )
    webhook_retry_max_seconds: float = Field(
        default=300.0, alias="APPROVAL_BOT_WEBHOOK_RETRY_MAX_SECONDS", gt=0
    )
    webhook_max_age_hours: float = Field(
        default=72.0, alias="APPROVAL_BOT_WEBHOOK_MAX_AGE_HOURS", gt=0
    )
    # Free text (what a person or the agent wrote) leaves as its length and a keyed digest
    # only, unless this is set: then as it is, with credentials masked (`bot.webhooks`).
    webhook_free_text: bool = Field(default=False, alias="APPROVAL_BOT_WEBHOOK_FREE_TEXT")

    # Tracing of agent runs by the Agents SDK: off unless asked for.
    tracing: Literal["off", "on"] = Field(default="off", alias="APPROVAL_BOT_TRACING")
    trace_sensitive_data: bool | None = Field(
        default=None, alias="APPROVAL_BOT_TRACE_SENSITIVE_DATA"
    )
    tracing_api_key: SecretStr | None = Field(default=None, alias="APPROVAL_BOT_TRACING_API_KEY")
    # The OpenAI client reads these from the process environment; `.env` is honoured too
    # (`export_openai`, before anything builds a client).
    openai_api_key: SecretStr | None = Field(default=None, alias="OPENAI_API_KEY")
    openai_base_url: str | None = Field(default=None, alias="OPENAI_BASE_URL")

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        level = value.strip().upper()
        if not isinstance(logging.getLevelName(level), int):
            raise ValueError("use DEBUG, INFO, WARNING, ERROR or CRITICAL")
        return level

    @field_validator("review_digest")
    @classmethod
    def _weekly(cls, value: str) -> str:
        schedule = parse_schedule(value)
        return str(schedule) if schedule is not None else "off"

    @field_validator("webhook_url")
    @classmethod
    def _no_empty_url(cls, value: str | None) -> str | None:
        return value.strip() or None if value is not None else None

    @field_validator("slack_api_url")
    @classmethod
    def _trailing_slash(cls, value: str) -> str:
        # slack_sdk joins base_url and method names by plain concatenation.
        return value if value.endswith("/") else value + "/"

    @model_validator(mode="after")
    def _lull_within_budget(self) -> Settings:
        """The default lull fits any ack budget (one set explicitly is checked by `problems`)."""
        if "lull_max_seconds" not in self.model_fields_set:
            self.lull_max_seconds = min(self.lull_max_seconds, self.ack_budget_seconds / 3)
        return self

    @property
    def distributed(self) -> bool:
        """OAuth distribution: installed by many workspaces, a token for each."""
        return self.slack_client_id is not None or self.slack_client_secret is not None

    def authorize_url(self) -> str:
        """Slack's install page, on the host the Web API is on (GovSlack: slack-gov.com)."""
        if self.slack_authorize_url:
            return self.slack_authorize_url
        return self.slack_api_url.removesuffix("/").removesuffix("/api") + "/oauth/v2/authorize"

    def token_key_list(self) -> list[str]:
        text = self.token_keys.get_secret_value() if self.token_keys else ""
        return [k.strip() for k in text.split(",") if k.strip()]

    def problems(self, *, socket_mode: bool) -> list[str]:
        """Everything missing for the chosen transport, in words a person can act on."""
        found: list[str] = []
        if self.distributed:
            found += self.distribution_problems(socket_mode=socket_mode)
        elif self.slack_bot_token is None:
            found.append(
                "SLACK_BOT_TOKEN is not set (the app's Bot User OAuth Token, xoxb-...); or, to "
                "serve many workspaces, set SLACK_CLIENT_ID and SLACK_CLIENT_SECRET."
            )
        if socket_mode:
            if self.slack_app_token is None:
                found.append(
                    "SLACK_APP_TOKEN is not set: Socket Mode needs an app-level token (xapp-...) "
                    "with the connections:write scope."
                )
        elif self.slack_signing_secret is None:
            found.append(
                "SLACK_SIGNING_SECRET is not set: HTTP mode needs it to verify Slack's requests "
                "(Basic Information > App Credentials)."
            )
        if self.lull_max_seconds >= self.ack_budget_seconds:
            found.append(
                f"APPROVAL_BOT_LULL_MAX_SECONDS={self.lull_max_seconds:g} must be below "
                f"APPROVAL_BOT_ACK_BUDGET_SECONDS ({self.ack_budget_seconds:g}): a click's "
                "decision would wait past the moment its clicker is told it is still working."
            )
        found += self.tracing_problems()
        found += self.webhook_problems()
        if self.event_loop == "uvloop" and importlib.util.find_spec("uvloop") is None:
            found.append(
                "APPROVAL_BOT_EVENT_LOOP=uvloop, but uvloop is not installed: install the "
                "bot with its `uvloop` extra (pip install 'slack-approval-bot[uvloop]'), or "
                "leave the setting unset."
            )
        return found

    def webhook_problems(self) -> list[str]:
        """A webhook needs a secret to sign with, an http(s) URL, and a bound on its backlog
        within the audit trail's retention (what is skipped must still be in the trail)."""
        if self.webhook_url is None:
            return []
        found: list[str] = []
        url = urlparse(self.webhook_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            found.append("APPROVAL_BOT_WEBHOOK_URL must be an http:// or https:// URL with a host.")
        secret = self.webhook_secret.get_secret_value() if self.webhook_secret else ""
        if len(secret) < 16:
            found.append(
                "APPROVAL_BOT_WEBHOOK_SECRET must be set, at least 16 characters, when "
                "APPROVAL_BOT_WEBHOOK_URL is: every event is signed with it "
                "(e.g. `openssl rand -hex 32`)."
            )
        days = self.audit_retention_days
        if days > 0 and self.webhook_max_age_hours > days * 24:
            found.append(
                f"APPROVAL_BOT_WEBHOOK_MAX_AGE_HOURS={self.webhook_max_age_hours:g} is longer than "
                f"APPROVAL_BOT_AUDIT_RETENTION_DAYS ({days}): undelivered entries would be trimmed "
                "from the audit trail before the webhook gives up on them."
            )
        return found

    def distribution_problems(self, *, socket_mode: bool) -> list[str]:
        """OAuth distribution: both credentials, a token key, HTTP mode, no fixed token."""
        from bot.store.installs.installations import TokenCipher, TokenKeyError

        found: list[str] = []
        if self.slack_client_id is None or self.slack_client_secret is None:
            found.append(
                "OAuth distribution needs both SLACK_CLIENT_ID and SLACK_CLIENT_SECRET (Basic "
                "Information > App Credentials); one of them is not set."
            )
        if self.slack_bot_token is not None:
            found.append(
                "SLACK_BOT_TOKEN and SLACK_CLIENT_ID are both set: one workspace's fixed token, "
                "or each installed workspace's own (OAuth). Unset the one you do not mean."
            )
        if socket_mode:
            found.append(
                "OAuth distribution needs HTTP mode (Slack redirects installers to "
                "/slack/oauth_redirect); Socket Mode serves one workspace with SLACK_BOT_TOKEN."
            )
        try:
            TokenCipher(self.token_key_list())
        except TokenKeyError as exc:
            found.append(str(exc))
        return found

    def tracing_problems(self) -> list[str]:
        """Tracing on with the SDK's exporter sends OPENAI_API_KEY to OpenAI's trace ingest;
        when the models are served elsewhere that key belongs to another service."""
        host = urlparse(self.openai_base_url or "").hostname or "api.openai.com"
        if self.tracing == "on" and self.tracing_api_key is None and host != "api.openai.com":
            return [
                f"APPROVAL_BOT_TRACING=on exports traces to OpenAI, but OPENAI_BASE_URL points "
                f"at {host}: the SDK would send that service's key (OPENAI_API_KEY) to OpenAI. "
                "Set APPROVAL_BOT_TRACING_API_KEY to an OpenAI key for traces, or leave "
                "tracing off."
            ]
        return []


def env_file() -> str | None:
    """The `.env` file to read: `.env` in the working directory unless APPROVAL_BOT_ENV_FILE
    names another; empty means none (tests set it, so a developer's `.env` never leaks in)."""
    return os.environ.get(ENV_FILE_VARIABLE, ".env") or None


def export_openai(settings: Settings) -> None:
    """Put OPENAI_API_KEY and OPENAI_BASE_URL, when only `.env` sets them, into the process
    environment, where the Agents SDK and the OpenAI client look (a variable already set in
    the environment wins, as it does for every setting)."""
    key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else None
    for name, value in (("OPENAI_API_KEY", key), ("OPENAI_BASE_URL", settings.openai_base_url)):
        if value and name not in os.environ:
            os.environ[name] = value


def load_settings() -> Settings:
    """Settings from the environment and the `.env` file `env_file()` names."""
    return Settings(_env_file=env_file())  # type: ignore[call-arg]
