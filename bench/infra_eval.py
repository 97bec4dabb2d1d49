"""How long the infra program takes to evaluate under Pulumi mocks, per stack.

A speed benchmark of our own code (not a pass/fail test): `python bench/infra_eval.py`
runs the real program (__main__.py, infra/program.py) for each stack file as tests/infra does and
prints, largest stack first, the resource count, the cold time (the first run in the process,
which includes importing the provider SDKs it is the first to use: pulumi_gcp and pulumi_aws
take seconds) and the median of `--repeat N` warm runs.
It measures the Python program only: no engine, no provider plugins, no cloud.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests" / "infra")]  # the harness, and what it imports


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="warm runs per stack (default 5)")
    args = parser.parse_args()
    warnings.simplefilter("ignore", DeprecationWarning)
    from infra_harness import evaluate, stack_names

    cold = {}  # first run in this process: includes importing the provider SDKs it uses
    for name in stack_names():
        start = time.perf_counter()
        cold[name] = (len(evaluate(name).resources), time.perf_counter() - start)
    print(f"{'stack':<16}{'resources':>10}{'cold_s':>10}{'warm_median_s':>15}")
    for name in sorted(cold, key=lambda n: cold[n][0], reverse=True):
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            evaluate(name)
            times.append(time.perf_counter() - start)
        count, cold_s = cold[name]
        print(f"{name:<16}{count:>10}{cold_s:>10.3f}{statistics.median(times):>15.3f}")


if __name__ == "__main__":
    main()
