"""The data stages on Ray beside the local executor: time and peak memory per stage, on one corpus.

    python benchmarks/ray_executor.py [--mb 100] [--ray-cpus 2] [--source FILE ...] [--no-append]

Each stage (ingest, vocab, pairs) is its own ``bertwb`` process, with scale.py's settings (BERT's data
settings, ``dupe_factor 1``), once with ``workspace.executor: local`` and once with ``ray``, the two
alternating stage by stage so a slow minute of a shared machine falls on both.

* **The cluster.** ``ray start --head --num-cpus N`` on this machine, started once (its start-up time is
  reported, not charged to the stages, as on a cluster that runs for many jobs); the ``ray`` stages join
  it through ``RAY_ADDRESS``, which costs each of them a connection. It is stopped at the end (only its
  own processes, found by its temporary folder and port).
* **Memory.** Peak RSS, sampled every 50 ms: of the stage's process tree (the driver), and of the driver
  together with every process of the cluster (raylet, GCS, workers). The cluster's idle RSS is reported
  too. RSS counts Ray's shared object store once per process that maps it: an upper bound.
* **Same outputs.** Each stage's identity (the digest of what it built) must be equal on both sides.

Appends a section to BENCHMARKS.md (and its "Current results" row) unless ``--no-append``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import yaml

from _common import append_report, cpu_model
from bench_ingest_vocab import write_corpus
from scale import SETTINGS, STAGES, source_documents

RAY = Path(sys.executable).parent / "ray"
# Ray's token authentication, on for the head and its drivers alike (the token: ~/.ray/auth_token, made by
# the head when missing); a driver that is not told would knock without it and be turned away.
TOKEN_AUTH = {"RAY_AUTH_MODE": "token"}


CODE = str(Path(__file__).resolve().parents[1])  # this checkout, for the stages and the cluster's workers


class Cluster:
    """A Ray head on this machine with ``cpus`` CPUs, its files under ``folder``, its workers on this checkout."""

    def __init__(self, folder: Path, cpus: int):
        self.folder, self.cpus = folder, cpus
        with socket.socket() as probe:  # a free port, so no other Ray head on this machine is joined
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        started = time.perf_counter()
        result = subprocess.run([str(RAY), "start", "--head", "--port",
                                 str(self.port), "--num-cpus", str(cpus), "--temp-dir", str(folder),
                                 "--include-dashboard=false", "--disable-usage-stats"],
                                capture_output=True, text=True, env={**os.environ, **TOKEN_AUTH, "PYTHONPATH": CODE})
        if result.returncode != 0:
            sys.exit(f"ray start failed:\n{result.stderr}")
        self.start_s = time.perf_counter() - started
        self.roots = self._find()

    def _find(self) -> list[psutil.Process]:
        """The cluster's daemons: every process (not this one) with an argument naming its folder or its port."""
        found = []
        for process in psutil.process_iter(["cmdline"]):
            arguments = process.info["cmdline"] or []
            if process.pid != os.getpid() and any(str(self.folder) in argument or argument.endswith(f":{self.port}")
                                                  for argument in arguments):
                found.append(process)
        return found

    def processes(self) -> list[psutil.Process]:
        """The daemons and their children (the raylet's workers)."""
        every = []
        for root in self.roots:
            try:
                every += [root, *root.children(recursive=True)]
            except psutil.Error:
                pass
        return every

    def stop(self) -> None:
        processes = self.processes()
        for process in processes:
            try:
                process.terminate()
            except psutil.Error:
                pass
        _, alive = psutil.wait_procs(processes, timeout=10)
        for process in alive:
            try:
                process.kill()
            except psutil.Error:
                pass


def rss_mb(processes: list[psutil.Process]) -> float:
    total = 0
    for process in processes:
        try:
            total += process.memory_info().rss
        except psutil.Error:  # exited between listing and reading
            pass
    return total / 2**20


def run_stage(folder: Path, stage: str, env: dict[str, str], cluster: Cluster | None) -> dict[str, float]:
    """``bertwb STAGE`` in ``folder``: seconds, the driver's peak RSS and (with a cluster) the peak of both."""
    command = [sys.executable, "-m", "bertwb", "--config", str(folder / "bertwb.yaml"), stage]
    started = time.perf_counter()
    process = psutil.Popen(command, cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    driver_peak = total_peak = 0.0
    while process.poll() is None:
        try:
            driver = rss_mb([process, *process.children(recursive=True)])
        except psutil.Error:
            driver = 0.0
        driver_peak = max(driver_peak, driver)
        total_peak = max(total_peak, driver + (rss_mb(cluster.processes()) if cluster else 0.0))
        time.sleep(0.05)
    seconds = time.perf_counter() - started
    if process.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{process.stderr.read().decode()}")
    manifest = json.loads((folder / ".bertwb" / "manifests" / f"{stage}.json").read_text())
    return {"s": seconds, "driver": driver_peak, "total": total_peak, "identity": manifest["identity"]}


def measure(corpus: Path, root: Path, cluster: Cluster) -> dict[str, dict[str, dict]]:
    """{executor: {stage: figures}}, the two executors alternating which goes first."""
    results: dict[str, dict[str, dict]] = {"local": {}, "ray": {}}
    folders, envs = {}, {}
    for executor in results:
        folders[executor] = root / executor
        folders[executor].mkdir(parents=True)
        settings = {"workspace": {"executor": executor}, "ingest": {"inputs": [str(corpus)]}, **SETTINGS}
        (folders[executor] / "bertwb.yaml").write_text(yaml.safe_dump(settings, sort_keys=False))
        envs[executor] = {**os.environ, "PYTHONPATH": CODE}
        envs[executor].pop("RAY_ADDRESS", None)
    envs["ray"].update(RAY_ADDRESS=cluster.address, **TOKEN_AUTH)
    for number, stage in enumerate(STAGES):
        for executor in (("local", "ray") if number % 2 == 0 else ("ray", "local")):
            figures = run_stage(folders[executor], stage, envs[executor], cluster if executor == "ray" else None)
            results[executor][stage] = figures
            print(f"{executor:>5}  {stage:<6} {figures['s']:8.1f} s  driver {figures['driver']:6.0f} MB  "
                  f"with Ray's processes {figures['total']:6.0f} MB", flush=True)
        if results["local"][stage]["identity"] != results["ray"][stage]["identity"]:
            sys.exit(f"{stage}: ray built other outputs than local (identities differ); that is a bug")
    return results


def report(results: dict, corpus_bytes: int, cluster: Cluster, idle_mb: float, command: str,
           source: str) -> tuple[str, str]:
    """The BENCHMARKS.md section and its one-line headline."""
    now, cores = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), os.cpu_count() or 1
    size = f"{corpus_bytes / 1e6:,.0f} MB" if corpus_bytes >= 10e6 else f"{corpus_bytes / 1e6:.1f} MB"
    lines = [
        f"\n## Data stages on Ray — {now}\n",
        f"Script: `{command}`.",
        f"Machine: {platform.system()} {platform.machine()} ({cpu_model()}), {cores} CPUs, "
        f"Python {platform.python_version()}, load average before the run {os.getloadavg()[0]:.1f}.",
        f"Corpus: {size} of {source}. Settings: scale.py's (vocab_size 30522, max_seq_length 128, "
        "masked_lm_prob 0.15, dupe_factor 1), the rest defaults.",
        f"Ray: a head on this machine with {cluster.cpus} CPUs (`ray start` took {cluster.start_s:.1f} s, not "
        f"counted below; idle, its processes hold {idle_mb:,.0f} MB RSS). Every stage built the same outputs "
        "on both executors (equal identities).\n",
        "| stage | local wall | ray wall | ray / local | local peak RSS | ray driver peak RSS | "
        "ray peak RSS with Ray's processes |",
        "|---|---|---|---|---|---|---|",
    ]
    local, on_ray = results["local"], results["ray"]
    totals = {}
    for executor, stages in results.items():
        totals[executor] = {"s": sum(f["s"] for f in stages.values()),
                            "driver": max(f["driver"] for f in stages.values()),
                            "total": max(f["total"] for f in stages.values())}
    for stage in (*STAGES, "all"):
        a = totals["local"] if stage == "all" else local[stage]
        b = totals["ray"] if stage == "all" else on_ray[stage]
        lines.append(f"| {stage} | {a['s']:,.1f} s | {b['s']:,.1f} s | {b['s'] / a['s']:.2f}× | "
                     f"{a['driver']:,.0f} MB | {b['driver']:,.0f} MB | {b['total']:,.0f} MB |")
    ratio = totals["ray"]["s"] / totals["local"]["s"]
    headline = (f"{size}, {cluster.cpus} local Ray workers: data preparation takes **{ratio:.2f}×** the local "
                f"executor's time ({totals['ray']['s']:,.0f} s vs {totals['local']['s']:,.0f} s); peak RSS "
                f"{totals['ray']['total']:,.0f} MB with Ray's processes vs {totals['local']['total']:,.0f} MB; "
                "same outputs")
    lines += ["", f"Headline: {headline}.", ""]
    return "\n".join(lines), headline


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=100, help="corpus size in MB")
    parser.add_argument("--ray-cpus", type=int, default=2, help="CPUs of the local Ray head (its workers)")
    parser.add_argument("--source", type=Path, nargs="*", default=[], help="text files to repeat (default: "
                        "the sample corpus)")
    parser.add_argument("--no-append", action="store_true")
    args = parser.parse_args()
    if not RAY.exists():
        sys.exit(f"no `ray` command beside {sys.executable}; pip install 'bertwb[ray]'")
    blocks = source_documents(args.source)
    with tempfile.TemporaryDirectory(prefix="bertwb-ray-") as tmp_name:
        tmp = Path(tmp_name)
        corpus_bytes = write_corpus(tmp / "corpus", args.mb, blocks)
        cluster = Cluster(tmp / "ray", args.ray_cpus)
        try:
            time.sleep(2)  # let the head's daemons settle before its idle memory is read
            idle_mb = rss_mb(cluster.processes())
            results = measure(tmp / "corpus", tmp / "projects", cluster)
        finally:
            cluster.stop()
        shutil.rmtree(tmp / "projects", ignore_errors=True)
    command = f"python benchmarks/ray_executor.py --mb {args.mb:g} --ray-cpus {args.ray_cpus}"
    if args.source:
        command += " --source " + " ".join(str(p) for p in args.source)
    source = ", ".join(p.name for p in args.source) if args.source else "the sample corpus, repeated"
    text, headline = report(results, corpus_bytes, cluster, idle_mb, command, source)
    print(text)
    if not args.no_append:
        append_report(text, headline)


if __name__ == "__main__":
    main()
