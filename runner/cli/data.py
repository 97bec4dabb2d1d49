"""`runner data fetch`: download and prepare data sets, outside any benchmark's clock."""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path
from typing import Any

import click

from runner.cli.common import console, handle_errors, plain


@click.group()
def data() -> None:
    """Download and prepare data sets (outside any benchmark's clock).

    \b
    Examples:
      runner data fetch cifar10
      runner data fetch epsilon --dir /mnt/data
      runner data fetch wmt17 --dir /mnt/data
      runner data fetch cifar10 --mirror http://mirror.internal/datasets
    """


@data.command("fetch")
@click.argument("name", metavar="NAME")
@click.option(
    "--dir", "directory", type=click.Path(file_okay=False, path_type=Path), default=None,
    help="Data directory (default: $STACKBENCH_DATA, else ~/.cache/stackbench/data); "
    "runs read it through config data_dir.",
)  # fmt: skip
@click.option(
    "--mirror", metavar="URL", default=None, callback=lambda ctx, param, value: _mirror(value),
    help="Download URL/<file name> instead of the published URL (http, https or file); "
    "checksums are still checked.",
)  # fmt: skip
@click.option("--force", is_flag=True, help="Download and prepare again even if present.")
@handle_errors
def fetch_data(name: str, directory: Path | None, mirror: str | None, force: bool) -> None:
    """Download data set NAME, verify its published checksums and prepare it.

    NAME is cifar10, epsilon, wikitext2, wmt16, wmt17, or a plugin's data set that declares
    its source (runner --plugin PATH data fetch NAME). The WMT en-de sets are large: wmt16
    downloads about 1.65 GB and wmt17 about 1.74 GB (1.58 GB of it, Europarl v7 and Common
    Crawl, the same files), then extracts the English and German text to DIR/NAME/raw and
    tokenizes it into DIR/NAME/cache. Verified downloads stay in DIR/downloads, so preparing
    again never downloads again.
    """
    from runner.datasets import fetch as datasets
    from workloads.data import DATA_DIR_ENV, default_data_dir

    if name not in datasets.DATASETS:
        raise click.BadParameter(
            f"unknown data set {name!r}; choose one of: {', '.join(datasets.DATASETS)}",
            param_hint="NAME",
        )
    root = directory or default_data_dir()
    # How the user chose it, for the fix of a folder that cannot be one (a file, a dangling link).
    named_by = "--dir" if directory else (DATA_DIR_ENV if os.environ.get(DATA_DIR_ENV) else "")
    datasets.check_folder(name, root, named_by)  # before the progress display starts
    if datasets.is_prepared(name, root) and not force:
        console.print(
            f"{name} is already prepared in {plain(str(datasets.prepared_path(name, root)))}"
        )
        return
    from runner.cli.progress import download_bar

    tasks: dict[str, Any] = {}
    with download_bar(console) as bar:

        def on_progress(what: str, done: int, total: int | None, unit: str) -> None:
            if what not in tasks:
                tasks[what] = bar.add_task(what, total=total, unit=unit)
            bar.update(tasks[what], completed=done)

        path = datasets.fetch(name, root, mirror, force, on_progress, named_by)
    console.print(f"[green]ready[/green]: {plain(str(path))}")
    if root != default_data_dir():
        console.print(f"runs read it with: --set data_dir={plain(str(root))}")


MIRROR_SCHEMES = ("http", "https", "file")


def _mirror(url: str | None) -> str | None:
    """The --mirror URL when urllib can download from it; a usage error (exit 2) otherwise,
    rather than urllib's traceback ("unknown url type") once the download starts."""
    if url is None:
        return None
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port out of range or not a number
    except ValueError as err:
        raise click.BadParameter(f"{url!r} is not a URL ({err})", param_hint="--mirror") from None
    if parts.scheme not in MIRROR_SCHEMES or (parts.scheme != "file" and not parts.hostname):
        raise click.BadParameter(
            f"{url!r}: expected an http://, https:// or file:// URL of a directory, e.g. "
            "http://mirror.internal/datasets",
            param_hint="--mirror",
        )
    return url


COMMANDS = (data,)
