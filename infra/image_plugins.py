"""The plugins the training image carries (stack config `plugins`, contract/imageplugins.py):
each package folder copied into a staging folder with plugins.json, their list, which the
image build takes as its `plugins` context (images/Dockerfile) and the stack exports as
`image_plugins`. The source hash is contract/imageplugins.py's, the same a run records, so
`runner submit --plugin` on the stack knows, before submit, whether the image has that code.
Standard library only; touches only the staging folder.
"""

from __future__ import annotations

import json
import keyword
import shutil
from pathlib import Path

from contract.imageplugins import ImagePlugin, package_files, source_sha256
from contract.stackconfig.config_values import ConfigError

# Names a plugin package may not take: the image's own packages.
TAKEN = frozenset({"contract", "workloads", "runner", "infra"})
MANIFEST = "plugins.json"


def stage(folders: tuple[str, ...], project_root: Path, staging: Path) -> tuple[ImagePlugin, ...]:
    """Copy each plugin package folder into `staging` (emptied first) and write its list;
    returns it. ConfigError (key `plugins`) for a folder that cannot be a plugin package."""
    found = [_checked(folder, project_root) for folder in folders]
    names = [path.name for path in found]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError("plugins", f"names package {twice[0]!r} twice", "[]")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    plugins = []
    for path in found:
        shutil.copytree(path, staging / path.name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))  # fmt: skip
        sha256 = source_sha256(package_files(staging / path.name))
        plugins.append(ImagePlugin(name=path.name, version=None, source_sha256=sha256,
                                   module=path.name))  # fmt: skip
    (staging / MANIFEST).write_text(json.dumps([p.to_dict() for p in plugins], indent=1) + "\n")
    return tuple(plugins)


def _checked(folder: str, project_root: Path) -> Path:
    path = (project_root / folder).resolve() if not Path(folder).is_absolute() else Path(folder)
    example = '["examples/stackbench-example/stackbench_example"]'
    if not (path / "__init__.py").is_file():
        raise ConfigError("plugins", f"{folder!r} is not a Python package folder "
                          "(no __init__.py)", example)  # fmt: skip
    if not path.name.isidentifier() or keyword.iskeyword(path.name) or path.name in TAKEN:
        raise ConfigError("plugins", f"{folder!r}: {path.name!r} cannot be a plugin's module "
                          "name", example)  # fmt: skip
    links = [p for p in path.rglob("*") if p.is_symlink()]
    if links:  # the image would carry what the link names, and the hash would not cover it
        raise ConfigError("plugins", f"{folder!r} holds a symbolic link ({links[0]}); the "
                          "image carries plain files only", example)  # fmt: skip
    return path
