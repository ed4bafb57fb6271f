"""The test kit we ship: the README's "Testing your agents" example, used exactly as printed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "test_my_agent.py"


def test_the_readme_shows_the_example_that_runs() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Testing your agents", 1)[1].split("\n## ", 1)[0]
    [block] = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert block == EXAMPLE.read_text()


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
