"""The code samples of the README and of the documentation site (`docs/`), read from the
Markdown as printed, for the tests that run them (`tests/test_doc_samples.py`, and the tests of
what a sample shows: the policy recipes, the webhook receiver's check)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

# A fenced block at the start of a line: ```python ... ```
FENCE = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```\s*$", flags=re.S | re.M)
# A sample's first line may name the file it is (`# myteam/agents.py`, `# verify.py: ...`).
FILE_NAME = re.compile(r"#\s*([\w./-]+\.py)\b")


@dataclass(frozen=True)
class Sample:
    page: Path
    line: int  # of the opening fence
    language: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def file_name(self) -> str | None:
        """The file the sample says it is, on its first line (`# myteam/agents.py`)."""
        match = FILE_NAME.match(self.text.splitlines()[0]) if self.text.strip() else None
        return match.group(1) if match else None


def pages() -> list[Path]:
    """Every page whose samples must work: the README, the changelog and the site's pages."""
    return [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted(DOCS.glob("*.md"))]


def samples(page: Path, language: str | None = None) -> list[Sample]:
    text = page.read_text()
    found = [
        Sample(page, text.count("\n", 0, match.start()) + 1, match.group(1), match.group(2))
        for match in FENCE.finditer(text)
    ]
    return [s for s in found if language is None or s.language == language]


def section(page: Path, heading: str) -> str:
    """The page's text under `heading` (a whole heading line, `## Recipes`), to the next
    heading of its level or higher (lines in code blocks are not headings)."""
    level = heading.split(" ", 1)[0]
    lines = page.read_text().splitlines()
    start = lines.index(heading) + 1
    fenced = False
    for end in range(start, len(lines)):
        line = lines[end]
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(rf"#{{1,{len(level)}}} ", line):
            return "\n".join(lines[start:end]) + "\n"
    return "\n".join(lines[start:]) + "\n"


def blocks(text: str, language: str) -> list[str]:
    return [m.group(2) for m in FENCE.finditer(text) if m.group(1) == language]
