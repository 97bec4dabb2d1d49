"""How a config is built from components, and what every config made of them can do.

- `Component`: a frozen dataclass of declared fields (workloads/configuration/fields.py), validated
when
  made: each field against its declaration, then the component's own cross-field rules. A
  component lives beside the code it configures (a model family's config beside its network,
  the optimizers beside workloads/optimization/optim.py, ...) and imports no torch.
- `Choice`: the components that can fill one place, told apart by their `name` field (SGD or
  Adam; ddp, powersgd, ...). Its `key` is the flat key that selects: `--set optimizer=adam`.
- `Composite`: a config made of components (TrainConfig, AllReduceMicroConfig). Its flat
  keys are its components' field names, unique within the config, so a user types
  `--set lr=0.1`, not a path; a choice's `name` is keyed by the choice's key. It travels as
  JSON nested by component, with a version number, and gives a flat view for comparing and
  showing configs.
Selecting another option of a choice keeps the fields the two options share and takes the
new option's defaults for the rest; a field the new option requires and does not default
must be set in the same command. Not here: any particular component.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from typing import Any, ClassVar, Self

from contract import files
from workloads.configuration.fields import (
    ConfigError,
    bounds_of,
    check_fields,
    coerce_fields,
    describe,
    field_types,
    parse_value,
    to_json,
)
from workloads.plugins.registry import Registry

NAME = "name"  # the field that tells the options of a choice apart


@dataclass(frozen=True, kw_only=True)
class Component:
    """A validated, frozen part of a config. Subclasses add fields and override `validate`."""

    def __post_init__(self) -> None:
        coerce_fields(self)
        check_fields(self)
        self.validate()

    def validate(self) -> None:
        """Rules between this component's fields (raise ConfigError naming the key)."""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: to_json(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], part: str) -> Self:
        types_ = field_types(cls)
        unknown = sorted(set(data) - set(types_))
        if unknown:
            raise ConfigError(
                f"{part}.{unknown[0]}", f"unknown key; {part} has: {', '.join(types_)}"
            )
        missing = [name for name in _required(cls) if name not in data]
        if missing:
            raise ConfigError(f"{part}.{missing[0]}", "missing")
        return cls(**data)


@dataclass(frozen=True)
class Choice:
    """The options for one place in a config, selected by `key`: the entries of an extension
    point (workloads/plugins/points.py), built-ins and plugins alike, each a subclass of
    `base`."""

    key: str
    point: Registry[Any]
    base: type[Component]

    @property
    def options(self) -> tuple[type[Component], ...]:
        return tuple(dict.fromkeys(e.obj for e in self.point.entries().values()))

    def names(self) -> dict[str, type[Component]]:
        """Each selectable name and the option it selects (an option may take several)."""
        return {name: e.obj for name, e in self.point.entries().items()}

    def option(self, name: Any) -> type[Component]:
        names = self.names()
        if name not in names:
            raise ConfigError(self.key, f"expected one of {', '.join(names)}, got {name!r}")
        return names[name]

    def owners(self, key: str, current: type[Component]) -> list[str]:
        """The names of the other options that have field `key`, for a hint."""
        return [
            name
            for name, cls in self.names().items()
            if cls is not current and key in field_types(cls)
        ]


class Composite:
    """A config made of components: the dataclass fields of a subclass, each a Component.

    Subclasses set VERSION (of their JSON layout) and CHOICES (component -> Choice).
    `replace(lr=0.1)` changes flat keys; dataclasses.replace(config, model=...) swaps whole
    components, as the registry's variants do."""

    VERSION: ClassVar[int]
    CHOICES: ClassVar[Mapping[str, Choice]] = {}
    # Keys of an earlier version -> their names now, for the hint an old key gets.
    RENAMED: ClassVar[Mapping[str, str]] = {}

    def __post_init__(self) -> None:
        types_ = field_types(type(self))
        for name, part in self.parts().items():
            choice = self.CHOICES.get(name)
            # A choice's base, not its entries: reading those loads installed plugins, and
            # configs are made while our own modules are still being imported.
            allowed = choice.base if choice else types_[name]
            if not isinstance(part, allowed):
                raise ConfigError(name, f"expected {types_[name].__name__}, got {part!r}")
        self.flat_keys()  # refuses components whose keys collide
        self.validate()

    def validate(self) -> None:
        """Rules between components (raise ConfigError naming the key to change)."""

    def parts(self) -> dict[str, Component]:
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]

    def flat_keys(self) -> KeyMap:
        """Flat key -> (component, field), in component order."""
        return self.key_map({name: type(c) for name, c in self.parts().items()})

    @classmethod
    def key_map(cls, classes: Mapping[str, type[Component]]) -> KeyMap:
        """Flat key -> (component, field) of components of these classes; a key two of them
        share is a TypeError (a design error of the components, not a user's)."""
        return _keymap(cls, classes)

    def flat(self) -> dict[str, Any]:
        """Every key with its value: the same keys as `--set` (tuples stay tuples)."""
        parts = self.parts()
        return {k: getattr(parts[p], f) for k, (p, f) in self.flat_keys().items()}

    def describe(self, key: str) -> str:
        """What `key` accepts, from its declaration: "a finite number in (0, 1000]"."""
        part, name = self.flat_keys()[key]
        cls = type(self.parts()[part])
        if part in self.CHOICES and name == NAME:
            return "one of " + ", ".join(self.CHOICES[part].names())
        return describe(field_types(cls)[name], bounds_of(cls, name))

    # ---- changing a config by flat key ----

    def replace(self, **values: Any) -> Self:
        """This config with flat keys set to typed values (a selector key first selects)."""
        parts, rest = self._select(values)
        return self._assign(parts, rest)

    def with_overrides(self, overrides: Mapping[str, str]) -> Self:
        """This config with flat keys set from strings as typed on a command line."""
        parts, rest = self._select(overrides)
        keymap = self._keymap_for(parts, rest)
        parsed = {}
        for key, text in rest.items():
            part, name = keymap[key]
            cls = parts[part].cls
            parsed[key] = parse_value(key, text, field_types(cls)[name], bounds_of(cls, name))
        return self._assign(parts, parsed)

    def _select(self, values: Mapping[str, Any]) -> tuple[dict[str, _Part], dict[str, Any]]:
        """Each component as it will be made (another option where a selector key says so),
        and the values left to assign."""
        parts = {name: _Part(type(c), c) for name, c in self.parts().items()}
        rest = dict(values)
        for name, choice in self.CHOICES.items():
            if choice.key in rest:
                selected = rest.pop(choice.key)
                parts[name] = _Part(choice.option(selected), parts[name].current, selected)
        return parts, rest

    def _keymap_for(self, parts: Mapping[str, _Part], values: Mapping[str, Any]) -> KeyMap:
        keymap = _keymap(type(self), {name: p.cls for name, p in parts.items()})
        for key in values:
            if key not in keymap:
                raise self._unknown(key, parts, keymap)
        return keymap

    def _assign(self, parts: Mapping[str, _Part], values: Mapping[str, Any]) -> Self:
        keymap = self._keymap_for(parts, values)
        changes: dict[str, dict[str, Any]] = {name: {} for name in parts}
        for key, value in values.items():
            part, name = keymap[key]
            changes[part][name] = value
        made = {
            name: part.make(self.CHOICES.get(name), changes[name])
            for name, part in parts.items()
            if changes[name] or part.selected is not None
        }
        return dataclasses.replace(self, **made)  # type: ignore[type-var]

    def _unknown(self, key: str, parts: Mapping[str, _Part], keymap: KeyMap) -> ConfigError:
        hint = ""
        for name, choice in self.CHOICES.items():
            owners = choice.owners(key, parts[name].cls)
            if owners:
                current = parts[name].selected or getattr(parts[name].current, NAME)
                hint = (
                    f": it belongs to {choice.key}={' or '.join(owners)}, and this is "
                    f"{choice.key}={current}"
                )
                break
        close = difflib.get_close_matches(key, list(keymap), n=1)
        if self.RENAMED.get(key) in keymap:
            hint += f" (now called {self.RENAMED[key]})"
        elif close:
            hint += f" (did you mean {close[0]}?)"
        return ConfigError(key, f"unknown key{hint}; valid keys: {_listing(keymap)}")

    # ---- JSON ----

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.VERSION} | {p: c.to_dict() for p, c in self.parts().items()}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: Any) -> Self:
        if not isinstance(data, Mapping):
            raise ConfigError("config", f"expected a JSON object, got {type(data).__name__}")
        _check_version(cls, data.get("version"))
        names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
        unknown = sorted(set(data) - {"version", *names})
        if unknown:
            raise ConfigError(unknown[0], f"unknown part; the parts are {', '.join(names)}")
        built: dict[str, Component] = {}
        defaults = _defaulted(cls)
        for name in names:
            part = data.get(name)
            if part is None and name in defaults:
                continue  # a part added since: the config was written without it
            if not isinstance(part, Mapping):
                raise ConfigError(name, "missing, or not a JSON object")
            built[name] = cls._part_class(name, part, built).from_dict(part, name)
        return cls(**built)

    @classmethod
    def from_json(cls, text: str) -> Self:
        try:
            data = files.loads(text)  # nesting too deep for the parser: ValueError too
        except ValueError as err:
            raise ConfigError("config", f"not JSON: {err}") from None
        return cls.from_dict(data)

    @classmethod
    def _part_class(
        cls, name: str, data: Mapping[str, Any], built: Mapping[str, Component]
    ) -> type[Component]:
        """Which component class reads part `name` of the JSON (`built`: the parts before)."""
        if name in cls.CHOICES:
            return cls.CHOICES[name].option(data.get(NAME))
        return field_types(cls)[name]


KeyMap = dict[str, tuple[str, str]]  # flat key -> (component, field)


# ---- internals -------------------------------------------------------------------------


@dataclass(frozen=True)
class _Part:
    """A component as it will be made: `current` changed, or option `cls` newly `selected`."""

    cls: type[Component]
    current: Component
    selected: str | None = None

    def make(self, choice: Choice | None, values: Mapping[str, Any]) -> Component:
        if self.selected is None or (choice and type(self.current) is self.cls):
            changes = dict(values) | ({NAME: self.selected} if self.selected is not None else {})
            return dataclasses.replace(self.current, **changes)
        assert choice is not None
        # Another option: the fields both options have keep their values.
        new_fields = field_types(self.cls)
        shared = {
            f.name: getattr(self.current, f.name)
            for f in fields(self.current)
            if f.name in new_fields and f.name != NAME
        }
        given = shared | dict(values) | {NAME: self.selected}
        for name in _required(self.cls):
            if name not in given:
                raise ConfigError(
                    name, f"{choice.key}={self.selected} needs it: add --set {name}=..."
                )
        return self.cls(**given)


def _defaulted(cls: type) -> set[str]:
    """The parts of a composite that have a default (they may be absent from its JSON)."""
    return {
        f.name for f in fields(cls) if f.default is not MISSING or f.default_factory is not MISSING
    }


def _required(cls: type[Component]) -> list[str]:
    """The fields of `cls` without a default."""
    return [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]


def _keymap(cls: type[Composite], classes: Mapping[str, type[Component]]) -> KeyMap:
    """Flat key -> (component, field) of components of these classes."""
    keymap: KeyMap = {}
    for part, component_cls in classes.items():
        for name in field_types(component_cls):
            key = cls.CHOICES[part].key if name == NAME and part in cls.CHOICES else name
            if key in keymap:  # a design error of the components, not a user's
                raise TypeError(f"{key} is a field of both {keymap[key][0]} and {part}")
            keymap[key] = (part, name)
    return keymap


def _listing(keymap: KeyMap) -> str:
    """The keys grouped by component: "data [dataset, batch_size]; optimizer [...]"."""
    groups: dict[str, list[str]] = {}
    for key, (part, _) in keymap.items():
        groups.setdefault(part, []).append(key)
    return "; ".join(f"{part} [{', '.join(keys)}]" for part, keys in groups.items())


def _check_version(cls: type, version: Any) -> None:
    latest = cls.VERSION  # type: ignore[attr-defined]
    if version is None:
        raise ConfigError(
            "version",
            f"missing: a {cls.__name__} from before version 2 (one flat object), which this "
            "stackbench does not read; resolve the benchmark again (runner submit BENCHMARK)",
        )
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ConfigError("version", f"expected a positive integer, got {version!r}")
    if version > latest:
        raise ConfigError(
            "version",
            f"{version} is newer than this stackbench reads ({latest}); update stackbench to "
            "the version that wrote it",
        )
    if version < latest:
        raise ConfigError("version", f"{version} is older than {latest} and is not read")
