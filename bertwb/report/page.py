"""The report's one HTML page: self-contained (figures as base64 PNG data URIs, CSS inline, no script),
so it can be mailed, attached to an issue or opened from any folder."""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass
from pathlib import Path

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 860px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.5em 0; } td, th { padding: 0.2em 0.8em; text-align: left; }
th { border-bottom: 1px solid #999; } tr:nth-child(even) td { background: #f6f6f6; }
figure { margin: 1.5em 0; } figcaption { font-size: 0.9em; color: #555; }
img { max-width: 100%; height: auto; border: 1px solid #eee; } .note { color: #8a5a00; }
.caption { font-size: 0.9em; color: #555; }
"""


@dataclass
class Shown:
    """A figure as the page shows it: where its PNG is, what it shows and how it was computed."""

    name: str
    section: str
    title: str
    caption: str
    path: Path


@dataclass
class ShownTable:
    """A table of numbers on the page, with what it shows and how it was computed."""

    title: str
    caption: str
    columns: list[str]
    rows: list[tuple[str, ...]]


def render(title: str, subtitle: str, headline: list[tuple[str, str, str]], stages: list[tuple[str, str]],
           notes: list[str], figures: list[Shown], tables: list[ShownTable] = ()) -> str:
    """The page: headline numbers, the stages' states, notes on what is missing or wrong, the tables, then the
    figures by section."""
    parts = [f"<!doctype html>\n<html lang='en'><head><meta charset='utf-8'><title>{_e(title)}</title>"
             f"<style>{_CSS}</style></head><body>", f"<h1>{_e(title)}</h1>", f"<p>{_e(subtitle)}</p>"]
    if headline:
        parts.append("<h2>Headline numbers</h2>" + _table(["", "value", "details"], headline))
    parts.append("<h2>Stages</h2>" + _table(["stage", "state"], stages))
    if notes:
        parts.append("<ul>" + "".join(f"<li class='note'>{_e(note)}</li>" for note in notes) + "</ul>")
    for shown in tables:
        parts.append(f"<h2>{_e(shown.title)}</h2>" + _table(shown.columns, shown.rows)
                     + f"<p class='caption'>{_e(shown.caption)}</p>")
    section = None
    for figure in figures:
        if figure.section != section:
            section = figure.section
            parts.append(f"<h2>{_e(section)}</h2>")
        data = base64.b64encode(figure.path.read_bytes()).decode("ascii")
        parts.append(f"<figure id='{_e(figure.name)}'><img alt='{_e(figure.title)}' "
                     f"src='data:image/png;base64,{data}'><figcaption><b>{_e(figure.title)}.</b> "
                     f"{_e(figure.caption)}</figcaption></figure>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _table(columns: list[str], rows: list[tuple[str, ...]]) -> str:
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{_e(cell)}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _e(text: str) -> str:
    return html.escape(str(text), quote=True)
