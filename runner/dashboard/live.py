"""What a page's server-sent event stream carries, polled from the run directories.

A page opens one stream naming what it shows: the runs table, one or more runs (header and
curves), one run's log. Each feed answers `poll()` with the messages since its last poll; its
first poll is a snapshot (the whole table, every curve point so far, the log's recent tail),
so a page that connects or reconnects needs nothing else, and nothing is lost or doubled
between a snapshot and the first update. Polling is cheap: a few stat calls per run, and for
events and logs only the bytes appended since the last read (an event line still being written
waits for its newline). A file replaced under us (a fetch rewrote events.jsonl) starts its
series over with a fresh snapshot.

Messages are (name, JSON-ready payload):
    table   {version, states, total}: the runs table changed (runs changed state: states)
    gone    {run_id} of a run no longer there    detail  a run page's header, when it changed
    curves  {run_id, ...every series}            points  {run_id, ...points added}
    log     {run_id, name, text, reset}          problem {run_id, file, problem}

Feeds read files (through runner.dashboard.data and runpage) and block; the server polls
them on a thread. Not here: HTTP (runner.dashboard.server).
"""

from __future__ import annotations

import codecs
from pathlib import Path
from typing import Any, Protocol

from contract.events import RUN_START, parse_line
from contract.files import DamagedFile
from runner.dashboard import curves, data, runpage
from runner.results.eventtext import event_text  # `runner logs`' own formatter

Message = tuple[str, Any]
# Reads per poll: a reconnecting page catches up on a long run's events over a few polls
# (1 MiB a read) rather than one message of everything.
MAX_READS_PER_POLL = 8


class Feed(Protocol):
    def poll(self) -> list[Message]: ...


class TableFeed:
    """The runs table's version: a `table` message first, then one whenever a run is added,
    changed or gone. The page asks /api/runs again for what it shows (a page of the table,
    filtered and sorted on the server: runner.dashboard.paging), so that 10,000 runs are
    never sent whole. `states` moves only when a run comes, goes or changes state (a study's
    page refreshes then, not at every epoch of a run)."""

    def __init__(self, table: data.RunTable) -> None:
        self._table = table
        self._sent: dict[str, dict[str, Any]] | None = None
        self._states: dict[str, str] = {}
        self._version = self._states_version = 0

    def poll(self) -> list[Message]:
        current = {row["run_id"]: row for row in self._table.rows()}
        if self._sent is not None and current == self._sent:
            return []
        states = {k: row["state"] for k, row in current.items()}
        if self._sent is None or states != self._states:
            self._states_version += 1
        self._version += 1
        self._sent, self._states = current, states
        return [("table", {"version": self._version, "states": self._states_version,
                           "total": len(current)})]  # fmt: skip


class RunFeed:
    """One run: its page header when its records change, and its curves as they grow."""

    def __init__(self, root: Path, run_id: str) -> None:
        self._root, self._run_id = root, run_id
        self._tail = runpage.events_tail(root, run_id)
        self._curves = curves.Curves()
        self._snapshot_due = True
        self._signature: Any = None
        self._detail: dict[str, Any] | None = None
        self._damage: str | None = None
        self._gone = False

    def poll(self) -> list[Message]:
        try:
            return self._header() + self._points()
        except data.NotFound:  # removed while the page was open
            gone, self._gone = self._gone, True
            return [] if gone else [("gone", {"run_id": self._run_id})]

    def _header(self) -> list[Message]:
        sig = data.signature(self._root / self._run_id)
        stale = self._detail is None or data.may_change_unseen(self._detail)
        if sig == self._signature and not stale:
            return []
        self._signature = sig
        detail = runpage.run_detail(self._root, self._run_id)
        changed, self._detail = detail != self._detail, detail
        return [("detail", detail)] if changed else []

    def _points(self) -> list[Message]:
        events: list[dict[str, Any]] = []
        try:
            for _ in range(MAX_READS_PER_POLL):
                chunk, reset = self._tail.read()
                if reset:  # a new file: its series start over
                    self._curves, self._snapshot_due, events = curves.Curves(), True, []
                if not chunk:
                    break
                events += runpage.parse_events(chunk)
        except DamagedFile as err:
            if self._damage == err.problem:
                return []
            self._damage = err.problem
            return [("problem", {"run_id": self._run_id, "file": str(err.path),
                                 "problem": err.problem})]  # fmt: skip
        added = self._curves.feed(events)
        if self._snapshot_due:
            self._snapshot_due = False
            return [("curves", {"run_id": self._run_id, **added})]
        if any(added.values()):
            return [("points", {"run_id": self._run_id, **added})]
        return []


class LogFeed:
    """One log of one run: its recent tail first, then what is appended, each event line shown
    as `runner logs` shows it (runner.results.eventtext: time since run_start, key, value),
    every other line as it is. A line is sent once whole; a last line without its newline is
    sent as it is after a poll that brought nothing more (a killed writer's last words)."""

    def __init__(self, root: Path, run_id: str, name: str) -> None:
        self._run_id, self._name = run_id, name
        self._tail = runpage.log_tail(root, run_id, name)
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._started = False
        self._partial = ""  # the text after the last newline, waiting for its end
        self._start_ms: int | None = None

    def poll(self) -> list[Message]:
        parts: list[str] = []
        reset = not self._started
        try:
            for _ in range(MAX_READS_PER_POLL):
                chunk, restarted = self._tail.read()
                if restarted:
                    parts, reset = [], True
                    self._decoder.reset()
                    self._partial, self._start_ms = "", None
                if not chunk:
                    break
                parts.append(self._decoder.decode(chunk))
        except DamagedFile as err:
            if self._started:
                return []
            self._started = True
            return [("problem", {"run_id": self._run_id, "file": str(err.path),
                                 "problem": err.problem})]  # fmt: skip
        text = self._readable("".join(parts))
        if not text and not reset:
            return []
        self._started = True
        return [("log", {"run_id": self._run_id, "name": self._name, "text": text,
                         "reset": reset})]  # fmt: skip

    def _readable(self, text: str) -> str:
        if not text and self._partial:  # nothing more came: the last line is all there is
            text, self._partial = self._partial + "\n", ""
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        return "".join(self._line(line) + "\n" for line in lines)

    def _line(self, line: str) -> str:
        event = parse_line(line)
        if event is None:
            return line
        if event["key"] == RUN_START:
            self._start_ms = event["time_ms"]
        return event_text(event, self._start_ms)


def poll_all(feeds: list[Feed]) -> list[Message]:
    return [message for feed in feeds for message in feed.poll()]
