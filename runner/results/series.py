"""How runs are named into series: a report's cells are (series, workers), and a run's series
is what its configuration varies in among the runs shown together (its --set values, link,
plugins; or, grouped by a key, that key's value), never mixing what no series mixes
(benchmark, device, threads per worker) or two divisions. Pure; the report
(runner.results.report) and the dashboard's pages label runs with it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from runner.errors import SpecError
from runner.job.benchmarks import RUN_CONTROLS
from runner.job.link import parse_link
from runner.results.keys import PLUGIN, UNSHAPED
from runner.results.runs import RunResult


def series_labeller(
    runs: Sequence[RunResult], group_by: str | None = None
) -> Callable[[RunResult], str]:
    """Label runs by the --set values (and benchmark, device, link, threads per worker and
    plugins) that vary among them, run controls aside; when nothing varies, by strategy. Runs
    are told apart by the value they used, not the text they were given: `lr=.05` and the
    default 0.05 are one series, shown as the first --set text given for it. With `group_by`,
    by that configuration key's value (`link=25mbit`), still apart by benchmark, device and
    threads per worker, whose times are never one series."""
    apart = _never_together(runs)
    if group_by is not None:
        return _divided(runs, lambda run: ", ".join(
            [*apart(run), f"{group_by}={run.keys.get(group_by, '-')}"]))  # fmt: skip
    keys = {key for run in runs for key in set(run.overrides) - RUN_CONTROLS}
    shown: dict[str, dict[str, str]] = {}  # key -> the value used -> its text in labels
    for key in keys:
        texts = shown.setdefault(key, {})
        for run in sorted(runs, key=lambda r: key not in r.overrides):  # --set texts first
            texts.setdefault(_used(run, key), str(run.overrides.get(key, run.config.get(key))))
    varying = sorted(k for k, texts in shown.items() if len(texts) > 1)
    several_links = len({r.link for r in runs}) > 1
    # A plugin's code beside the reference's is its own series, named with its version.
    plugins = {run.run_id: run.keys.get(PLUGIN, "") for run in runs}
    several_plugins = len(set(plugins.values())) > 1

    def plain(run: RunResult) -> str:
        parts = apart(run)
        parts += [f"link={run.link or UNSHAPED}"] if several_links else []
        parts += [f"{k}={shown[k][_used(run, k)]}" for k in varying]
        plugin = plugins[run.run_id] if several_plugins else ""
        parts += [f"plugin={plugin}"] if plugin else []
        return ", ".join(parts) or f"strategy={run.strategy}"

    return _divided(runs, plain)


def _never_together(runs: Sequence[RunResult]) -> Callable[[RunResult], list[str]]:
    """The label parts of what no series mixes, where the runs differ in it: the benchmark,
    the device (a CPU and a GPU time never averaged) and the threads each worker had (a
    speedup between them would measure the thread pool: runner/job/threads.py)."""
    several_benchmarks = len({r.benchmark for r in runs}) > 1
    several_devices = len({r.device for r in runs}) > 1
    several_threads = len({r.threads_per_worker for r in runs}) > 1

    def parts(run: RunResult) -> list[str]:
        out = [run.benchmark] if several_benchmarks else []
        out += [f"device={run.device}"] if several_devices else []
        out += [f"threads={run.threads_per_worker or '?'}"] if several_threads else []
        return out

    return parts


def _divided(
    runs: Sequence[RunResult], plain: Callable[[RunResult], str]
) -> Callable[[RunResult], str]:
    """`plain`, with the division added where runs of one plain label differ in it."""
    # A run can be open division with no --set key to show it (an elastic --workers 2:3
    # beside a fixed 3); without its division in the label, --allow-mixed would average it
    # with the closed runs of the same label in one cell, as one configuration.
    divisions: dict[str, set[str]] = {}
    for run in runs:
        divisions.setdefault(plain(run), set()).add(run.division)

    def label(run: RunResult) -> str:
        text = plain(run)
        return f"{text}, division={run.division}" if len(divisions[text]) > 1 else text

    return label


def series_order(run: RunResult) -> tuple[str, str, float, str]:
    """Where a run's series sorts before its label: by benchmark, device, then link by its
    rate, the slowest first and unshaped last (as text, `100mbit` came before `10mbit`)."""
    return (run.benchmark, run.device, _rate(run.link), run.link or "")


def _rate(link: str | None) -> float:
    """A link's rate in bit/s; unshaped (or a rate no longer readable) as the fastest."""
    if link is None:
        return float("inf")
    try:
        return float(parse_link(link).rate_bit_s)
    except SpecError:
        return float("inf")


def _used(run: RunResult, key: str) -> str:
    """The value a run used for a --set key, as comparable text (the --set text itself for a
    key outside its config)."""
    if key not in run.config:
        return f"given {run.overrides.get(key)}"
    return json.dumps(run.config[key], sort_keys=True, default=str)
