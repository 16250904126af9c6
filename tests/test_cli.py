"""The CLI as a user drives it: a full ingest → vocab run, status, sql, help texts."""

from __future__ import annotations

import json
import shutil
import subprocess

import duckdb
import pytest
from click.testing import CliRunner

from bertwb.cli import cli
from conftest import DEFAULT_TEST_CONFIG, PYTHON, REPO, Project, assert_one_line_error, is_usage_line


def test_every_command_has_help_text():
    for name, command in cli.commands.items():
        assert command.help or command.callback.__doc__, f"bertwb {name} has no help text"
        result = CliRunner().invoke(cli, [name, "--help"])
        assert result.exit_code == 0 and "Usage:" in result.output


# What was wrong (the option, command or value) and where its help is are bertwb's part of the line;
# click words the rest, and its wording is not pinned.
@pytest.mark.parametrize("args, fact, where", [
    (["--zzz"], "--zzz", "bertwb"),
    (["bogus"], "bogus", "bertwb"),
    (["pretrain", "--zzz"], "--zzz", "bertwb pretrain"),
    (["pretrain", "--set"], "--set", "bertwb pretrain"),
    (["sql", "--format", "xml", "select 1"], "--format", "bertwb sql"),
])
def test_a_mistyped_command_line_is_one_line_and_exit_code_2(args, fact, where):
    result = subprocess.run([PYTHON, "-m", "bertwb", *args], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 2  # click's code for usage errors, without its usage block
    assert result.stderr.count("\n") == 1 and is_usage_line(result.stderr.rstrip("\n"), fact, where), result.stderr
    assert "Usage:" not in result.stderr + result.stdout


def test_python_dash_m_and_version():
    result = subprocess.run([PYTHON, "-m", "bertwb", "--version"], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0 and "bertwb" in result.stdout


def test_config_options_go_before_the_command_as_well_as_after_it(project: Project):
    """``bertwb --config F --set K=V run`` as ``bertwb run --config F --set K=V``; the command's own win."""
    before = CliRunner().invoke(cli, ["--config", str(project.config), "--set", "vocab.vocab_size=320",
                                      "run", "--until", "vocab"])
    assert before.exit_code == 0, before.output
    manifest = json.loads((project.workspace / "manifests" / "vocab.json").read_text())
    assert manifest["params"]["vocab"]["vocab_size"] == 320
    mixed = CliRunner().invoke(cli, ["--config", str(project.config), "--set", "vocab.vocab_size=320",
                                     "vocab", "--set", "vocab.vocab_size=384"])
    assert "vocab: running (stale: vocab.vocab_size 320 → 384)" in mixed.output
    elsewhere = CliRunner().invoke(cli, ["--workdir", str(project.root / "other"), "--config", str(project.config),
                                         "status", "--json"])
    assert {row["state"] for row in json.loads(elsewhere.stdout)} == {"missing"}


def test_device_option_is_a_set_of_the_commands_device_key(project: Project):
    """``bertwb pretrain --device X`` is ``--set pretrain.device=X``, given last: it wins over the file and over
    --set, and a bad device is blamed on the command line, not on the file's line that it replaced."""
    project.write_config(DEFAULT_TEST_CONFIG + "pretrain:\n  device: cpu\n")
    assert_one_line_error(project.run("pretrain", "--device", "gpu", expect=None),
                          "--set pretrain.device 'gpu' is not a device")
    assert_one_line_error(project.run("pretrain", "--set", "pretrain.device=cpu", "--device", "gpu", expect=None),
                          "--set pretrain.device 'gpu'")
    project.write_config(DEFAULT_TEST_CONFIG + "pretrain:\n  device: gpu\n")
    assert_one_line_error(project.run("pretrain", expect=None), "bertwb.yaml line 9: pretrain.device 'gpu'")


def test_run_builds_tables_files_and_manifests(project: Project):
    result = project.run("run", "--until", "vocab")
    assert "ingest: running (missing: never run)" in result.output
    assert "vocab: running (missing: never run)" in result.output
    con = duckdb.connect(str(project.workspace / "bertwb.duckdb"), read_only=True)
    documents, valid = con.execute("select count(*), count(*) filter (split = 'valid') from documents").fetchone()
    assert documents == 120 and 1 <= valid <= 30
    n_sentences = con.execute("select count(*) from sentences").fetchone()[0]
    assert n_sentences == con.execute("select count(*) from tokens").fetchone()[0]
    assert con.execute("select sum(n_sentences) from documents").fetchone()[0] == n_sentences
    vocab_size = con.execute("select count(*) from vocab").fetchone()[0]
    assert vocab_size % 64 == 0
    assert con.execute("select token from vocab where token_id < 5 order by token_id").fetchall() == \
        [("[PAD]",), ("[UNK]",), ("[CLS]",), ("[SEP]",), ("[MASK]",)]
    # The frequencies in the vocab table are the counts of the ids in the tokens table.
    counted = con.execute("select sum(len(ids)) from tokens").fetchone()[0]
    assert con.execute("select sum(frequency) from vocab").fetchone()[0] == counted

    manifest = json.loads((project.workspace / "manifests" / "vocab.json").read_text())
    ingest_manifest = json.loads((project.workspace / "manifests" / "ingest.json").read_text())
    assert manifest["deps"]["ingest"] == ingest_manifest["identity"]  # what ingest built, not its key
    assert manifest["outputs"]["tables"]["tokens"] == n_sentences
    assert {"vocab/tokenizer.json", "vocab/vocab.txt"} <= set(manifest["outputs"]["files"])
    assert manifest["summary"]["unk_rate"] == 0
    assert manifest["summary"]["tokens_per_word"] >= 1
    assert manifest["versions"]["duckdb"] == duckdb.__version__
    vocab_lines = (project.workspace / "vocab" / "vocab.txt").read_text().splitlines()
    assert len(vocab_lines) == vocab_size


def test_second_run_skips_every_stage_and_keeps_manifests(project: Project):
    project.run("run", "--until", "vocab")
    before = {p.name: p.read_bytes() for p in (project.workspace / "manifests").iterdir()}
    result = project.run("run", "--until", "vocab")
    assert "ingest: fresh" in result.output and "vocab: fresh" in result.output
    assert "running" not in result.output
    after = {p.name: p.read_bytes() for p in (project.workspace / "manifests").iterdir()}
    assert before == after


def test_status_table_and_json(project: Project):
    states = {r["stage"]: r["state"] for r in json.loads(project.run("status", "--json").stdout)}
    assert states == {"ingest": "missing", "vocab": "missing"} | {k: "missing" for k in states if k not in
                                                                  ("ingest", "vocab")}
    project.run("ingest")
    rows = {r["stage"]: r for r in json.loads(project.run("status", "--json").stdout)}
    assert rows["ingest"]["state"] == "fresh" and rows["ingest"]["rows"]["documents"] == 120
    assert rows["vocab"]["state"] == "missing"
    project.run("vocab")
    project.run("run", "--until", "vocab", "--set", "vocab.vocab_size=320")  # builds, then the config below differs
    rows = {r["stage"]: r for r in json.loads(project.run("status", "--json").stdout)}
    assert rows["vocab"]["state"] == "stale"
    assert rows["vocab"]["reason"] == "vocab.vocab_size 320 → 256"
    table = project.run("status").stdout
    assert "vocab.vocab_size 320 → 256" in table and "fresh" in table


def test_status_shows_a_missing_input_and_run_stops_on_it(project: Project):
    """A config whose corpus is not there yet (pipelines/bert-base.yaml before corpus/ exists): status
    still lists every stage and says why, rather than failing; running is what stops, with one line."""
    project.run("ingest")
    shutil.rmtree(project.root / "corpus")
    rows = {r["stage"]: r for r in json.loads(project.run("status", "--json").stdout)}
    assert rows["ingest"]["state"] == "stale"
    assert rows["ingest"]["reason"].startswith("ingest.inputs: 'corpus' does not exist")
    assert rows["vocab"] == rows["vocab"] | {"state": "missing", "reason": "upstream ingest is stale"}
    assert "does not exist" in project.run("status").stdout
    assert_one_line_error(project.run("run", expect=1), "ingest.inputs: 'corpus' does not exist", "fix the path")


@pytest.mark.built("vocab")
def test_sql_formats(project: Project, tmp_path):
    query = "select doc_id, split from documents order by doc_id limit 3"
    table = project.run("sql", query).stdout
    assert "doc_id" in table and "split" in table
    csv_text = project.run("sql", query, "--format", "csv").stdout
    assert csv_text.splitlines()[0] == "doc_id,split" and len(csv_text.splitlines()) == 4
    rows = json.loads(project.run("sql", query, "--format", "json").stdout)
    assert [r["doc_id"] for r in rows] == [0, 1, 2]
    out = tmp_path / "docs.parquet"
    project.run("sql", query, "--format", "parquet", "--output", str(out))
    assert duckdb.connect().execute(f"select count(*) from '{out}'").fetchone()[0] == 3
    link = tmp_path / "latest.csv"  # a link is written through (as /dev/stdout must be), not replaced
    link.symlink_to(tmp_path / "docs.csv")
    project.run("sql", query, "--format", "csv", "--output", str(link))
    assert link.is_symlink() and (tmp_path / "docs.csv").read_text() == csv_text
    sql_file = tmp_path / "q.sql"
    sql_file.write_text("select count(*) as n from sentences;")
    assert json.loads(project.run("sql", "-f", str(sql_file), "--format", "json").stdout)[0]["n"] > 0


@pytest.mark.built("vocab")
def test_sql_views_decode_tokens_and_frequencies(project: Project):
    rows = json.loads(project.run("sql", "select text, pieces from tokens_text limit 5", "--format", "json").stdout)
    for row in rows:
        assert "".join(p.removeprefix("##") for p in row["pieces"]) == row["text"].lower().replace(" ", "")
    top = json.loads(project.run("sql", "select token, percent from vocab_freq limit 1", "--format", "json").stdout)
    assert top[0]["percent"] > 0
    stats = json.loads(project.run("sql", "select * from corpus_stats", "--format", "json").stdout)
    assert sum(r["documents"] for r in stats) == 120


def test_sql_is_read_only_by_default(project: Project):
    project.run("ingest")
    result = project.run("sql", "delete from documents", expect=1)
    assert "read-only" in result.output.lower()
    assert json.loads(project.run("sql", "select count(*) as n from documents", "--format", "json").stdout)[0]["n"] \
        == 120
    project.run("sql", "create table notes as select 1 as x", "--write")


@pytest.mark.built("vocab")
def test_tokenizer_loads_in_transformers_with_identical_ids(project: Project):
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer
    vocab_dir = project.workspace / "vocab"
    hf = transformers.BertTokenizerFast.from_pretrained(str(vocab_dir))
    ours = Tokenizer.from_file(str(vocab_dir / "tokenizer.json"))
    con = duckdb.connect(str(project.workspace / "bertwb.duckdb"), read_only=True)
    for text, ids in con.execute("select s.text, t.ids from sentences s join tokens t using (doc_id, sent_idx) "
                                 "limit 50").fetchall():
        assert hf(text, add_special_tokens=False)["input_ids"] == ids
        assert hf(text)["input_ids"] == ours.encode(text).ids
    pair = hf("Ship sail.", "Bread oven.")
    assert pair["token_type_ids"] == ours.encode("Ship sail.", "Bread oven.").type_ids
    slow = transformers.BertTokenizer(str(vocab_dir / "vocab.txt"), do_lower_case=True)
    assert slow("The captain's ship!")["input_ids"] == hf("The captain's ship!")["input_ids"]


def test_workspace_prints_the_folder_the_config_names_and_makes_nothing(tmp_path, monkeypatch):
    """`bertwb workspace`: workspace.dir as the config resolves it (--workdir and --set win), relative to the
    current folder when inside it, else absolute; a broken config is its one-line error."""
    assert CliRunner().invoke(cli, ["init", str(tmp_path)]).exit_code == 0
    monkeypatch.chdir(tmp_path)

    def printed(*args: str) -> str:
        result = CliRunner().invoke(cli, [*args, "workspace"])
        assert result.exit_code == 0, result.output
        return result.stdout

    assert printed() == ".bertwb\n"
    config = tmp_path / "bertwb.yaml"
    config.write_text(config.read_text().replace("\n  dir: .bertwb ", "\n  dir: runs/x  ", 1))
    assert printed() == "runs/x\n"
    assert printed("--workdir", "other") == "other\n" and printed("--set", "workspace.dir=../up") == "../up\n"
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    assert printed("--config", "../bertwb.yaml") == f"{tmp_path.resolve() / 'runs' / 'x'}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["Makefile", "bertwb.yaml", "corpus", "sub"]
    broken = CliRunner().invoke(cli, ["--config", "missing.yaml", "workspace"])
    assert broken.exit_code == 1 and "missing.yaml: config file not found" in broken.output and not broken.stdout


@pytest.mark.parametrize("before, named", [
    (["--workdir", "elsewhere"], "--workdir"),
    (["--set", "vocab.vocab_size=512", "--config", "x.yaml"], "--config and --set")])
def test_config_options_before_init_or_compare_are_refused_not_dropped(tmp_path, before, named):
    init = CliRunner().invoke(cli, [*before, "init", str(tmp_path / "p")])
    assert_one_line_error(init, f"{named}: init reads no config", "edit the bertwb.yaml it writes")
    assert not (tmp_path / "p").exists()  # nothing written
    (tmp_path / "ws").mkdir()
    compare = CliRunner().invoke(cli, [*before, "compare", str(tmp_path / "ws")])
    assert_one_line_error(compare, f"{named}: compare reads no config", "name the workspaces")
    assert CliRunner().invoke(cli, ["init", str(tmp_path / "p")]).exit_code == 0  # without them, as always


def test_init_writes_a_config_that_loads_to_the_defaults(tmp_path):
    import dataclasses

    from bertwb.config import SECTIONS
    from bertwb.configfile import load_config
    result = CliRunner().invoke(cli, ["init", str(tmp_path), "--input", "texts/*.txt"])
    assert result.exit_code == 0, result.output
    cfg = load_config(tmp_path / "bertwb.yaml")
    assert cfg.ingest.inputs == ["texts/*.txt"]
    for section, cls in SECTIONS.items():
        defaults = cls()
        if section == "ingest":
            defaults.inputs = ["texts/*.txt"]
        assert dataclasses.asdict(cfg.section(section)) == dataclasses.asdict(defaults)
    makefile = (tmp_path / "Makefile").read_text()
    assert "$(M)/vocab.json: $(M)/ingest.json" in makefile and "$(RUN) finetune" in makefile
    assert "BERT format" in (tmp_path / "corpus" / "README.md").read_text()
    assert cfg.pairs.masked_lm_prob == 0.15 and cfg.finetune.lr == 5e-5  # BERT's own recipe
    again = CliRunner().invoke(cli, ["init", str(tmp_path)])
    assert again.exit_code == 1 and "already exists; pass --force" in again.output


@pytest.mark.parametrize("args, code", [(["--version"], 0), (["bogus"], 2),
                                        (["status", "--config", "/nonexistent.yaml"], 1)])
def test_the_entry_point_freezes_the_collector_as_the_command_ends(args: list[str], code: int,
                                                                   monkeypatch: pytest.MonkeyPatch):
    """`main`, the process's entry point, leaves the exit's garbage collections nothing to walk (gc.freeze),
    whatever the command's exit code, which it keeps; `cli` called in-process (tests, scripts) freezes nothing."""
    import gc
    import sys

    import bertwb.cli as entry

    monkeypatch.setattr(entry.memory, "reexec_with_malloc_tunables", lambda: None)  # no re-exec of pytest
    monkeypatch.setattr(entry.memory, "bound_kernel_cache", lambda: [])  # nor settings in its environment
    monkeypatch.setattr(sys, "argv", ["bertwb", *args])
    gc.unfreeze()
    try:
        assert CliRunner().invoke(cli, args).exit_code == code and gc.get_freeze_count() == 0
        with pytest.raises(SystemExit) as ended:
            entry.main()
        assert ended.value.code == code and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
