"""A communication model that predicts: every strategy's collective timed on shaped links of
each delay x rate x worker count, the alpha-beta (Hockney) model fitted per strategy
(runner/results/linkmodel.py), and its error on points held out of the fit.

For each cell the workers run in network namespaces on links with that rate and one-way delay
(tbf, and the NFQUEUE delay line or netem: runner/backends/local/network.py; the probe checks
the delay before anything runs), one core's worth of threads each, and time (bench/
shaped_model_rank.py): `--iters` training iterations of flat all-reduce, DDP and
gather-scatter on VGG-11-BN with channels divided by --width-divisor (their exposed
communication, as bench/shaped_network.py splits it), and allreduce-micro's own timed
all-reduces of --micro-elements float32 elements. Rows are appended to --rows as they come
(JSON lines), so a grid cut short still fits; --fit-only fits the rows already there.
Held out of the fit: every point at a delay in --held-delays or a rate in --held-rates.
This is a speed benchmark, not a test: it asserts nothing.

Usage (root, iptables where the kernel has no netem):
    python bench/shaped_model.py [--delays 0ms 1ms 5ms 20ms] [--rates 25mbit 100mbit 1gbit]
        [--workers 2 4] [--rows bench/figures/shaped_model.jsonl] [--figures bench/figures]
        [--fit-only]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.shaped_network import rows_for, run_ranks  # noqa: E402
from runner.backends.local.network import ShapedNetwork  # noqa: E402
from runner.backends.local.network_check import require  # noqa: E402
from runner.job.link import parse_link  # noqa: E402
from runner.results.linkmodel import (  # noqa: E402
    COLLECTIVES,
    Point,
    finite,
    fit,
    relative_errors,
    split,
    summary,
)

RANK_SCRIPT = str(REPO / "bench" / "shaped_model_rank.py")
STRATEGIES = ("allreduce", "ddp", "gather-scatter")


def gradient_bytes(width_divisor: int) -> int:
    from bench.iterations import vgg11

    return 4 * sum(p.numel() for p in vgg11(width_divisor).parameters())


def measure_cell(link: str, workers: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    settings = {"iters": args.iters, "global_batch": args.global_batch,
                "width_divisor": args.width_divisor, "strategies": list(STRATEGIES),
                "micro_elements": args.micro_elements, "micro_iters": 3,
                "micro_budget_s": 3.0}  # fmt: skip
    parsed = parse_link(link)
    with ShapedNetwork.open(parsed, workers) as net:
        record = net.probe()
        ranks = run_ranks(net, workers, settings, args.timeout_s, RANK_SCRIPT)
    base = {
        "link": link, "workers": workers, "delay_s": parsed.delay_us / 1e6,
        "rate_bit_s": parsed.rate_bit_s, "rtt_ms": record.rtt_ms,
        "base_rtt_ms": record.base_rtt_ms, "measured_mbit_s": record.measured_mbit_s,
    }  # fmt: skip
    size = gradient_bytes(args.width_divisor)
    strategy_ranks = [{k: v for k, v in r.items() if k != "allreduce-micro"} for r in ranks]
    rows = [
        {
            **base,
            "strategy": row["strategy"],
            "size_bytes": size,
            "time_s": row["comm_s"],
            "step_s": row["time_s"],
        }
        for row in rows_for(link, workers, strategy_ranks)
    ]
    rows += [
        {
            **base,
            "strategy": "allreduce-micro",
            "size_bytes": m["size_bytes"],
            "time_s": m["time_s"],
        }
        for m in ranks[0]["allreduce-micro"]
    ]
    return rows


def points(rows: list[dict[str, Any]]) -> list[Point]:
    return finite([
        Point(r["strategy"], r["workers"], r["delay_s"], r["rate_bit_s"], r["size_bytes"],
              r["time_s"])
        for r in rows
    ])  # fmt: skip


def report(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    held_delays = {parse_link(f"1gbit,delay={d}").delay_us / 1e6 for d in args.held_delays}
    held_rates = {float(parse_link(r).rate_bit_s) for r in args.held_rates}
    train, held = split(points(rows), held_delays, held_rates)
    lines = [f"fit on {len(train)} points, held out {len(held)} (delays {args.held_delays}, "
             f"rates {args.held_rates})", ""]  # fmt: skip
    lines.append(f"{'strategy':<16}{'alpha0 ms':>10}{'a (x d)':>9}{'beta@25M':>10}"
                 f"{'beta@1G':>10}{'bits/B':>8}  held-out error; fitted-on error")  # fmt: skip
    for strategy in COLLECTIVES:
        mine = [p for p in train if p.strategy == strategy]
        if len(mine) < 4:
            continue
        model = fit(strategy, mine)
        theirs = [p for p in held if p.strategy == strategy]
        lines.append(
            f"{strategy:<16}{1e3 * model.alpha0_s:>10.3f}{model.alpha_per_delay:>9.2f}"
            f"{model.beta_byte_s(25e6) * 8 / 1e6:>9.1f}M{model.beta_byte_s(1e9) * 8 / 1e6:>9.0f}M"
            f"{model.bits_per_byte:>8.2f}  {summary(relative_errors(model, theirs))}; "
            f"{summary(relative_errors(model, mine))}"
        )
        worst = sorted(theirs, key=lambda p: -relative_errors(model, [p])[0])[:3]
        for p in worst:
            lines.append(
                f"    worst: N={p.workers} d={1e3 * p.delay_s:g}ms R={p.rate_bit_s / 1e6:g}M "
                f"n={p.size_bytes / 1e6:.3g}MB measured {1e3 * p.time_s:.1f} ms, predicted "
                f"{1e3 * model.predict_s(p):.1f} ms"
            )
    return "\n".join(lines)


def figure(rows: list[dict[str, Any]], args: argparse.Namespace, out_dir: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = points(rows)
    held_delays = {parse_link(f"1gbit,delay={d}").delay_us / 1e6 for d in args.held_delays}
    held_rates = {float(parse_link(r).rate_bit_s) for r in args.held_rates}
    strategies = [s for s in COLLECTIVES if sum(p.strategy == s for p in pts) >= 4]
    fig, axes = plt.subplots(1, len(strategies), figsize=(4 * len(strategies), 4), squeeze=False)
    for ax, strategy in zip(axes[0], strategies, strict=True):
        mine = [p for p in pts if p.strategy == strategy]
        train, held = split(mine, held_delays, held_rates)
        model = fit(strategy, train)
        for group, marker, label in ((train, "o", "fitted on"), (held, "x", "held out")):
            predicted = [1e3 * model.predict_s(p) for p in group]
            delays_ms = [1e3 * p.delay_s for p in group]
            ax.scatter(predicted, [1e3 * p.time_s for p in group], marker=marker, label=label,
                       c=delays_ms, cmap="viridis", vmin=0, vmax=20)  # fmt: skip
        low = min(1e3 * p.time_s for p in mine)
        high = max(1e3 * p.time_s for p in mine)
        ax.plot([low, high], [low, high], "k--", lw=0.8)
        ax.set(xscale="log", yscale="log", title=strategy, xlabel="predicted (ms)",
               ylabel="measured (ms)")  # fmt: skip
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # labels overlapped
        ax.legend(fontsize=8)
    fig.suptitle("alpha-beta model per strategy; colour: one-way delay (0-20 ms)")
    fig.tight_layout()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "shaped_model.png"
    fig.savefig(path, dpi=110)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--delays", nargs="+", default=["0ms", "1ms", "5ms", "20ms"])
    parser.add_argument("--rates", nargs="+", default=["25mbit", "100mbit", "1gbit"])
    parser.add_argument("--workers", nargs="+", type=int, default=[2, 4])
    parser.add_argument("--held-delays", nargs="+", default=["1ms"])
    parser.add_argument("--held-rates", nargs="+", default=["100mbit"])
    parser.add_argument("--iters", type=int, default=4)
    parser.add_argument("--global-batch", type=int, default=64)
    parser.add_argument("--width-divisor", type=int, default=8)
    parser.add_argument("--micro-elements", nargs="+", type=int,
                        default=[1_000, 10_000, 100_000, 1_000_000])  # fmt: skip
    parser.add_argument("--timeout-s", type=float, default=900)
    parser.add_argument("--rows", type=Path, default=REPO / "bench/figures/shaped_model.jsonl")
    parser.add_argument("--figures", type=Path, default=None)
    parser.add_argument("--fit-only", action="store_true")
    args = parser.parse_args()
    if not args.fit_only:
        done = _done(args.rows)
        for delay in args.delays:
            for rate in args.rates:
                link = parse_link(f"{rate},delay={delay}").text
                require(parse_link(link))
                for workers in args.workers:
                    if (link, workers) in done:
                        continue
                    started = time.perf_counter()
                    rows = measure_cell(link, workers, args)
                    with args.rows.open("a") as out:
                        out.writelines(json.dumps(r) + "\n" for r in rows)
                    print(f"  {link} x{workers}: {time.perf_counter() - started:.0f} s",
                          file=sys.stderr, flush=True)  # fmt: skip
    rows = [json.loads(line) for line in args.rows.read_text().splitlines() if line.strip()]
    print(report(rows, args))
    if args.figures is not None:
        print(f"figure: {figure(rows, args, args.figures)}")


def _done(path: Path) -> set[tuple[str, int]]:
    """The cells already in the rows file (a rerun resumes a grid cut short)."""
    if not path.exists():
        return set()
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {(r["link"], r["workers"]) for r in rows}


if __name__ == "__main__":
    main()
