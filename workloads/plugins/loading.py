"""Loading a plugin named on the command line: `--plugin MODULE_OR_PATH`.

MODULE is an importable module (an installed package's, or one on PYTHONPATH); PATH is a
Python file, a package directory (with __init__.py), or a project directory holding one
package (at its top or under src/). Importing the plugin registers its entries, as
importing our modules registers ours (`points.STRATEGIES.register(TopKConfig)`). Installed
packages need no --plugin: their entry points are read when a point is first used
(registry.py). Whatever goes wrong is one PluginError line naming the plugin and the cause.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from workloads.plugins.registry import PluginError

# Top-level module -> what --plugin named to load it, resolved: a job records it, so that
# its workers load the same (runner --plugin PATH sweep ... too).
_LOADED: dict[str, str] = {}


def loaded() -> dict[str, str]:
    """The plugins this process loaded by name or path: top-level module -> resolved spec."""
    return dict(_LOADED)


def load(spec: str) -> str:
    """Import plugin `spec` (MODULE or PATH); returns the module's name."""
    path = Path(spec).expanduser()
    if spec.endswith(".py") or "/" in spec or path.is_dir():
        name, root = _located(spec, path)
        _check_not_shadowed(spec, name, root)
        if str(root) not in sys.path:
            sys.path.insert(0, str(root))
    else:
        name = spec
    try:
        importlib.import_module(name)
    except PluginError:
        raise  # a registration it made was refused: already one line naming it
    except Exception as err:  # a user's code: whatever it raises is its cause
        raise PluginError(f"plugin {spec}: import failed: {type(err).__name__}: {err}") from None
    _LOADED[name.split(".")[0]] = resolved(spec)
    return name


def resolved(spec: str) -> str:
    """`spec` as a job records it: a PATH made absolute (the workers' directory differs)."""
    path = Path(spec).expanduser()
    if spec.endswith(".py") or "/" in spec or path.is_dir():
        return str(path.resolve())
    return spec


def _located(spec: str, path: Path) -> tuple[str, Path]:
    """(module name, the directory to import it from) of a plugin given by path."""
    path = path.resolve()
    if path.is_file() and path.suffix == ".py":
        return path.stem, path.parent
    if not path.is_dir():
        raise PluginError(f"plugin {spec}: no such Python file or directory")
    if (path / "__init__.py").is_file():
        return path.name, path.parent
    for root in (path, path / "src"):
        found = sorted(p.parent.name for p in root.glob("*/__init__.py")) if root.is_dir() else []
        if len(found) == 1:
            return found[0], root
        if len(found) > 1:
            raise PluginError(
                f"plugin {spec}: holds several packages ({', '.join(found)}): name one of them"
            )
    raise PluginError(f"plugin {spec}: a directory with no Python package (no __init__.py)")


def _check_not_shadowed(spec: str, name: str, root: Path) -> None:
    """A module of that name imported from elsewhere (ours, or another plugin) would be used
    instead of the file given: refuse rather than run other code than the user named."""
    held = sys.modules.get(name)
    where = getattr(held, "__file__", None)
    if held is not None and (where is None or not Path(where).resolve().is_relative_to(root)):
        raise PluginError(
            f"plugin {spec}: module name {name!r} is already taken by {where or 'a module'}; "
            "rename the plugin's module"
        )
