"""benchmarks/gpu_check.py, the one command a GPU lease runs: its dry run goes through every part on the CPU
(so the GPU call is known to run before a GPU does), and a part that hangs or crashes costs only itself."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import PYTHON, REPO, benchmark_records

sys.path.insert(0, str(REPO / "benchmarks"))
import gpu_check  # noqa: E402
import _gpu_parts  # noqa: E402
from _gpu_parts import LOGIT_TOLERANCE, lock_entries  # noqa: E402

PART_FIELDS = {"name", "title", "status", "reason", "seconds", "limit_s", "headline", "numbers", "markdown", "log_tail"}


# Past the suite's 300 s: a hung part is ended by gpu_check at its limit, with its processes' stacks in the failure.
@pytest.mark.timeout(590)
def test_the_dry_run_goes_through_every_part_and_writes_its_summary(tmp_path: Path):
    before = benchmark_records()
    out, work = tmp_path / "out", tmp_path / "work"
    result = subprocess.run([PYTHON, str(REPO / "benchmarks" / "gpu_check.py"), str(out), "--dry-run", "--jobs", "2",
                             "--work", str(work)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    # three files: a device machine returns at most 8
    assert sorted(p.name for p in out.iterdir()) == ["logs.txt", "summary.json", "summary.md"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["mode"] == "dry run" and summary["budget_s"] == 480
    assert summary["machine"]["torch"] == torch.__version__
    parts = {row["name"]: row for row in summary["parts"]}
    assert list(parts) == [plan.name for plan in gpu_check.PLANS]
    for row in parts.values():
        assert set(row) == PART_FIELDS and row["seconds"] > 0 and row["limit_s"] > 0, row
    cuda_only = {"cuda-tests"}
    assert {name: row["status"] for name, row in parts.items() if name not in cuda_only} == \
        {name: "ok" for name in parts if name not in cuda_only}, {n: r["reason"] for n, r in parts.items()}
    tests = parts["cuda-tests"]
    assert tests["numbers"]["exit_code"] == 0 and tests["numbers"]["failed"] == tests["numbers"]["errors"] == 0
    if torch.cuda.is_available():
        assert tests["status"] == "ok"
    else:  # ran, and skipped every test cleanly for want of a GPU
        assert tests["status"] == "skipped" and "needs a CUDA GPU" in tests["reason"]
        assert tests["numbers"]["passed"] == 0 and tests["numbers"]["skipped"] == 3

    install = parts["install"]["numbers"]
    assert install["torch"] == torch.__version__ and install["locked_missing"] == []
    assert "missing" not in install["importable"].values()
    assert [step["exit"] for step in install["pip_steps"]] == [0]  # pip --dry-run -e: nothing installed

    steps = parts["steps"]["numbers"]
    assert [row["label"] for row in steps["rows"]] == [
        "bertwb trainer step", "transformers BertForPreTraining (sdpa), the same batches",
        "transformers BertForPreTraining (sdpa), random batches"]
    assert all(row["tokens_per_s"] > 0 and row["mfu"] is None for row in steps["rows"])
    assert all(row["peak_memory_gib"] is None for row in steps["rows"])  # GPU memory: measured on CUDA only
    assert steps["mfu_note"] == "MFU not computed: no dense bf16 peak known for 'CPU'"

    cli = parts["cli"]["numbers"]
    assert cli["interrupted_exit"] == 130 and 0 < cli["interrupted_at_step"] < 20
    assert cli["resumed_from_step"] == cli["interrupted_at_step"] and cli["steps_done"] == 20
    assert 0 < cli["evaluate"]["mlm_acc"] <= 1 and cli["compared_tokens"] > 0
    assert cli["max_abs_diff_mlm_logits"] <= LOGIT_TOLERANCE and cli["max_abs_diff_nsp_logits"] <= LOGIT_TOLERANCE

    torchrun = parts["torchrun"]["numbers"]
    assert torchrun["steps_done"] == 4 and torchrun["processes"] == 1
    assert torchrun["ddp_probe"]["backend"] == "gloo" and torchrun["ddp_probe"]["steps"] == 5

    profile = parts["profile"]["numbers"]
    assert len(profile["top"]) == 15 and 0 <= profile["host_overhead_share"] <= 1
    assert profile["top"][0]["self_ms_per_step"] >= profile["top"][-1]["self_ms_per_step"] > 0

    compiled = parts["compile"]["numbers"]
    assert compiled["row"]["tokens_per_s"] > 0 and compiled["dynamo"]["stats"]["unique_graphs"] >= 1

    text = (out / "summary.md").read_text()
    assert "| part | status | seconds | limit | result |" in text
    assert "## Profile: top kernels and host overhead" in text
    for name, row in parts.items():
        assert f"| {name} | {row['status']} |" in text
    logs = (out / "logs.txt").read_text()
    assert all(f"===== {name}: {row['status']}" in logs for name, row in parts.items())
    assert benchmark_records() == before


FAKE_PARTS = """
import json, subprocess, sys, time
from pathlib import Path

name, work = sys.argv[1], Path(sys.argv[3])

def save(status, **numbers):
    result = {"status": status, "reason": "", "headline": name + " headline", "numbers": numbers, "markdown": ""}
    (work / (name + ".json")).write_text(json.dumps(result))

print(name + " starts", flush=True)
if name == "hang":
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    save("running", child=child.pid)
    time.sleep(60)
elif name == "crash":
    raise RuntimeError("a crash before any result")
else:
    save("ok", answer=42)
"""


def test_a_hung_or_crashed_part_costs_only_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A hang is killed at its limit with its whole process group, keeping what it had recorded and showing
    where each of its processes stood; a crash is failed with its log's tail; a part that needs a failed one
    is skipped; the rest still run; the budget skips what no longer fits."""
    script = tmp_path / "fake_parts.py"
    script.write_text(FAKE_PARTS)
    monkeypatch.setattr(gpu_check, "PARTS_SCRIPT", script)
    monkeypatch.setattr(gpu_check, "PLANS", (
        gpu_check.Plan("hang", "Hangs", 60, 2, 1), gpu_check.Plan("crash", "Crashes", 60, 30, 1),
        gpu_check.Plan("after", "Needs crash", 60, 30, 1, needs="crash"), gpu_check.Plan("ok", "Works", 60, 30, 1),
        gpu_check.Plan("late", "Wants more than is left", 600, 600, 500, optional=True)))
    out = tmp_path / "out"
    args = argparse.Namespace(outdir=out, dry_run=True, budget_s=60.0, parts=None, jobs=1, work=str(tmp_path / "w"),
                              keep_work=False)
    assert gpu_check.check(args) == 1
    parts = {row["name"]: row for row in json.loads((out / "summary.json").read_text())["parts"]}
    assert {name: row["status"] for name, row in parts.items()} == {
        "hang": "timed out", "crash": "failed", "after": "skipped", "ok": "ok", "late": "skipped"}
    hang, crash = parts["hang"], parts["crash"]
    assert hang["reason"] == "killed at its limit of 2 s" and 2 <= hang["seconds"] < 10
    assert "hang starts" in hang["log_tail"] and hang["headline"] == "hang headline"  # what it had recorded
    # before the kill, each Python process of the part printed where it stood: the part and its child
    assert hang["log_tail"].count("Fatal Python error: Aborted") == 2, hang["log_tail"]
    assert 'fake_parts.py", line 15 in <module>' in hang["log_tail"] and 'File "<string>", line 1' in hang["log_tail"]
    assert crash["reason"] == "exited 1 without a result"
    assert "RuntimeError: a crash before any result" in crash["log_tail"]
    assert parts["after"]["reason"] == "needs the crash part, which is failed"
    assert parts["ok"]["numbers"] == {"answer": 42} and parts["ok"]["log_tail"] == ""
    assert parts["late"]["reason"].startswith("budget: ")
    child = Path(f"/proc/{hang['numbers']['child']}/stat")
    deadline = time.monotonic() + 10
    while child.exists() and child.read_text().split()[2] != "Z" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not child.exists() or child.read_text().split()[2] == "Z", "the hung part's child outlived the kill"
    text = (out / "summary.md").read_text()
    assert "| hang | timed out |" in text and "## hang: timed out — log tail" in text
    assert "===== crash: failed" in (out / "logs.txt").read_text()


def test_install_asks_pip_for_each_locked_package_the_machine_lacks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capfd: pytest.CaptureFixture):
    """What the device lacks (duckdb and zstandard, here pretended missing) goes to pip one package at a
    time, as the lock's own lines with their hashes; the dry run's pip only says what it would do."""
    entries = lock_entries(REPO / "requirements" / "runtime.txt")
    assert "torch" not in entries and entries["duckdb"][0] == "2.0.1"
    real = _gpu_parts.installed_version
    monkeypatch.setattr(_gpu_parts, "installed_version",
                        lambda name: None if name in gpu_check.DEVICE_LACKS else real(name))
    part = _gpu_parts.Part("install", tmp_path, dry_run=True)
    _gpu_parts.install(part)
    assert part.numbers["locked_missing"] == sorted(gpu_check.DEVICE_LACKS)
    assert [(step["what"], step["exit"]) for step in part.numbers["pip_steps"]] == [
        *((name, 0) for name in sorted(gpu_check.DEVICE_LACKS)), ("bertwb -e", 0)]
    printed = capfd.readouterr().out  # pip's own lines: it read each file, hashes and all
    for name in gpu_check.DEVICE_LACKS:
        version, lines = entries[name]
        assert lines.startswith(f"{name}=={version} \\\n") and "--hash=sha256:" in lines and "#" not in lines
        assert (tmp_path / f"install-{name}.txt").read_text() == lines + "\n"
        assert f"Requirement already satisfied: {name}=={version}" in printed


def test_install_names_what_it_could_not_install_and_no_part_needs_as_such(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch):
    """The first GPU run's headline said "pip failed for blingfire, pysbd, ..." though no part imports them
    and the part passed; what nothing needs is now named as such, and a failure only when a part needs it."""
    real_version, real_run = _gpu_parts.installed_version, _gpu_parts.run
    monkeypatch.setattr(_gpu_parts, "installed_version", lambda name: None if name == "pysbd" else real_version(name))

    def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:  # pip cannot find pysbd's wheel
        if any(str(arg).endswith("install-pysbd.txt") for arg in command):
            return subprocess.CompletedProcess(command, 1)
        return real_run(command, **kwargs)

    monkeypatch.setattr(_gpu_parts, "run", run)
    part = _gpu_parts.Part("install", tmp_path, dry_run=True)
    _gpu_parts.install(part)
    assert part.numbers["pip_failed"] == ["pysbd"]
    assert "not installed, and no part imports them: pysbd" in part.headline and "pip failed" not in part.headline


def test_the_summary_says_when_the_tree_differs_from_its_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The device's copy of a checkout kept the session's first HEAD under a newer tree, and the summary named
    that commit as if it had run; now a changed tracked file adds "-dirty"."""
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path)]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "a.py").write_text("x = 1\n")
    subprocess.run([*git, "add", "a.py"], check=True)
    subprocess.run([*git, "commit", "-qm", "a"], check=True)
    head = subprocess.run([*git, "rev-parse", "--short=7", "HEAD"], capture_output=True, text=True).stdout.strip()
    monkeypatch.setattr(gpu_check, "REPO", tmp_path)
    assert gpu_check.machine([])["commit"] == head
    (tmp_path / "a.py").write_text("x = 2\n")
    assert gpu_check.machine([])["commit"] == f"{head}-dirty"
