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


def test_a_page_missing_from_the_nav_fails_the_build(tmp_path: Path) -> None:
    root = copy_of_the_site(tmp_path)
    (root / "docs" / "orphan.md").write_text("# Orphan\n")
    result = build(root)
    assert result.returncode != 0
    assert "orphan.md" in result.stderr


def test_a_broken_link_or_anchor_fails_the_build(tmp_path: Path) -> None:
    root = copy_of_the_site(tmp_path)
    page = root / "docs" / "sandbox.md"
    page.write_text(page.read_text() + "\nSee [gone](gone.md) and [here](policy.md#no-such).\n")
    result = build(root)
    assert result.returncode != 0
    assert "gone.md" in result.stderr and "no-such" in result.stderr
