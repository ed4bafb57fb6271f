# One place for the commands a newcomer needs: `make run` starts the bot, `make test` checks everything.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install run sandbox test lint typecheck docs unit bench bench-more check clean screenshots

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

install: $(VENV)/.installed

## Run the bot over HTTP on 127.0.0.1:3000 (reads configuration from the environment or .env).
run: install
	$(BIN)/approval-bot serve --http --host $${HOST:-127.0.0.1} --port $${PORT:-3000}

## Try the bot in a browser at http://127.0.0.1:3000: no Slack app, no model key needed.
sandbox: install
	$(BIN)/approval-bot sandbox --port $${PORT:-3000}

## Validate configuration and policy without starting the bot.
check: install
	$(BIN)/approval-bot check

lint: install
	$(BIN)/ruff check bot tests benchmarks examples
	$(BIN)/ruff format --check bot tests benchmarks examples

typecheck: install
	$(BIN)/mypy
	$(BIN)/mypy benchmarks

## The documentation site (MkDocs, from docs/ into site/), strictly: a broken link or anchor, or
## a page missing from mkdocs.yml's nav, fails it. Preview: $(BIN)/mkdocs serve
docs: install
	$(BIN)/mkdocs build --strict

# The tests mostly wait (on Redis, the Slack stand-in, bot processes, a browser): more workers
# than cores pays. Each worker starts its own redis-server. The longest tests start first and
# each worker is handed a test or two at a time (--maxschedchunk 1), so that no long test
# starts last (tests/conftest.py keeps each test's time from the run before). Bytecode is
# cached even where PYTHONDONTWRITEBYTECODE is set: every worker, fork server and bot process
# would compile the same modules (and pytest rewrite the same tests) again. It ends with the
# slowest tests and every skipped test with its reason (-rs; on CI, CI=true, a skip is a
# failure unless a browser or Docker is missing: tests/conftest.py).
PYTEST_WORKERS ?= 5

unit: install
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --maxschedchunk 1 \
		--durations=15 -rfEs

## Everything CI runs: lint, types, the docs site, and the test suite against a real redis-server.
# All at once (the tests mostly wait, mypy mostly computes); each one's output together.
test: install
	$(MAKE) --no-print-directory -j3 --output-sync=target lint typecheck docs unit

## The floor under a decision's cost on this machine (the SDK, Bolt, slack_sdk, redis-py, each
## alone), the Redis round trips of a run and of a decision, then the cost of a decision against a bare Bolt app and the SDK's own resume, queue throughput,
## then 3 replicas + 2 workers on a Redis Cluster within Slack's limits (200 clicks at once),
## then follow-ups in a run's thread (reply -> first streamed words, Slack calls per turn), then the
## sandbox: `/agent` -> its first card, and that card's size.
bench: install
	$(BIN)/python -m benchmarks.floor
	$(BIN)/python -m benchmarks.costs
	$(BIN)/python -m benchmarks.decisions
	$(BIN)/python -m benchmarks.queue_throughput
	$(BIN)/python -m benchmarks.scale_out
	$(BIN)/python -m benchmarks.follow_ups
	$(BIN)/python -m benchmarks.sandbox_first_card

## The sandbox's pictures in docs/ (docs/sandbox-*.png), taken by the browser tests in Chromium.
screenshots: install
	SANDBOX_SCREENSHOTS=docs $(BIN)/python -m pytest -q -n 2 tests/test_sandbox_page.py

## Longer figures: pacing of 50 posts in one channel, Redis for a 40,000-character task, how
## a three-node Redis Cluster carries the data and the commands, and what waiting for a
## replica (APPROVAL_BOT_REDIS_WAIT_REPLICAS) costs, and what serving many workspaces costs.
bench-more: install
	$(BIN)/python -m benchmarks.approval_loop
	$(BIN)/python -m benchmarks.cluster
	$(BIN)/python -m benchmarks.failover
	$(BIN)/python -m benchmarks.workspaces

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info site
