"""`runner benchmarks` and `runner plugins` as printed: aligned columns (runner/cli/catalog.py)."""

from __future__ import annotations

import re

import click
from click.testing import CliRunner

from runner.cli import main
from runner.cli.catalog import columns
from workloads.plugins import points


def test_plugins_lists_every_entry_of_every_point_with_its_origin_on_its_line():
    result = CliRunner().invoke(main, ["plugins"])
    assert result.exit_code == 0, result.output
    header, *lines = result.output.splitlines()
    assert re.split(r"\s{2,}", header) == ["POINT", "NAME", "ORIGIN"]
    listed = [tuple(re.split(r"\s{2,}", line)) for line in lines]
    assert listed == [
        (registry.point, name, entry.origin)
        for registry in points.POINTS
        for name, entry in registry.entries().items()
    ]


def test_columns_align_under_the_header_and_write_out_control_characters():
    text = columns(("A", "B"), [("x\x1b[2J", "built in"), ("longer", "pkg==1.0")], bold=1)
    assert click.unstyle(text).splitlines() == [
        "A         B",
        "x\\x1b[2J  built in",
        "longer    pkg==1.0",
    ]
    # What is not built in is bold (click.echo drops the style where stdout is no terminal);
    # the only escapes are that style's, none of the cell's own.
    assert click.style("pkg==1.0", bold=True) in text and text.count("\x1b") == 2
