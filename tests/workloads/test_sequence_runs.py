"""2-worker runs of the real entry point (torchrun -m workloads.train) on the sequence tasks,
with tiny models on corpora the tests generate in the canonical formats: a Transformer that
learns a copy-and-reverse translation task to BLEU above 90 (and whose event log passes the
MLPerf compliance checker), GNMT whose loss falls, and an AWD-LSTM whose validation perplexity
falls."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from contract.events import read_events
from runner.job.benchmarks import BENCHMARKS
from tests.datagen import markov_lines, write_lines, write_parallel
from tests.workloads.test_reference_runs import torchrun, train_losses
from workloads.compliance import check_log
from workloads.data import WIKITEXT2_SUBDIR, translation_cache_dir
from workloads.data.translation import prepare_parallel

pytestmark = pytest.mark.slow

TINY_TRANSFORMER = {"d_model": 64, "ffn_dim": 128, "num_heads": 4, "num_layers": 2}


def _translation_data(root: Path, dataset: str, pairs: int) -> None:
    raw = root / "raw"
    splits = {
        "train": write_parallel(raw, "train", pairs, seed=0, max_words=6),
        "test": write_parallel(raw, "test", 60, seed=1, max_words=6),
    }
    prepare_parallel(splits, translation_cache_dir(root, dataset), vocab_size=96)


def test_tiny_transformer_on_2_workers_learns_copy_and_reverse_to_bleu_above_90(tmp_path):
    _translation_data(tmp_path / "data", "wmt17", pairs=3000)
    config = BENCHMARKS["transformer-wmt17"].config.replace(
        data_dir=str(tmp_path / "data"),
        target_value=90.0,
        max_epochs=20,  # it reaches 90 in about 11 (13 s here) and stops there
        batch_size=512,  # padded tokens per worker...
        global_batch=1024,  # ...accumulated: as batches hold padding, 2 rounds or more
        lr=5e-3,
        warmup_steps=50,
        dropout=0.0,
        **TINY_TRANSFORMER,
    )
    out = tmp_path / "out"
    summary = torchrun(config, out, benchmark="transformer-wmt17")
    assert summary["target_reached"], summary["final"]
    assert summary["final"]["value"] > 90.0
    assert summary["final"]["bleu_signature"].startswith("nrefs:1|")
    assert summary["precision"] == "fp32"  # CPU
    assert summary["throughput_tokens_per_s"] > 0
    # What was scored is kept: the last evaluation's translations, one per test sentence.
    last = out / "translations" / f"epoch-{summary['final']['epoch']}.txt"
    assert len(last.read_text().splitlines()) == 60
    events = list(read_events(out / "events.jsonl"))
    assert any(e["key"] == "gradient_accumulation_steps" for e in events)
    result = check_log(out / "events.jsonl", "transformer-wmt17")
    assert result.ok, result.messages


def test_tiny_gnmt_on_2_workers_lowers_its_loss_and_logs_compliantly(tmp_path):
    _translation_data(tmp_path / "data", "wmt16", pairs=600)
    config = BENCHMARKS["gnmt-wmt16"].config.replace(
        data_dir=str(tmp_path / "data"),
        max_epochs=10,
        stop_at_target=False,
        batch_size=32,  # sentences per worker, accumulated to 64 an update
        global_batch=64,
        lr=1e-2,
        warmup_steps=5,
        hidden_dim=64,
        num_layers=2,
        dropout=0.0,
    )
    out = tmp_path / "out"
    summary = torchrun(config, out, benchmark="gnmt-wmt16")
    losses = train_losses(out)
    assert losses[-1] < 0.8 * losses[0]
    # Every update holds at least 64 sentences: at most 9 of the 600 an epoch.
    assert 0 < summary["steps"] <= 10 * (600 // 64)
    assert 0.0 <= summary["final"]["value"] <= 100.0
    result = check_log(out / "events.jsonl", "gnmt-wmt16")
    assert result.ok, result.messages


def _wikitext(root: Path) -> None:
    """WikiText-2's layout, with lines from a Markov chain that a model can learn."""
    directory = root / WIKITEXT2_SUBDIR
    directory.mkdir(parents=True)
    for split, num, seed in (("train", 3000, 0), ("valid", 300, 1), ("test", 300, 2)):
        write_lines(directory / f"wiki.{split}.tokens", markov_lines(num, seed))


def test_tiny_awd_lstm_on_2_workers_lowers_validation_perplexity(tmp_path):
    _wikitext(tmp_path / "data")
    config = BENCHMARKS["lstm-wikitext2"].config.replace(
        data_dir=str(tmp_path / "data"),
        max_epochs=8,
        stop_at_target=False,
        batch_size=8,
        bptt=20,
        lr=10.0,
        embed_dim=32,
        hidden_dim=64,
        num_layers=2,
        # The reference's dropouts are for a 33M-parameter model on 2M tokens; a tiny model
        # on a tiny corpus learns too slowly under them for a test.
        dropout=0.1,
        dropout_input=0.1,
        dropout_hidden=0.1,
        dropout_embedding=0.0,
        weight_drop=0.1,
    )
    out = tmp_path / "out"
    summary = torchrun(config, out, benchmark="lstm-wikitext2", open_division=True)
    perplexities = [
        e["value"] for e in read_events(out / "events.jsonl") if e["key"] == "eval_accuracy"
    ]
    assert len(perplexities) == 8
    assert perplexities[-1] < 0.5 * perplexities[0]
    # 22 words ("." and <eos> too); two successors a word, and "." ends 1 line in 6 or so.
    assert np.isfinite(perplexities[-1]) and perplexities[-1] < 4.0
    assert summary["target"] == {"metric": "perplexity", "value": 70.0}
    assert summary["target_reached"]  # a tiny grammar is far below 70
    result = check_log(out / "events.jsonl", "lstm-wikitext2")
    assert result.ok, result.messages


def _lm_evaluations_around_an_averaging(
    rank: int, world_size: int, data_dir: str, asgd: bool
) -> list[float]:
    """On each rank: the perplexity of an evaluation right after local steps, then of one
    after the models were averaged by hand (what evaluation must score either way); with
    `asgd`, of the weights NT-ASGD averaged over the second epoch's steps."""
    import torch
    import torch.distributed as dist

    from workloads import tasks
    from workloads.telemetry import mllog
    from workloads.telemetry.timing import clock_for

    config = BENCHMARKS["lstm-wikitext2"].config.replace(
        data_dir=data_dir,
        strategy="model-averaging",
        averaging_period=100_000,  # no averaging while training: the ranks' models drift apart
        asgd_nonmono=1 if asgd else 0,
        batch_size=8,
        bptt=20,
        lr=10.0,
        embed_dim=16,
        hidden_dim=16,
        num_layers=1,
    )
    device = torch.device("cpu")
    torch.manual_seed(0)  # as workloads.train does: the same initial model on every rank
    log = mllog.RankLog(rank, None)
    task = tasks.build(tasks.Context(config, rank, world_size, device, clock_for(device), log))
    task.train_epoch(1)
    if asgd:  # a validation loss above an earlier one of 0: this evaluation switches to ASGD
        task.val_losses = [0.0, 0.0]
        task.evaluate(1)
        assert task.averaging
        task.train_epoch(2)
    first = task.evaluate(1).value
    task.strategy.sync_buffers()  # model-averaging's: the models' mean
    for state in task.optimizer.state.values():  # and ASGD's averages', where it averages
        if "ax" in state:
            dist.all_reduce(state["ax"])
            state["ax"] /= world_size
    return [first, task.evaluate(1).value]


@pytest.mark.parametrize("asgd", [False, True], ids=["sgd", "nt-asgd"])
def test_awd_lstm_under_model_averaging_evaluates_the_averaged_model(tmp_path, asgd):
    from tests.distributed import run_ranks

    _wikitext(tmp_path / "data")
    results = run_ranks(
        _lm_evaluations_around_an_averaging, data_dir=str(tmp_path / "data"), asgd=asgd
    )
    # Every rank scores its share of the validation stream with the one averaged model: the
    # ranks' own models (different after local steps) would score a mixture of models.
    (first, averaged), _ = results
    assert results[0] == results[1]
    assert first == pytest.approx(averaged, rel=1e-9)


def test_awd_lstm_refuses_a_validation_split_too_short_to_score_before_training(tmp_path):
    from tests.workloads.entry import run_entry

    directory = tmp_path / "data" / WIKITEXT2_SUBDIR
    directory.mkdir(parents=True)
    write_lines(directory / "wiki.train.tokens", markov_lines(600, 0))
    write_lines(directory / "wiki.test.tokens", markov_lines(30, 2))
    # 16 tokens: one row of 10 streams, whose tokens have no next token to predict.
    write_lines(directory / "wiki.valid.tokens", markov_lines(2, 1))
    config = BENCHMARKS["lstm-wikitext2"].config.replace(
        data_dir=str(tmp_path / "data"), max_epochs=1, batch_size=8, bptt=20,
        embed_dim=16, hidden_dim=16, num_layers=1,
    )  # fmt: skip
    out = tmp_path / "out"
    done = run_entry(config, out, "--open-division")
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert "1 validation tokens per stream (of 10), so nothing to score" in output
    # Refused while building the task, not scored as a diverged run after an epoch.
    assert "diverged" not in output
    assert not any(e["key"] == "run_start" for e in read_events(out / "events.jsonl"))
