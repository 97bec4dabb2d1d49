"""The MLPerf compliance checker with our rules, on real and built event logs.

The translation logs are built from the events train.py emits: its real _log_run_parameters
(the benchmark, division and every hyperparameter of workloads.telemetry.mlperf_keys), then the
init/run/epoch/eval sequence of train.run and train._train.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from contract import events as keys
from contract.manifest import parse_manifest
from runner.job.benchmarks import BENCHMARKS, GNMT_WMT16, TRANSFORMER_WMT17
from tests.runner.rundirs import env_manifest
from workloads import compliance
from workloads.compliance import check_log
from workloads.configuration.train_config import TrainConfig
from workloads.telemetry import mllog
from workloads.training.run import _log_run_parameters

TRANSFORMER, GNMT = TRANSFORMER_WMT17.config, GNMT_WMT16.config

CONFIGS = {"transformer-wmt17": TRANSFORMER, "gnmt-wmt16": GNMT}
LSTM = BENCHMARKS["lstm-wikitext2"].config


def emit_run(
    log: mllog.EventLog,
    config: TrainConfig,
    benchmark: str,
    *,
    bleu: tuple[float, ...] = (12.0, 26.0),
    status: str = "success",
    division: str = "closed",
) -> None:
    """The events of a run of `config` on 4 workers, one evaluation per epoch."""
    log.start(keys.INIT_START)
    args = SimpleNamespace(benchmark=benchmark, open_division=division == "open")
    task = SimpleNamespace(num_train=4_500_000, num_eval=3003)
    manifest = parse_manifest(env_manifest("run", 4))  # what the checker never reads
    _log_run_parameters(log, config, args, SimpleNamespace(world_size=4), task, manifest)
    log.end(keys.INIT_STOP)
    log.start(keys.RUN_START)
    for epoch, value in enumerate(bleu, start=1):
        log.start(keys.EPOCH_START, epoch_num=epoch)
        log.point(keys.TRAIN_LOSS, 4.2, epoch_num=epoch)
        log.point(keys.EPOCH_PHASES, {"forward": 1.0}, epoch_num=epoch)
        log.end(keys.EPOCH_STOP, epoch_num=epoch)
        log.start(keys.EVAL_START, epoch_num=epoch)
        log.point(keys.EVAL_ACCURACY, value, epoch_num=epoch)
        log.point(keys.EVAL_LOSS, 3.1, epoch_num=epoch)
        log.point(keys.EVAL_DETAILS, {"signature": "nrefs:1"}, epoch_num=epoch)
        log.end(keys.EVAL_STOP, epoch_num=epoch)
    log.point(keys.SUMMARY, {"status": status})
    log.end(keys.RUN_STOP, status=status)


def write_run(tmp_path: Path, benchmark: str, config: TrainConfig | None = None, **kw) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "events.jsonl"
    log = mllog.EventLog(str(path), echo=None)
    emit_run(log, config or CONFIGS[benchmark], benchmark, **kw)
    log.close()
    return path


def rewrite(path: Path, edit) -> Path:
    """`path` with each event passed through `edit` (None drops the event)."""
    events = [edit(json.loads(line)) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(e) + "\n" for e in events if e is not None))
    return path


def failure(result: compliance.CheckResult) -> str:
    assert not result.ok
    return "\n".join(result.messages)


def test_the_log_of_a_real_cnn_digits_run_passes(finished_run):
    _, run = finished_run
    result = check_log(run.run_dir / "events.jsonl", "cnn-digits")
    assert result.ok, "\n".join(result.messages)
    assert result.messages == []
    assert "classification.yaml then common.yaml" in result.ruleset


@pytest.mark.parametrize("benchmark", CONFIGS)
def test_a_translation_log_of_the_events_train_emits_passes(tmp_path, benchmark):
    result = check_log(write_run(tmp_path, benchmark), benchmark)
    assert result.ok, "\n".join(result.messages)
    assert result.ruleset.startswith(f"{benchmark} (closed division): {benchmark}.yaml then")


@pytest.mark.parametrize(
    ("benchmark", "key"),
    [
        ("transformer-wmt17", keys.OPT_ADAM_EPSILON),
        ("transformer-wmt17", keys.MAX_SEQUENCE_LENGTH),
        ("gnmt-wmt16", keys.OPT_GRADIENT_CLIP_NORM),
        ("gnmt-wmt16", keys.OPT_LR_DECAY_BOUNDARY_EPOCHS),
        ("gnmt-wmt16", keys.GRADIENT_ACCUMULATION_STEPS),
    ],
)
def test_a_missing_hyperparameter_fails_naming_it(tmp_path, benchmark, key):
    path = rewrite(write_run(tmp_path, benchmark), lambda e: None if e["key"] == key else e)
    assert f"Required EXACTLY_ONE occurrence of '{key}' but found 0" in failure(
        check_log(path, benchmark)
    )


@pytest.mark.parametrize(
    ("benchmark", "change", "key"),
    [
        ("transformer-wmt17", {"adam_eps": 1e-8}, keys.OPT_ADAM_EPSILON),
        ("transformer-wmt17", {"beam_size": 5}, keys.BEAM_SIZE),
        ("transformer-wmt17", {"grad_clip_norm": 1.0}, keys.OPT_GRADIENT_CLIP_NORM),
        ("transformer-wmt17", {"length_penalty_form": "power"}, keys.LENGTH_PENALTY),
        ("gnmt-wmt16", {"grad_clip_norm": 1.0}, keys.OPT_GRADIENT_CLIP_NORM),
        ("gnmt-wmt16", {"label_smoothing": 0.2}, keys.LABEL_SMOOTHING),
        ("gnmt-wmt16", {"optimizer": "sgd"}, keys.OPT_NAME),
        ("lstm-wikitext2", {"grad_clip_norm": 0.5}, keys.OPT_GRADIENT_CLIP_NORM),
        ("lstm-wikitext2", {"asgd_nonmono": 0}, keys.ASGD_NONMONO),
        ("lstm-wikitext2", {"bptt": 35}, keys.BPTT),
        ("lstm-wikitext2", {"lr_milestones": (100,)}, keys.OPT_LR_DECAY_BOUNDARY_EPOCHS),
    ],
)
def test_a_wrong_closed_division_value_fails_naming_it(tmp_path, benchmark, change, key):
    config = {**CONFIGS, "lstm-wikitext2": LSTM}[benchmark].replace(**change)
    message = failure(check_log(write_run(tmp_path, benchmark, config), benchmark))
    assert f"CHECK for '{key}' failed" in message


def test_an_open_division_run_may_change_what_the_closed_division_fixes(tmp_path):
    config = TRANSFORMER.replace(adam_eps=1e-8, beam_size=1, grad_clip_norm=1.0)
    path = write_run(tmp_path, "transformer-wmt17", config, division="open")
    result = check_log(path, "transformer-wmt17")
    assert result.ok, "\n".join(result.messages)
    assert "(open division): common.yaml," in result.ruleset


def test_a_log_without_run_stop_fails(tmp_path):
    path = rewrite(
        write_run(tmp_path, "gnmt-wmt16"), lambda e: None if e["key"] == keys.RUN_STOP else e
    )
    assert "Required EXACTLY_ONE occurrence of 'run_stop' but found 0" in failure(
        check_log(path, "gnmt-wmt16")
    )


def test_an_eval_accuracy_without_epoch_num_fails(tmp_path):
    def drop_epoch(event):
        if event["key"] == keys.EVAL_ACCURACY:
            event["metadata"].pop("epoch_num")
        return event

    path = rewrite(write_run(tmp_path, "transformer-wmt17"), drop_epoch)
    message = failure(check_log(path, "transformer-wmt17"))
    assert "CHECK for 'eval_accuracy' failed" in message
    assert "failed test: 'epoch_num' in v['metadata']" in message


def test_a_closed_run_that_claims_success_below_the_target_fails(tmp_path):
    path = write_run(tmp_path, "transformer-wmt17", bleu=(12.0, 24.9))
    assert "s['best_bleu'] or 0) >= 25.0" in failure(check_log(path, "transformer-wmt17"))
    aborted = write_run(tmp_path / "b", "transformer-wmt17", bleu=(12.0,), status="aborted")
    assert check_log(aborted, "transformer-wmt17").ok  # stopped by its time budget: a result


def test_an_lstm_log_passes_and_its_perplexity_target_is_met_at_or_below_70(tmp_path):
    passing = write_run(tmp_path / "a", "lstm-wikitext2", LSTM, bleu=(300.0, 69.5))
    assert check_log(passing, "lstm-wikitext2").ok
    missed = write_run(tmp_path / "b", "lstm-wikitext2", LSTM, bleu=(300.0, 70.5))
    assert "s['best'] <= 70.0" in failure(check_log(missed, "lstm-wikitext2"))


def test_bleu_is_in_points_not_a_fraction_above_one_hundred(tmp_path):
    path = write_run(tmp_path, "gnmt-wmt16", bleu=(24.5, 2450.0))
    assert "s['best_bleu'] <= 100" in failure(check_log(path, "gnmt-wmt16"))


def test_evaluations_must_follow_their_epoch(tmp_path):
    def eval_ahead(event):
        if event["key"] in (keys.EVAL_START, keys.EVAL_ACCURACY, keys.EVAL_STOP):
            event["metadata"]["epoch_num"] += 1
        return event

    path = rewrite(write_run(tmp_path, "gnmt-wmt16"), eval_ahead)
    assert "CHECK for 'eval_start' failed" in failure(check_log(path, "gnmt-wmt16"))


def test_the_log_of_another_benchmark_fails(tmp_path):
    path = write_run(tmp_path, "gnmt-wmt16")
    assert "submission_benchmark is 'gnmt-wmt16': not a log of transformer-wmt17" in failure(
        check_log(path, "transformer-wmt17")
    )


def test_a_rank_log_with_prefixed_lines_is_checked_too(tmp_path):
    echo = io.StringIO()
    emit_run(mllog.EventLog(None, echo=echo), GNMT, "gnmt-wmt16")
    rank_log = tmp_path / "rank-0.log"
    rank_log.write_text(
        "W1121 a warning\n" + echo.getvalue().replace(":::MLLOG", "[rank0]: :::MLLOG")
    )
    assert check_log(rank_log, "gnmt-wmt16").ok


def test_an_event_without_the_mlperf_fields_fails_instead_of_crashing(tmp_path):
    path = write_run(tmp_path, "gnmt-wmt16")
    with path.open("a") as f:
        f.write('{"key": "eval_loss", "value": 1.0}\n')
    assert "not an MLPerf event (no time_ms, metadata)" in failure(check_log(path, "gnmt-wmt16"))


def test_a_benchmark_without_rules_is_refused_naming_those_with_rules(tmp_path):
    with pytest.raises(compliance.UnknownBenchmark, match=r"allreduce-micro.*transformer-wmt17"):
        check_log(write_run(tmp_path, "gnmt-wmt16"), "allreduce-micro")


def test_without_the_checker_package_the_error_says_how_to_install_it(tmp_path, monkeypatch):
    path = write_run(tmp_path, "gnmt-wmt16")
    for name in [n for n in sys.modules if n.startswith("mlperf_logging")] + ["mlperf_logging"]:
        monkeypatch.setitem(sys.modules, name, None)  # None: "import halted"
    with pytest.raises(compliance.CheckerUnavailable, match="pip install mlperf-logging"):
        check_log(path, "gnmt-wmt16")


def test_every_rule_file_is_package_data():
    import tomllib

    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["workloads.compliance"]
    files = {compliance.RULES_DIR / compliance.COMMON, *compliance.rulesets().values()}
    assert all(f.is_file() for f in files)
    assert all(any(Path(f.name).match(p) for p in patterns) for f in files)


def test_every_requirement_names_only_its_own_key():
    """check_log hands the checker only the events of keys a rule names (rule_keys); that is
    exact only while no REQ names another key (AT_LEAST_ONE_OR(...) counts events of keys the
    checker otherwise skips), so every rule file is held to the two that name none."""
    import yaml

    for rule_file in sorted(compliance.RULES_DIR.glob("*.yaml")):
        for block in yaml.safe_load(rule_file.read_text()):
            if "KEY" in block:
                assert block["KEY"].get("REQ", "EXACTLY_ONE") in ("EXACTLY_ONE", "AT_LEAST_ONE")
                assert block["KEY"]["NAME"] in compliance.rule_keys()


def test_a_log_drowned_in_unchecked_events_is_checked_on_what_its_rules_name(tmp_path):
    """The per-step events no rule names never reach the checker (which skips them): a real
    log with 20,000 of them in the middle passes as the log without them does."""
    path = write_run(tmp_path, "gnmt-wmt16")
    lines = path.read_text().splitlines(keepends=True)
    step = json.dumps({"key": keys.TRAIN_LOSS, "value": 4.0, "time_ms": 1, "metadata": {}}) + "\n"
    path.write_text("".join(lines[:-3]) + step * 20_000 + "".join(lines[-3:]))
    assert check_log(path, "gnmt-wmt16").ok


def test_checked_events_past_the_cap_fail_the_check_saying_so(tmp_path, monkeypatch):
    path = write_run(tmp_path, "gnmt-wmt16")
    monkeypatch.setattr(compliance, "MAX_CHECKED_BYTES", 2000)
    assert "left unchecked: they go past" in failure(check_log(path, "gnmt-wmt16"))


def test_events_that_are_not_mlperf_events_are_quoted_up_to_a_count(tmp_path):
    path = write_run(tmp_path, "gnmt-wmt16")
    with path.open("a") as f:
        f.writelines(f'{{"key": "eval_loss", "value": {i}}}\n' for i in range(50))
    messages = check_log(path, "gnmt-wmt16").messages
    assert sum(m.startswith("not an MLPerf event") for m in messages) == 20
    assert "and 30 more events that are not MLPerf events" in messages
