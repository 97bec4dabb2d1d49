"""What every `runner` command shares: the consoles, error handling, the option definitions
(one definition per option, so an option means the same on every command), the extras check
and the signals that cancel a followed run.

Exit codes: 0 done; 1 an operational failure or a run that did not succeed; 2 bad input;
128 + N when signal N stopped the command (130 Ctrl-C, 129 SIGHUP, 143 SIGTERM), after
cancelling the run it followed and keeping what was recorded.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import logging
import signal
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.markup import escape

from contract.files import DamagedFile
from runner.errors import Interrupted, RunnerError, SpecError

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Settings:
    """The group's options, handed to every command."""

    results_dir: Path
    debug: bool = False


pass_settings = click.make_pass_decorator(Settings)
console = Console()
errors = Console(stderr=True)
EXIT_FAILED = 1
INSTALL = "pip install -c constraints.txt -e '.[{extra}]'"
# The optional extra that provides each module a command may need (pyproject.toml).
EXTRAS = {
    "matplotlib": "report",
    "yaml": "report",
    "kubernetes": "kubernetes",
    "mlperf_logging": "test",
    "torch": "workloads",
    "aiohttp": "dashboard",
}


def handle_errors(fn: F) -> F:
    """SpecError -> usage error (exit 2); RunnerError or a damaged file -> one line, exit 1.
    `runner --debug` shows the traceback too."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except SpecError as err:
            raise click.BadParameter(str(err), param_hint=err.param) from None
        except (RunnerError, DamagedFile) as err:
            if _debug_enabled():
                raise
            fail(str(err))

    return wrapper  # type: ignore[return-value]


def fail(message: str, code: int = EXIT_FAILED) -> None:
    errors.print(f"[red]error:[/red] {escape(message)}", soft_wrap=True)
    sys.exit(code)


def _debug_enabled() -> bool:
    ctx = click.get_current_context(silent=True)
    settings = ctx.find_root().obj if ctx is not None else None
    return isinstance(settings, Settings) and settings.debug


def require(module: str, command: str) -> None:
    """One line naming the extra to install when `command` needs `module` and it is missing."""
    if importlib.util.find_spec(module) is None:
        extra = EXTRAS.get(module, module)
        install = INSTALL.format(extra=extra)
        raise RunnerError(f"{command} needs {module}, which is not installed: {install}")


@contextlib.contextmanager
def signals_interrupt() -> Iterator[None]:
    """Within it, SIGTERM and SIGHUP act as Ctrl-C does: they raise Interrupted in the main
    thread, so the command cancels what it follows, keeps the record and exits 128 + N."""

    def raise_interrupted(signum: int, frame: object) -> None:
        raise Interrupted(signum)

    previous = {s: signal.signal(s, raise_interrupted) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def exit_code(err: BaseException) -> int:
    return 128 + err.signum if isinstance(err, Interrupted) else 130


def configure_logging(verbose: int) -> None:
    """-v: what the runner does (INFO); -vv: everything, libraries included (DEBUG)."""
    if not verbose:
        return
    level = logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if verbose == 1:
        logging.getLogger("runner").setLevel(logging.INFO)


def confirm(question: str, yes: bool) -> None:
    """Ask before something destructive; --yes answers for a script. Without a terminal and
    without --yes, refuse rather than guess."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise SpecError("--yes", f"{question} Refusing without a terminal; pass --yes to confirm")
    if not click.confirm(question, default=False):
        raise RunnerError("nothing done")


# ---- option definitions shared by the commands ----------------------------------------------


def where_options(fn: F) -> F:
    """Where runs go: here (the default) or a cluster (a stack, or a kubeconfig and an image)."""
    kubeconfig = click.Path(exists=True, dir_okay=False, path_type=Path)
    options = (
        click.option("--local", "local", is_flag=True, help="Run here (the default)."),
        click.option("--stack", metavar="NAME", help="Run on the cluster of this Pulumi stack."),
        click.option("--kubeconfig", type=kubeconfig, help="A cluster made elsewhere (+ --image)."),
        click.option("--context", help="Kubeconfig context (with --kubeconfig)."),
        click.option("--job-api", type=click.Choice(["trainjob", "pytorchjob"]),
                     help="Kubeflow API (default: the stack's, else trainjob)."),
        click.option("--image", help="Training image (digest or version tag)."),
        click.option("--pending-timeout", type=click.FloatRange(min=1), metavar="SECONDS",
                     help="Cancel a cluster job still pending after this long, saying why."),
    )  # fmt: skip
    for option in reversed(options):
        fn = option(fn)
    return fn


def per_node_option(fn: F) -> F:
    return click.option(
        "--per-node", type=click.IntRange(min=1), default=None, metavar="P",
        help="Processes per node on a cluster (workers / P nodes; default 1). Locally every "
        "worker is on this machine.",
    )(fn)  # fmt: skip


def link_option(fn: F) -> F:
    return click.option(
        "--link", metavar="RATE", default=None,
        help="Give every worker a link of this rate (100mbit, 1gbit, 500kbit): here, shaped "
        "network namespaces; on a cluster, pod bandwidth limits.",
    )(fn)  # fmt: skip


def device_option(fn: F) -> F:
    return click.option(
        "--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True,
        help="What each worker computes on (cuda: one GPU per worker).",
    )(fn)  # fmt: skip


def yes_option(fn: F) -> F:
    return click.option("--yes", "-y", is_flag=True, help="Do it without asking.")(fn)


def run_argument(fn: F) -> F:
    return click.argument("run_id", metavar="RUN")(fn)
