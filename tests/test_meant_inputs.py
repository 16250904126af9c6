"""Issue #49: inputs read as the user meant them, or refused in one line naming the input and the fix.

Each test drives the CLI on a case that exited 0 with a wrong result (or an internal error) before: a tag
task predicting on raw text, on CoNLL found by its columns and on stdin; a tag file without a known
extension; the labelled file's gold; and the other classes the issue lists, each beside its fix.
"""

from __future__ import annotations

import json
import random
import textwrap
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

from bertwb.cli import cli
from conftest import Project, assert_one_line_error, ingested_documents, make_documents, tiny_model_dir


def _tag_sentences(n: int, seed: int = 0) -> list[list[tuple[str, str]]]:
    """Sentences of the tiny model's words, each with one "ship", the only entity (type X)."""
    rng = random.Random(seed)
    sentences = []
    for _ in range(n):
        words = [rng.choice(["the", "sail", "."]) for _ in range(rng.randint(2, 5))]
        words.insert(rng.randrange(len(words) + 1), "ship")
        sentences.append([(word, "B-X" if word == "ship" else "O") for word in words])
    return sentences


def _conll(sentences: list[list[tuple[str, str]]]) -> str:
    return "\n\n".join("\n".join(f"{word} {tag}" for word, tag in sentence) for sentence in sentences) + "\n"


@pytest.fixture(scope="module")
def tagger(tmp_path_factory: pytest.TempPathFactory) -> Project:
    """A tag task trained from a tiny random model on a CoNLL file named like CoNLL 2003's ``eng.train`` (no
    known extension): 40 steps teach it that "ship" is an X, in a few seconds."""
    root = tmp_path_factory.mktemp("tagger")
    tiny_model_dir(root / "model")
    (root / "eng.train").write_text(_conll(_tag_sentences(24)))
    (root / "corpus").mkdir()
    project = Project(root)
    project.write_config(yaml.safe_dump({"ingest": {"inputs": ["corpus"]}, "finetune": {
        "steps": 40, "batch_size": 8, "max_seq_length": 32, "init_from": "model", "lr": 0.01, "eval_every": 0,
        "tasks": {"ner": {"type": "tag", "train": "eng.train"}}}}))
    project.run("finetune", "-q")
    return project


def _predict(project: Project, *args: str, stdin: str | None = None) -> list[dict]:
    result = CliRunner().invoke(cli, ["predict", "ner", "--config", str(project.config), *args], input=stdin)
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


def _invoke(project: Project, *args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(cli, [args[0], "--config", str(project.config), *args[1:]], input=stdin)


# --- 1a: a tag task predicts on raw text; CoNLL is found by its columns --------------------------------------

def test_a_tag_task_trains_on_a_conll_file_found_by_its_content(tagger: Project):
    """`eng.train` was "the extension is not one this task reads"; it trained (in the fixture), and learnt."""
    rows = _predict(tagger, str(tagger.root / "eng.train"))
    assert len(rows) == 24 and all(row["tags"] == row["gold"] for row in rows)


def test_a_text_file_whose_lines_have_equal_word_counts_is_raw_text_one_input_a_line(tagger: Project, tmp_path: Path):
    """It was read as CoNLL: one "sentence" of each line's first word, the other words taken for tags."""
    text = tmp_path / "lines.txt"
    text.write_text("the ship sail\nthe sail ship\n")
    rows = _predict(tagger, str(text))
    assert [row["text"] for row in rows] == ["the ship sail", "the sail ship"]
    assert [[(e["type"], e["text"], e["start"], e["end"]) for e in row["entities"]] for row in rows] == \
        [[("X", "ship", 4, 8)], [("X", "ship", 9, 13)]]
    assert all(0.5 < e["score"] <= 1 for row in rows for e in row["entities"])


def test_lines_of_unequal_length_are_raw_text_not_a_column_count_error(tagger: Project, tmp_path: Path):
    text = tmp_path / "notes"
    text.write_text("the ship sails.\n\nthe sail\n")
    rows = _predict(tagger, str(text))
    assert [row["text"] for row in rows] == ["the ship sails.", "the sail"]
    assert rows[0]["entities"][0]["text"] == "ship"


def test_raw_text_is_split_by_the_tokenizer_with_character_offsets(tagger: Project):
    """Stdin lines were split at whitespace only, so "ship," was one word; the pre-tokenizer splits punctuation
    off, as transformers' token-classification pipeline does, and --words gives each word's label."""
    [row] = _predict(tagger, "--words", stdin="the  ship, sails.\n")
    assert [(w["word"], w["start"], w["end"]) for w in row["words"]] == \
        [("the", 0, 3), ("ship", 5, 9), (",", 9, 10), ("sails", 11, 16), (".", 16, 17)]
    assert all(row["text"][w["start"]:w["end"]] == w["word"] for w in row["words"])
    assert row["words"][1]["tag"] == "B-X" and row["entities"][0] == {**row["entities"][0], "start": 5, "end": 9}
    assert set(_predict(tagger, stdin="the ship\n")[0]) == {"text", "entities"}  # word labels only when asked


def test_format_conll_reads_a_file_as_conll_whatever_its_columns(tagger: Project, tmp_path: Path):
    words = tmp_path / "words.txt"
    words.write_text("the\nship\n\nsail\nship\n")  # one word a line, sentences apart: CoNLL without tags
    assert [row["words"] for row in _predict(tagger, str(words))] == [["the", "ship"], ["sail", "ship"]]
    lines = tmp_path / "lines.txt"
    lines.write_text("the ship\nsail ship\n")
    forced = _predict(tagger, str(lines), "--set", "finetune.tasks.ner.format=conll")
    assert [row["words"] for row in forced] == [["the", "sail"]]


def test_a_file_that_is_not_conll_trains_nothing_and_names_format_conll(tagger: Project):
    (tagger.root / "notes.train").write_text("the ship sail\nthe sail\n")
    result = _invoke(tagger, "finetune", "--set", "finetune.tasks.ner.train=notes.train")
    assert_one_line_error(result, "notes.train: not CoNLL (line 2 has 2 columns where line 1 has 3)",
                          "set finetune.tasks.ner.format: conll")


def test_a_labelled_conll_file_s_rows_carry_their_gold(tagger: Project, tmp_path: Path):
    """The README promised `gold` on a labelled file; the tag task read its words only."""
    dev = tmp_path / "dev.conll"
    dev.write_text(_conll(_tag_sentences(3, seed=5)))
    rows = _predict(tagger, str(dev))
    assert [row["gold"] for row in rows] == [[tag for _, tag in s] for s in _tag_sentences(3, seed=5)]
    assert rows[0]["entities"][0].keys() == {"type", "text", "first_word", "last_word", "score"}


# --- 1b: hard-wrapped prose is read as paragraphs, and one line says so ---------------------------------------

def _wrapped(documents: list[list[str]], width: int = 72) -> str:
    return "\n\n".join(textwrap.fill(" ".join(sentences), width) for sentences in documents) + "\n"


def test_hard_wrapped_prose_is_read_as_paragraphs_and_one_line_says_so(project: Project):
    """A licence or a book wrapped at 72 columns was read as one sentence per line: its fragments became the
    sentences, and nothing said so."""
    documents = make_documents(30, seed=4)
    (project.root / "corpus" / "a.txt").write_text(_wrapped(documents))
    result = project.run("ingest")
    assert "ingest: corpus/a.txt reads as paragraphs: it looks hard-wrapped (" in result.output
    assert "set ingest.format: bert if it is one sentence per line" in result.output
    ingested = ingested_documents(project)
    assert [" ".join(doc) for doc in ingested] == [" ".join(doc) for doc in documents]
    assert all(sentence[-1] in ".?!" for doc in ingested for sentence in doc)  # sentences, not line fragments


def test_the_bert_format_is_not_taken_for_wrapped_prose(project: Project):
    """Lines of one sentence each, and a wrapped file that ingest.format names as bert, stay as they are."""
    result = project.run("ingest")
    assert "reads as paragraphs" not in result.output
    assert ingested_documents(project) == make_documents(120)
    documents = make_documents(30, seed=4)
    (project.root / "corpus" / "a.txt").write_text(_wrapped(documents))
    named = project.run("ingest", "--set", "ingest.format=bert")
    assert "reads as paragraphs" not in named.output
    assert [len(doc) for doc in ingested_documents(project)] == \
        [len(textwrap.fill(" ".join(doc), 72).splitlines()) for doc in documents]


# --- 1c: a tokenizer.json that is not BERT's WordPiece is refused; casing is the normaliser's ----------------

def _with_tokenizer(folder: Path, kind: str) -> Path:
    """A tiny model directory whose tokenizer.json holds the same tokens in another kind of model (BPE,
    Unigram), as a RoBERTa or T5 folder would; or WordPiece under a normaliser that keeps case, or with a gap."""
    from tokenizers import Tokenizer, models, normalizers  # noqa: PLC0415

    tiny_model_dir(folder)
    path = folder / "tokenizer.json"
    tokenizer = Tokenizer.from_file(str(path))
    vocab = tokenizer.get_vocab()
    if kind == "BPE":
        tokenizer.model = models.BPE(vocab, [], unk_token="[UNK]")
    elif kind == "Unigram":
        tokenizer.model = models.Unigram([(token, -1.0) for token in sorted(vocab, key=vocab.get)], 1)
    elif kind == "cased":
        tokenizer.normalizer = normalizers.NFC()
    tokenizer.save(str(path))
    if kind == "gap":
        data = json.loads(path.read_text())
        data["model"]["vocab"]["ship"] = len(vocab) + 3  # "ship" moved past the end: ids 6 and on skip one
        path.write_text(json.dumps(data))
    return folder


@pytest.mark.parametrize("kind", ["BPE", "Unigram"])
def test_a_bpe_or_unigram_tokenizer_is_refused_in_one_line_naming_its_kind(project: Project, tmp_path: Path,
                                                                           kind: str):
    """Its pieces were trained on as WordPiece ones, and export wrote a BertTokenizer that gave other ids."""
    model = _with_tokenizer(tmp_path / "model", kind)
    result = CliRunner().invoke(cli, ["init", str(tmp_path / "adapt"), "--recipe", "continue", "--from", str(model)])
    assert_one_line_error(result, f"{model / 'tokenizer.json'}: a {kind} tokenizer, not BERT's WordPiece")
    assert not (tmp_path / "adapt" / "bertwb.yaml").exists()
    vocab = project.run("run", "--until", "vocab", "--set", f"vocab.from_file={model / 'tokenizer.json'}", expect=1)
    assert_one_line_error(vocab, f"a {kind} tokenizer, not BERT's WordPiece", "let `bertwb vocab` train one")
    assert not (project.workspace / "vocab" / "tokenizer.json").exists()


def test_the_continue_recipe_cases_as_the_tokenizer_s_own_normaliser_does(tmp_path: Path):
    """A normaliser other than BERT's that keeps case was written as `vocab.lowercase: true`."""
    model = _with_tokenizer(tmp_path / "model", "cased")
    CliRunner().invoke(cli, ["init", str(tmp_path / "adapt"), "--recipe", "continue", "--from", str(model)])
    assert yaml.safe_load((tmp_path / "adapt" / "bertwb.yaml").read_text())["vocab"]["lowercase"] is False
    lowercasing = _with_tokenizer(tmp_path / "lower", "WordPiece")
    CliRunner().invoke(cli, ["init", str(tmp_path / "a2"), "--recipe", "continue", "--from", str(lowercasing)])
    assert yaml.safe_load((tmp_path / "a2" / "bertwb.yaml").read_text())["vocab"]["lowercase"] is True


# --- 2: internal errors become one line ---------------------------------------------------------------------

def test_a_tokenizer_json_with_a_gap_in_its_ids_is_one_line(project: Project, tmp_path: Path):
    """It was an internal error (IndexError) in the vocab stage."""
    model = _with_tokenizer(tmp_path / "model", "gap")
    result = project.run("run", "--until", "vocab", "--set", f"vocab.from_file={model / 'tokenizer.json'}", expect=1)
    assert_one_line_error(result, f"{model / 'tokenizer.json'}: no token has id 6, though ids run to 13",
                          "renumber the tokens")
    assert "internal error" not in result.output


# --- 1d: a vocabulary that makes the corpus [UNK] stops the stage -------------------------------------------

def test_a_vocabulary_of_special_tokens_only_stops_naming_the_unk_rate_and_cause(project: Project):
    """Every token became [UNK], with exit 0, and pre-training went on to learn nothing."""
    project.run("run", "--until", "vocab")
    built = (project.workspace / "vocab" / "tokenizer.json").read_bytes()
    (project.root / "specials.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n")
    result = project.run("vocab", "--set", "vocab.from_file=specials.txt", expect=1)
    assert_one_line_error(result, "100.0% of the corpus's tokens are [UNK], above vocab.max_unk_rate 5%: the "
                          "vocabulary of specials.txt holds only special tokens (5)", "raise vocab.max_unk_rate")
    assert (project.workspace / "vocab" / "tokenizer.json").read_bytes() == built  # the vocabulary before stays
    project.run("vocab", "--set", "vocab.from_file=specials.txt", "--set", "vocab.max_unk_rate=1")  # when meant


@pytest.mark.parametrize("content, problem", [
    ("[1, 2]", "holds a list, not a JSON object"),
    ('{"initialised": "MLM head"}', "its 'initialised' is a string, not a list of strings"),
    ('{"initialised": [', "unreadable JSON ("),
])
def test_a_malformed_import_json_is_one_line_naming_it(tmp_path: Path, content: str, problem: str):
    """A list was an internal error in `init --recipe continue`; a string was read letter by letter."""
    model = tiny_model_dir(tmp_path / "model")
    (model / "import.json").write_text(content)
    result = CliRunner().invoke(cli, ["init", str(tmp_path / "adapt"), "--recipe", "continue", "--from", str(model)])
    assert_one_line_error(result, f"{model / 'import.json'}: {problem}",
                          "import the model again with `bertwb import-hf`")
    assert "internal error" not in result.output and not (tmp_path / "adapt" / "bertwb.yaml").exists()


def test_a_line_break_in_the_from_path_stays_inside_the_generated_comment(tmp_path: Path):
    """The path went into the config's head comment as it was: after its newline, the rest became YAML."""
    model = tiny_model_dir(tmp_path / "model\nvocab: {vocab_size: 7}\u2028pairs: 1")
    result = CliRunner().invoke(cli, ["init", str(tmp_path / "adapt"), "--recipe", "continue", "--from", str(model)])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "adapt" / "bertwb.yaml").read_text()
    assert "model\\nvocab: {vocab_size: 7}\\u2028pairs: 1" in text  # escaped in the comment
    config = yaml.safe_load(text)
    assert config["vocab"]["vocab_size"] == 8192 and isinstance(config["pairs"], dict)
    assert config["model"]["init_from"] == str(model)  # the value itself, quoted by YAML, is the real path
    status = CliRunner().invoke(cli, ["status", "--config", str(tmp_path / "adapt" / "bertwb.yaml")])
    assert status.exit_code == 0, status.output


def test_a_yaml_alias_bomb_s_error_is_one_readable_line(tmp_path: Path):
    """The value it quoted made the error line megabytes long (28 MB for a bigger bomb)."""
    anchors = ["&a0 [lol,lol,lol,lol,lol,lol,lol,lol,lol]"] + \
        [f"&a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 6)]
    (tmp_path / "bertwb.yaml").write_text("vocab:\n  vocab_size: [" + ", ".join(anchors) + "]\n")
    result = CliRunner().invoke(cli, ["status", "--config", str(tmp_path / "bertwb.yaml")])
    assert_one_line_error(result, "bertwb.yaml line 2: vocab.vocab_size must be an integer", "characters left out")
    assert len(result.output) < 1100


# --- 3: predictions join back to their inputs ----------------------------------------------------------------

@pytest.fixture(scope="module")
def classifier(tmp_path_factory: pytest.TempPathFactory) -> Project:
    """A classify task and a regression task, two steps each from a tiny random model."""
    root = tmp_path_factory.mktemp("classifier")
    tiny_model_dir(root / "model")
    (root / "corpus").mkdir()
    (root / "train.csv").write_text("text,label,level\n" + "".join(f"the ship sail {i},{'ab'[i % 2]},{i / 7}\n"
                                                                  for i in range(8)))
    project = Project(root)
    project.write_config(yaml.safe_dump({"ingest": {"inputs": ["corpus"]}, "finetune": {
        "steps": 2, "batch_size": 4, "max_seq_length": 32, "init_from": "model", "eval_every": 0,
        "tasks": {"topic": {"type": "classify", "train": "train.csv"},
                  "level": {"type": "classify", "train": "train.csv", "label_column": "level", "regression": True}}}}))
    project.run("finetune", "-q")
    return project


def _rows(project: Project, *args: str, stdin: bytes | None = None) -> list[dict]:
    result = CliRunner().invoke(cli, ["predict", "--config", str(project.config), *args], input=stdin)
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_predict_keeps_every_input_column_under_its_own_name(classifier: Project, tmp_path: Path):
    """An `id` vanished and the text came back as `text`; the label column is the gold, and an input column
    named as a prediction column is kept beside it."""
    (tmp_path / "new.csv").write_text("id,body,score,label\nr1,the ship,7,a\nr2,the sail,8,b\n")
    rows = _rows(classifier, "topic", str(tmp_path / "new.csv"), "--set", "finetune.tasks.topic.text_column=body")
    assert [list(row) for row in rows] == [["id", "body", "input.score", "label", "score", "probabilities", "gold"]] * 2
    assert [(row["id"], row["body"], row["input.score"], row["gold"]) for row in rows] == \
        [("r1", "the ship", "7", "a"), ("r2", "the sail", "8", "b")]
    (tmp_path / "new.jsonl").write_text('{"key": 5, "text": "the ship", "meta": {"from": "x"}}\n')
    [row] = _rows(classifier, "topic", str(tmp_path / "new.jsonl"))
    assert (row["key"], row["text"], row["meta"]) == (5, "the ship", {"from": "x"}) and row["label"] in ("a", "b")


def test_regression_values_are_rounded_as_class_scores_are(classifier: Project):
    rows = _rows(classifier, "level", stdin=b"the ship\nthe sail sail\n")
    assert all(row["value"] == round(row["value"], 6) and len(repr(row["value"]).split(".")[-1]) <= 6 for row in rows)


def test_a_nul_byte_is_refused_alike_in_a_file_and_on_stdin(classifier: Project, tmp_path: Path):
    """A CSV's NUL was read and echoed back into the output, while stdin's was refused."""
    (tmp_path / "nul.csv").write_bytes(b"text\nthe ship\nthe\x00sail\n")
    result = _invoke(classifier, "predict", "topic", str(tmp_path / "nul.csv"))
    assert_one_line_error(result, f"{tmp_path / 'nul.csv'}:3: a NUL byte: binary data, not text")
    piped = CliRunner().invoke(cli, ["predict", "topic", "--config", str(classifier.config)],
                               input=b"the ship\nthe\x00sail\n")
    assert_one_line_error(piped, "stdin:2: a NUL byte: binary data, not text")


def test_tag_metrics_give_each_entity_type_and_iob1_tags_are_named(tmp_path: Path):
    """Tag metrics were entity F1 overall only; and CoNLL 2003's original IOB1 tags went by without a word."""
    tiny_model_dir(tmp_path / "model")
    (tmp_path / "corpus").mkdir()
    iob1 = [[("the", "O"), ("ship", "I-X"), ("sail", "I-Y")], [("ship", "I-X"), ("ship", "B-X"), (".", "O")]] * 4
    (tmp_path / "train.conll").write_text(_conll(iob1))
    (tmp_path / "dev.conll").write_text(_conll([[("the", "O"), ("ship", "B-X"), ("sail", "I-Y")]] * 3))
    project = Project(tmp_path)
    project.write_config(yaml.safe_dump({"ingest": {"inputs": ["corpus"]}, "finetune": {
        "steps": 2, "batch_size": 4, "max_seq_length": 32, "init_from": "model", "eval_every": 0,
        "tasks": {"ner": {"type": "tag", "train": "train.conll", "dev": "dev.conll"}}}}))
    result = project.run("finetune")
    assert f"warning: {tmp_path / 'train.conll'}: 12 of 16 entities start with I-: the tags look like IOB1" \
        in result.output
    dev = json.loads((project.workspace / "finetune" / "ner" / "metrics.json").read_text())["dev"]
    assert set(dev["per_type"]) == {"X", "Y"} and dev["per_type"]["X"]["support"] == 3
    assert set(dev["per_type"]["Y"]) == {"precision", "recall", "f1", "support"}
    rows = project.run("sql", "--format", "csv", "select metric from finetune_metrics where metric like "
                       "'dev_per_type.%.f1' order by metric").output.split()
    assert rows == ["metric", "dev_per_type.X.f1", "dev_per_type.Y.f1"]
    project.run("report")
    assert "dev F1 by type: X " in (project.workspace / "report" / "index.html").read_text()


# --- 4: messages --------------------------------------------------------------------------------------------

def test_fill_mask_and_nsp_warn_when_the_import_made_their_head_anew(project: Project, tmp_path: Path):
    """A checkpoint without the masked-LM (or NSP) head printed confident nonsense from the random new one."""
    model = tiny_model_dir(tmp_path / "model")
    (model / "import.json").write_text(json.dumps({"kind": "pretraining", "initialised": ["NSP head"]}))
    filled = project.run("fill-mask", "--checkpoint", str(model), "the [MASK] sail")
    assert "warning" not in filled.output  # its MLM head came with the checkpoint
    nsp = project.run("nsp", "--checkpoint", str(model), "the ship", "the sail")
    assert f"warning: {model} has no trained NSP head (import.json: the checkpoint had none" in nsp.output
    assert "nsp's answers are random" in nsp.output
    (model / "import.json").write_text(json.dumps({"kind": "pretraining", "initialised": ["MLM head"]}))
    filled = project.run("fill-mask", "--checkpoint", str(model), "the [MASK] sail")
    assert "has no trained MLM head" in filled.output and "fill-mask's answers are random" in filled.output


def test_word_labels_are_asked_of_a_tag_task_alone(tagger: Project):
    """--words is a tag task's option, given to it whole when it is made; a classify task asked for it is one line."""
    result = _invoke(tagger, "predict", "mood", "--words", "--checkpoint", str(tagger.root / "model"),
                     "--set", "finetune.tasks.mood.type=classify", stdin="the ship\n")
    assert_one_line_error(result, "--words", "mood is a classify task")
