"""A stack's settings read from the files, for what runs without the Pulumi engine.

`pulumi up` hands the program Pulumi.yaml's declared defaults overlaid with
stacks/Pulumi.<stack>.yaml, every value a string (lists as JSON). `cli_values` does the same
from the files, so `runner cost`, `runner teardown`'s guard and the infra tests read a stack
exactly as the program does, through infra/config.py's one parser (`load`). Not read here:
values set only in a Pulumi Cloud environment or with `--config` on the command line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from infra.config import NAMESPACE, StackConfig, parse_stack_config

# Pulumi.yaml's stackConfigDir (a test holds them equal): fixed here so that listing the
# stacks needs no YAML parser, which the runner's start-up path does not load.
STACKS_DIR = "stacks"
_STACK_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*")  # what `pulumi stack init` accepts


class StackFileError(ValueError):
    """No such stack, or a stack file that is not what Pulumi writes."""


def stack_names(project_root: Path) -> list[str]:
    """The stacks with a settings file, sorted."""
    files = (project_root / STACKS_DIR).glob("Pulumi.*.yaml")
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in files if p.is_file())


def stack_file(project_root: Path, stack: str) -> Path:
    """stacks/Pulumi.<stack>.yaml; StackFileError naming the stacks that exist if missing.
    A fully qualified name (org/project/stack) names the file of its last part."""
    name = stack.rpartition("/")[2]
    path = project_root / STACKS_DIR / f"Pulumi.{name}.yaml"
    if not _STACK_NAME.fullmatch(name) or not path.is_file():
        known = ", ".join(stack_names(project_root)) or "none"
        raise StackFileError(f"no stack {stack!r} in {project_root / STACKS_DIR} (stacks: {known})")
    return path


def as_cli_string(value: Any) -> str:
    """A YAML value as the Pulumi CLI passes it to the program."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | dict):
        return json.dumps(value)
    return str(value)


def cli_values(project_root: Path, stack: str) -> dict[str, str]:
    """key -> string for every `stackbench:` key: declared defaults, then the stack file."""
    import yaml  # not on the runner's start-up path

    schema = _mapping(yaml.safe_load((project_root / "Pulumi.yaml").read_text()), "Pulumi.yaml")
    values = {
        key: as_cli_string(spec["default"])
        for key, spec in _mapping(schema.get("config"), "Pulumi.yaml config").items()
        if isinstance(spec, dict) and "default" in spec
    }
    path = stack_file(project_root, stack)
    settings = _mapping(yaml.safe_load(path.read_text()), path.name).get("config") or {}
    for key, value in _mapping(settings, f"{path.name} config").items():
        namespace, _, name = str(key).rpartition(":")
        if namespace in ("", NAMESPACE):  # a bare key belongs to the project
            values[name] = as_cli_string(value)
    return values


def load(project_root: Path, stack: str) -> StackConfig:
    """The stack's validated settings (ConfigError if invalid, StackFileError if absent), under
    the stack's own name, as the program sees it (`pulumi.get_stack()`), also when `stack` is
    fully qualified (org/project/stack)."""
    name = stack.rpartition("/")[2]
    return parse_stack_config(cli_values(project_root, stack), name, str(project_root))


def _mapping(value: Any, what: str) -> dict[Any, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise StackFileError(f"{what} is not a YAML mapping")
    return value
