"""Which rank wrote which line of a pod's log, believing only what the runner can check.

torchrun prefixes each worker's lines with `[rank<N>]:` in the pod log (render/common.py), but the
text after a prefix is the worker's, and any process of a job can print anything, a prefix
included: `[rank0]:` in node 1's log is a lie. So a line is rank N's only if N is one of the ranks
of the node whose pod wrote the log (the node index comes from the controller's labels,
pods.node_rank, never from the log) and N is below the world size. Every other line is
unattributed: torchrun's own unprefixed lines, and prefixes that name another node's rank or no
rank at all. Unattributed lines are kept as they are, per node, in
`logs/node-<N>.unattributed.log` (only when there are some), and are never written into a rank's
log, nor read for events or the summary.

Pure functions; no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from contract.rundir import LOGS

# ASCII digits only (`\d` would take other scripts' digits, which int() accepts), and few enough
# that a number cannot be absurd; render/common.py's RANK_PREFIX_TEMPLATE writes it.
RANK_PREFIX = re.compile(r"\[rank([0-9]{1,9})\]:", re.ASCII)


def unattributed_log(run_dir: Path, node: int) -> Path:
    return run_dir / LOGS / f"node-{node}.unattributed.log"


@dataclass(frozen=True)
class NodeRanks:
    """The ranks one node runs: procs_per_node consecutive ranks, none at or past world_size.
    `elastic`: the node of an elastic job (--workers MIN:MAX), one worker started directly,
    not under torchrun, so its lines carry no prefix and all are its (worker i is node i: the
    PyTorchJob has Worker replicas only)."""

    node: int
    procs_per_node: int
    world_size: int
    elastic: bool = False

    @property
    def ranks(self) -> range:
        first = self.node * self.procs_per_node
        return range(first, min(first + self.procs_per_node, self.world_size))


def attribute(line: str, node: NodeRanks) -> tuple[int | None, str]:
    """(rank, the line without its prefix) if one of this node's ranks wrote it, else
    (None, the line as it is)."""
    if node.elastic:  # no torchrun, so no prefix: the pod's one process wrote every line
        return node.node, line
    match = RANK_PREFIX.match(line)
    if match:
        rank = int(match.group(1))
        if rank in node.ranks:
            return rank, line[match.end() :]
    return None, line


@dataclass
class SplitLog:
    """One pod log split: each of the node's ranks' lines (every rank has a list, maybe empty)
    and the lines no rank of the node wrote."""

    per_rank: dict[int, list[str]]
    unattributed: list[str] = field(default_factory=list)


def split(lines: Iterable[str], node: NodeRanks) -> SplitLog:
    result = SplitLog({rank: [] for rank in node.ranks})
    for line in lines:
        rank, text = attribute(line, node)
        if rank is None:
            result.unattributed.append(text)
        else:
            result.per_rank[rank].append(text)
    return result
