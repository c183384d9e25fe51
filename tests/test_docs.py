"""The README and docs/ stay a description of the project as it is now.

Dated measurement logs and commit citations belong in docs/history.md; every other page says how
things work and gives one current table. These tests keep it that way, keep the README's Quick
start identical to what CI runs, and check that relative links point to files that exist.
"""

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
HISTORY = DOCS / "history.md"

# A commit-hash-like token: 7 to 40 lowercase hex characters with at least one digit and at least
# one letter a-f, standing alone (not part of a longer word, a `0x` literal or an identifier).
HASH = re.compile(r"(?<![0-9A-Za-z_])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![0-9A-Za-z_])")
DATE = re.compile(r"20\d\d-\d\d-\d\d")
# [text](target) and ![alt](target); the target ends at whitespace or ")".
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def current_pages():
    return [ROOT / "README.md"] + sorted(p for p in DOCS.glob("*.md") if p != HISTORY)


def all_pages():
    return [ROOT / "README.md"] + sorted(DOCS.glob("*.md"))


def _hits(pattern, path):
    return [
        f"{path.relative_to(ROOT)}:{n}: {m.group(0)}"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for m in pattern.finditer(line)
    ]


def test_hash_pattern():
    assert HASH.search("at commit f81fa38, seed 1")
    assert HASH.search("2c8675f")
    assert not HASH.search("the ICRC check value 0xcbf43926")
    assert not HASH.search("deadbeef")        # no digit
    assert not HASH.search("1234567")         # no letter
    assert not HASH.search("abc123")          # too short
    assert not HASH.search("s2_fwd1a2b3c4")   # part of an identifier


@pytest.mark.parametrize("path", current_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_commit_hashes(path):
    hits = _hits(HASH, path)
    assert not hits, (
        "commit-hash-like tokens outside docs/history.md (move the passage there, or write hex "
        "values with a 0x prefix):\n" + "\n".join(hits))


@pytest.mark.parametrize("path", current_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_dates(path):
    hits = _hits(DATE, path)
    assert not hits, "dates outside docs/history.md (dated logs go there):\n" + "\n".join(hits)


def _ci_test_command():
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    commands = [line for line in lines if line and not line.startswith("#")]
    return commands[-1]


def _quick_start():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    start = next(n for n, line in enumerate(lines) if line.strip() == "## Quick start")
    end = next((n for n in range(start + 1, len(lines)) if lines[n].startswith("## ")), len(lines))
    section = "\n".join(lines[start:end])
    blocks = re.findall(r"^```sh\n(.*?)\n```", section, flags=re.M | re.S)
    return start + 1, [b.strip() for b in blocks]


def test_quick_start_matches_ci():
    line, blocks = _quick_start()
    assert line <= 40, f"the Quick start should be near the top of README.md, not at line {line}"
    assert len(blocks) == 2, f"the Quick start should hold two sh blocks (main job, tests): {blocks}"
    main_job, tests = blocks
    ci = _ci_test_command()
    assert shlex.split(tests) == shlex.split(ci), (
        f"README's test command differs from what .ci/run runs:\n  README: {tests}\n  CI:     {ci}")
    # Both commands set up the same virtual environment, the main job without the test extra.
    assert main_job.startswith("python3 -m venv .venv && .venv/bin/pip install -e . && "), main_job
    assert ".venv/bin/python -m rnic.sim demo" in main_job, main_job


@pytest.mark.parametrize("path", all_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_exist(path):
    missing = []
    fenced = False
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if fenced:
            continue  # code blocks are drawings and commands, not links
        for m in LINK.finditer(re.sub(r"`[^`]*`", "", line)):
            target = m.group(1)
            if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # URL (https:, mailto:) or an anchor in the same page
            file = target.split("#", 1)[0]
            if not (path.parent / file).exists():
                missing.append(f"{path.relative_to(ROOT)}:{n}: {target}")
    assert not missing, "relative links to files that do not exist:\n" + "\n".join(missing)
