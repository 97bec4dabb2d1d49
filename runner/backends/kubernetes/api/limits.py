"""How long a call to the API server may take and how much of its answer the runner takes in:
the bounds that keep a slow, broken or hostile cluster from holding the runner or filling its
memory. Each can be set from the environment (names below); README.md lists them by command.

- `call_deadline_s`: one call as a whole (connect, every read, its retries): get, list, create,
  delete, and the opening of a watch or a followed log.
- `log_deadline_s`: reading one pod's log to its end (`runner fetch`, `runner logs`).
- `watch_slack_s`: a watch lasts its server-side timeout (5-10 minutes) and at most this much
  longer.
- `max_answer_bytes`: one answer (a job, a list of pods or events); larger is refused.
- `max_log_bytes`: one pod's log as fetched; the rest is cut, and the run says so.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

from runner.errors import RunnerError

MIB = 1 << 20
ENV = {
    "call_deadline_s": "STACKBENCH_K8S_CALL_DEADLINE_S",
    "log_deadline_s": "STACKBENCH_K8S_LOG_DEADLINE_S",
    "watch_slack_s": "STACKBENCH_K8S_WATCH_SLACK_S",
    "max_answer_bytes": "STACKBENCH_K8S_MAX_ANSWER_MIB",
    "max_log_bytes": "STACKBENCH_K8S_MAX_LOG_MIB",
}


@dataclass(frozen=True)
class ApiLimits:
    call_deadline_s: float = 60.0  # an admission webhook may take 30 s; retries fit after it
    log_deadline_s: float = 900.0  # 1 GiB at a slow 2 MB/s
    watch_slack_s: float = 30.0
    max_answer_bytes: int = 32 * MIB  # a list of thousands of pods; parsed, up to ~20x in memory
    max_log_bytes: int = 1024 * MIB  # spooled to disk, never held in memory

    def __post_init__(self) -> None:
        for f in fields(self):
            if not getattr(self, f.name) > 0:
                raise ValueError(f"{f.name} must be positive")

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> ApiLimits:
        """The defaults, with what the environment sets (sizes in MiB, times in seconds)."""
        env = os.environ if environ is None else environ
        values: dict[str, float | int] = {}
        for name, var in ENV.items():
            text = env.get(var)
            if not text:
                continue
            try:
                value = float(text)
            except ValueError:
                value = -1.0
            if not 0 < value < 1e9:
                raise RunnerError(f"{var}={text!r:.40} is not a positive number; unset or fix it")
            values[name] = int(value * MIB) if name.startswith("max_") else value
        return cls(**values)  # type: ignore[arg-type]


def mib(size_bytes: int) -> str:
    return f"{size_bytes / MIB:g} MiB"
