"""Transformer training tokens/s in one process: stackbench against a bare loop, one run.

stackbench's path is workloads.training.run (the translation task with its length batching,
phase timers, strategy, schedule and event log); the bare loop is what a person would write
by hand around the same Transformer: the same batches (the same length_batches call), the
same Adam and label-smoothed loss, no timers, no logging. Both count real target tokens and
leave out the first (warm-up) update. Rounds alternate between the two so machine noise hits
both alike; the ratio of medians is stackbench's overhead. The corpus is synthetic (random
words, tokenized once with the real subword pipeline), since WMT cannot be downloaded here.

Usage: python bench/transformer_throughput.py [--rounds 3] [--size small|big] [--device cpu]
  small: d_model 256, FFN 1024, 4 heads, 3+3 layers (CPU-sized); big: the MLPerf model.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.one_process import run_quietly, single_rank_environment, steady
from runner.job.benchmarks import TRANSFORMER_WMT17
from workloads import models
from workloads.configuration.train_config import TrainConfig
from workloads.data import translation_cache_dir
from workloads.data.token_batching import length_batches
from workloads.data.translation import load_parallel, prepare_parallel, tokenizer
from workloads.optimization.optim import AdamConfig
from workloads.tasks.config import TranslationConfig

SIZES = {
    "small": {"d_model": 256, "ffn_dim": 1024, "num_heads": 4, "num_layers": 3},
    "big": {},  # the benchmark's own: 1024 / 4096 / 16 / 6
}


def write_corpus(root: Path, pairs: int, seed: int = 0) -> None:
    """Random sentences over 2,000 made-up words, their 'translation' a fixed word map."""
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(2000)]
    raw = root / "raw"
    raw.mkdir(parents=True)
    splits = {}
    for split, n in (("train", pairs), ("test", 16)):
        src, tgt = [], []
        for _ in range(n):
            ids = rng.integers(0, len(words), rng.integers(8, 40))
            src.append(" ".join(words[i] for i in ids))
            tgt.append(" ".join(words[(i * 7 + 3) % len(words)] for i in ids[::-1]))
        (raw / f"{split}.en").write_text("\n".join(src) + "\n")
        (raw / f"{split}.de").write_text("\n".join(tgt) + "\n")
        splits[split] = (raw / f"{split}.en", raw / f"{split}.de")
    prepare_parallel(splits, translation_cache_dir(root, "wmt17"), vocab_size=4000)


def bench_config(data_dir: Path, size: str, tokens: int) -> TrainConfig:
    return TRANSFORMER_WMT17.config.replace(
        data_dir=str(data_dir),
        max_epochs=1,
        stop_at_target=False,
        batch_size=tokens,
        global_batch=None,  # one batch per update: the step itself is what is compared
        beam_size=1,  # the evaluation after the epoch is outside the figure; keep it short
        length_penalty=0.0,
        **SIZES[size],
    )


def stackbench_tokens_per_s(config: TrainConfig, device: str) -> float:
    summary = run_quietly(config, "--device", device)
    assert summary is not None
    return steady(summary.throughput_tokens_per_s)


def bare_tokens_per_s(config: TrainConfig, device: str) -> float:
    """The same model, batches, optimizer and loss, in the plainest loop."""
    dev = torch.device(device)
    task = config.task
    assert isinstance(task, TranslationConfig), "the Transformer is trained by translation"
    cache = translation_cache_dir(Path(config.data.data_dir or ""), config.data.name)
    tok = tokenizer(cache)
    train = load_parallel(cache, "train")
    torch.manual_seed(config.run.seed)
    model = models.build(config.model, tok.vocab_size).to(dev)
    adam = config.optimizer
    assert isinstance(adam, AdamConfig), "the Transformer trains with Adam"
    beta1, beta2 = adam.adam_betas
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(beta1, beta2), eps=adam.adam_eps)
    batches = length_batches(
        train.src_lengths, train.tgt_lengths, config.data.batch_size, "tokens",
        seed=config.run.seed, epoch=0,
    )  # fmt: skip
    autocast = torch.autocast("cuda", torch.bfloat16) if dev.type == "cuda" else None
    tokens, elapsed = 0, 0.0
    for i, batch in enumerate(batches):
        t0 = time.perf_counter()
        src, src_len, tgt, _ = train.padded(batch, tok.pad_id)
        src_t, len_t = torch.from_numpy(src).to(dev), torch.from_numpy(src_len).to(dev)
        tgt_out = torch.from_numpy(tgt).to(dev)
        tgt_in = torch.cat([torch.full_like(tgt_out[:, :1], tok.bos_id), tgt_out[:, :-1]], 1)
        if autocast is not None:
            with autocast:
                logits = model(src_t, len_t, tgt_in)
        else:
            logits = model(src_t, len_t, tgt_in)
        loss = F.cross_entropy(
            logits.float().flatten(0, 1), tgt_out.flatten(), ignore_index=tok.pad_id,
            label_smoothing=task.label_smoothing, reduction="sum",
        )  # fmt: skip
        (loss / int((tgt_out != tok.pad_id).sum())).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        if i > 0:  # the warm-up update is left out, as stackbench's summary does
            elapsed += time.perf_counter() - t0
            tokens += int((tgt_out != tok.pad_id).sum())
    return tokens / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--pairs", type=int, default=3000, help="training sentence pairs")
    parser.add_argument("--tokens", type=int, default=4096, help="padded tokens per batch")
    args = parser.parse_args()
    single_rank_environment()
    figures: dict[str, list[float]] = {"bare": [], "stackbench": []}
    with tempfile.TemporaryDirectory() as data_dir:
        write_corpus(Path(data_dir), args.pairs)
        config = bench_config(Path(data_dir), args.size, args.tokens)
        for _ in range(args.rounds):
            figures["bare"].append(bare_tokens_per_s(config, args.device))
            figures["stackbench"].append(stackbench_tokens_per_s(config, args.device))
    medians = {k: statistics.median(v) for k, v in figures.items()}
    print(json.dumps({
        "transformer_one_process_tokens_per_s": {k: round(v) for k, v in medians.items()},
        "per_round_tokens_per_s": {k: [round(x) for x in v] for k, v in figures.items()},
        "ratio_stackbench_to_bare": round(medians["stackbench"] / medians["bare"], 3),
        "size": args.size, "device": args.device, "tokens_per_batch": args.tokens,
        "training_pairs": args.pairs, "rounds": args.rounds,
        "torch_threads": torch.get_num_threads(),
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
