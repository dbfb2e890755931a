"""The README is a front door: short, its figures linked to where they were measured, its links alive.

Checks what ``tests/readme.py`` reads: the README has at most 250 lines; every line of its "Headline figures"
section links into ``tests/benchmarks/RESULTS.md`` at a heading that exists there; every relative link of the
README and of ``docs/*.md`` reaches a file (and, into a Markdown page, a heading of it); every block a test
runs verbatim is marked exactly once; and no ``kubectl`` line is shown outside a marked block.
"""

from __future__ import annotations

from tests.readme import (
    README,
    ROOT,
    anchor,
    anchors,
    block,
    link_targets,
    links,
    marked_names,
    pages,
    unmarked_kubectl_lines,
)

RESULTS = ROOT / "tests" / "benchmarks" / "RESULTS.md"
MAX_LINES = 250
TESTED_BLOCKS = ("demo-look-around", "install-full", "install-dry-run", "helm", "patches-kustomize", "patches-kubectl")
"""The blocks test_demo, test_readme_commands, test_helm_chart and test_report_patches_real run."""


def _section(text: str, heading: str) -> list[str]:
    lines = text.splitlines()
    start = lines.index(f"## {heading}") + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
    return [line for line in lines[start:end] if line.strip()]


def test_the_readme_is_read_in_five_minutes() -> None:
    assert len(README.read_text().splitlines()) <= MAX_LINES


def test_every_line_of_the_headline_figures_links_to_its_section_of_results() -> None:
    figures = _section(README.read_text(), "Headline figures")
    assert len(figures) >= 5, figures
    have = anchors(RESULTS)
    for line in figures:
        into = [t for t in link_targets(line) if t.split("#")[0] == "tests/benchmarks/RESULTS.md"]
        assert into, f"no link into tests/benchmarks/RESULTS.md: {line}"
        if line.startswith("- "):  # a figure: linked to the heading it was measured under
            assert all("#" in t and t.split("#", 1)[1] in have for t in into), (line, into)


def test_every_relative_link_of_the_readme_and_docs_resolves() -> None:
    for page in pages():
        for target in links(page):
            path, _, fragment = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            assert dest.exists(), f"{page.relative_to(ROOT)}: {target} is missing"
            if fragment and dest.suffix == ".md":
                assert fragment in anchors(dest), f"{page.relative_to(ROOT)}: {target} names no heading"


def test_every_tested_block_is_marked_once_and_no_kubectl_line_is_untested() -> None:
    names = marked_names()
    assert sorted(names) == sorted(set(names)), names
    assert set(TESTED_BLOCKS) <= set(names), names
    assert all(block(name) for name in TESTED_BLOCKS)
    assert unmarked_kubectl_lines() == []


def test_blocks_are_read_from_the_readme_and_the_docs() -> None:
    text = "intro\n\n<!-- test: moved -->\n```sh\n# a comment\nkubectl get pods\n```\n\n```sh\nkubectl get vpa\n```\n"
    assert block("moved", text) == ["kubectl get pods"]
    assert unmarked_kubectl_lines(text) == ["kubectl get vpa"]
    assert any(p.parent.name == "docs" for p in pages())


def test_anchors_follow_githubs_rule() -> None:
    assert anchor("Side by side with VPA 1.8.1") == "side-by-side-with-vpa-181"
    assert anchor("Report against its floors: 1,000 workloads, 8 days of history") == (
        "report-against-its-floors-1000-workloads-8-days-of-history")
    assert anchor("The first run's builds") == "the-first-runs-builds"
