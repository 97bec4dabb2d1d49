"""Which plugins a training image carries: the seam between the image's build (infra/image.py
writes the list into the image and its label, and exports it as the stack output
`image_plugins`) and the runner (`runner submit --plugin` on a cluster checks, before submit,
that the image carries each plugin the run uses, of the same source hash; the workers check
the hash again in the pod).

A plugin is named by its name (a distribution's, or a package's loaded from a path), version
and the SHA-256 of its source (`source_sha256`: each .py file's path relative to the package
and its bytes, in path order): the same function hashes it when the image is built and when
a run records it (workloads/plugins/provenance.py), so a byte's difference tells them apart.
Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Where the image holds its plugins (one package folder each, on PYTHONPATH), its list of them
# (JSON: a list of ImagePlugin.to_dict()) and the OCI label that repeats the list.
PLUGINS_DIR = "/opt/stackbench/plugins"
MANIFEST_PATH = f"{PLUGINS_DIR}/plugins.json"
LABEL = "io.stackbench.plugins"
MAX_MANIFEST_BYTES = 1 << 20  # a list of a few plugins is a few hundred bytes
_SHA256 = re.compile(r"[0-9a-f]{64}")
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class ImagePlugin:
    name: str
    version: str | None
    source_sha256: str
    module: str  # the top-level module the image installs it as (what workers import)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version,
                "source_sha256": self.source_sha256, "module": self.module}  # fmt: skip


def source_sha256(files: Iterable[tuple[str, Path]]) -> str:
    """SHA-256 over (relative path, file) pairs: each path and its bytes, in path order."""
    digest = hashlib.sha256()
    for relative, path in sorted(files):
        digest.update(relative.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def package_files(root: Path) -> list[tuple[str, Path]]:
    """A package folder's Python files, as source_sha256 takes them (links not followed out)."""
    return [(f.relative_to(root).as_posix(), f) for f in root.rglob("*.py")
            if f.is_file() and not f.is_symlink()]  # fmt: skip


def plugins_problem(value: Any) -> str | None:
    """Why `value` is not a list of image plugins (the stack output, the manifest), or None."""
    if not isinstance(value, list):
        return f"must be a list, got {type(value).__name__}"
    for item in value:
        if not isinstance(item, dict):
            return "must be a list of objects"
        if not isinstance(item.get("name"), str) or not item["name"]:
            return "has a plugin without a name"
        if not (item.get("version") is None or isinstance(item["version"], str)):
            return f"plugin {item['name']!r:.60}: version must be a string or null"
        if not isinstance(item.get("source_sha256"), str) or not _SHA256.fullmatch(
            item["source_sha256"]
        ):
            return f"plugin {item['name']!r:.60}: source_sha256 must be 64 hex digits"
        if not isinstance(item.get("module"), str) or not _MODULE.fullmatch(item["module"]):
            return f"plugin {item['name']!r:.60}: module must be a Python module name"
    return None


def parse_plugins(value: Any) -> tuple[ImagePlugin, ...]:
    """The checked list (ValueError, one line, when it is not one)."""
    problem = plugins_problem(value)
    if problem:
        raise ValueError(problem)
    return tuple(
        ImagePlugin(p["name"], p.get("version"), p["source_sha256"], p["module"]) for p in value
    )


def read_manifest(path: Path) -> tuple[ImagePlugin, ...]:
    """An image's plugin list from a JSON file (a copy of MANIFEST_PATH, or written by hand
    for an image built elsewhere); ValueError naming the file when it is not one."""
    try:
        with path.open("rb") as f:
            text = f.read(MAX_MANIFEST_BYTES + 1)
        if len(text) > MAX_MANIFEST_BYTES:
            raise ValueError(f"larger than {MAX_MANIFEST_BYTES} bytes")
        return parse_plugins(json.loads(text))
    except (OSError, ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not a list of image plugins ({err})") from None


def not_carried(
    wanted: Sequence[tuple[str, str]], carried: Sequence[ImagePlugin]
) -> list[tuple[str, str]]:
    """Of the (name, source_sha256) a run wants, those the image does not carry."""
    have = {(p.name, p.source_sha256) for p in carried}
    return [w for w in wanted if w not in have]
