"""Logging set-up: plain text for people, JSON lines for log collectors; credentials masked.

The SDK, the OpenAI client and httpx log every model call at INFO; that is noise in production
and can carry request details, so those loggers stay at WARNING unless DEBUG is asked for.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

from bot.untrusted import redact

NOISY = ("openai", "openai.agents", "httpx", "httpcore")


class TextFormatter(logging.Formatter):
    """`time level logger: message`, with anything that looks like a credential masked."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, exc_info."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, str] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        if record.exc_info:
            entry["exc_info"] = redact(self.formatException(record.exc_info))
        elif record.exc_text:
            entry["exc_info"] = redact(record.exc_text)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(level: str = "INFO", fmt: str = "text") -> None:
    """Replace the root handlers with one on stderr in the chosen format and level."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    numeric = logging.getLevelName(level.upper())
    root.setLevel(numeric)
    for name in NOISY:
        quiet = numeric if numeric <= logging.DEBUG else max(numeric, logging.WARNING)
        logging.getLogger(name).setLevel(quiet)
