"""The documentation site's strict build (`make docs`, run by `make test`): it passes as the
pages are, and it fails on what rots a site: a broken link, a missing anchor, a page left out
of the navigation."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from tests.docs_samples import DOCS, ROOT


def build(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(root / "site")],
        cwd=root, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def copy_of_the_site(tmp_path: Path) -> Path:
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(DOCS, tmp_path / "docs", symlinks=False)
    return tmp_path


def small_site(tmp_path: Path) -> Path:
    """The site's own configuration (mkdocs.yml: strict, and what it validates) over two pages
    that build cleanly: what then fails the build is the configuration's doing, and each build
    takes a fraction of the whole site's."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    config["nav"] = ["index.md", "policy.md"]
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# Home\n\nSee [the rules](policy.md#rules).\n")
    (tmp_path / "docs" / "policy.md").write_text("# Policy\n\n## Rules\n\nWho decides.\n")
    return tmp_path


def nav_pages(nav: list[object]) -> list[str]:
    found: list[str] = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        found += nav_pages(value) if isinstance(value, list) else [str(value)]
    return found


def test_every_page_is_in_the_nav_and_the_strict_build_passes(tmp_path: Path) -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert sorted(nav_pages(config["nav"])) == sorted(p.name for p in DOCS.glob("*.md"))
    result = build(copy_of_the_site(tmp_path))
    assert result.returncode == 0, result.stderr


def test_a_page_missing_from_the_nav_a_broken_link_or_anchor_fails_the_build(
    tmp_path: Path,
) -> None:
    """Each is named in the build's complaint (one build: each costs a second or two)."""
    root = small_site(tmp_path)
    (root / "docs" / "orphan.md").write_text("# Orphan\n")
    page = root / "docs" / "index.md"
    page.write_text(page.read_text() + "\nSee [gone](gone.md) and [here](policy.md#no-such).\n")
    result = build(root)
    assert result.returncode != 0
    assert "orphan.md" in result.stderr
    assert "gone.md" in result.stderr and "no-such" in result.stderr
