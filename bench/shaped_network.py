"""The CS744 strategy comparison and MLBench's speedup curve on shaped links, on one machine.

For each link (loopback, then every --links rate) and each worker count, the workers run in
network namespaces of their own joined by links shaped to that rate (runner/backends/local/
network.py; the probe's measured rate is printed), one core's worth of threads each, and time
`--iters` training iterations of every communication strategy on VGG-11-BN (channels divided
by --width-divisor: 4 by default, 0.58 M parameters, because the full model's 9.2 M take
minutes an iteration on slow links here). Synthetic CIFAR-shaped data, global batch 256 split
over the workers, SGD as the study. Reported per strategy: the median iteration (2..N), split
into the longest-computing rank's compute and the rest (communication), and the speedup over
one worker; then the ratios that explain the ordering (bench/shaped_explain.py) and, with
--figures, two figures.
This is a speed benchmark, not a test: it asserts nothing.

Usage (root, or CAP_NET_ADMIN and CAP_SYS_ADMIN):
    python bench/shaped_network.py [--links 1gbit 100mbit 25mbit] [--workers 2 4] [--iters 8]
        [--width-divisor 4] [--json rows.json] [--figures bench/figures]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.shaped_explain import explain, ratio_lines  # noqa: E402
from runner.backends.local.launch import SHAPED_MASTER_PORT  # noqa: E402
from runner.backends.local.network import INTERFACE, ShapedNetwork, address  # noqa: E402
from runner.backends.local.network_check import require  # noqa: E402
from runner.job.link import parse_link  # noqa: E402

STRATEGIES = ("gather-scatter", "allreduce-per-param", "allreduce", "ddp")
LOOPBACK = "loopback"
RANK_SCRIPT = str(REPO / "bench" / "shaped_rank.py")


def run_ranks(
    net: ShapedNetwork | None,
    world_size: int,
    settings: dict[str, Any],
    timeout_s: float,
    script: str = RANK_SCRIPT,
) -> list[dict[str, Any]]:
    """Each rank's results (`script` run by each); ranks in net's worker namespaces, or on
    loopback without one."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1",
           "WORLD_SIZE": str(world_size), "MASTER_PORT": str(SHAPED_MASTER_PORT),
           "MASTER_ADDR": address(0) if net else "127.0.0.1"}  # fmt: skip
    if net is not None:
        env["GLOO_SOCKET_IFNAME"] = INTERFACE
    with tempfile.TemporaryDirectory() as tmp:
        outs = [Path(tmp) / f"rank-{r}.json" for r in range(world_size)]
        procs = []
        for rank, out in enumerate(outs):
            argv = [sys.executable, script, json.dumps(settings), str(out)]
            argv = net.command(rank, argv, str(REPO)) if net else argv
            procs.append(subprocess.Popen(argv, env={**env, "RANK": str(rank)}, cwd=REPO))
        try:
            codes = [p.wait(timeout=timeout_s) for p in procs]
        finally:
            for p in procs:
                p.kill()
        if any(codes):
            raise SystemExit(f"a rank failed ({codes}) at {world_size} workers; see above")
        return [json.loads(out.read_text()) for out in outs]


def rows_for(link: str, workers: int, ranks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per strategy: the iteration time of the slowest rank, the compute of the rank
    that computes longest, and the rest as communication.

    Not one rank's own split: a collective completes on every rank at once, so a rank that
    computes faster waits longer and counts the straggler's compute as its communication.
    The slowest compute and the longest iteration are each the critical path's."""
    rows = []
    for strategy in ranks[0]:
        medians = [median_iteration(r[strategy]) for r in ranks]
        time_s = max(step for step, _ in medians)
        compute_s = min(time_s, max(compute for _, compute in medians))
        rows.append({"link": link, "workers": workers, "strategy": strategy, "time_s": time_s,
                     "comm_s": time_s - compute_s, "compute_s": compute_s})  # fmt: skip
    return rows


def median_iteration(times: dict[str, list[float]]) -> tuple[float, float]:
    """(step, compute) seconds of one rank's median iteration by step time, the first left
    out (warm-up). One whole iteration rather than medians of each part, so the parts add up;
    the median, because other work on a shared machine adds spikes to single iterations."""
    kept = sorted(
        (step, step - comm) for step, comm in zip(times["step_s"][1:], times["comm_s"][1:],
                                                   strict=True)
    )  # fmt: skip
    return kept[(len(kept) - 1) // 2]


def measure(args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, float | None]]:
    settings = {"iters": args.iters, "global_batch": args.global_batch,
                "width_divisor": args.width_divisor}  # fmt: skip
    single = run_ranks(None, 1, {**settings, "strategies": ["single"]}, args.timeout_s)
    rows = rows_for("-", 1, single)
    measured: dict[str, float | None] = {LOOPBACK: None}
    for link in [LOOPBACK, *args.links]:
        for k in args.workers:
            started = time.perf_counter()
            work = {**settings, "strategies": list(args.strategies)}
            if link == LOOPBACK:
                ranks = run_ranks(None, k, work, args.timeout_s)
            else:
                with ShapedNetwork.open(parse_link(link), k) as net:
                    measured[link] = net.probe().measured_mbit_s
                    ranks = run_ranks(net, k, work, args.timeout_s)
            rows += rows_for(link, k, ranks)
            print(f"  {link} x{k}: {time.perf_counter() - started:.0f} s", file=sys.stderr)
    for row in rows:
        row["speedup"] = rows[0]["time_s"] / row["time_s"]
        row["comm_share"] = row["comm_s"] / row["time_s"]
    return rows, measured


def table(rows: list[dict[str, Any]], measured: dict[str, float | None]) -> str:
    lines = [f"{'link':<10}{'measured':>10}{'workers':>8}  {'strategy':<21}{'s/iter':>8}"
             f"{'compute':>9}{'comm':>8}{'comm %':>8}{'speedup':>9}"]  # fmt: skip
    for r in rows:
        rate = measured.get(r["link"])
        shown = f"{rate:.0f} Mb/s" if rate else ("-" if r["link"] != LOOPBACK else "unshaped")
        lines.append(
            f"{r['link']:<10}{shown:>10}{r['workers']:>8}  {r['strategy']:<21}"
            f"{r['time_s']:>8.3f}{r['compute_s']:>9.3f}{r['comm_s']:>8.3f}"
            f"{100 * r['comm_share']:>7.1f}%{r['speedup']:>8.2f}x"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--links", nargs="+", default=["1gbit", "100mbit", "25mbit"])
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--strategies", nargs="+", default=list(STRATEGIES))
    parser.add_argument("--iters", type=int, default=8)
    parser.add_argument("--global-batch", type=int, default=256)
    parser.add_argument("--width-divisor", type=int, default=4)
    parser.add_argument("--timeout-s", type=float, default=900.0)
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    parser.add_argument("--figures", type=Path, default=None, help="write the figures here")
    args = parser.parse_args()
    if args.iters < 2:
        parser.error("--iters must be at least 2 (iteration 1 is warm-up, not averaged)")
    for link in args.links:
        parse_link(link)  # a bad rate fails before anything runs
    require()
    from bench.iterations import vgg11

    params_m = sum(p.numel() for p in vgg11(args.width_divisor).parameters()) / 1e6
    print(f"VGG-11-BN, channels / {args.width_divisor}: {params_m:.2f} M parameters "
          f"({4 * params_m:.1f} MB of gradients); global batch {args.global_batch}; the "
          f"median of iterations 2-{args.iters}; 1 thread per worker, "
          f"{os.cpu_count()} cores here")  # fmt: skip
    started = time.perf_counter()
    rows, measured = measure(args)
    print(table(rows, measured))
    print(f"(measured in {time.perf_counter() - started:.0f} s)\n")
    for line in [*ratio_lines(rows), *explain(rows, 4 * params_m, os.cpu_count() or 1)]:
        print(line)
    if args.json is not None:
        data = {"params_m": params_m, "cores": os.cpu_count(), "measured_mbit_s": measured,
                "rows": rows}  # fmt: skip
        args.json.write_text(json.dumps(data, indent=2) + "\n")
    if args.figures is not None:
        from bench.shaped_figures import write_figures

        for path in write_figures(rows, args.figures, os.cpu_count() or 1):
            print(f"wrote {path}")


if __name__ == "__main__":
    main()
