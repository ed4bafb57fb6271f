"""The Slack app manifests (HTTP and Socket Mode) conform to the Slack app manifest schema."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from bot.slack.installs.oauth import BOT_SCOPES as INSTALL_SCOPES

REPO = Path(__file__).resolve().parent.parent
VENDORED_SCHEMA = Path(__file__).resolve().parent / "data" / "slack-app-manifest.schema.json"
SHARED_SCHEMA = REPO.parent / "shared" / "slack-app-manifest.schema.json"
HTTP_MANIFEST = REPO / "manifest.yml"
SOCKET_MANIFEST = REPO / "manifest.socket.yml"
DISTRIBUTED_MANIFEST = REPO / "manifest.distributed.yml"

BOT_SCOPES = {
    "commands",
    "chat:write",
    "channels:history",
    "groups:history",
    "usergroups:read",
    "channels:read",
    "groups:read",
    "im:write",
    "app_mentions:read",
}


def schema_path() -> Path:
    """The shared schema beside the repo when present, else the vendored copy."""
    return SHARED_SCHEMA if SHARED_SCHEMA.exists() else VENDORED_SCHEMA


def load_schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(schema_path().read_text(encoding="utf-8"))
    return schema


def load_manifest(path: Path) -> dict[str, Any]:
    manifest = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(manifest, dict), f"{path.name} is not a YAML mapping"
    return manifest


def schema_errors(manifest: Any) -> list[str]:
    schema = load_schema()
    validator_cls = jsonschema.validators.validator_for(schema)
    validator_cls.check_schema(schema)
    validator = validator_cls(schema)
    errors = sorted(validator.iter_errors(manifest), key=lambda e: list(e.absolute_path))
    return [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors]


def assert_valid(manifest: Any, name: str) -> None:
    errors = schema_errors(manifest)
    assert not errors, f"{name} does not conform to the schema:\n  " + "\n  ".join(errors)


# The vendored copy as it was taken from the shared one: a copy edited by hand fails here on
# any machine (a fresh clone has no shared copy beside it, and must not skip: a skip on CI is
# a failure). Taking a new copy means changing this digest too.
VENDORED_SHA256 = "b03f9f1b4c84f6a0bffb30606260d44fe559d9167caf30f90759fb5dc608adbf"


def test_vendored_schema_matches_shared() -> None:
    vendored = VENDORED_SCHEMA.read_bytes()
    assert hashlib.sha256(vendored).hexdigest() == VENDORED_SHA256, (
        f"{VENDORED_SCHEMA} is not the copy taken (copy the shared one over it, and its digest)"
    )
    if SHARED_SCHEMA.exists():  # beside a checkout on a machine that has it
        assert vendored == SHARED_SCHEMA.read_bytes(), (
            f"{VENDORED_SCHEMA} is out of date: copy {SHARED_SCHEMA} over it, and its digest"
        )


ALL = [HTTP_MANIFEST, SOCKET_MANIFEST, DISTRIBUTED_MANIFEST]


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_manifest_conforms_to_schema(path: Path) -> None:
    assert_valid(load_manifest(path), path.name)


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_manifest_requests_only_the_scopes_the_bot_uses(path: Path) -> None:
    manifest = load_manifest(path)
    bot_scopes = manifest["oauth_config"]["scopes"]["bot"]
    assert len(bot_scopes) == len(set(bot_scopes)), f"duplicate scopes: {bot_scopes}"
    assert set(bot_scopes) == BOT_SCOPES
    assert "user" not in manifest["oauth_config"]["scopes"]
    assert set(INSTALL_SCOPES) == BOT_SCOPES  # what an OAuth installation asks for


def test_the_distributed_manifest_adds_only_the_install_flow() -> None:
    """manifest.yml, plus the redirect URL and the events that say a workspace left."""
    distributed = load_manifest(DISTRIBUTED_MANIFEST)
    assert distributed["oauth_config"].pop("redirect_urls") == [
        "https://YOUR-HOST/slack/oauth_redirect"
    ]
    events = distributed["settings"]["event_subscriptions"]["bot_events"]
    assert events[-2:] == ["app_uninstalled", "tokens_revoked"]
    del events[-2:]
    assert distributed == load_manifest(HTTP_MANIFEST)


@pytest.mark.parametrize("path", [HTTP_MANIFEST, SOCKET_MANIFEST], ids=lambda p: p.name)
def test_manifest_has_the_agent_command_and_thread_reply_events(path: Path) -> None:
    manifest = load_manifest(path)
    commands = manifest["features"]["slash_commands"]
    assert [c["command"] for c in commands] == ["/agent"]
    settings = manifest["settings"]
    assert settings["interactivity"]["is_enabled"] is True
    assert set(settings["event_subscriptions"]["bot_events"]) == {
        "message.channels",
        "message.groups",
        "app_home_opened",
        "app_mention",
    }
    assert manifest["features"]["app_home"]["home_tab_enabled"] is True


def test_http_manifest_sends_everything_to_slack_events() -> None:
    manifest = load_manifest(HTTP_MANIFEST)
    settings = manifest["settings"]
    urls = {
        "slash command url": manifest["features"]["slash_commands"][0]["url"],
        "interactivity request_url": settings["interactivity"]["request_url"],
        "event request_url": settings["event_subscriptions"]["request_url"],
    }
    for what, url in urls.items():
        assert url.startswith("https://"), f"{what} is not https: {url}"
        assert url.endswith("/slack/events"), f"{what} does not end with /slack/events: {url}"
    assert settings["socket_mode_enabled"] is False


def test_socket_manifest_uses_socket_mode_without_request_urls() -> None:
    manifest = load_manifest(SOCKET_MANIFEST)
    settings = manifest["settings"]
    assert settings["socket_mode_enabled"] is True
    assert all("url" not in c for c in manifest["features"]["slash_commands"])
    assert "request_url" not in settings["interactivity"]
    assert "request_url" not in settings["event_subscriptions"]


def test_manifests_differ_only_in_socket_mode_and_request_urls() -> None:
    http = load_manifest(HTTP_MANIFEST)
    http["settings"]["socket_mode_enabled"] = True
    for command in http["features"]["slash_commands"]:
        del command["url"]
    del http["settings"]["interactivity"]["request_url"]
    del http["settings"]["event_subscriptions"]["request_url"]
    assert http == load_manifest(SOCKET_MANIFEST)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda m: m.update(unknown_key=True), "Additional properties are not allowed"),
        (lambda m: m.pop("display_information"), "'display_information' is a required property"),
    ],
    ids=["unknown-top-level-key", "missing-display_information"],
)
def test_schema_rejects_an_invalid_manifest(change: Any, expected: str) -> None:
    manifest = load_manifest(HTTP_MANIFEST)
    change(manifest)
    errors = schema_errors(manifest)
    assert any(expected in error for error in errors), errors
