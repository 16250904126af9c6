"""benchmarks/english_text.py, which writes the benchmarks' English text from Debian's manuals: the paragraphs it
takes from HTML, text and POD, what it skips and writes once, and the record about.json keeps of each file."""

from __future__ import annotations

import gzip
import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import PYTHON, REPO

sys.path.insert(0, str(REPO / "benchmarks"))

from continue_pretraining import prose_paragraphs  # noqa: E402
from english_text import Source, html_paragraphs, write_source  # noqa: E402

needs_dpkg = pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="reads Debian's package versions")


def test_html_keeps_paragraph_text_and_leaves_code_scripts_and_navigation_out():
    page = ("<html><head><style>p { color: red }</style><script>var p = '<p>no</p>';</script></head><body>"
            "<ul><li>Prev</li></ul><h1>Title</h1>"
            "<p>The first <b>paragraph</b>,\n  over two lines.</p>"
            "<p>An open paragraph<p>ends where the next begins.</p>"
            "<pre>for x in y: pass</pre>"
            "<div class=\"para\">A DocBook paragraph <pre>code</pre>around code.</div>"
            "<div class=\"block\"><p>A javadoc block</p>with text after its inner paragraph.</div>"
            "<div class=\"other\">Not a paragraph.</div>"
            "<p>Caf&eacute; &amp; entities.</p></body></html>")
    assert html_paragraphs(page) == ["The first paragraph, over two lines.", "An open paragraph",
                                     "ends where the next begins.", "A DocBook paragraph around code.",
                                     "A javadoc block", "with text after its inner paragraph.", "Café & entities."]


@needs_dpkg
def test_a_source_becomes_one_file_of_paragraphs_with_its_package_s_version_and_digest(tmp_path: Path):
    root = tmp_path / "doc"
    (root / "api" / "src").mkdir(parents=True)
    (root / "api" / "a.html").write_text("<p>Returns the argument unchanged.</p><p>Alpha is the first letter of "
                                         "the alphabet, and this paragraph says so at length.</p>")
    (root / "api" / "b.html").write_text("<p>Returns the argument unchanged.</p><p>Beta comes second.</p>")
    (root / "api" / "src" / "c.html").write_text("<p>Source code pages are skipped.</p>")
    (root / "latest").symlink_to(root / "api")  # the same files through a link: read once
    source = Source("manual", "dpkg", root, ("**/*.html",), kind="html", skip=("src",))
    out = tmp_path / "out"
    out.mkdir()
    record = write_source(source, out)
    text = (out / "manual.txt").read_text(encoding="utf-8")
    assert text == ("Returns the argument unchanged.\n\nAlpha is the first letter of the alphabet, and this paragraph "
                    "says so at length.\n\nBeta comes second.\n\n")  # the repeated paragraph once; src/ skipped
    version = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "dpkg"], capture_output=True, text=True).stdout
    assert record == {"package": "dpkg", "version": version, "files": 2, "bytes": len(text.encode()),
                      "sha256": hashlib.sha256(text.encode()).hexdigest()}
    # the benchmarks' reader finds the paragraphs again (the short ones are not prose to it)
    assert prose_paragraphs(out / "manual.txt", 10**9) == [
        "Alpha is the first letter of the alphabet, and this paragraph says so at length."]


@needs_dpkg
def test_text_files_are_read_whole_gzip_or_not_and_pod_loses_its_markup(tmp_path: Path):
    (tmp_path / "guide.txt.gz").write_bytes(gzip.compress("Packed text.\n".encode()))
    (tmp_path / "notes.txt").write_text("Plain text.\n\nSecond block.\n")
    (tmp_path / "perlintro.pod").write_text("Use X<print>C<print> and B<<< bold >>> with L<perlfunc>.\n")
    out = tmp_path / "out"
    out.mkdir()
    write_source(Source("texts", "dpkg", tmp_path, ("*.txt.gz", "*.txt")), out)
    assert (out / "texts.txt").read_text() == "Packed text.\n\nPlain text.\n\nSecond block.\n\n"
    write_source(Source("pod", "dpkg", tmp_path, ("*.pod",), kind="pod"), out)
    assert (out / "pod.txt").read_text() == "Use printprint and  bold  with perlfunc.\n\n"


def test_a_source_whose_package_is_missing_is_skipped_and_the_script_says_how_to_install_it(tmp_path: Path):
    (tmp_path / "doc").mkdir()
    (tmp_path / "doc" / "a.txt").write_text("Text.\n")
    assert write_source(Source("gone", "no-such-package-bertwb", tmp_path / "doc", ("*.txt",)), tmp_path) is None
    assert not (tmp_path / "gone.txt").exists()
    listed = subprocess.run([PYTHON, str(REPO / "benchmarks" / "english_text.py"), "--list"], capture_output=True,
                            text=True, check=True).stdout
    assert "python311_docs   python3.11-doc" in listed and "debian_policy    debian-policy" in listed
