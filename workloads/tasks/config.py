"""Task configs: what a task adds to training beyond model, data and optimizer, and how it is
scored. Which task a run has follows from its model (ModelConfig.task), by the task's `kind`
under which it registers (workloads/plugins/points.py TASKS).

- classification (tasks 1a, 2a, the CS744 study, cnn-digits): top-1 accuracy; nothing to set.
- language_model (3a): perplexity; gradient clipping and NT-ASGD's trigger.
- translation (4a, 4b): BLEU; gradient clipping, label smoothing, and the search evaluation
  decodes with (beam, length penalty, length limit).
Gradient clipping is here, not with the optimizer, because the sequence tasks clip and the
classification loop does not: it is a key only where it acts. Torch-free; each config builds
its task, importing it only then.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal

from workloads.configuration.components import Component
from workloads.configuration.fields import Bounds, setting
from workloads.plugins import points
from workloads.tasks.metrics import LOWER_IS_BETTER as LOWER_IS_BETTER  # readers import it here

if TYPE_CHECKING:
    from workloads.tasks import Context, Task

# The values a target may take, by metric.
METRIC_RANGES: dict[str, Bounds] = {
    "top1_accuracy": Bounds(0.0, 1.0, low_open=True, high_open=False),
    "bleu": Bounds(0.0, 100.0, low_open=True, high_open=False),
    "perplexity": Bounds(1.0, float("inf"), low_open=True, high_open=True),
}


@dataclass(frozen=True, kw_only=True)
class TaskConfig(Component):
    kind: ClassVar[str]  # what ModelConfig.task names
    metric: ClassVar[str]  # the quality metric a target is set in (METRIC_RANGES)
    compiles: ClassVar[bool] = False  # torch.compile is wired into its training loop
    # The global gradient norm is clipped to this; fixed where the task does not clip (a
    # field of the same name in a task that does makes it a key).
    grad_clip_norm: ClassVar[float | None] = None

    def build(self, ctx: Context) -> Task:
        raise NotImplementedError


@dataclass(frozen=True, kw_only=True)
class ClassificationConfig(TaskConfig):
    kind = "classification"
    metric = "top1_accuracy"
    compiles = True

    def build(self, ctx: Context) -> Task:
        from workloads.tasks.classification import ClassificationTask

        return ClassificationTask.build(ctx)


@dataclass(frozen=True, kw_only=True)
class LanguageModelConfig(TaskConfig):
    kind = "language_model"
    metric = "perplexity"

    grad_clip_norm: float | None = setting(None, gt=0, le=1e6)  # type: ignore[misc]
    # NT-ASGD (Merity et al. 2017): switch from SGD to averaged SGD once the validation
    # metric has not improved on the best of all but the last `asgd_nonmono` evaluations
    # (0: never).
    asgd_nonmono: int = setting(0, ge=0, le=100_000)

    def build(self, ctx: Context) -> Task:
        from workloads.tasks.language_model import LanguageModelTask

        return LanguageModelTask.build(ctx, self)


@dataclass(frozen=True, kw_only=True)
class TranslationConfig(TaskConfig):
    kind = "translation"
    metric = "bleu"

    grad_clip_norm: float | None = setting(None, gt=0, le=1e6)  # type: ignore[misc]
    label_smoothing: float = setting(0.0, ge=0, lt=1)
    beam_size: int = setting(1, ge=1, le=256)  # evaluation's search; 1 is greedy
    length_penalty: float = setting(0.0, ge=0, le=100)  # the search's alpha
    # "gnmt": ((5+|Y|)/6)^alpha (Wu et al. 2016, and both MLPerf translation references);
    # "power": |Y|^alpha (fairseq's lenpen).
    length_penalty_form: Literal["gnmt", "power"] = "power"
    # A translation is at most source length + this many tokens.
    decode_extra_len: int = setting(50, ge=0, le=100_000)

    def build(self, ctx: Context) -> Task:
        from workloads.tasks.translation import TranslationTask

        return TranslationTask.build(ctx, self)


for _task in (ClassificationConfig, LanguageModelConfig, TranslationConfig):
    points.TASKS.register(_task)
