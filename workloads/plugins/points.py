"""The extension points: one Registry each, its entry-point group, and its built-ins.

    point       entry-point group      an entry is                  our built-ins in
    models      stackbench.models      a ModelConfig subclass       workloads.models
    datasets    stackbench.datasets    a DataConfig subclass        workloads.data.config
    tasks       stackbench.tasks       a TaskConfig subclass        workloads.tasks.config
    strategies  stackbench.strategies  a StrategyConfig subclass    workloads.strategies.config
    optimizers  stackbench.optimizers  an OptimizerConfig subclass  workloads.optimization.optim
    schedules   stackbench.schedules   a ScheduleConfig subclass    workloads.optimization.schedule
    policies    stackbench.policies    a PolicySpec                 workloads.adaptive.policies
    benchmarks  stackbench.benchmarks  a Benchmark                  runner.job.benchmarks

A config class is its own factory (its `build` makes the model, optimizer, strategy, task,
data splits from the class's own fields) and names itself by its `name` field's Literal
(`name: Literal["topk"] = "topk"`): the class is both the entry's config dataclass and its
factory, as torchtitan's TrainSpec pairs a builder with its config. A task registers under
its `kind`. The bases are named by module path, imported only when a plugin registers, so
this module imports nothing of ours and no torch.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterable
from typing import Any, get_args

from workloads.plugins.registry import Registry

# point -> (the base class an entry subclasses, "module:Class"; its factory method)
_BASES = {
    "models": ("workloads.models.base:ModelConfig", "build"),
    "datasets": ("workloads.data.config:DataConfig", "load"),
    "tasks": ("workloads.tasks.config:TaskConfig", "build"),
    "strategies": ("workloads.strategies.config:StrategyConfig", "build"),
    "optimizers": ("workloads.optimization.optim:OptimizerConfig", "build"),
    "schedules": ("workloads.optimization.schedule:ScheduleConfig", "lr_at"),
}


def _literal_names(cls: Any) -> tuple[str, ...]:
    """The names a config class selects by: its `name` field's Literal values."""
    from workloads.configuration.fields import field_types

    try:
        return tuple(get_args(field_types(cls).get("name")))
    except (TypeError, NameError):  # not a dataclass, or annotations that do not resolve
        return ()


def _task_names(cls: Any) -> tuple[str, ...]:
    kind = getattr(cls, "kind", None)
    return (kind,) if isinstance(kind, str) else ()


def _subclass_check(point: str) -> Any:
    """None when `obj` is a subclass of the point's base whose factory method takes the
    base's parameters; else why not."""
    base_path, method = _BASES[point]

    def check(obj: Any) -> str | None:
        module, _, name = base_path.partition(":")
        base = getattr(importlib.import_module(module), name)
        if not (isinstance(obj, type) and issubclass(obj, base)):
            return f"is not a subclass of {name} ({module})"
        if obj is base:
            return f"is the base class {name} itself"
        return _signature_problem(obj, base, method)

    return check


def _signature_problem(obj: type, base: type, method: str) -> str | None:
    """Why obj.method cannot be called as base.method is (its parameters by name and
    order; more are fine where they have defaults), or None."""
    if not hasattr(base, method):  # a base without the method: nothing to compare
        return None
    try:
        want = list(inspect.signature(getattr(base, method)).parameters.values())
        have = list(inspect.signature(getattr(obj, method)).parameters.values())
    except (TypeError, ValueError):
        return f"has a {method} whose signature cannot be read"
    wanted = [p.name for p in want]
    named = [p.name for p in have[: len(want)]]
    extra = [p for p in have[len(want) :] if p.default is inspect.Parameter.empty]
    if named != wanted or extra:
        shown = ", ".join(w for w in wanted if w != "self")
        return f"has {method}({', '.join(p.name for p in have if p.name != 'self')}); " \
            f"{base.__name__}.{method} takes ({shown})"  # fmt: skip
    return None


def _policy_check(obj: Any) -> str | None:
    from workloads.adaptive.spec import PolicySpec

    if not isinstance(obj, PolicySpec):
        return "is not a PolicySpec (workloads.adaptive.policies)"
    if not callable(obj.build) or len(inspect.signature(obj.build).parameters) != 1:
        return "has a build that is not a function of one PolicyContext"
    return None


def _benchmark_check(obj: Any) -> str | None:
    from runner.job.benchmark_types import Benchmark, MicroBenchmark

    if not isinstance(obj, Benchmark | MicroBenchmark):
        return "is not a Benchmark (runner.job.benchmarks)"
    return None


def _named(obj: Any) -> Iterable[str]:
    name = getattr(obj, "name", None)
    return (name,) if isinstance(name, str) else ()


MODELS: Registry[Any] = Registry("models", _literal_names, _subclass_check("models"),
                                 ("workloads.models",))  # fmt: skip
DATASETS: Registry[Any] = Registry("datasets", _literal_names, _subclass_check("datasets"),
                                   ("workloads.data.config",))  # fmt: skip
TASKS: Registry[Any] = Registry("tasks", _task_names, _subclass_check("tasks"),
                                ("workloads.tasks.config",))  # fmt: skip
STRATEGIES: Registry[Any] = Registry("strategies", _literal_names,
                                     _subclass_check("strategies"),
                                     ("workloads.strategies.config",))  # fmt: skip
OPTIMIZERS: Registry[Any] = Registry("optimizers", _literal_names,
                                     _subclass_check("optimizers"),
                                     ("workloads.optimization.optim",))  # fmt: skip
SCHEDULES: Registry[Any] = Registry("schedules", _literal_names, _subclass_check("schedules"),
                                    ("workloads.optimization.schedule",))  # fmt: skip
POLICIES: Registry[Any] = Registry("policies", _named, _policy_check,
                                   ("workloads.adaptive.policies",))  # fmt: skip
BENCHMARKS: Registry[Any] = Registry("benchmarks", _named, _benchmark_check,
                                     ("runner.job.benchmarks",))  # fmt: skip

POINTS: tuple[Registry[Any], ...] = (
    MODELS, DATASETS, TASKS, STRATEGIES, OPTIMIZERS, SCHEDULES, POLICIES, BENCHMARKS,
)  # fmt: skip
