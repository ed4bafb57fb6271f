"""Every Python and YAML sample of the README and of the docs site works as printed: the README's
agent and its test run (in a project of their own, with pytest, as a user would run them),
every other Python sample is executed (or, where it would serve or needs a service, compiled,
for a reason given here), every YAML sample parses, and every policy among them is accepted by
the parser `approval-bot check` uses. A sample that rots fails here."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.service.policy.rules import parse_policy
from tests.docs_samples import ROOT, Sample, pages, samples
from tests.forkserver import run_python

PYTHON = [s for page in pages() for s in samples(page, "python")]
YAML = [s for page in pages() for s in samples(page, "yaml")]

# Keys only a policy file has at its top level: a YAML sample with one of them is a policy.
POLICY_KEYS = {"channels", "tools", "defaults", "workspace", "workspaces"}

# Samples compiled but not executed, found by a line they hold, each for its reason.
COMPILE_ONLY = {
    "web.run_app(app, port=8088)": "serves forever; tests/test_recipes.py checks the recipe",
}


def ids(found: list[Sample]) -> list[str]:
    return [s.where for s in found]


def test_there_are_samples_to_test() -> None:
    """The README has its agent and its test, and the pages their samples."""
    readme = [s for s in PYTHON if s.page.name == "README.md"]
    assert [s.file_name for s in readme] == ["myteam/agents.py", "tests/test_ops.py"]
    assert len(PYTHON) >= 6 and len(YAML) >= 7


@pytest.mark.parametrize("sample", YAML, ids=ids(YAML))
def test_a_yaml_sample_parses_and_a_policy_is_valid(sample: Sample) -> None:
    documents = list(yaml.safe_load_all(sample.text))
    assert documents, f"{sample.where}: an empty YAML sample"
    for document in documents:
        if isinstance(document, dict) and POLICY_KEYS & set(document) and "kind" not in document:
            parse_policy(sample.text, source=sample.where)  # raises with the line of a mistake


@pytest.mark.parametrize("sample", PYTHON, ids=ids(PYTHON))
def test_a_python_sample_compiles(sample: Sample) -> None:
    compile(sample.text, sample.where, "exec")


def runnable(sample: Sample) -> bool:
    return not any(line in sample.text for line in COMPILE_ONLY) and not is_test(sample)


def is_test(sample: Sample) -> bool:
    return "\ndef test_" in sample.text or "\nasync def test_" in sample.text


def write_page_files(page: Path, into: Path) -> None:
    """The page's samples that name their file (`# myteam/agents.py`), written there: the
    modules its other samples import."""
    for sample in samples(page, "python"):
        if sample.file_name and not is_test(sample):
            target = into / sample.file_name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(sample.text)


EXECUTED = [s for s in PYTHON if runnable(s)]


@pytest.mark.parametrize("sample", EXECUTED, ids=ids(EXECUTED))
def test_a_python_sample_runs(
    sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Executed as a module in a directory holding its page's named files (so `from myteam...`
    or `from verify import ...` finds what the page shows)."""
    write_page_files(sample.page, tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    namespace: dict[str, Any] = {"__name__": "doc_sample"}
    exec(compile(sample.text, sample.where, "exec"), namespace)
    CHECKS.get(sample.file_name or "", lambda _: None)(namespace)


def check_agents(namespace: dict[str, Any]) -> None:
    """A module the bot can serve: `APPROVAL_BOT_AGENTS=myteam.agents:agents`."""
    from bot.engine.registry import AgentRegistry

    registry = AgentRegistry.from_value(namespace["agents"])
    assert registry.agents


def check_verify(namespace: dict[str, Any]) -> None:
    """The receiver's check accepts the bot's signature and refuses a forged or stale one (the
    bot's own deliveries are checked with it in tests/test_webhooks.py)."""
    import time

    from bot.webhooks import signature

    secret, body = b"s" * 32, b'{"id": "1-0"}'

    def headers(at: int) -> dict[str, str]:
        return {
            "X-Approval-Bot-Timestamp": str(at),
            "X-Approval-Bot-Signature": signature(secret.decode(), at, body),
        }

    now = int(time.time())
    assert namespace["verified"](secret, headers(now), body)
    assert not namespace["verified"](secret, headers(now), body + b" ")
    assert not namespace["verified"](secret, headers(now - 600), body)


CHECKS = {"myteam/agents.py": check_agents, "verify.py": check_verify}

TESTS = [s for s in PYTHON if is_test(s)]


@pytest.mark.parametrize("sample", TESTS, ids=ids(TESTS))
def test_a_test_sample_passes_in_a_project_of_its_own(sample: Sample, tmp_path: Path) -> None:
    """A user's project: the page's modules, the test file, no conftest, no pytest settings,
    no pytest-asyncio; only the installed plugin. Run as the docs say: `python -m pytest`."""
    write_page_files(sample.page, tmp_path)
    test_file = tmp_path / (sample.file_name or "test_sample.py")
    test_file.parent.mkdir(parents=True, exist_ok=True)
    test_file.write_text(sample.text)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "APPROVAL_BOT_"))}
    env["PYTHONPATH"] = str(ROOT)
    result = run_python(
        [
            "-m", "pytest", "-q", "-p", "bot.testing.pytest_plugin",
            "-p", "no:asyncio", "-p", "no:cacheprovider", "-p", "no:xdist",
            str(test_file.relative_to(tmp_path)),
        ],
        cwd=tmp_path, env=env, timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, f"{sample.where}:\n{result.stdout}{result.stderr}"
    assert " passed" in result.stdout and "failed" not in result.stdout
