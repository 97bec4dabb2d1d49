"""MLPerf compliance of our event logs: MLCommons' checker (mlperf-logging) with our rules.

The rules are the YAML files beside this module, in the checker's config format (KEY records
with REQ/CHECK/POST, BEGIN and END): common.yaml for every training benchmark, and a file of
closed-division rules per benchmark (RULESETS). Which files apply follows MLPerf, whose
common.yaml enqueues {division}_common.yaml: a closed-division log is checked against its
benchmark's file and then common.yaml, an open-division log against common.yaml alone (MLPerf's
open rulesets check little beyond the quality metric). common.yaml runs last because the
checker lets a config's rules for a key replace what earlier configs reported about it: no
benchmark file can weaken a common rule.

The checker reads `:::MLLOG {json}` lines; events.jsonl holds bare JSON, so the events are
written, prefixed, to a temporary file first (any log with events will do: a rank log too).
mlperf-logging pulls pandas and scipy: it is in the test extra, not in training images, and
is imported only when a check runs. No torch here.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import MappingProxyType
from typing import Any

from contract.events import parse_object
from workloads import mllog

RULES_DIR = Path(__file__).parent
COMMON = "common.yaml"
# The closed-division rules of each training benchmark (the registry's names).
RULESETS: Mapping[str, str] = MappingProxyType(
    {
        "transformer-wmt17": "transformer-wmt17.yaml",
        "gnmt-wmt16": "gnmt-wmt16.yaml",
        "lstm-wikitext2": "lstm-wikitext2.yaml",
        "cnn-digits": "classification.yaml",
        "resnet20-cifar10": "classification.yaml",
        "logreg-epsilon": "classification.yaml",
        "vgg11-cifar10": "classification.yaml",
    }
)
# Selects the checker's parser of `:::MLLOG {json}` lines (the same since ruleset 0.7.0);
# the rules themselves are ours.
PARSER_RULESET = "6.1.0"
EVENT_FIELDS = ("time_ms", "key", "value", "metadata")
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


def rules_for(benchmark: str) -> Path:
    """The closed-division rule file of `benchmark`."""
    if benchmark not in RULESETS:
        raise UnknownBenchmark(
            f"no compliance rules for {benchmark!r}; rules exist for: {', '.join(RULESETS)}"
        )
    return RULES_DIR / RULESETS[benchmark]


def check_log(events_path: Path, benchmark: str) -> CheckResult:
    """Run the MLPerf compliance checker with our rules for `benchmark` on a run's events."""
    bench_rules = rules_for(benchmark)
    with open(events_path, encoding="utf-8", errors="replace") as f:  # missing: an error
        events = [e for e in map(parse_object, f) if e is not None]
    division = _first_value(events, mllog.SUBMISSION_DIVISION)
    # A log without a division is held to the closed rules (common.yaml reports the gap).
    files = [RULES_DIR / COMMON] if division == "open" else [bench_rules, RULES_DIR / COMMON]
    gaps = [(e, _missing(e)) for e in events]
    messages = [f"not an MLPerf event (no {', '.join(m)}): {e}" for e, m in gaps if m]
    messages += run_checker([e for e, m in gaps if not m], files)
    logged = _first_value(events, mllog.SUBMISSION_BENCHMARK)
    if logged is not None and logged != benchmark:
        messages.insert(0, f"submission_benchmark is {logged!r}: not a log of {benchmark}")
    ruleset = (
        f"{benchmark} ({division or 'closed'} division): {' then '.join(f.name for f in files)}"
        f", mlperf-logging {metadata.version('mlperf-logging')}"
    )
    return CheckResult(ok=not messages, messages=messages, ruleset=ruleset)


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
            "".join(mllog.PREFIX + json.dumps(e, separators=(", ", ": ")) + "\n" for e in events),
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


def _first_value(events: Sequence[dict[str, Any]], key: str) -> Any:
    return next((e.get("value") for e in events if e.get("key") == key), None)
