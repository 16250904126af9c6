"""The training commands: ``bertwb pretrain``, ``evaluate`` and ``finetune``, each a stage the engine runs or
launches (under torchrun too).
"""

from __future__ import annotations

import click

from bertwb import engine, ui
from bertwb.artifacts import RESULTS_FILE, read_results
from bertwb.cli.group import checkpoint_option, cli, complete_tasks, config_options, load, option_set
from bertwb.errors import BertwbError
from bertwb.stages import evaluate as evaluate_stage


@cli.command()
@config_options
@click.option("--force", is_flag=True, help="Train from scratch even when the stage is fresh or a run can resume.")
@click.option("--device", default=None, help="auto, cpu, cuda or cuda:N (--set pretrain.device=DEVICE).")
def pretrain(config_path: str | None, overrides: tuple[str, ...], workdir: str | None, force: bool,
             device: str | None) -> None:
    """Pre-train BERT on the pairs (MLM + NSP); resumes after Ctrl-C; works under torchrun."""
    cfg, ws = load(config_path, (*overrides, *option_set("pretrain.device", device)), workdir)
    engine.launch(cfg, ws, "pretrain", force=force)


@cli.command()
@config_options
@checkpoint_option
@click.option("--device", default=None, help="auto, cpu, cuda or cuda:N (--set evaluate.device=DEVICE).")
@click.option("--force", is_flag=True, help="Evaluate again even when the result is fresh.")
@click.option("--json", "as_json", is_flag=True, help="Print the metrics as JSON.")
def evaluate(config_path: str | None, overrides: tuple[str, ...], workdir: str | None, checkpoint: str | None,
             device: str | None, force: bool, as_json: bool) -> None:
    """MLM and NSP accuracy, loss and perplexity of a checkpoint on the valid pairs (cached)."""
    cfg, ws = load(config_path, (*overrides, *option_set("evaluate.checkpoint", checkpoint),
                                  *option_set("evaluate.device", device)), workdir)
    with ui.tables_to_stderr(as_json):
        ran = engine.run_pipeline(cfg, ws, ["evaluate"], force=force)
    metrics = ran.get("evaluate") or read_results(ws.stage_dir("evaluate"))
    if metrics is None:  # fresh by its manifest, yet its file does not read
        raise BertwbError(f"{ws.stage_dir('evaluate') / RESULTS_FILE} is missing or unreadable; "
                          "run `bertwb evaluate --force`")
    if as_json:
        ui.print_json(metrics)
    elif "evaluate" not in ran:
        evaluate_stage.report(metrics)


@cli.command()
@config_options
@click.argument("task", required=False, shell_complete=complete_tasks)
@click.option("--force", is_flag=True, help="Train from scratch even when the task is fresh or a run can resume.")
@click.option("--device", default=None, help="auto, cpu, cuda or cuda:N (--set finetune.device=DEVICE, and "
              "finetune.tasks.NAME.device=DEVICE for a task that names its own: the command line wins).")
def finetune(config_path: str | None, overrides: tuple[str, ...], workdir: str | None, task: str | None, force: bool,
             device: str | None) -> None:
    """Fine-tune TASK (default: every task in finetune.tasks); resumes after Ctrl-C; works under torchrun."""
    cfg, ws = load(config_path, overrides, workdir)
    if device is not None:  # the command line beats a task's own device too: a --set of each task that names one
        keys = ["finetune.device", *(f"finetune.tasks.{name}.device" for name in cfg.finetune.tasks
                                     if cfg.given(f"finetune.tasks.{name}.device"))]
        sets = tuple(item for key in keys for item in option_set(key, device))
        cfg, ws = load(config_path, (*overrides, *sets), workdir)
    engine.launch(cfg, ws, f"finetune/{task}" if task else "finetune", force=force)
