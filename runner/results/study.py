"""The study record: a grid of runs (workers x --set values x N runs) kept as one JSON file.

    results/studies/<study-id>/study.json

It lists the grid and, per planned run, its cell, its index within the cell, its seed and its
run id once submitted. Per-run results stay in the usual run directories; a study only points
at them. Written after every change, atomically, so an interrupted sweep leaves a partial
study that still reports. Not here: running anything (runner.sweep), statistics or output.
"""

from __future__ import annotations

import contextlib
import itertools
import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TypeVar

from contract import files
from contract.records import Fields
from runner import flock
from runner.errors import RunNotFound, SpecError

STUDIES_DIR = "studies"
STUDY_FILE = "study.json"
# Held by the sweep running the study (runner/flock.py): a study that says "running" while
# nobody holds it was left by a sweep that was killed, and reads as partial.
SWEEP_LOCK = ".sweep.lock"
StudyState = Literal["running", "complete", "partial"]
STUDY_STATES = ("running", "complete", "partial")
T = TypeVar("T")


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
    def from_dict(cls, data: Any, path: Path = Path(STUDY_FILE)) -> Study:
        """The record, every field's type checked: a study.json may be damaged or hostile, and
        a run id that is not text, or a grid that is not an object, must not reach the code
        that joins paths and formats labels with them. DamagedFile names the field."""
        try:
            return cls._parse(Fields(data, path))
        except files.DamagedFile as err:
            raise files.DamagedFile(path, f"is not a study record: {err.problem}") from None

    @classmethod
    def _parse(cls, f: Fields) -> Study:
        grid = f.object("grid")
        state = f.text("state")
        if state not in STUDY_STATES:
            raise f.bad("state", f"one of {', '.join(STUDY_STATES)}")
        return cls(
            study_id=f.text("study_id"),
            benchmark=f.text("benchmark"),
            workers=_list(f, "workers", Fields.integer),
            grid={k: _list(grid, k, Fields.text) for k in grid.data},
            fixed=_list(f, "fixed", Fields.text),
            runs_per_cell=f.integer("runs_per_cell"),
            where=f.text("where"),
            runs=tuple(_planned(r) for r in f.objects("runs")),
            state=state,  # type: ignore[arg-type]  # checked against STUDY_STATES above
            # Studies written before links were a dimension have none: the machine's own.
            links=_list(f, "links", Fields.optional_text, default=[None]),
            created_at=f.text("created_at"),
            finished_at=f.optional_text("finished_at"),
        )


def _planned(f: Fields) -> PlannedRun:
    sets = tuple(_pair(f, item) for item in _list(f, "sets", _any))
    return PlannedRun(
        workers=f.integer("workers"),
        sets=sets,
        index=f.integer("index"),
        seed=f.integer("seed"),
        run_id=f.optional_text("run_id"),
        state=f.optional_text("state"),
        link=f.optional_text("link"),
    )


def _pair(f: Fields, item: Any) -> tuple[str, str]:
    if not (isinstance(item, list) and len(item) == 2 and all(isinstance(v, str) for v in item)):
        raise f.bad("sets", "a list of [key, value] pairs of text")
    return (item[0], item[1])


def _any(f: Fields, key: str) -> Any:
    return f.data[key]


def _list(
    f: Fields, key: str, read: Callable[[Fields, str], T], default: list[Any] | None = None
) -> tuple[T, ...]:
    """A JSON list field, each item read (and checked) by `read`; `default` when absent."""
    value = f.data.get(key, default)
    if not isinstance(value, list):
        raise f.bad(key, "a list")
    return tuple(read(Fields({key: v}, f.path, f.prefix), key) for v in value)


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
    """'10mbit,100mbit' -> ('10mbit', '100mbit'), each checked; None -> (None,). A link's
    options follow its rate: '1gbit,1gbit,delay=5ms' -> ('1gbit', '1gbit,delay=5ms')."""
    if text is None:
        return (None,)
    from runner.job.link import parse_link

    values: list[str] = []
    for piece in (v.strip() for v in text.split(",") if v.strip()):
        if "=" in piece and values:  # delay=, jitter=, loss=: the previous rate's
            values[-1] += "," + piece
        else:
            values.append(piece)
    if not values:
        raise SpecError("--link", f"expected rates like 10mbit,100mbit, got {text!r}")
    links = tuple(parse_link(v).text for v in values)
    if len(set(links)) != len(links):
        raise SpecError("--link", f"{text!r} repeats a link")
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
    """study.json; DamagedFile when it is not one. A running study whose sweep is gone (it
    was SIGKILLed: it had no chance to say so) is partial, as one interrupted by a signal."""
    study = Study.from_dict(files.read_json_object(path), path)
    if study.state == "running" and not flock.held(path.parent / SWEEP_LOCK):
        return replace(study, state="partial")
    return study


@contextlib.contextmanager
def sweeping(results_root: Path, study_id: str) -> Iterator[None]:
    """Held by the sweep that runs the study, for as long as it runs (see SWEEP_LOCK)."""
    study_dir = studies_root(results_root) / study_id
    study_dir.mkdir(parents=True, exist_ok=True)
    with flock.hold(study_dir / SWEEP_LOCK):
        yield


def find(results_root: Path, study_id: str) -> Path | None:
    """The study.json of an id or unambiguous prefix; None when no study matches."""
    root = studies_root(results_root)
    if not root.is_dir():
        return None
    # A study directory that is a link may point anywhere: never followed (nor is study.json
    # itself, by files.read_json_object).
    matches = [p for p in root.iterdir() if not p.is_symlink() and (p / STUDY_FILE).is_file()]
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
