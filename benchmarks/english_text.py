"""Real English text for the benchmarks, from the manuals that Debian packages ship: one file per manual.

Usage: ``python benchmarks/english_text.py [--out /work/english] [--only NAME ...] [--list]``

No text corpus can be downloaded here, and none of a few hundred MB ships in a package; the manuals of
Debian's documentation packages are the largest body of English written by people that the package
managers give. Each source below becomes ``OUT/NAME.txt``: its paragraphs, a blank line between them, so
that ``continue_pretraining.prose_paragraphs`` and ``bertwb ingest`` (format ``paragraphs``) read them.

* reStructuredText, plain text and GNU info files are copied as they are (decompressed); Perl's POD loses
  its ``X<...>`` markup.
* HTML keeps the text of its ``<p>`` elements (and of javadoc's and DocBook's paragraph ``<div>``s), one per line,
  without ``<pre>``, scripts and styles; pages of source code and Sphinx's copies of the sources are
  skipped. A paragraph that repeats one already written for the same source is written once (rustdoc and
  javadoc repeat inherited docs on every type).

``OUT/about.json`` records each source's Debian package, its installed version, the files read, the bytes
written and their sha256, so two runs' texts can be told apart. A source whose package is not installed
is skipped with the ``apt-get install`` line that brings it; ``--list`` prints the sources and their packages.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

DEFAULT_OUT = Path("/work/english")
DOC = Path("/usr/share/doc")


class _Paragraphs(HTMLParser):
    """The text of an HTML page's paragraph elements, whitespace collapsed; nothing inside pre/script/style."""

    _QUIET = {"pre", "script", "style"}
    _PARAGRAPH_DIVS = {"block", "para"}  # javadoc's descriptions; DocBook's paragraphs

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.paragraphs: list[str] = []
        self._open: list[str] = []  # the paragraph elements we are inside: "p" or "div"
        self._divs: list[bool] = []  # for every open div: is it a paragraph (javadoc's or DocBook's)?
        self._quiet = 0
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._QUIET:
            self._quiet += 1
        paragraph_div = tag == "div" and dict(attrs).get("class") in self._PARAGRAPH_DIVS
        if tag == "p" or paragraph_div:
            self._flush()
            if tag == "p" and self._open and self._open[-1] == "p":
                self._open.pop()  # a new <p> ends an open one, as in HTML
            self._open.append(tag)
        if tag == "div":
            self._divs.append(paragraph_div)

    def handle_endtag(self, tag: str) -> None:
        if tag in self._QUIET:
            self._quiet = max(0, self._quiet - 1)
        elif tag == "p" and self._open and self._open[-1] == "p":
            self._flush()
            self._open.pop()
        elif tag == "div" and self._divs and self._divs.pop():
            self._flush()
            while self._open and self._open.pop() != "div":
                pass

    def handle_data(self, data: str) -> None:
        if self._open and not self._quiet:
            self._text.append(data)

    def _flush(self) -> None:
        text = " ".join("".join(self._text).split())
        if text:
            self.paragraphs.append(text)
        self._text = []

    def close(self) -> None:
        super().close()
        self._flush()


def html_paragraphs(html: str) -> list[str]:
    """The paragraphs of one HTML page (see the module's docstring)."""
    parser = _Paragraphs()
    parser.feed(html)
    parser.close()
    return parser.paragraphs


def _read(path: Path) -> str:
    data = path.read_bytes()
    return (gzip.decompress(data) if path.suffix == ".gz" else data).decode("utf-8", "replace")


def _pod(path: Path) -> str:
    return re.sub(r"[A-Z]<+([^<>]*?)>+", r"\1", _read(path))


@dataclass(frozen=True)
class Source:
    name: str
    package: str  # the Debian package that ships it (its installed version goes to about.json)
    root: Path
    patterns: tuple[str, ...]
    kind: str = "text"  # text | pod | html
    skip: tuple[str, ...] = ()  # path parts whose files are not read

    def files(self) -> list[Path]:
        """The files to read, each once: a folder reached through a link too (Perl's 5.36 -> 5.36.0) is not
        read twice."""
        found: dict[Path, Path] = {}
        for pattern in self.patterns:
            for path in _glob(self.root, pattern):
                if not set(path.relative_to(self.root).parts) & set(self.skip):
                    found.setdefault(path.resolve(), path)
        return sorted(found.values())

    def blocks(self, files: list[Path]) -> Iterator[str]:
        """The source's text, a block at a time: a whole file, or one HTML paragraph."""
        reader: Callable[[Path], str] = _pod if self.kind == "pod" else _read
        seen: set[str] = set()
        for path in files:
            if self.kind != "html":
                yield reader(path).strip()
                continue
            for paragraph in html_paragraphs(reader(path)):
                if paragraph not in seen:
                    seen.add(paragraph)
                    yield paragraph


def _glob(root: Path, pattern: str) -> Iterator[Path]:
    """``root.glob(pattern)``, following the symbolic links that some packages' folders are made of."""
    if "**" not in pattern:
        yield from root.glob(pattern)
        return
    head, _, tail = pattern.partition("**/")
    for folder in root.glob(head.rstrip("/")) if head else [root]:
        for directory, _, names in os.walk(folder, followlinks=True):
            yield from (Path(directory) / name for name in names if Path(name).match(tail))


SOURCES = (
    Source("python311_docs", "python3.11-doc", DOC / "python3.11" / "html" / "_sources", ("**/*.txt",)),
    Source("debian_policy", "debian-policy", DOC / "debian-policy", ("**/*.txt.gz", "**/*.txt")),
    Source("linux_doc", "linux-doc", DOC, ("linux-doc-*/Documentation/**/*.rst.gz",
                                           "linux-doc-*/Documentation/**/*.txt.gz")),
    Source("perl_pod", "perl-doc", Path("/usr/share/perl"), ("*/pod/*.pod",), kind="pod"),
    # every installed package's info manual (coreutils, gnupg, octave...): emacs-common brings Emacs's own, and
    # about.json's digest tells two machines' sets apart
    Source("gnu_info", "emacs-common", Path("/usr/share/info"), ("*.info.gz", "*.info-*.gz", "emacs/*.gz")),
    Source("postgresql", "postgresql-doc-15", DOC / "postgresql-doc-15" / "html", ("*.html",), kind="html"),
    Source("sqlalchemy", "python-sqlalchemy-doc", DOC / "python-sqlalchemy-doc" / "html", ("**/*.html",),
           kind="html", skip=("_modules", "_sources")),
    Source("django", "python-django-doc", DOC / "python-django-doc" / "html", ("**/*.html",), kind="html",
           skip=("_modules", "_sources")),
    Source("scipy", "python-scipy-doc", DOC / "python-scipy-doc" / "html", ("**/*.html",), kind="html",
           skip=("_modules", "_sources")),
    Source("pandas", "python-pandas-doc", DOC / "python-pandas-doc" / "html", ("**/*.html",), kind="html",
           skip=("_modules", "_sources")),
    Source("rust", "rust-doc", DOC / "rust-doc" / "html", ("**/*.html",), kind="html", skip=("src",)),
    Source("java", "openjdk-17-doc", DOC / "openjdk-17-doc" / "api", ("**/*.html",), kind="html",
           skip=("src-html",)),
    Source("debian_handbook", "debian-handbook", DOC / "debian-handbook" / "html" / "en-US", ("*.html",),
           kind="html"),
    Source("maxima", "maxima-doc", DOC / "maxima-doc" / "html", ("*.html",), kind="html"),
)


def installed_version(package: str) -> str | None:
    """The installed version of the Debian package ``package``; None when it is not installed (or no dpkg)."""
    try:
        result = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True)
    except FileNotFoundError:
        return None
    return (result.stdout.strip() or None) if result.returncode == 0 else None


def write_source(source: Source, out: Path) -> dict | None:
    """``OUT/NAME.txt`` for ``source``; what about.json says of it, or None when its package is missing."""
    version, files = installed_version(source.package), source.files()
    if not version or not files:
        return None
    digest, written = hashlib.sha256(), 0
    with open(out / f"{source.name}.txt", "w", encoding="utf-8") as handle:
        for block in source.blocks(files):
            if block:
                text = block + "\n\n"
                handle.write(text)
                encoded = text.encode("utf-8")
                digest.update(encoded)
                written += len(encoded)
    return {"package": source.package, "version": version, "files": len(files), "bytes": written,
            "sha256": digest.hexdigest()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--only", nargs="+", choices=[source.name for source in SOURCES], default=None)
    parser.add_argument("--list", action="store_true", help="print the sources and their packages")
    args = parser.parse_args()
    chosen = [source for source in SOURCES if args.only is None or source.name in args.only]
    if args.list:
        for source in chosen:
            print(f"{source.name:16} {source.package:22} {source.root}")
        return
    args.out.mkdir(parents=True, exist_ok=True)
    about_path = args.out / "about.json"  # --only rewrites its sources' records and keeps the others'
    about = json.loads(about_path.read_text(encoding="utf-8")) if about_path.is_file() else {}
    missing: list[str] = []
    for source in chosen:
        record = write_source(source, args.out)
        if record is None:
            missing.append(source.package)
            print(f"{source.name}: skipped, the package {source.package} is not installed", file=sys.stderr)
            continue
        about[source.name] = record
        print(f"{source.name}: {record['bytes'] / 1e6:,.1f} MB from {record['files']:,} files of "
              f"{source.package} {record['version']}")
    about_path.write_text(json.dumps(about, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    total = sum(record["bytes"] for record in about.values())
    print(f"{total / 1e6:,.1f} MB in {len(about)} files under {args.out}")
    if missing:
        print(f"for the rest: sudo apt-get install {' '.join(missing)}", file=sys.stderr)


if __name__ == "__main__":
    main()
