"""The runs table's configuration keys sent once where every run has the same value: a row
carries ~45 keys (every --set key, workers, link, division, policy), most of them the same
in every run of a sweep. A page of the table (runner.dashboard.paging) sends those once, and
/api/keys those every run shares. Pure; the page puts the shared keys back into each row that
says it left them out (`keys_shared`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

SHARED = "keys_shared"  # a row's flag: its keys lack the shared ones (every run's same value)


def split_keys(
    rows: Sequence[Mapping[str, Any]],
) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """The keys every row with keys has with one value, and the rows without them. A row with
    no keys (a damaged run's) is left whole and unflagged: the shared values are not its."""
    keyed = [row["keys"] for row in rows if row.get("keys")]
    if len(keyed) < 2:  # one row: nothing is shared, and nothing is saved by sending it apart
        return {}, [dict(row) for row in rows]
    shared = {k: v for k, v in keyed[0].items() if all(keys.get(k) == v for keys in keyed[1:])}
    out = []
    for row in rows:
        if row.get("keys"):
            own = {k: v for k, v in row["keys"].items() if k not in shared}
            row = {**row, "keys": own, SHARED: True}
        out.append(dict(row))
    return shared, out
