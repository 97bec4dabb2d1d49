"""The resolved training configuration: one frozen value saying exactly what a run trains.

It is the contract between the runner, which resolves it from the benchmark registry plus
`--set key=value` overrides, and the workload, which receives it as JSON. It is validated
here, once, so a bad value fails before anything is submitted. It is not the registry (see
runner/benchmarks.py) and imports no torch: the runner loads it on its start-up path.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal, Self, TypeVar, get_args, get_origin

Strategy = Literal[
    "ddp",
    "allreduce",
    "allreduce-per-param",
    "gather-scatter",
    "powersgd",
    "fp16-compress",
    "bf16-compress",
    "model-averaging",
]
Optimizer = Literal[
    "sgd",
    "adam",
]
Metric = Literal["top1_accuracy", "perplexity", "bleu"]
# Higher is better for every metric except these (a run reaches its target at or below it).
LOWER_IS_BETTER: frozenset[str] = frozenset({"perplexity"})

# ---- models, data, losses and LR schedules of the reference workloads --------------------
Model = Literal[
    "cnn-digits", "resnet-cifar", "vgg11-bn", "logreg", "awd-lstm", "gnmt", "transformer"
]
Dataset = Literal["digits", "cifar10", "epsilon", "wikitext2", "wmt16", "wmt17"]
# m1: post-activation residual blocks (He et al. 2015); m2: pre-activation (He et al. 2016).
ResnetVariant = Literal["m1", "m2"]
Loss = Literal["cross-entropy", "logistic"]
LrSchedule = Literal["multistep", "inverse-sqrt", "warmup-inverse-sqrt", "warmup-step-decay"]
# "table": the peak LR is lr * lr_scale_table[i] at world size 2**i (see workloads/schedule.py).
LrScaling = Literal["none", "linear", "sqrt", "table"]
MemoryFormat = Literal["contiguous", "channels_last"]
# What batch_size and global_batch count: samples (sentences, sequences) or padded tokens.
BatchUnit = Literal["samples", "tokens"]
# "auto": bf16 autocast for the translation models on CUDA, fp32 otherwise (workloads/precision).
Precision = Literal["auto", "fp32", "bf16"]
# Beam-search length normalisation: "gnmt" ((5+|Y|)/6)^alpha (Wu et al. 2016), "power" |Y|^alpha
# (fairseq's lenpen, the MLPerf Transformer reference's).
LengthPenalty = Literal["gnmt", "power"]
# Which datasets each model is built for (its input shape and number of outputs).
MODEL_DATASETS: dict[str, tuple[str, ...]] = {
    "cnn-digits": ("digits",),
    "resnet-cifar": ("cifar10",),
    "vgg11-bn": ("cifar10",),
    "logreg": ("epsilon",),
    "awd-lstm": ("wikitext2",),
    "gnmt": ("wmt16", "wmt17"),
    "transformer": ("wmt16", "wmt17"),
}
# The task each model is trained for, which fixes its quality metric (workloads/tasks/).
LANGUAGE_MODELS = frozenset({"awd-lstm"})
TRANSLATION_MODELS = frozenset({"gnmt", "transformer"})
SEQUENCE_MODELS = LANGUAGE_MODELS | TRANSLATION_MODELS


def task_metric(model: str) -> str:
    if model in LANGUAGE_MODELS:
        return "perplexity"
    return "bleu" if model in TRANSLATION_MODELS else "top1_accuracy"


class ConfigError(ValueError):
    """A config value is invalid; `key` names it so the caller can say what to change."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


class JsonConfig:
    """The JSON round trip of a frozen config dataclass: tuples travel as lists, integral
    floats come back as floats, and an unknown key is refused naming the valid ones."""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _jsonable(getattr(self, f.name)) for f in fields(self)}  # type: ignore[arg-type]

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise ConfigError(unknown[0], f"unknown key; valid keys: {', '.join(names)}")
        types_ = typing.get_type_hints(cls)
        return cls(**{k: _from_json(v, types_[k]) for k, v in data.items()})

    @classmethod
    def from_json(cls, text: str) -> Self:
        return cls.from_dict(json.loads(text))


@dataclass(frozen=True)
class TrainConfig(JsonConfig):
    """Model, data, algorithm and hyperparameters of one run (per worker unless named global)."""

    model: Model
    dataset: Dataset
    target_metric: Metric
    target_value: float
    max_epochs: int
    batch_size: int  # per worker; the global batch is batch_size * world size
    lr: float  # for one worker's batch; see lr_scaling for more workers
    strategy: Strategy = "ddp"
    optimizer: Optimizer = "sgd"
    momentum: float = 0.0
    nesterov: bool = False
    weight_decay: float = 0.0
    # "linear": the LR grows from `lr` to `lr * world_size` over warmup_epochs (Goyal et al.).
    lr_scaling: LrScaling = "none"
    warmup_epochs: float = 0.0
    lr_milestones: tuple[int, ...] = ()  # epochs at which the LR is multiplied by lr_gamma
    lr_gamma: float = 0.1
    seed: int = 0
    eval_every_epochs: int = 1
    stop_at_target: bool = True
    time_budget_s: float | None = None  # "accuracy after time": stop at this wall time
    data_dir: str | None = None  # None: $STACKBENCH_DATA or ~/.cache (workloads.data)
    dist_timeout_s: float = 300.0
    # Communication-strategy options (workloads/strategies/); each applies to one strategy.
    powersgd_rank: int = 1  # matrix approximation rank r (torch's PowerSGDState default)
    powersgd_start_iter: int = 1000  # plain all-reduce before this step (torch's default)
    averaging_period: int = 1  # model-averaging: average the weights every this many steps
    averaging_warmup_steps: int = 0  # model-averaging: all-reduce gradients for these first
    # Adam ("centralized Adam": all-reduced gradients, then Adam on every worker).
    adam_betas: tuple[float, ...] = (0.9, 0.999)
    adam_eps: float = 1e-8
    # ---- model, loss, schedule and step-speed options of the reference workloads ----
    resnet_depth: int = 20  # 6n+2 layers; He et al. report 20, 32, 44, 56 (and 110)
    resnet_variant: ResnetVariant = "m1"
    loss: Loss = "cross-entropy"  # "logistic": binary, one logit per sample (labels 0/1)
    l2_rate: float = 0.0  # adds l2_rate / 2 * ||params||^2 to the loss (MLBench's definition)
    # "multistep": warm-up then x lr_gamma at lr_milestones; "inverse-sqrt": peak / sqrt(t),
    # t the 1-based step (MLBench's logistic-regression schedule).
    lr_schedule: LrSchedule = "multistep"
    lr_scale_table: tuple[float, ...] = ()  # lr_scaling="table": multiplier at world size 2**i
    memory_format: MemoryFormat = "contiguous"  # of the model and its input batches
    compile_model: bool = False  # torch.compile, compiled before the clock (workloads/compiling)
    # A training-loss goal reported next to the accuracy target (2a: 0.2828); never stops a run.
    target_train_loss: float | None = None
    # ---- sequence tasks: language modelling (3a) and translation (4a, 4b) ----
    batch_unit: BatchUnit = "samples"  # "tokens": batch_size counts padded tokens per device
    # Units per optimizer update over all workers, reached by accumulating micro-batches of
    # batch_size (translation); None: one micro-batch per worker per update.
    global_batch: int | None = None
    grad_clip_norm: float | None = None  # clip the global gradient norm to this
    label_smoothing: float = 0.0
    warmup_steps: int = 0  # optimizer updates of warm-up (the warmup-* schedules)
    lr_decay_start: float = 0.4  # warmup-step-decay: first decay at this fraction of training
    lr_decay_count: int = 4  # ...then this many x lr_gamma decays, evenly spaced to the end
    bptt: int = 70  # language modelling: the mean truncated-backprop length in tokens
    max_seq_len: int | None = None  # translation: training pairs longer than this are skipped
    # Model sizes (0: the model does not use it); each model checks what it needs.
    embed_dim: int = 0  # awd-lstm embedding
    hidden_dim: int = 0  # awd-lstm / gnmt LSTM width, transformer d_model
    ffn_dim: int = 0  # transformer feed-forward width
    num_layers: int = 0  # awd-lstm layers; encoder and decoder layers each for translation
    num_heads: int = 0  # transformer attention heads
    dropout: float = 0.0  # awd-lstm: output dropout
    lstm_dropout_hidden: float = 0.0  # awd-lstm: between layers
    lstm_dropout_input: float = 0.0  # awd-lstm: on the embeddings
    lstm_dropout_embedding: float = 0.0  # awd-lstm: whole words
    lstm_weight_drop: float = 0.0  # awd-lstm: DropConnect on hidden-to-hidden weights
    # NT-ASGD (Merity et al. 2017): switch from SGD to averaged SGD once the validation metric
    # has not improved on the best of all but the last `asgd_nonmono` evaluations (0: never).
    asgd_nonmono: int = 0
    beam_size: int = 1  # translation evaluation; 1 is greedy search
    length_penalty: float = 0.0
    length_penalty_form: LengthPenalty = "power"
    decode_extra_len: int = 50  # a translation is at most source length + this many tokens
    precision: Precision = "auto"

    def __post_init__(self) -> None:
        types_ = _field_types()
        for f in fields(self):
            _check_type(f.name, getattr(self, f.name), types_[f.name])
        _positive(self, "max_epochs", "batch_size", "lr", "eval_every_epochs", "dist_timeout_s")
        _non_negative(self, "momentum", "weight_decay", "warmup_epochs", "seed")
        _check_target(self)
        if self.nesterov and self.momentum <= 0:
            raise ConfigError("nesterov", "Nesterov momentum needs momentum > 0")
        if self.warmup_epochs > self.max_epochs:
            raise ConfigError("warmup_epochs", f"must not exceed max_epochs={self.max_epochs}")
        if list(self.lr_milestones) != sorted(set(self.lr_milestones)):
            raise ConfigError("lr_milestones", "must be strictly increasing epochs")
        if not 0.0 < self.lr_gamma <= 1.0:
            raise ConfigError("lr_gamma", "must be in (0, 1]")
        if self.time_budget_s is not None and self.time_budget_s <= 0:
            raise ConfigError("time_budget_s", "must be positive (or unset)")
        _check_strategy_options(self)
        _check_optimizer_options(self)
        _check_workload_options(self)
        _check_sequence_options(self)


C = TypeVar("C")


def field_names() -> tuple[str, ...]:
    return tuple(f.name for f in fields(TrainConfig))


def describe_type(key: str) -> str:
    """A human description of what `key` accepts, for error messages and help."""
    return _describe(_field_types()[key])


def with_overrides(config: C, overrides: Mapping[str, str]) -> C:
    """`config` (any config dataclass) with string overrides, as typed on a command line,
    parsed by field type."""
    types_ = typing.get_type_hints(type(config))
    parsed: dict[str, Any] = {}
    for key, text in overrides.items():
        if key not in types_:
            raise ConfigError(key, f"unknown key; valid keys: {', '.join(types_)}")
        parsed[key] = parse_value(key, text, types_[key])
    return dataclasses.replace(config, **parsed)


def parse_value(key: str, text: str, tp: Any) -> Any:
    """Parse one command-line string into the type `tp`; ConfigError says what was expected."""
    origin, args = get_origin(tp), get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if text.lower() in ("none", "null", "") and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return parse_value(key, text, inner[0])
    if origin is Literal:
        if text not in args:
            raise ConfigError(key, f"expected one of {', '.join(map(str, args))}, got {text!r}")
        return text
    if origin is tuple:
        parts = [p for p in text.replace(" ", "").split(",") if p]
        return tuple(parse_value(key, p, args[0]) for p in parts)
    if tp is bool:
        lowered = text.lower()
        if lowered in ("true", "1", "yes", "on"):
            return True
        if lowered in ("false", "0", "no", "off"):
            return False
        raise ConfigError(key, f"expected true or false, got {text!r}")
    try:
        return tp(text)
    except ValueError:
        raise ConfigError(key, f"expected {_describe(tp)}, got {text!r}") from None


# ---- internals -------------------------------------------------------------------------


@functools.cache  # resolving the annotations is slow; every config checks every field
def _field_types() -> dict[str, Any]:
    return typing.get_type_hints(TrainConfig)


def _describe(tp: Any) -> str:
    origin, args = get_origin(tp), get_args(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [_describe(a) for a in args if a is not type(None)]
        return " or ".join(inner) + (" or none" if type(None) in args else "")
    if origin is Literal:
        return "one of " + ", ".join(map(str, args))
    if origin is tuple:
        return f"a comma-separated list of {_describe(args[0])}s"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(
        tp, str(tp)
    )


def _check_type(key: str, value: Any, tp: Any) -> None:
    origin, args = get_origin(tp), get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return
        _check_type(key, value, next(a for a in args if a is not type(None)))
        return
    if origin is Literal:
        if value not in args:
            raise ConfigError(key, f"expected one of {', '.join(map(str, args))}, got {value!r}")
        return
    if origin is tuple:
        if not isinstance(value, tuple):
            raise ConfigError(key, f"expected {_describe(tp)}, got {value!r}")
        for item in value:
            _check_type(key, item, args[0])
        return
    ok = isinstance(value, tp) and not (tp is not bool and isinstance(value, bool))
    if tp is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok:
        raise ConfigError(key, f"expected {_describe(tp)}, got {value!r}")


def _from_json(value: Any, tp: Any) -> Any:
    if get_origin(tp) is tuple and isinstance(value, list):
        return tuple(value)
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def _jsonable(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _check_workload_options(c: TrainConfig) -> None:
    """Model, loss and schedule options: combinations that would train something else."""
    if c.dataset not in MODEL_DATASETS[c.model]:
        raise ConfigError(
            "dataset", f"model {c.model} trains on {' or '.join(MODEL_DATASETS[c.model])}"
        )
    if c.resnet_depth < 8 or (c.resnet_depth - 2) % 6:
        raise ConfigError("resnet_depth", f"must be 6n+2 (20, 32, 44, 56), got {c.resnet_depth}")
    if (c.loss == "logistic") != (c.model == "logreg"):
        wanted = "logistic" if c.model == "logreg" else "cross-entropy"
        raise ConfigError("loss", f"model {c.model} is trained with loss={wanted}")
    _non_negative(c, "l2_rate")
    if c.target_train_loss is not None and c.target_train_loss <= 0:
        raise ConfigError("target_train_loss", "must be positive (or unset)")
    if c.l2_rate and c.loss != "logistic":
        raise ConfigError("l2_rate", "regularizes the logistic loss; other models use weight_decay")
    if c.lr_schedule == "inverse-sqrt" and (c.lr_milestones or c.warmup_epochs):
        raise ConfigError(
            "lr_schedule", "inverse-sqrt has no warm-up or milestones; unset those two"
        )
    if (c.lr_scaling == "table") != bool(c.lr_scale_table):
        raise ConfigError(
            "lr_scale_table", "give it (multipliers at 1, 2, 4, ... workers) iff lr_scaling=table"
        )
    if any(m <= 0 for m in c.lr_scale_table):
        raise ConfigError("lr_scale_table", "multipliers must be positive")
    if c.memory_format == "channels_last" and c.model == "logreg":
        raise ConfigError("memory_format", "channels_last applies to image models only")


def _check_target(c: TrainConfig) -> None:
    wanted = task_metric(c.model)
    if c.target_metric != wanted:
        raise ConfigError("target_metric", f"model {c.model} is scored by {wanted}")
    if c.target_metric == "top1_accuracy" and not 0.0 < c.target_value <= 1.0:
        raise ConfigError("target_value", "must be in (0, 1] for top1_accuracy")
    if c.target_metric == "bleu" and not 0.0 < c.target_value <= 100.0:
        raise ConfigError("target_value", "must be in (0, 100] for bleu")
    if c.target_metric == "perplexity" and not c.target_value > 1.0:
        raise ConfigError("target_value", "must be above 1 for perplexity")


# The sizes and options each sequence model reads; setting one for another model is a mistake.
MODEL_OPTIONS: dict[str, frozenset[str]] = {
    "embed_dim": LANGUAGE_MODELS,
    "hidden_dim": SEQUENCE_MODELS,
    "ffn_dim": frozenset({"transformer"}),
    "num_layers": SEQUENCE_MODELS,
    "num_heads": frozenset({"transformer"}),
    "dropout": SEQUENCE_MODELS,
    "lstm_dropout_hidden": LANGUAGE_MODELS,
    "lstm_dropout_input": LANGUAGE_MODELS,
    "lstm_dropout_embedding": LANGUAGE_MODELS,
    "lstm_weight_drop": LANGUAGE_MODELS,
    "asgd_nonmono": LANGUAGE_MODELS,
    "bptt": LANGUAGE_MODELS,
    "global_batch": TRANSLATION_MODELS,
    "label_smoothing": TRANSLATION_MODELS,
    "max_seq_len": TRANSLATION_MODELS,
    "beam_size": TRANSLATION_MODELS,
    "length_penalty": TRANSLATION_MODELS,
    "length_penalty_form": TRANSLATION_MODELS,
    "decode_extra_len": TRANSLATION_MODELS,
}
# The sizes each model cannot do without.
REQUIRED_SIZES: dict[str, tuple[str, ...]] = {
    "awd-lstm": ("embed_dim", "hidden_dim", "num_layers"),
    "gnmt": ("hidden_dim", "num_layers"),
    "transformer": ("hidden_dim", "ffn_dim", "num_layers", "num_heads"),
}


def _check_sequence_options(c: TrainConfig) -> None:
    """Options of the language-modelling and translation tasks."""
    defaults = {f.name: f.default for f in fields(c)}
    for key, models in MODEL_OPTIONS.items():
        if c.model not in models and getattr(c, key) != defaults[key]:
            raise ConfigError(
                key,
                f"applies to model {' or '.join(sorted(models))} only; with model={c.model} "
                f"leave it at its default (--set {key}={_jsonable(defaults[key])})",
            )
    for key in REQUIRED_SIZES.get(c.model, ()):
        if getattr(c, key) <= 0:
            raise ConfigError(key, f"model {c.model} needs a positive {key}")
    if c.model == "transformer" and c.hidden_dim % c.num_heads:
        raise ConfigError("num_heads", f"must divide hidden_dim={c.hidden_dim}")
    for key in (
        "dropout",
        "label_smoothing",
        "lstm_dropout_hidden",
        "lstm_dropout_input",
        "lstm_dropout_embedding",
        "lstm_weight_drop",
    ):
        if not 0.0 <= getattr(c, key) < 1.0:
            raise ConfigError(key, f"must be in [0, 1), got {getattr(c, key)}")
    _positive(c, "bptt", "beam_size", "lr_decay_count")
    _non_negative(c, "warmup_steps", "asgd_nonmono", "length_penalty", "decode_extra_len")
    if c.batch_unit == "tokens" and c.model not in TRANSLATION_MODELS:
        raise ConfigError("batch_unit", "tokens batches are for the translation models")
    if c.global_batch is not None and c.global_batch < c.batch_size:
        raise ConfigError("global_batch", f"must be at least batch_size={c.batch_size} (or unset)")
    if c.max_seq_len is not None and c.max_seq_len < 1:
        raise ConfigError("max_seq_len", "must be positive (or unset)")
    if c.grad_clip_norm is not None and c.grad_clip_norm <= 0:
        raise ConfigError("grad_clip_norm", "must be positive (or unset)")
    if not 0.0 <= c.lr_decay_start < 1.0:
        raise ConfigError("lr_decay_start", "must be a fraction of training in [0, 1)")
    step_schedule = c.lr_schedule in ("warmup-inverse-sqrt", "warmup-step-decay")
    if step_schedule and (c.lr_milestones or c.warmup_epochs):
        raise ConfigError(
            "lr_schedule",
            f"{c.lr_schedule} warms up over warmup_steps; unset warmup_epochs and lr_milestones",
        )
    if not step_schedule and c.warmup_steps:
        raise ConfigError("warmup_steps", f"applies to the warmup-* schedules, not {c.lr_schedule}")
    decay = (c.lr_decay_start, c.lr_decay_count) != (
        defaults["lr_decay_start"],
        defaults["lr_decay_count"],
    )
    if c.lr_schedule != "warmup-step-decay" and decay:
        raise ConfigError(
            "lr_decay_start", "lr_decay_start and lr_decay_count apply to warmup-step-decay only"
        )
    if c.lr_schedule == "warmup-inverse-sqrt" and c.warmup_steps < 1:
        raise ConfigError("warmup_steps", "warmup-inverse-sqrt needs at least 1 warm-up step")
    if c.model in SEQUENCE_MODELS:
        if c.memory_format != "contiguous":
            raise ConfigError("memory_format", "channels_last applies to image models only")
        if c.compile_model:
            raise ConfigError("compile_model", "torch.compile is wired for the image models only")


def _positive(config: TrainConfig, *keys: str) -> None:
    for key in keys:
        if getattr(config, key) <= 0:
            raise ConfigError(key, f"must be positive, got {getattr(config, key)!r}")


# Which strategy or optimizer each option belongs to: setting one for another is a mistake.
STRATEGY_OPTIONS = {
    "powersgd_rank": "powersgd",
    "powersgd_start_iter": "powersgd",
    "averaging_period": "model-averaging",
    "averaging_warmup_steps": "model-averaging",
}
OPTIMIZER_OPTIONS = {"momentum": "sgd", "nesterov": "sgd", "adam_betas": "adam", "adam_eps": "adam"}


def _check_strategy_options(config: TrainConfig) -> None:
    _positive(config, "powersgd_rank", "averaging_period")
    _non_negative(config, "averaging_warmup_steps")
    if config.powersgd_start_iter < 2:
        # torch's PowerSGD needs two plain steps before error feedback and warm start work.
        raise ConfigError("powersgd_start_iter", "must be at least 2 (torch's PowerSGD needs it)")
    _only_with(config, "strategy", STRATEGY_OPTIONS)


def _check_optimizer_options(config: TrainConfig) -> None:
    if len(config.adam_betas) != 2 or not all(0.0 <= b < 1.0 for b in config.adam_betas):
        raise ConfigError("adam_betas", f"must be two numbers in [0, 1), got {config.adam_betas}")
    _positive(config, "adam_eps")
    _only_with(config, "optimizer", OPTIMIZER_OPTIONS)


def _only_with(config: TrainConfig, selector: str, options: Mapping[str, str]) -> None:
    """An option changed from its default must belong to the selected strategy/optimizer."""
    defaults = {f.name: f.default for f in fields(config)}
    chosen = getattr(config, selector)
    for key, owner in options.items():
        if owner != chosen and getattr(config, key) != defaults[key]:
            raise ConfigError(
                key,
                f"applies to {selector}={owner} only; with {selector}={chosen} leave it at "
                f"its default (--set {key}={_jsonable(defaults[key])})",
            )


def _non_negative(config: TrainConfig, *keys: str) -> None:
    for key in keys:
        if getattr(config, key) < 0:
            raise ConfigError(key, f"must not be negative, got {getattr(config, key)!r}")
