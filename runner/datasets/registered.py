"""The data sets `runner data fetch` can fetch: each registered data set whose entry declares
a source (its `fetch_source`, runner/datasets/catalog.py's DataSource), read from the DATASETS
extension point each time, so a plugin loaded after start-up is seen.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping

from runner.datasets.catalog import DataSource
from runner.errors import RunnerError


class _Catalog(MutableMapping[str, DataSource]):
    """Data set name -> its source, read from the DATASETS extension point each time (a
    plugin loaded after start-up is seen). Setting a name declares its source here instead:
    the tests point a built-in data set at files they serve."""

    def __init__(self) -> None:
        self._declared: dict[str, DataSource] = {}

    def _registered(self) -> dict[str, DataSource]:
        from workloads.plugins import points

        found: dict[str, DataSource] = {}
        for name, entry in points.DATASETS.entries().items():
            declare = getattr(entry.obj, "fetch_source", None)
            src = declare(name) if callable(declare) else None
            if isinstance(src, DataSource):
                found[name] = src
        return found

    def __getitem__(self, name: str) -> DataSource:
        if name in self._declared:
            return self._declared[name]
        return self._registered()[name]

    def __setitem__(self, name: str, src: DataSource) -> None:
        self._declared[name] = src

    def __delitem__(self, name: str) -> None:
        del self._declared[name]

    def __iter__(self) -> Iterator[str]:
        return iter({**self._registered(), **self._declared})

    def __len__(self) -> int:
        return len({**self._registered(), **self._declared})


DATASETS: MutableMapping[str, DataSource] = _Catalog()


def source(name: str) -> DataSource:
    try:
        return DATASETS[name]
    except KeyError:
        raise RunnerError(
            f"unknown data set {name!r}; choose one of: {', '.join(DATASETS)}"
        ) from None
