# The bot in a slim image, run as a non-root user.
#   docker build -t approval-bot .
#   docker run --env-file .env -e REDIS_URL=redis://redis:6379/0 \
#     -v "$PWD/policy.yml:/config/policy.yml:ro" -p 3000:3000 approval-bot
# A worker: the same image with `approval-bot worker` (health on port 9090, see compose.yml).

FROM python:3.11.13-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY bot ./bot
# The bot and its `cel` extra (`when: {cel: ...}` conditions); pyproject.toml bounds the versions.
# hadolint ignore=DL3013
RUN pip install --no-cache-dir --no-compile --prefix=/install ".[cel]"

FROM python:3.11.13-slim-bookworm
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    APPROVAL_BOT_POLICY=/config/policy.yml \
    APPROVAL_BOT_DATA_DIR=/data \
    APPROVAL_BOT_LOG_FORMAT=json \
    APPROVAL_BOT_METRICS_HOST=0.0.0.0 \
    HEALTHCHECK_URL=http://127.0.0.1:3000/healthz
RUN useradd --system --uid 10001 --user-group --home-dir /app --shell /usr/sbin/nologin bot \
    && mkdir -p /app /config /data \
    && chown bot:bot /app /data
COPY --from=build /install /usr/local
WORKDIR /app
USER 10001:10001
# 3000: Slack's requests, /metrics, /healthz, /readyz (serve --http).
# 9090: /metrics, /healthz, /readyz of `worker` and `serve --socket`, and of all the serving
# processes of `serve --http` as one (APPROVAL_BOT_PROCESSES).
EXPOSE 3000 9090
HEALTHCHECK --interval=30s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(os.environ['HEALTHCHECK_URL'], timeout=2)"]
STOPSIGNAL SIGTERM
CMD ["approval-bot", "serve", "--http", "--host", "0.0.0.0", "--port", "3000"]
