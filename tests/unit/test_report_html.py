"""The HTML report: self-contained (no network fetch), escaped, and rendered by headless Chromium.

The Chromium test needs Debian's ``chromium`` (scripts/setup.sh installs it); it renders the page to a
screenshot kept in tests/artifacts/report.png and checks the DOM after the page's script ran.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest

from recommender.report.html import as_html
from tests.builders.report import sample_report

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def test_the_page_is_self_contained() -> None:
    page = as_html(sample_report())
    assert page.startswith("<!DOCTYPE html>")
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page, re.I)
    assert "@import" not in page and "url(" not in page and "fetch(" not in page
    # One chart per container and resource: 3 containers of web + 1 of db + 1 of nightly = 5 x 2.
    assert page.count('<svg class="chart chart-') == 10
    assert page.count('class="mark-recommended"') == 8  # setup (init) has no history: "no usage history" charts


def test_cluster_text_is_escaped() -> None:
    report = sample_report()
    evil = replace(report.workloads[0], name='<script>alert("x")</script>')
    page = as_html(replace(report, workloads=(evil, *report.workloads[1:])))
    assert '<script>alert("x")</script>' not in page and "&lt;script&gt;" in page


def chromium(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        pytest.skip("chromium not installed (apt-get install chromium; scripts/setup.sh does it)")
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        return subprocess.run([binary, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True,
                              timeout=timeout, check=False)


def test_chromium_renders_the_charts_and_runs_the_script(tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    page.write_text(as_html(sample_report()))
    dom = chromium("--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert 'data-ready="true"' in dom.stdout  # the script ran
    assert "3 of 3 workloads shown" in dom.stdout
    assert dom.stdout.count('class="chart chart-') == 10 and "mark-request" in dom.stdout
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report.png"
    shot.unlink(missing_ok=True)
    done = chromium(f"--screenshot={shot}", "--window-size=1280,2000", page.as_uri())
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
