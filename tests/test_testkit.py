"""The test kit we ship: docs/testing-your-agents.md's first example, used exactly as printed."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "test_my_agent.py"


def test_the_docs_show_the_example_that_runs() -> None:
    page = (ROOT / "docs" / "testing-your-agents.md").read_text()
    assert EXAMPLE.read_text() in re.findall(r"```python\n(.*?)```", page, flags=re.DOTALL)


def test_the_example_runs_as_is_in_a_project_of_its_own(tmp_path: Path) -> None:
    """A user's project: no conftest, no pytest settings, no pytest-asyncio; only the plugin."""
    (tmp_path / "test_my_agent.py").write_text(EXAMPLE.read_text())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "APPROVAL_BOT_"))}
    env["PYTHONPATH"] = str(ROOT)
    result = subprocess.run(
        [
            sys.executable, "-m", "pytest", "-q", "-p", "bot.testing.pytest_plugin",
            "-p", "no:asyncio", "-p", "no:cacheprovider", "test_my_agent.py",
        ],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


LEAKY_TEST = """
import subprocess
import sys


def test_leaks_a_process(tmp_path):
    sleeper = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"], cwd=tmp_path,
        start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    print("LEAKED", sleeper.pid)
"""


def test_a_process_left_running_by_a_test_is_named(tmp_path: Path) -> None:
    (tmp_path / "test_leaky.py").write_text(LEAKY_TEST)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [
            sys.executable, "-m", "pytest", "-s", "-p", "bot.testing.pytest_plugin",
            "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "base"), "test_leaky.py",
        ],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    [pid] = [int(found) for found in re.findall(r"LEAKED (\d+)", result.stdout)]
    try:
        assert "processes left running by tests" in result.stdout
        assert re.search(rf"pid {pid} python\S* in {tmp_path / 'base'}/", result.stdout)
    finally:
        os.kill(pid, signal.SIGTERM)
