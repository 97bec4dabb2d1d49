"""The study record: a grid of runs (workers x --set values x N runs) kept as one JSON file.

    results/studies/<study-id>/study.json

It lists the grid and, per planned run, its cell, its index within the cell, its seed and its
run id once submitted. Per-run results stay in the usual run directories; a study only points
at them. Written after every change, atomically, so an interrupted sweep leaves a partial
study that still reports. Not here: running anything (runner.sweep), statistics or output.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from contract import files
from runner.errors import RunNotFound, SpecError

STUDIES_DIR = "studies"
STUDY_FILE = "study.json"
StudyState = Literal["running", "complete", "partial"]


@dataclass(frozen=True)
class PlannedRun:
    workers: int
    sets: tuple[tuple[str, str], ...]  # this cell's grid values, as --set pairs
    index: int  # 0..runs-1 within the cell
    seed: int
    run_id: str | None = None
    state: str | None = None  # the run's final JobState value, once it ended
    link: str | None = None  # the link each worker gets (--link); None: the machine's own

    @property
    def cell(self) -> tuple[int, str | None, tuple[tuple[str, str], ...]]:
        return (self.workers, self.link, self.sets)


@dataclass(frozen=True)
class Study:
    study_id: str
    benchmark: str
    workers: tuple[int, ...]
    grid: Mapping[str, tuple[str, ...]]  # --set key -> values swept
    fixed: tuple[str, ...]  # --set items applied to every run
    runs_per_cell: int
    where: str  # "local" or "stack <name>"
    runs: tuple[PlannedRun, ...]
    state: StudyState = "running"
    links: tuple[str | None, ...] = (None,)  # link rates swept (--link a,b)
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    finished_at: str | None = None

    @property
    def run_ids(self) -> list[str]:
        return [r.run_id for r in self.runs if r.run_id]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["grid"] = {k: list(v) for k, v in self.grid.items()}
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Study:
        runs = tuple(
            PlannedRun(**{**r, "sets": tuple(tuple(p) for p in r["sets"])}) for r in data["runs"]
        )
        return cls(
            **{
                **data,
                "workers": tuple(data["workers"]),
                "links": tuple(data.get("links", (None,))),
                "grid": {k: tuple(v) for k, v in data["grid"].items()},
                "fixed": tuple(data["fixed"]),
                "runs": runs,
            }
        )


def parse_workers(text: str) -> tuple[int, ...]:
    """'1,2,4,8' -> (1, 2, 4, 8); SpecError naming --workers otherwise."""
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise SpecError("--workers", f"expected a list like 1,2,4,8, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise SpecError("--workers", f"expected positive counts like 1,2,4,8, got {text!r}")
    if len(set(values)) != len(values):
        raise SpecError("--workers", f"{text!r} repeats a count")
    return values


def parse_grid(items: Sequence[str]) -> tuple[dict[str, tuple[str, ...]], tuple[str, ...]]:
    """--set items: `key=a,b` sweeps the values (a grid axis); `key=a` applies to every run.

    A value that itself holds commas (lr_milestones=[82,109]) is taken whole when it is
    bracketed."""
    grid: dict[str, tuple[str, ...]] = {}
    fixed: list[str] = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SpecError("--set", f"expected key=value[,value...], got {item!r}")
        value = value.strip()
        if "," in value and not value.startswith("["):
            grid[key.strip()] = tuple(v.strip() for v in value.split(","))
        else:
            fixed.append(f"{key.strip()}={value}")
    return grid, tuple(fixed)


def plan(
    workers: Sequence[int],
    grid: Mapping[str, Sequence[str]],
    runs_per_cell: int,
    base_seed: int,
    links: Sequence[str | None] = (None,),
) -> tuple[PlannedRun, ...]:
    """Every run of the grid (workers x links x --set values), cell by cell. Run i of every
    cell uses seed base_seed + i: the runs of a cell differ in seed, and the cells are paired
    run by run."""
    keys = sorted(grid)
    cells = itertools.product(workers, links, itertools.product(*(grid[k] for k in keys)))
    return tuple(
        PlannedRun(w, tuple(zip(keys, values, strict=True)), i, base_seed + i, link=link)
        for w, link, values in cells
        for i in range(runs_per_cell)
    )


def parse_links(text: str | None) -> tuple[str | None, ...]:
    """'10mbit,100mbit' -> ('10mbit', '100mbit'), each checked; None -> (None,)."""
    if text is None:
        return (None,)
    from runner.job.link import parse_link

    values = [v.strip() for v in text.split(",") if v.strip()]
    if not values:
        raise SpecError("--link", f"expected rates like 10mbit,100mbit, got {text!r}")
    links = tuple(parse_link(v).text for v in values)
    if len(set(links)) != len(links):
        raise SpecError("--link", f"{text!r} repeats a rate")
    return links


def new_study_id(benchmark: str, now: datetime | None = None) -> str:
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%d-%H%M%S")
    return f"study-{benchmark}-{stamp}-{secrets.token_hex(2)}"


def studies_root(results_root: Path) -> Path:
    return results_root / STUDIES_DIR


def save(results_root: Path, study: Study) -> Path:
    path = studies_root(results_root) / study.study_id / STUDY_FILE
    files.write_json(path, study.to_dict())
    return path


def load(path: Path) -> Study:
    """study.json; DamagedFile when it is not one."""
    data = files.read_json_object(path)
    try:
        return Study.from_dict(data)
    except (KeyError, TypeError, ValueError) as err:
        raise files.DamagedFile(
            path, f"is not a study record ({type(err).__name__}: {err})"
        ) from None


def find(results_root: Path, study_id: str) -> Path | None:
    """The study.json of an id or unambiguous prefix; None when no study matches."""
    root = studies_root(results_root)
    if not root.is_dir():
        return None
    matches = [p for p in root.iterdir() if (p / STUDY_FILE).is_file()]
    exact = [p for p in matches if p.name == study_id]
    matches = exact or [p for p in matches if p.name.startswith(study_id)]
    if len(matches) > 1:
        names = ", ".join(p.name for p in matches[:5])
        raise RunNotFound(f"{study_id!r} matches several studies ({names}); give more of the id")
    return matches[0] / STUDY_FILE if matches else None


def with_run(study: Study, position: int, **changes: Any) -> Study:
    runs = list(study.runs)
    runs[position] = replace(runs[position], **changes)
    return replace(study, runs=tuple(runs))
