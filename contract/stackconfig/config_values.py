"""The stack settings' value parsers: one raw CLI string -> one typed value, or ConfigError.

The Pulumi CLI hands every setting over as a string; each parser here reads one kind (text,
a bounded integer, a boolean, a choice, a pinned version, a list of CIDRs) and says, on bad
input, the key and the `pulumi config set` command that fixes it. config.py maps the
keys to these parsers; config_checks.py checks the values together.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable

NAMESPACE = "stackbench"  # the Pulumi project name, so keys read `stackbench:KEY`
API_CIDR_EXAMPLE = "[0] 203.0.113.7/32"  # the `pulumi config set --path` fix: index, value
_INTEGER = re.compile(r"[+-]?[0-9]+")  # what the CLI's `integer` type takes: no 1_000, no "٨"
_SEMVER = re.compile(r"^\d+\.\d+\.\d+$")


class ConfigError(ValueError):
    """A stack setting is invalid; the message names the key and the command that fixes it.

    `example` is the value of the `pulumi config set` fix; a list key's example starts with
    the index (`[0] 203.0.113.7/32`), which makes the fix a `--path` command. `fix` replaces
    that command and `subject` the `stackbench:KEY` the message starts with, for what a
    `pulumi config set` cannot fix (an unknown key, the stack's name)."""

    def __init__(
        self,
        key: str,
        problem: str,
        example: str,
        *,
        fix: str | None = None,
        subject: str | None = None,
    ) -> None:
        self.key = key
        subject = subject or f"{NAMESPACE}:{key}"
        super().__init__(f"{subject} {problem}; fix: {fix or set_command(key, example)}")


def set_command(key: str, example: str) -> str:
    """The `pulumi config set` that gives `key` the value `example`, pasteable into a shell."""
    if example.startswith("["):
        index, _, value = example.partition(" ")
        return f"pulumi config set --path '{NAMESPACE}:{key}{index}' {value}"
    return f"pulumi config set {NAMESPACE}:{key} {example}"


def text(key: str, raw: str) -> str:
    return raw.strip()


def integer(lo: int, hi: int, example: int) -> Callable[[str, str], int]:
    def parse(key: str, raw: str) -> int:
        if not _INTEGER.fullmatch(raw.strip()):
            raise ConfigError(key, f"must be an integer, got {raw!r}", str(example))
        value = int(raw.strip())
        if not lo <= value <= hi:
            raise ConfigError(key, f"must be between {lo} and {hi}, got {value}", str(example))
        return value

    return parse


def boolean(key: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(key, f"must be true or false, got {raw!r}", "false")
    return value == "true"


def choice(options: tuple[str, ...]) -> Callable[[str, str], str]:
    def parse(key: str, raw: str) -> str:
        if raw.strip() not in options:
            raise ConfigError(key, f"must be one of {', '.join(options)}, got {raw!r}", options[0])
        return raw.strip()

    return parse


def semver(key: str, raw: str) -> str:
    if not _SEMVER.match(raw.strip()):
        raise ConfigError(key, f"must be a pinned version x.y.z, got {raw!r}", "2.3.0")
    return raw.strip()


def cidrs(key: str, raw: str) -> tuple[str, ...]:
    example = API_CIDR_EXAMPLE
    try:
        items = json.loads(raw)
    except json.JSONDecodeError:
        raise ConfigError(key, f"must be a list of CIDRs, got {raw!r}", example) from None
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise ConfigError(key, f"must be a list of CIDR strings, got {raw!r}", example)
    for item in items:
        try:
            net = ipaddress.ip_network(item, strict=True)
        except ValueError:
            raise ConfigError(key, f"has {item!r}, which is not a CIDR", example) from None
        if net.version != 4:
            raise ConfigError(key, f"has {item!r}; only IPv4 CIDRs are supported", example)
    return tuple(items)


def folders(key: str, raw: str) -> tuple[str, ...]:
    """A JSON list of folder paths (not checked on disk here: `pulumi up` reads them)."""
    example = '["examples/stackbench-example/stackbench_example"]'
    try:
        items = json.loads(raw)
    except json.JSONDecodeError:
        raise ConfigError(key, f"must be a JSON list of folders, got {raw!r}", example) from None
    if not isinstance(items, list) or not all(isinstance(i, str) and i for i in items):
        raise ConfigError(key, f"must be a list of folder paths, got {raw!r}", example)
    return tuple(items)
