"""Issue #25, item 4: text from data, paths and user input is never read as rich markup.

Every place that renders text (messages, tables, progress, training lines, status, fill-mask) is fed
bracketed text, on a terminal (a rich Console with force_terminal) and off one, and must print it
whole; control characters come out as visible ``\\xNN`` escapes, never raw.
"""

from __future__ import annotations

import io
from typing import Any, Callable, Iterator

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from bertwb import ui
from bertwb.cli import cli
from conftest import Project

BRACKETED = "see [citation needed] and [/quote] or [bold]x[/bold] in [red]"


@pytest.fixture(params=[True, False], ids=["terminal", "plain"])
def screen(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    """ui's consoles writing to one buffer, as a terminal or as a pipe; everything said at VERBOSE."""
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=request.param, width=400, highlight=False, soft_wrap=True,
                      color_system="standard" if request.param else None)
    monkeypatch.setattr(ui, "err", console)
    monkeypatch.setattr(ui, "out", console)
    saved = ui.verbosity()
    ui.set_verbosity(ui.VERBOSE)
    yield buffer
    ui.set_verbosity(saved)


def _visible(buffer: io.StringIO) -> str:
    """What a reader sees: the output without the terminal's colour codes."""
    from rich.text import Text
    return Text.from_ansi(buffer.getvalue()).plain


def _progress(text: str) -> None:
    every, ui.PLAIN_PROGRESS_EVERY_S = ui.PLAIN_PROGRESS_EVERY_S, 0.0  # a plain line at the first advance
    try:
        with ui.progress(text, total=2) as bar:
            bar.advance(1)
    finally:
        ui.PLAIN_PROGRESS_EVERY_S = every


def _training(text: str) -> None:
    with ui.training(text, 10, 0, lambda stats: ([stats["piece"]], [])) as view:
        view.update(1, {"lr": 1e-3, "tokens_per_s": 10.0, "eta_s": 3.0, "piece": text})
        view.note(text)


RENDERERS: dict[str, Callable[[str], None]] = {
    "info": ui.info,
    "detail": ui.detail,
    "warning": ui.warn,
    "error": ui.error,
    "stage line": lambda text: ui.stage_line(text, text),
    "pipeline step": lambda text: ui.pipeline_step(1, 2, text),
    "table title": lambda text: ui.table(text, ["a"], [["1"]]),
    "table column": lambda text: ui.table(None, [text], [["1"]]),
    "table cell": lambda text: ui.table(None, ["a"], [[text]]),
    "summary": lambda text: ui.summary("stage", {"note": text}),
    "progress": _progress,
    "training": _training,
}


@pytest.mark.parametrize("render", list(RENDERERS.values()), ids=list(RENDERERS))
def test_every_renderer_prints_bracketed_text_whole(screen: io.StringIO, render: Callable[[str], None]):
    render(BRACKETED)
    assert BRACKETED in _visible(screen)


@pytest.mark.parametrize("render", list(RENDERERS.values()), ids=list(RENDERERS))
def test_every_renderer_shows_control_characters_as_escapes(screen: io.StringIO, render: Callable[[str], None]):
    render("a\x1b[2Jb\rc\x07d")
    assert "a\\x1b[2Jb\\x0dc\\x07d" in _visible(screen)
    assert "\x1b[2J" not in screen.getvalue() and "\x07" not in screen.getvalue()


# Text a renderer could meet: brackets, backslashes, markup-like tags, controls, and any letters.
PIECES = ["[", "]", "/", "\\", "[/", "[bold]", "[/quote]", "[link=x]", ":smile:",
          "\x1b", "\r", "\x00", "\x9b", "a", " "]
TEXT = st.lists(st.sampled_from(PIECES) | st.characters(codec="utf-8", exclude_characters="\n\t"),
                min_size=1, max_size=30).map("".join)


@settings(deadline=None, derandomize=True, database=None, max_examples=60)
@given(text=TEXT, terminal=st.booleans(), name=st.sampled_from(sorted(RENDERERS)))
def test_any_text_comes_out_whole(text: str, terminal: bool, name: str):
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=terminal, width=2000, highlight=False, soft_wrap=True,
                      color_system="standard" if terminal else None)
    saved = ui.err, ui.out, ui.verbosity()
    ui.err = ui.out = console
    ui.set_verbosity(ui.VERBOSE)
    try:
        RENDERERS[name](text)
    finally:
        ui.err, ui.out = saved[:2]
        ui.set_verbosity(saved[2])
    expected = ui.shown(text)
    if name.startswith("table"):  # a table cell folds nothing at this width, but trims edge spaces
        expected = expected.strip()
    assert expected in _visible(buffer), (name, text)


# --- the CLI, as a user drives it ---------------------------------------------------------------------

@pytest.fixture
def ingested(project: Project) -> Project:
    project.run("ingest")
    return project


@pytest.fixture(params=[True, False], ids=["terminal", "plain"])
def said(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Callable[[Any], str]:
    """The CLI's consoles on a terminal (into a buffer) or not (CliRunner captures them); gives what a
    command said: its captured output and, on a terminal, the buffer."""
    buffer = io.StringIO()
    if request.param:
        console = Console(file=buffer, force_terminal=True, width=400, highlight=False, soft_wrap=True,
                          color_system=None)
        monkeypatch.setattr(ui, "err", console)
        monkeypatch.setattr(ui, "out", console)
    return lambda result: result.output + buffer.getvalue()


def test_sql_prints_bracketed_values_whole(ingested: Project, said: Callable[[Any], str]):
    result = ingested.run("sql", "select 'see [citation needed] here' as x, '[/quote]' as \"[/y]\"")
    assert "see [citation needed] here" in said(result) and "[/quote]" in said(result) and "[/y]" in said(result)


def test_status_prints_a_bracketed_workspace_path_whole(project: Project, said: Callable[[Any], str]):
    result = project.run("status", "--workdir", str(project.root / "[/quote]"))
    assert "[/quote]" in said(result)


def test_an_error_naming_a_bracketed_path_is_one_whole_line(project: Project, said: Callable[[Any], str]):
    missing = project.root / "[/quote] [bold].yaml"
    result = CliRunner().invoke(cli, ["status", "--config", str(missing)])
    assert result.exit_code == 1 and "Traceback" not in said(result)
    assert [line for line in said(result).splitlines() if line.startswith("error:")] == [
        line for line in said(result).splitlines() if str(missing) in line]


def test_a_warning_about_a_bracketed_file_is_whole(project: Project, said: Callable[[Any], str]):
    folder = project.root / "corpus"
    (folder / "[quote] [bold].jsonl").write_text("not json\n")
    result = project.run("ingest")
    assert "[quote] [bold].jsonl" in said(result) and "Traceback" not in said(result)


def test_fill_mask_prints_a_bracketed_input_whole(project: Project, said: Callable[[Any], str],
                                                  monkeypatch: pytest.MonkeyPatch):
    """The model is a stand-in (no model directory is looked for): what is under test is how its answer is printed."""
    import importlib

    from bertwb import inference

    class StandIn:
        def fill_mask(self, texts: list[str], top_k: int) -> list[dict[str, Any]]:
            return [{"text": text, "masks": [{"predictions": [
                {"token": "[/t]", "score": 0.5, "sequence": text.replace("[MASK]", "[/t]")}]}]} for text in texts]

    monkeypatch.setattr(importlib.import_module("bertwb.cli.models"), "model_of", lambda *args: (None, None))
    monkeypatch.setattr(inference.PretrainedModel, "load", classmethod(lambda cls, *args: StandIn()))
    result = project.run("fill-mask", "the [/quote] [MASK] sat")
    assert "the [/quote] [MASK] sat" in said(result) and "the [/quote] [/t] sat" in said(result)


def test_init_and_its_refusal_print_a_bracketed_folder_whole(tmp_path, said: Callable[[Any], str]):
    folder = tmp_path / "[bold] project [/quote]"
    result = CliRunner().invoke(cli, ["init", str(folder)])
    assert result.exit_code == 0 and f"wrote {folder / 'bertwb.yaml'}" in said(result)
    again = CliRunner().invoke(cli, ["init", str(folder)])
    assert again.exit_code == 1 and f"{folder / 'bertwb.yaml'} already exists" in said(again)


def test_a_sql_write_refusal_prints_a_bracketed_path_whole(ingested: Project, said: Callable[[Any], str]):
    target = ingested.workspace / "[red] x [/quote].csv"
    result = ingested.run("sql", "--write", f"copy (select 1 as x) to '{target}'", expect=1)
    assert f"sql --write: {target} is inside the workspace" in said(result) and not target.exists()
