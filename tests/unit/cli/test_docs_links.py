"""The user docs hold together: relative links and images resolve, anchors exist, and every
`cursor-byok` subcommand and option the docs show is one the CLI accepts."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from byok.cli import build_parser

ROOT = Path(__file__).resolve().parents[3]
DOCS = [ROOT / "README.md", ROOT / "captures" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def anchors(path: Path) -> set[str]:
    out = set()
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc):
    for target in LINK.findall(doc.read_text()):
        if re.match(r"[a-z]+://", target):
            continue
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        assert path.exists(), f"{doc.name}: broken link {target}"
        if anchor and path.suffix == ".md":
            assert anchor in anchors(path), f"{doc.name}: no heading for #{anchor} in {path.name}"


def test_screenshots_are_small_pngs():
    for png in (ROOT / "docs" / "img").glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert png.stat().st_size < 250_000, png


def test_cli_lines_in_docs_parse():
    parser = build_parser()
    seen = 0
    for doc in DOCS:
        blocks = re.findall(r"^```bash\n(.*?)^```", doc.read_text(), re.M | re.S)
        commands = [line.split("  #")[0] for block in blocks for line in block.splitlines()]
        for line in [c for c in commands if c.startswith("cursor-byok ")]:
            # placeholders (<request id | conversation id>) -> one word; [optional] parts taken as given
            line = re.sub(r"<[^>]*>", "ID", line).replace("[", "").replace("]", "")
            words = shlex.split(line.replace("YYYY-MM-DD", "2026-01-01"))
            try:
                parser.parse_args(words[1:])
            except SystemExit as e:
                raise AssertionError(f"{doc.name}: `{line.strip()}` is not a valid command line") from e
            seen += 1
    assert seen >= 10
