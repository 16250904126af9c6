"""Shared fixtures: a small generated corpus, a project directory around it, and a CLI driver."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import duckdb
import numpy as np
import pytest
import yaml
from click.testing import CliRunner, Result

from bertwb import faults, ui
from bertwb.cli import cli
from bertwb.data.pair_batches import PairArrays

REPO = Path(__file__).resolve().parents[1]
SAMPLE_CORPUS = REPO / "sample_corpus" / "pretrain"


def benchmark_records() -> dict[str, bytes]:
    """BENCHMARKS.md and every month's log under benchmarks/log/, by path: what a benchmark run with
    ``--no-append`` must leave as it found it."""
    paths = [REPO / "BENCHMARKS.md", *sorted((REPO / "benchmarks" / "log").glob("*.md"))]
    return {str(path.relative_to(REPO)): path.read_bytes() for path in paths}

TOPIC_WORDS = {
    "sea": "ship sail harbour wave captain anchor deck crew storm tide island rope",
    "kitchen": "bread oven flour butter soup knife recipe salt pepper onion garlic cook",
    "sky": "star planet moon telescope orbit comet galaxy night astronomer light dust",
}
GLUE_WORDS = "the a of to in and with on at was is by for from".split()


def make_documents(n_docs: int, seed: int = 0) -> list[list[str]]:
    """Deterministic documents of 2–9 sentences, each on one topic."""
    rng = random.Random(seed)
    documents = []
    for _ in range(n_docs):
        words = TOPIC_WORDS[rng.choice(sorted(TOPIC_WORDS))].split()
        sentences = []
        for _ in range(rng.randint(2, 9)):
            tokens = [rng.choice(words) if rng.random() < 0.6 else rng.choice(GLUE_WORDS)
                      for _ in range(rng.randint(4, 14))]
            sentences.append(" ".join(tokens).capitalize() + rng.choice([".", ".", "?", "!"]))
        documents.append(sentences)
    return documents


def write_bert_format(path: Path, documents: list[list[str]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n\n".join("\n".join(doc) for doc in documents) + "\n", encoding="utf-8")
    return path


@dataclass
class Project:
    """A directory with a corpus and a bertwb.yaml, driven through the CLI in-process."""

    root: Path

    @property
    def config(self) -> Path:
        return self.root / "bertwb.yaml"

    @property
    def workspace(self) -> Path:
        return self.root / ".bertwb"

    def write_config(self, text: str) -> None:
        self.config.write_text(text, encoding="utf-8")

    def run(self, command: str, *args: str, expect: int | None = 0) -> Result:
        """``bertwb COMMAND --config PROJECT/bertwb.yaml ARGS...``; checks the exit code unless None."""
        result = CliRunner().invoke(cli, [command, "--config", str(self.config), *args])
        if expect is not None and result.exit_code != expect:
            raise AssertionError(f"bertwb {command} {' '.join(args)} exited {result.exit_code}, "
                                 f"expected {expect}:\n{result.output}\n{result.exception!r}")
        return result


DEFAULT_TEST_CONFIG = """
ingest:
  inputs: [corpus]
  valid_fraction: 0.1
vocab:
  vocab_size: 256
  min_frequency: 1
"""


@pytest.fixture(scope="session", autouse=True)
def one_thread() -> None:
    """One intra-op thread for every test and its subprocesses, module fixtures that train included: on a
    shared 2-core machine OpenMP's spin-waits made 2 threads 3–5× slower than one."""
    import torch

    torch.set_num_threads(1)
    os.environ["OMP_NUM_THREADS"] = "1"


@pytest.fixture(scope="session", autouse=True)
def plain_cpu() -> None:
    """Every test and its subprocesses see a CPU without bf16 matrix instructions, so ``precision: auto`` is fp32
    whatever machine runs the suite: tolerances tuned on fp32 hold on an AMX machine too, and no result hangs on
    a timing check of a busy machine. A test of bf16 under auto says so (`bf16_cpu`). The CPU's maker is AMD's,
    so fp32 products take the oneDNN path on an Intel CI machine too (`bertwb.fast.linear.onednn_preferred`)."""
    from bertwb.cpuinfo import VENDOR_ENV
    from bertwb.train.device import CPU_FLAGS_ENV

    os.environ[CPU_FLAGS_ENV] = ""
    os.environ[VENDOR_ENV] = "AuthenticAMD"


def bf16_cpu(monkeypatch: pytest.MonkeyPatch, flags: str = "avx512_bf16", speedup: float = 2.4) -> None:
    """Make this process's precision rule see a CPU with ``flags`` whose matmul check measures ``speedup``."""
    from bertwb.train import device

    monkeypatch.setenv(device.CPU_FLAGS_ENV, flags)
    monkeypatch.setattr(device, "bf16_matmul_check", lambda hidden, intermediate, threads:
                        device.MatmulCheck(speedup, hidden, intermediate))


@pytest.fixture(scope="session", autouse=True)
def ctrl_c_interrupts() -> None:
    """SIGINT raises KeyboardInterrupt in the suite's own process, as in a terminal's foreground job.

    A suite started in the background by a script (`make test &`, a CI harness without job control)
    inherits SIGINT ignored, which Python keeps. The fault hook's ``sigint`` then interrupted nothing
    where bertwb installs no handler of its own: the quiet-stage test's pairs ran to the end and exited
    0, while the training Ctrl-C tests passed, the trainer installing its own handler. That is how it
    passed alone in a terminal and failed in a full run (reproduced with `trap '' INT`)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def leaves_no_state_behind() -> Iterator[None]:
    """Every test ends with the process as it found it: no fault armed or stage open in the fault hook, the
    same SIGINT handler, the same verbosity. A test that leaked one of them would change what the tests
    after it see, and the suite's outcome would hang on its order (it runs in a random one)."""
    before = (signal.getsignal(signal.SIGINT), ui.verbosity())
    yield
    assert faults._stage is None, f"a test left the fault hook inside stage {faults._stage!r}"
    assert faults.ENV not in os.environ, f"a test left {faults.ENV}={os.environ[faults.ENV]!r} set"
    assert (signal.getsignal(signal.SIGINT), ui.verbosity()) == before, "a test left a SIGINT handler or verbosity"


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """The test order's seed, at the end where a failed run's reader looks: -q hides the header that
    pytest-randomly prints it in."""
    seed = getattr(config.option, "randomly_seed", None)
    if isinstance(seed, int) and config.pluginmanager.has_plugin("randomly"):
        terminalreporter.write_line(f"test order: random, seed {seed}; repeat it with "
                                    f"`python -m pytest --randomly-seed {seed}`")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (`make test` runs two workers, `--dist loadgroup`), the tests that share a module
    fixture go to one worker together, so that fixture is built once, as in a single process; every other
    test goes to whichever worker is free.

    What the loadgroup scheduler reads is not the mark but the test's id, which xdist's hook ends with
    ``@group`` by setting ``item._nodeid``. pytest 9.2 no longer reads that (``nodeid`` is ``str(item._id)``),
    so with xdist 3.8 no test was grouped: each worker built a module's fixture for the tests it happened to
    get (test_finetune's four fine-tunes twice a run, 48 s and 40 s). Where pytest has ``_id``, the group goes
    into it here."""
    if not config.pluginmanager.has_plugin("xdist"):
        return
    for item in items:
        definitions = getattr(item, "_fixtureinfo", None)
        if definitions is not None and any(chain[-1].scope == "module"
                                           for chain in definitions.name2fixturedefs.values() if chain):
            group = item.module.__name__
            item.add_marker(pytest.mark.xdist_group(group))
            if config.getoption("loadgroup", default=False) and hasattr(item, "_id"):
                from _pytest.nodeid import NodeId  # noqa: PLC0415 - pytest >= 9.2, where ids are NodeIds

                item._id = NodeId.parse(f"{item.nodeid}@{group}")


class SlowTestsFirst:
    """Under xdist, the tests that took the longest in the last run start first, so that none of them starts
    last and leaves one worker running alone at the end (a 90 s test did). xdist already sends the module
    groups first (the units with the most tests); this orders the single tests after them: those that took
    at least `SLOW_S` seconds last time, longest first, then all the others in pytest-randomly's order.
    The times come from the last run's reports, which the controller keeps in pytest's cache (.pytest_cache);
    a run without the cache (a fresh clone, CI) takes `SHIPPED`, written by `make slow-tests`. The workers order
    their collections alike (xdist requires it) from the same file."""

    KEY = "bertwb/test_seconds"
    SLOW_S = 10.0
    SHIPPED = Path(__file__).with_name("slow_tests.json")

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.seconds: dict[str, float] = {}
        self.records = not hasattr(config, "workerinput")  # the controller, which gets every worker's reports

    @pytest.hookimpl(wrapper=True, tryfirst=True)  # around pytest-randomly's wrapper: reorders after its shuffle
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> Iterator[None]:
        result = yield
        cache = getattr(config, "cache", None)  # none under -p no:cacheprovider
        last = cache.get(self.KEY, {}) if cache is not None else {}
        if not last and self.SHIPPED.is_file():
            last = json.loads(self.SHIPPED.read_text())
        seconds = {item.nodeid: last.get(item.nodeid, last.get(item.nodeid.split("@")[0], 0.0)) for item in items}
        slow = {nodeid: s for nodeid, s in seconds.items() if s >= self.SLOW_S}  # "@group": loadgroup's suffix
        items.sort(key=lambda item: -slow.get(item.nodeid, 0.0))  # stable: the rest keep their order
        return result

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.records:  # setup, call and teardown
            self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        cache = getattr(self.config, "cache", None)
        if self.seconds and cache is not None:
            cache.set(self.KEY, {**cache.get(self.KEY, {}), **self.seconds})


def pytest_configure(config: pytest.Config) -> None:
    """`SlowTestsFirst` in a run on xdist workers (`make test`): in its controller and in each worker."""
    worker = hasattr(config, "workerinput")
    if worker or config.pluginmanager.has_plugin("xdist") and config.getoption("numprocesses", default=None):
        config.pluginmanager.register(SlowTestsFirst(config), "bertwb-slow-tests-first")


@pytest.fixture
def project(tmp_path: Path, request: pytest.FixtureRequest) -> Project:
    """A project with 120 small documents in corpus/a.txt and a config for a 256-token vocab. A test marked
    ``@pytest.mark.built("vocab")`` gets it built through that stage: a copy of the session's one build, laid
    out in ``tmp_path`` as an unbuilt one is."""
    marker = request.node.get_closest_marker("built")
    if marker is not None:
        builds = request.getfixturevalue("project_builds")
        return builds.copy(tmp_path, marker.args[0], DEFAULT_TEST_CONFIG, documents=120)
    write_bert_format(tmp_path / "corpus" / "a.txt", make_documents(120))
    proj = Project(tmp_path)
    proj.write_config(DEFAULT_TEST_CONFIG)
    return proj


def ingested_documents(project: Project) -> list[list[str]]:
    """The sentences ingest stored, as one list per document in document order."""
    with duckdb.connect(str(project.workspace / "bertwb.duckdb"), read_only=True) as con:
        rows = con.execute("select doc_id, text from sentences order by doc_id, sent_idx").fetchall()
    docs: dict[int, list[str]] = {}
    for doc_id, text in rows:
        docs.setdefault(doc_id, []).append(text)
    return [docs[k] for k in sorted(docs)]


def ingest_summary(project: Project) -> dict:
    """The summary ingest's manifest holds (counts of documents, sentences and what was skipped)."""
    return json.loads((project.workspace / "manifests" / "ingest.json").read_text())["summary"]


def tiny_model_dir(folder: Path, max_positions: int = 64) -> Path:
    """A random one-layer bertwb model directory with its own tokenizer, made in a blink: for commands
    that need a model but not a trained one (export, a finetune that must fail before training)."""
    from bertwb.data.tokenizer import SPECIAL_TOKENS, build_tokenizer, write_tokenizer_files  # noqa: PLC0415
    from bertwb.model import modeldir  # noqa: PLC0415
    from bertwb.model.bert import BertConfig, BertForPreTraining  # noqa: PLC0415

    import torch  # noqa: PLC0415

    tokens = SPECIAL_TOKENS + ["the", "ship", "sail", ".", "##s"]
    with torch.random.fork_rng():  # the same weights every time, and the caller's random state untouched
        torch.manual_seed(0)
        model = BertForPreTraining(BertConfig(vocab_size=len(tokens), num_layers=1, hidden_size=32, num_heads=2,
                                              intermediate_size=64, max_position_embeddings=max_positions))
    modeldir.save_model_dir(model, folder)
    tokenizer = build_tokenizer({token: i for i, token in enumerate(tokens)}, lowercase=True)
    tokenizer.add_special_tokens(SPECIAL_TOKENS)
    write_tokenizer_files(tokenizer, folder, max_positions)
    return folder


def assert_one_line_error(result: Result, *needles: str) -> None:
    """Exit 1, a single 'error:' line naming every needle, and no traceback."""
    assert result.exit_code == 1, result.output
    text = result.output.strip()
    error_lines = [line for line in text.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1, text
    assert "Traceback" not in text
    for needle in needles:
        assert needle in error_lines[0], f"{needle!r} not in {error_lines[0]!r}"


def assert_library_error(result: Result, prefix: str, *facts: str, hint: str | None = None) -> None:
    """bertwb's one line around a library's own message (DuckDB's, say): exit 1, one 'error:' line that
    starts with bertwb's ``prefix``, carries some of the library's text, names every fact of the case (a
    path, a table or option name) and ends with bertwb's ``hint``. The library's wording is not pinned: it
    changes between versions, and a test of bertwb must not fail when it does."""
    assert_one_line_error(result, *facts)
    line = next(line for line in result.output.splitlines() if line.startswith("error:"))
    assert line.startswith(f"error: {prefix}"), line
    upstream = line[len(f"error: {prefix}"):]
    if hint is not None:
        assert upstream.endswith(f"; {hint}"), line
        upstream = upstream[:-len(f"; {hint}")]
    assert len(upstream.strip()) >= 8, f"no message of the library's in {line!r}"


def is_usage_line(line: str, fact: str, where: str) -> bool:
    """Whether ``line`` is bertwb's one-line usage error about ``fact`` (the option, command or value that
    was wrong) ending with its pointer to ``where``'s help. Click words the middle; its wording is not pinned."""
    return line.startswith("error: ") and fact in line and re.search(rf"see `{re.escape(where)} --help`\)?$", line) \
        is not None


PYTHON = sys.executable


# --- training: projects built once per session, copied by each test ---------------------------------------

# Small and fast: 64-token pairs, 16 per step, a 256-token vocab, the tiny preset (L2 H128).
PRETRAIN_SETTINGS: dict[str, dict[str, Any]] = {
    "ingest": {"inputs": ["corpus"], "valid_fraction": 0.1},
    "vocab": {"vocab_size": 256, "min_frequency": 1},
    "pairs": {"max_seq_length": 64, "dupe_factor": 2},
    "pretrain": {"steps": 12, "batch_size": 16, "warmup_steps": 3, "log_every": 1, "eval_every": 0,
                 "eval_batches": 2, "checkpoint_every": 5},
}


def pretrain_config(corpus: str | Path = "corpus", **changes: dict[str, Any]) -> str:
    """PRETRAIN_SETTINGS as bertwb.yaml text, reading ``corpus``, with each section's ``changes`` merged
    in: a test's config says only how it differs from the others'."""
    sections = {name: dict(values) for name, values in PRETRAIN_SETTINGS.items()}
    sections["ingest"]["inputs"] = [str(corpus)]
    for name, values in changes.items():
        sections[name] = sections.get(name, {}) | values
    return yaml.safe_dump(sections, sort_keys=False)


def stand_in_pairs(n: int = 40, seed: int = 0) -> PairArrays:
    """Pairs of random lengths 8–40 with 1–4 static masks each, the layout the pairs stage writes."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(8, 41, n)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    tokens = rng.integers(5, 100, offsets[-1]).astype(np.int32)
    positions, ids, counts = [], [], []
    for i, length in enumerate(lengths):
        chosen = np.sort(rng.choice(np.arange(1, length - 1), rng.integers(1, 5), replace=False))
        ids.append(tokens[offsets[i] + chosen].copy())
        tokens[offsets[i] + chosen] = 4  # [MASK]
        positions.append(chosen)
        counts.append(len(chosen))
    return PairArrays(tokens, offsets, segment_a_len=lengths // 2, is_random_next=rng.integers(0, 2, n),
                      masked_positions=np.concatenate(positions).astype(np.int16),
                      masked_ids=np.concatenate(ids).astype(np.int32),
                      masked_offsets=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64))


class ProjectBuilds:
    """Projects built up to a stage once per session, each distinct (until, config, corpus) in a folder of its
    own, and handed out as copies: a test changes its copy, never what the next test is given.

    The suite used to build the same project in a fixture of each module that needed it (the pairs of
    `PRETRAIN_SETTINGS` a dozen times per run) or at the start of each test; a copy costs milliseconds, a
    build seconds."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.built: dict[tuple[str, str, int, int], Path] = {}

    def folder(self, until: str, config: str | dict[str, dict[str, Any]] | None = None, *, documents: int = 300,
               seed: int = 0) -> Path:
        """The session's one build of ``config`` through stage ``until`` on ``documents`` generated documents
        (corpus/a.txt): read it, never change it. ``config``: bertwb.yaml text, or each section's changes to
        `PRETRAIN_SETTINGS` (None: none)."""
        text = config if isinstance(config, str) else pretrain_config(**(config or {}))
        key = (until, text, documents, seed)
        if key not in self.built:
            root = self.root / f"build{len(self.built)}-{until}"
            write_bert_format(root / "corpus" / "a.txt", make_documents(documents, seed))
            project = Project(root)
            project.write_config(text)
            project.run("run", "--until", until)
            self.built[key] = root
        return self.built[key]

    def copy(self, to: Path, until: str, config: str | dict[str, dict[str, Any]] | None = None, **corpus: int
             ) -> Project:
        """A copy of `folder`'s build at ``to`` (which may exist, empty), the caller's own."""
        shutil.copytree(self.folder(until, config, **corpus), to, dirs_exist_ok=True)
        return Project(to)


@pytest.fixture(scope="session")
def project_builds(tmp_path_factory: pytest.TempPathFactory) -> ProjectBuilds:
    """The session's builds; a module fixture that needs one copy for all its tests takes it from here."""
    return ProjectBuilds(tmp_path_factory.mktemp("builds"))


BuiltProject = Callable[..., Project]  # the built_project fixture: (until, config=None, **corpus) -> a copy


@pytest.fixture
def built_project(project_builds: ProjectBuilds, tmp_path: Path) -> BuiltProject:
    """``built_project(until="pairs", config={...})``: this test's own copy of a project built through stage
    ``until`` (see `ProjectBuilds.folder`); the build itself runs once per session."""
    copies = iter(range(1_000))

    def build(until: str, config: str | dict[str, dict[str, Any]] | None = None, **corpus: int) -> Project:
        return project_builds.copy(tmp_path / f"built{next(copies)}", until, config, **corpus)

    return build


@pytest.fixture(scope="session")
def pairs_workspace(project_builds: ProjectBuilds) -> Path:
    """ingest → vocab → pairs of `PRETRAIN_SETTINGS` on 300 generated documents, built once per session:
    read it or copy it, never change it."""
    return project_builds.folder("pairs")


@pytest.fixture
def trainer(project_builds: ProjectBuilds, tmp_path: Path) -> Project:
    """This test's copy of the pairs of `PRETRAIN_SETTINGS`, ready to pre-train."""
    return project_builds.copy(tmp_path / "p", "pairs")


def interrupt_at(monkeypatch: pytest.MonkeyPatch, stage: str, step: int) -> None:
    """Ctrl-C the next command once ``stage`` has trained ``step`` steps in it (the fault hook's
    ``sigint``: the process sends itself SIGINT there, as a terminal would). ``monkeypatch.undo()``
    ends it."""
    monkeypatch.setenv(faults.ENV, f"{stage}.step#{step}:sigint")


def run_metrics(project: Project, runs: str = "pretrain-runs") -> list[dict]:
    """The metrics.jsonl lines of the one training run under ``runs``."""
    run_dirs = [p.parent for p in (project.workspace / runs).rglob("metrics.jsonl")]
    assert len(run_dirs) == 1
    return [json.loads(line) for line in (run_dirs[0] / "metrics.jsonl").read_text().splitlines()]


# --- a fake clock for time budgets -----------------------------------------------------------------------

STEP_SECONDS = 1.0  # what one training step takes on the fake clock


class FakeClock:
    """The time `bertwb.train.budget` reads: moved only by training steps, `STEP_SECONDS` each."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from bertwb.train import budget  # noqa: PLC0415
        from bertwb.train.trainer import Trainer  # noqa: PLC0415

        step = Trainer.__dict__["_step"]

        def timed_step(trainer: Trainer, *args: Any) -> None:
            step(trainer, *args)
            self.now += STEP_SECONDS

        monkeypatch.setattr(budget, "clock", self)
        monkeypatch.setattr(Trainer, "_step", timed_step)


@pytest.fixture
def fake_clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """Training time that steps alone move (no sleeps): budgets stop at a known step."""
    clock = FakeClock()
    clock.install(monkeypatch)
    return clock
