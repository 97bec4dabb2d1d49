"""A stack's settings read from the files, for what runs without the Pulumi engine.

`pulumi up` hands the program Pulumi.yaml's declared defaults overlaid with
stacks/Pulumi.<stack>.yaml, every value a string (lists as JSON). `cli_values` does the same
from the files, so `runner cost`, `runner teardown`'s guard and the infra tests read a stack
exactly as the program does, through config.py's one parser (`load`). Not read here:
values set only in a Pulumi Cloud environment or with `--config` on the command line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from contract.stackconfig.config import NAMESPACE, StackConfig, parse_stack_config

# Pulumi.yaml's stackConfigDir (a test holds them equal): fixed here so that listing the
# stacks needs no YAML parser, which the runner's start-up path does not load.
STACKS_DIR = "stacks"
_STACK_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*")  # what `pulumi stack init` accepts
# The most lists, mappings and scalars one value may hold, counted as written out: YAML
# aliases let a file of a few hundred bytes name a list of 10^9 strings (nested `*a`), which
# json.dumps would then build for minutes on end. Far above any real setting (apiAllowedCidrs
# is the one list, and GKE takes at most 50 of them).
MAX_VALUE_NODES = 10_000


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
    schema = _mapping(_read_yaml(project_root / "Pulumi.yaml"), "Pulumi.yaml")
    values = {
        key: as_cli_string(spec["default"])
        for key, spec in _mapping(schema.get("config"), "Pulumi.yaml config").items()
        if isinstance(spec, dict) and "default" in spec and _bounded(spec["default"], key)
    }
    path = stack_file(project_root, stack)
    settings = _mapping(_read_yaml(path), path.name).get("config") or {}
    for key, value in _mapping(settings, f"{path.name} config").items():
        namespace, _, name = str(key).rpartition(":")
        if namespace in ("", NAMESPACE) and _bounded(value, f"{path.name}: {key}"):
            values[name] = as_cli_string(value)  # a bare key belongs to the project
    return values


def load(project_root: Path, stack: str) -> StackConfig:
    """The stack's validated settings (ConfigError if invalid, StackFileError if absent), under
    the stack's own name, as the program sees it (`pulumi.get_stack()`), also when `stack` is
    fully qualified (org/project/stack)."""
    name = stack.rpartition("/")[2]
    return parse_stack_config(cli_values(project_root, stack), name, str(project_root))


def _read_yaml(path: Path) -> Any:
    """The file's YAML. PyYAML parses nesting by recursion: a file of `[[[[...` (damaged, or
    made to) would end the command in a RecursionError, where Pulumi refuses it in one line."""
    import yaml  # not on the runner's start-up path

    try:
        return yaml.safe_load(path.read_text())
    except RecursionError:
        raise StackFileError(f"{path.name} nests lists or mappings too deeply to read") from None


def _mapping(value: Any, what: str) -> dict[Any, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise StackFileError(f"{what} is not a YAML mapping")
    return value


def _bounded(value: Any, what: str) -> bool:
    """True, or StackFileError if `value` written out would hold over MAX_VALUE_NODES nodes;
    counted without writing it out, a node reached twice through an alias counted twice."""
    budget, pending = MAX_VALUE_NODES, [value]
    while pending:
        budget -= 1
        if budget < 0:
            raise StackFileError(
                f"{what} holds over {MAX_VALUE_NODES:,} values (YAML aliases nested into "
                "each other?); no setting of this project is that large"
            )
        node = pending.pop()
        if isinstance(node, dict):
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
    return True
