"""The task types: what one provides (`TaskType`), and the one table of them by name (`TASK_TYPES`).

A task's ``type`` is a key of `TASK_TYPES`; adding a type is one module beside classify.py, tag.py and
qa.py, and one line here. A type declares its own options as a dataclass (``settings_class``), which
the config loader builds ``finetune.tasks.<name>`` as. A type module imports no torch (the loader reads
this table, and ``bertwb status`` must stay light): its loss comes with its ``model_kind``
(:mod:`bertwb.tasks.finetune.objectives`), and its outputs are taken from tensors by their methods.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from bertwb.config import Config, FinetuneTaskConfig
from bertwb.errors import BertwbError
from bertwb.tasks.finetune.classify import ClassifyTask
from bertwb.tasks.finetune.features import Features
from bertwb.tasks.finetune.qa import QATask
from bertwb.tasks.finetune.tag import TagTask

if TYPE_CHECKING:
    from tokenizers import Tokenizer

    from bertwb.tasks.finetune.batches import TaskBatch


class TaskType(Protocol):
    """What a task type provides. It is made with the task's settings, their dotted key in the config for
    messages (``config_key``: ``finetune.tasks.sst``) and what training recorded about its data (`recorded`,
    empty when training).

    Examples are whatever the type reads; a feature is one model input (`Features`), and an example
    has one or more. Training reads, featurizes and scores; predicting reads (a file or stdin lines),
    featurizes, decodes and writes rows. Examples stay as read: what featurizing derives from them (raw
    text's words, a context's windows) goes into the features' ``meta``, where ``decode`` finds it.
    """

    settings_class: type[FinetuneTaskConfig]  # the task's settings: every task's and this type's own options
    model_kind: str  # a key of bertwb.model.heads.MODEL_KINDS: the head, and with it the loss
    main_metric: str  # the dev metric that picks the best checkpoint (higher is better)

    def __init__(self, settings: FinetuneTaskConfig, config_key: str, recorded: dict[str, Any]) -> None: ...

    def read(self, path: Path, labelled: bool = True) -> list[Any]:
        """The examples of a file in the task's format; ``labelled=False`` when labels are optional."""

    def label_names(self, train: list[Any], path: Path) -> list[str] | None:
        """The model's output names, from the training examples (None when the head has no label set)."""

    def check_labels(self, examples: list[Any], label_names: list[str] | None, path: Path) -> None:
        """One line naming the file and line of a dev or test label the training set does not have."""

    def featurize(self, examples: list[Any], tokenizer: Tokenizer, label_names: list[str] | None) -> Features:
        """The examples as new features, targets included where the examples have them; the examples unchanged,
        so featurizing them again gives the same features."""

    def outputs(self, out: Any, batch: TaskBatch) -> list[Any]:
        """The model's output (its objective's ``forward``) as one value per row of the batch, on the host."""

    def decode(self, examples: list[Any], features: Features, outputs: dict[int, Any],
               label_names: list[str] | None) -> list[dict[str, Any]]:
        """One prediction per example, from the outputs of its features (by feature index)."""

    def score(self, examples: list[Any], predictions: list[dict[str, Any]],
              label_names: list[str] | None) -> dict[str, Any]:
        """The task's metrics of the predictions against the examples' labels."""

    def recorded(self) -> dict[str, Any]:
        """What training learnt about the data that predicting needs (kept in task.json), e.g. a SQuAD version."""

    def from_lines(self, lines: list[tuple[int, str]]) -> list[Any]:
        """Examples from ``bertwb predict``'s stdin lines: (line number in stdin, text), blank lines left out."""

    def row(self, example: Any, prediction: dict[str, Any]) -> dict[str, Any]:
        """The output row of one prediction: the input it answers, then the prediction."""

    def gold(self, example: Any) -> Any:
        """The example's label in the input, None when it has none."""


TASK_TYPES: dict[str, type[TaskType]] = {
    "classify": ClassifyTask,
    "tag": TagTask,
    "qa": QATask,
}


def task_type(settings: FinetuneTaskConfig, config_key: str, recorded: dict[str, Any] | None = None,
              **options: Any) -> TaskType:
    """The task type a task's ``type`` names, set up with its settings (and what training recorded about its data,
    ``TaskType.recorded``, when predicting). ``options`` are the type's own keywords, given whole at construction
    (tag's ``word_labels``, which ``bertwb predict --words`` asks for)."""
    if settings.type is None:
        *others, last = TASK_TYPES
        raise BertwbError(f"{config_key}.type is not set; give {', '.join(others)} or {last}")
    return TASK_TYPES[settings.type](settings, config_key, recorded or {}, **options)


def settings_class(type_name: str | None) -> type[FinetuneTaskConfig]:
    """The settings dataclass of tasks of type ``type_name`` (the shared settings alone when it is None)."""
    return FinetuneTaskConfig if type_name is None else TASK_TYPES[type_name].settings_class


def task_settings(cfg: Config, task: str) -> FinetuneTaskConfig:
    """The settings of task ``task``; one line naming the tasks there are when it is not one of them."""
    if task not in cfg.finetune.tasks:
        known = ", ".join(cfg.finetune.tasks) or "none"
        raise BertwbError(f"no task {task!r} in finetune.tasks of {cfg.path or 'the config'} (tasks: {known}); "
                          "add it there or pick one of those")
    return cfg.finetune.tasks[task]
