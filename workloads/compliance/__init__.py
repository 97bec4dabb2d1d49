"""MLPerf compliance of our event logs: MLCommons' checker (mlperf-logging) with our rules.

The rules are the YAML files beside this module, in the checker's config format (KEY records
with REQ/CHECK/POST, BEGIN and END): common.yaml for every training benchmark, and a file of
closed-division rules per benchmark, which its entry in the benchmark registry names (its
`ruleset`; ours in rulefiles.py, a plugin's in its own folder). Which files apply follows
MLPerf, whose common.yaml enqueues {division}_common.yaml: a closed-division log is checked
against its benchmark's file and then common.yaml, an open-division log against common.yaml
alone (MLPerf's open rulesets check little beyond the quality metric). common.yaml runs last
because the checker lets a config's rules for a key replace what earlier configs reported
about it: no benchmark file can weaken a common rule.

The checker reads `:::MLLOG {json}` lines; events.jsonl holds bare JSON, so the events are
written, prefixed, to a temporary file first (any log with events will do: a rank log too).
The checker's parser holds the whole file in memory, so the log is streamed and the checker
given only the events of the keys our rules name, capped in size (check_log says why that
changes none of its answers).
mlperf-logging pulls pandas and scipy: it is in the test extra, not in training images, and
is imported only when a check runs. No torch here.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from contract.events import (
    PREFIX,
    SUBMISSION_BENCHMARK,
    SUBMISSION_DIVISION,
    parse_object,
    stream_lines,
)
from workloads.compliance.rulefiles import COMMON, RULES_DIR
from workloads.plugins import points

# Selects the checker's parser of `:::MLLOG {json}` lines (the same since ruleset 0.7.0);
# the rules themselves are ours.
PARSER_RULESET = "6.1.0"
EVENT_FIELDS = ("time_ms", "key", "value", "metadata")
# What a check hands the checker at most (check_log): the events of checked keys, as JSON.
# A reference run's are kilobytes (parameters once, a few events an epoch).
MAX_CHECKED_BYTES = 16 << 20
MAX_REPORTED_GAPS = 20  # events that are not MLPerf events, quoted; the rest counted
_NAME = re.compile(r"^\s*NAME:\s*(\S+)\s*$", re.MULTILINE)
INSTALL_HINT = "pip install mlperf-logging (it is in the test extra: pip install -e '.[test]')"


class CheckerUnavailable(RuntimeError):
    """The mlperf-logging package is not installed."""


class UnknownBenchmark(ValueError):
    """No rules exist for the benchmark."""


@dataclass(frozen=True)
class CheckResult:
    ok: bool
    messages: list[str]  # the checker's, one per failed rule; empty when ok
    ruleset: str  # which rule files were applied, and the checker's version


def rulesets() -> dict[str, Path]:
    """Benchmark -> its closed-division rule file, of every registered benchmark that names
    one (`ruleset` of its entry)."""
    found = {}
    for name, bench in points.BENCHMARKS.entries().items():
        ruleset = getattr(bench.obj, "ruleset", None)
        if isinstance(ruleset, Path):
            found[name] = ruleset
    return found


def rules_for(benchmark: str) -> Path:
    """The closed-division rule file of `benchmark`."""
    known = rulesets()
    if benchmark not in known:
        raise UnknownBenchmark(
            f"no compliance rules for {benchmark!r}; rules exist for: {', '.join(known)}"
        )
    return known[benchmark]


def check_log(events_path: Path, benchmark: str) -> CheckResult:
    """Run the MLPerf compliance checker with our rules for `benchmark` on a run's events.
    The log is streamed (contract.events.stream_lines): memory stays flat whatever its size,
    and the checker is handed only what it reads (_Feed)."""
    bench_rules = rules_for(benchmark)
    feed = _Feed(rule_keys())
    for event in map(parse_object, stream_lines(events_path)):
        if event is not None:
            feed.add(event)
    # A log without a division is held to the closed rules (common.yaml reports the gap).
    division = feed.first.get(SUBMISSION_DIVISION)
    files = [RULES_DIR / COMMON] if division == "open" else [bench_rules, RULES_DIR / COMMON]
    messages = [*feed.problems(), *run_checker(feed.kept, files)]
    logged = feed.first.get(SUBMISSION_BENCHMARK)
    if logged is not None and logged != benchmark:
        messages.insert(0, f"submission_benchmark is {logged!r}: not a log of {benchmark}")
    ruleset = (
        f"{benchmark} ({division or 'closed'} division): {' then '.join(f.name for f in files)}"
        f", mlperf-logging {metadata.version('mlperf-logging')}"
    )
    return CheckResult(ok=not messages, messages=messages, ruleset=ruleset)


def rule_keys() -> frozenset[str]:
    """Every key a rule of ours names (each file's `NAME:` lines). The checker skips an event
    of any other key ("unknown key - it's allowed"), and our REQ rules name no other key
    (EXACTLY_ONE and AT_LEAST_ONE only; a test holds every rule file to that), so handing it
    only these events changes none of its answers."""
    names = set()
    for rule_file in RULES_DIR.glob("*.yaml"):
        names.update(_NAME.findall(rule_file.read_text(encoding="utf-8")))
    return frozenset(names)


class _Feed:
    """What a streamed log gives the checker: the events of the keys its rules name, up to
    MAX_CHECKED_BYTES of them (MLPerf's parser holds every line it is given, several times its
    size, so a log whose checked events go past that fails the check instead), and the first
    MAX_REPORTED_GAPS events that are not MLPerf events, the rest counted."""

    def __init__(self, keys: frozenset[str]) -> None:
        self.keys = keys
        self.kept: list[dict[str, Any]] = []
        self.first: dict[str, Any] = {}  # the first value of each submission_* key
        self._bytes = 0
        self._over = 0  # checked events left out past the cap
        self._gaps: list[str] = []
        self._more_gaps = 0

    def add(self, event: dict[str, Any]) -> None:
        key = event.get("key")
        if key in (SUBMISSION_BENCHMARK, SUBMISSION_DIVISION):
            self.first.setdefault(key, event.get("value"))
        if missing := _missing(event):
            if len(self._gaps) < MAX_REPORTED_GAPS:
                self._gaps.append(f"not an MLPerf event (no {', '.join(missing)}): {event}")
            else:
                self._more_gaps += 1
        elif key in self.keys:
            size = len(json.dumps(event))
            if self._bytes + size > MAX_CHECKED_BYTES:
                self._over += 1
            else:
                self._bytes += size
                self.kept.append(event)

    def problems(self) -> list[str]:
        found = list(self._gaps)
        if self._more_gaps:
            found.append(f"and {self._more_gaps} more events that are not MLPerf events")
        if self._over:
            found.append(
                f"{self._over} events of checked keys left unchecked: they go past "
                f"{MAX_CHECKED_BYTES >> 20} MiB, far more than any run of ours logs"
            )
        return found


def run_checker(events: Sequence[dict[str, Any]], rule_files: Sequence[Path]) -> list[str]:
    """The checker's messages for `events` under `rule_files`, applied in order."""
    try:
        from mlperf_logging.compliance_checker import mlp_compliance, mlp_parser
    except ImportError as err:
        raise CheckerUnavailable(
            f"the MLPerf compliance checker is missing: {INSTALL_HINT}"
        ) from err
    with tempfile.TemporaryDirectory(prefix="stackbench-compliance-") as tmp:
        log_path = Path(tmp) / "mllog.txt"
        log_path.write_text(
            "".join(PREFIX + json.dumps(e, separators=(", ", ": ")) + "\n" for e in events),
            encoding="utf-8",
        )
        loglines, errors = mlp_parser.parse_file(str(log_path), ruleset=PARSER_RULESET)
    # werror: a key logged twice with the same value fails too (the checker's warning).
    checker = mlp_compliance.make_checker("training", PARSER_RULESET, quiet=False, werror=True)
    mlp_compliance.enqueued_configs.clear()  # a module-level queue a failed check may leave
    for rule_file in rule_files:
        # The checker joins config names onto its own directory; an absolute path survives.
        checker.check_loglines(loglines, str(rule_file))
    # What checker.log_messages() would log, as a list.
    found = [
        *(f"line not parsed ({error}): {line}" for line, error in errors),
        *checker.warnings.values(),
        *checker.overwritable.values(),
        *checker.not_overwritable,
    ]
    return list(dict.fromkeys(found))  # "No log lines detected" comes once per rule file


def _missing(event: dict[str, Any]) -> list[str]:
    """The fields of an MLPerf event that `event` lacks (the checker's parser needs them)."""
    missing = [k for k in EVENT_FIELDS if k not in event]
    return missing or ([] if isinstance(event["metadata"], dict) else ["metadata object"])
