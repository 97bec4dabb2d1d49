"""The elastic group's records signed with the run's secret, so that a process outside the run
that reaches its store cannot change who is a member.

A c10d TCPStore has no authentication: anyone who can connect may read and write every key.
The launcher makes a random secret per run and gives it to the run's processes in their
environment (SECRET_ENV, contract/runsecret.py; never on disk: launch.json, job.json and the
run directory do not hold it): locally the supervisor, on Kubernetes the run's own Secret.
Every record a member writes (a join, a generation, a check-in, an arrival, `latest`,
`ended`) is stored as `<HMAC-SHA256 of key and value, hex>.<value>`; a reader takes a record
only with a valid tag for its own key (a record moved to another key does not verify), and
ignores any other, saying so once per key on stderr (the worker's log). The counters the
store increments atomically (`joins`, the arrival count, heartbeats) cannot carry a tag: a
foreign client can bump them, which delays a decision or makes a worker wait, but admits no
member and drops none (rendezvous.py reads members from signed records only).
Without SECRET_ENV (a worker started by hand, or by a launcher other than the runner) records
are plain text; docs/security.md says so.
"""

from __future__ import annotations

import hashlib
import hmac
import sys
from collections.abc import Mapping

from contract.runsecret import SECRET_ENV, new_secret

__all__ = ["SECRET_ENV", "UNSIGNED", "Signer", "new_secret"]


class Signer:
    """Seals and opens records with one run's secret (none: plain records)."""

    def __init__(self, secret: str | None) -> None:
        self._key = bytes.fromhex(secret) if secret else None
        self._warned: set[str] = set()

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Signer:
        """The run's signer; ValueError when SECRET_ENV is set but not a hex secret."""
        secret = environ.get(SECRET_ENV) or None
        try:
            return cls(secret)
        except ValueError:
            raise ValueError(f"{SECRET_ENV} is not a hex secret") from None

    def __repr__(self) -> str:  # never the secret
        return f"Signer({'signed' if self._key else 'plain'})"

    def seal(self, key: str, value: str) -> str:
        if self._key is None:
            return value
        return f"{self._tag(key, value)}.{value}"

    def open(self, key: str, raw: bytes) -> str | None:
        """The value of the record at `key`, or None when it is not one of the run's (no tag,
        a wrong one, not text): ignored, and said once."""
        try:
            text = raw.decode()
        except UnicodeDecodeError:
            self._forged(key)
            return None
        if self._key is None:
            return text
        tag, dot, value = text.partition(".")
        if not dot or not hmac.compare_digest(tag, self._tag(key, value)):
            self._forged(key)
            return None
        return value

    def _tag(self, key: str, value: str) -> str:
        assert self._key is not None
        message = key.encode() + b"\0" + value.encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def _forged(self, key: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            print(f"elastic: ignored record {key!r} in the run's store: not signed with the "
                  "run's secret (written by a process outside the run)",
                  file=sys.stderr, flush=True)  # fmt: skip


UNSIGNED = Signer(None)
