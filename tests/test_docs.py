"""The documentation holds together: every relative link of the README, docs/ and the benchmark records
names a file that exists and an anchor one of its headings makes, and the configuration reference is
what the typed config says today; make installs torch from the index the README tells a CPU machine to give."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import PYTHON, REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from _common import slug  # noqa: E402  (the anchor rule the benchmark log's links are written with)

FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)\)")


def documents() -> list[Path]:
    """The Markdown a reader follows links through."""
    return [REPO / "README.md", REPO / "BENCHMARKS.md", *sorted((REPO / "docs").glob("*.md")),
            *sorted((REPO / "benchmarks" / "log").glob("*.md"))]


def anchors(text: str) -> set[str]:
    """The anchors a renderer gives ``text``'s headings: the slug, then -1, -2 ... for repeats."""
    found, seen = set(), {}
    for heading in re.findall(r"^#{1,6} (.+?)#*$", FENCE.sub("", text), re.M):
        base = slug(heading.strip())
        found.add(f"{base}-{seen[base]}" if base in seen else base)
        seen[base] = seen.get(base, 0) + 1
    return found


def broken_links(path: Path) -> list[str]:
    """``path``'s relative links whose file is missing, or whose anchor no heading of that file makes."""
    text = path.read_text(encoding="utf-8")
    broken = []
    for target in LINK.findall(CODE.sub("", FENCE.sub("", text))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # a scheme: not a file of this repository
            continue
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        if not linked.exists():
            broken.append(f"{target} (no file {file} beside {path.name})")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked.read_text(encoding="utf-8")):
            broken.append(f"{target} (no heading of {linked.name} makes #{anchor})")
    return broken


def test_every_relative_link_of_the_docs_names_a_file_and_heading_that_exist():
    found = {str(path.relative_to(REPO)): broken_links(path) for path in documents()}
    assert not {name: links for name, links in found.items() if links}, found
    assert len(found) >= 10  # the README, BENCHMARKS.md and the pages were all read


def test_the_link_check_finds_a_missing_file_and_a_missing_anchor(tmp_path: Path):
    (tmp_path / "other.md").write_text("# Other\n\n## Same\n\n## Same\n\n```\n# not a heading\n```\n")
    page = tmp_path / "page.md"
    page.write_text("# Page\n\n[ok](other.md#same-1) [ok](#page) ![img](other.md) `[code](gone.md)`\n"
                    "[bad](gone.md) [bad](other.md#not-a-heading) [bad](#nowhere) [mail](mailto:someone)\n")
    assert broken_links(page) == ["gone.md (no file gone.md beside page.md)",
                                  "other.md#not-a-heading (no heading of other.md makes #not-a-heading)",
                                  "#nowhere (no heading of page.md makes #nowhere)"]


def test_the_readme_is_a_map():
    """At most ~300 lines, and its quick start keeps the two commands CI and a new user run."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 300
    assert re.search(r"```sh\nmake demo .*\nmake test .*\n```", readme)
    linked = {Path(target.partition("#")[0]).name for target in LINK.findall(readme)}
    unlinked = [page.name for page in (REPO / "docs").glob("*.md") if page.name not in linked]
    assert not unlinked, f"docs pages the README's contents table does not link: {unlinked}"


def test_the_configuration_reference_is_what_the_typed_config_says():
    generated = subprocess.run([PYTHON, "-m", "bertwb.docs_config", "--check"], cwd=REPO, capture_output=True,
                               text=True, timeout=120)
    assert generated.returncode == 0, generated.stderr


def test_the_staleness_check_names_the_command_that_regenerates_the_reference(tmp_path: Path):
    stale = tmp_path / "configuration.md"
    stale.write_text("# Configuration reference\n\nan old copy\n")
    result = subprocess.run([PYTHON, "-m", "bertwb.docs_config", "--check", "--output", str(stale)], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert "python -m bertwb.docs_config" in result.stderr and "out of date" in result.stderr
    assert stale.read_text() == "# Configuration reference\n\nan old copy\n"  # --check writes nothing


def test_the_reference_has_a_row_for_every_key_with_its_default():
    import dataclasses

    from bertwb.config import SECTIONS
    from bertwb.tasks.finetune.tasktypes import TASK_TYPES

    page = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    rows = [(f"{section}.{f.name}", f) for section, cls in SECTIONS.items() for f in dataclasses.fields(cls)]
    rows += [(f"finetune.tasks.<name>.{f.name}", f) for task in TASK_TYPES.values()
             for f in dataclasses.fields(task.settings_class) if f.name in ("type", "train", "format")]
    for key, f in rows:  # a type's own option (format) has a row in that type's table
        doc = f.metadata["doc"].replace("|", "\\|")
        assert any(line.startswith(f"| `{key}` |") and doc in line for line in page.splitlines()), \
            f"docs/configuration.md has no row for {key} with its doc"
    lr = next(line for line in page.splitlines() if line.startswith("| `finetune.lr` |"))
    assert "| `5e-05` | 0 to 1 | yes |" in lr  # the section's own default, its range, and that it is in the key


def test_make_passes_a_torch_index_to_pip_only_when_one_is_given(tmp_path: Path):
    """The README's install on a machine without a GPU: TORCH_INDEX_URL reaches torch's pip line alone, and
    without it make runs what it always ran."""
    if shutil.which("make") is None:
        pytest.skip("no make on this machine")

    def planned(*variables: str) -> list[str]:
        return subprocess.run(["make", "-n", "install", f"VENV={tmp_path / 'venv'}", *variables], cwd=REPO,
                              capture_output=True, text=True, check=True).stdout.splitlines()

    plain, given = planned(), planned("TORCH_INDEX_URL=file:///nowhere/cpu")
    torch_lines = [i for i, line in enumerate(plain) if '"torch==' in line]
    assert len(torch_lines) == 1 and "--index-url" not in plain[torch_lines[0]]
    assert given[torch_lines[0]] == plain[torch_lines[0]].replace(
        'pip install --quiet "torch==', 'pip install --quiet --index-url file:///nowhere/cpu "torch==')
    assert [line for i, line in enumerate(given) if i != torch_lines[0]] == \
           [line for i, line in enumerate(plain) if i != torch_lines[0]]
    assert not any("--index-url" in line for line in plain)
