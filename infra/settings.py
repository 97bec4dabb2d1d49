"""The stack's settings as the Pulumi program gets them: from the Pulumi runtime, parsed and
checked by the one parser the runner shares (contract/stackconfig/config.py), which needs no
Pulumi; this module is the program's side of that seam, and the runner never imports it.
"""

from __future__ import annotations

from pathlib import Path

import pulumi
from pulumi.runtime import config as runtime_config

from contract.stackconfig.config import (
    KEYS,
    NAMESPACE,
    StackConfig,
    check_deployable,
    open_api_warning,
    parse_stack_config,
)

PROJECT_ROOT = Path(__file__).resolve().parent.parent  # where Pulumi.yaml is


def _runtime_keys() -> set[str]:
    """Every `stackbench:` key the CLI handed the program, declared or not: the language host
    passes them all in PULUMI_CONFIG (mocks set the runtime's map instead)."""
    names = set(runtime_config.get_config_env()) | set(runtime_config.CONFIG.get())
    return {name for ns, _, name in (n.partition(":") for n in names) if ns == NAMESPACE}


def load_stack_config() -> StackConfig:
    """Read this stack's settings from the Pulumi runtime, validate them, warn if the API is
    open to the internet."""
    config = pulumi.Config(NAMESPACE)
    raw = {key: config.get(key) for key in (*KEYS, *_runtime_keys() - set(KEYS))}
    cfg = parse_stack_config(raw, pulumi.get_stack(), str(PROJECT_ROOT))
    check_deployable(cfg)
    if warning := open_api_warning(cfg):
        pulumi.log.warn(warning)
    return cfg
