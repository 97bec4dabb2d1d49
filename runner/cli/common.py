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
import io
import math
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from runner.cli.lazy import deferred
from runner.errors import BadInput, Interrupted, RunnerError, SpecError, interruption
from runner.install import extra as install_extra

if TYPE_CHECKING:
    from runner.job.spec import Placement

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Settings:
    """The group's options, handed to every command."""

    results_dir: Path
    debug: bool = False


pass_settings = click.make_pass_decorator(Settings)
if TYPE_CHECKING:
    from rich.console import Console

    console: Console
    errors: Console
else:
    # Made at their first print: rich's console is a tenth of what `runner --help` imports.
    console = deferred(lambda: _consoles().StdoutConsole())
    errors = deferred(lambda: _consoles().Console(stderr=True))
EXIT_FAILED = 1
EXIT_USAGE = 2
# The optional extra that provides each module a command may need (pyproject.toml).
EXTRAS = {
    "matplotlib": "report",
    "yaml": "report",
    "kubernetes": "kubernetes",
    "mlperf_logging": "test",
    "torch": "workloads",
    "aiohttp": "dashboard",
}


class _NeverRaised(Exception):
    """Raised by nothing: what an error class of a module not yet imported stands for."""


def _error_class(module: str, name: str) -> type[Exception]:
    """`module`'s error class `name` once a command has imported that module (only its code
    raises one), else _NeverRaised: importing workloads.plugins (a plugin's errors) or
    contract.files (a damaged file's) here would put them on `runner --help`'s start-up path."""
    found = sys.modules.get(module)
    return getattr(found, name) if found is not None else _NeverRaised


def handle_errors(fn: F) -> F:
    """SpecError -> usage error (exit 2); BadInput (a run id, rank or run that does not fit,
    a missing data set) -> one line, exit 2; RunnerError, a damaged file or a plugin that
    cannot be used -> one line, exit 1.
    `runner --debug` shows the traceback too."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except SpecError as err:
            raise click.BadParameter(str(err), param_hint=err.param) from None
        except (
            RunnerError,
            _error_class("contract.files", "DamagedFile"),
            _error_class("workloads.plugins.registry", "PluginError"),  # a user's plugin code
        ) as err:
            if _debug_enabled():
                raise
            lines = err.lines if isinstance(err, RunnerError) and err.lines else str(err)
            fail(lines, EXIT_USAGE if isinstance(err, BadInput) else EXIT_FAILED)

    return wrapper  # type: ignore[return-value]


def own_folder(path: Path, option: str = "--results-dir") -> Path:
    """A folder the user named, resolved if a link is on its way (a results folder on
    another disk, macOS's /tmp): the user's own links are followed here, once, because the
    writers below never go through one (contract.files), whoever planted it. A path that
    cannot be resolved (a link loop, a folder not ours to read) is bad input, in one line."""
    try:
        absolute = path.absolute()
    except FileNotFoundError:  # os.getcwd() of a folder deleted under the shell
        fail(f"the current folder no longer exists (deleted), and {option} {path} is relative "
             f"to it: cd to a folder that exists, or give {option} an absolute path",
             EXIT_USAGE)  # fmt: skip
    try:
        if any(p.is_symlink() for p in (absolute, *absolute.parents)):
            return absolute.resolve()
    except (OSError, RuntimeError) as err:  # RuntimeError: Python 3.11's link loop
        raise click.BadParameter(f"{path} cannot be resolved: {err}", param_hint=option) from None
    return path


def fail(message: str | Sequence[str], code: int = EXIT_FAILED) -> None:
    """The error's one line (or the lines the runner composed it of, each on its own): its
    text may carry a path, a server's message or a file's content, whose control characters
    are written out, never sent to the terminal."""
    lines = [message] if isinstance(message, str) else message
    text = "\n".join(escape(terminal_safe(line)) for line in lines)
    errors.print(f"[red]error:[/red] {text}", soft_wrap=True)
    sys.exit(code)


def _consoles() -> Any:
    from runner.cli import consoles

    return consoles


def escape(text: str) -> str:
    """rich's markup escape (brackets shown as written), imported when first needed."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def terminal_safe(line: str) -> str:
    """`line` with its control characters written out (ESC as \\x1b, a newline as \\n): text
    from a run's processes, a cluster or a file, where an escape sequence reaching a terminal
    can retitle it, hide lines or write the clipboard, and a newline forges another line."""
    if line.isprintable():
        return line
    return "".join(c if c.isprintable() or c == "\t" else ascii(c)[1:-1] for c in line)


def plain(text: str) -> str:
    """Text that is not ours (a run id is a directory's name, a reason the cluster's words, a
    path the user's) for a rich print, shown as written: brackets are no markup (`run-[red]x`
    showed as `run-x`, an id no command finds, and a `[/]` in a results path was a traceback
    after the run had started) and control characters are written out (an escape sequence
    in a copied results folder's name went to the terminal as it was)."""
    return escape(terminal_safe(text))


def _debug_enabled() -> bool:
    ctx = click.get_current_context(silent=True)
    settings = ctx.find_root().obj if ctx is not None else None
    return isinstance(settings, Settings) and settings.debug


def require(module: str, command: str) -> None:
    """One line naming the extra to install when `command` needs `module` and it is missing."""
    if importlib.util.find_spec(module) is None:
        extra = EXTRAS.get(module, module)
        install = install_extra(extra)
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


def escape_unencodable() -> None:
    """Text the terminal's encoding cannot carry (a run folder named in UTF-8 on an ASCII-only
    stdout: LANG=C, PYTHONIOENCODING=ascii; a file name that is not UTF-8) is written escaped,
    `\\xe9`, instead of ending the command with UnicodeEncodeError."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")


class RunnerGroup(click.Group):
    """click's group, but a signal that stops a command exits 128 + N (130 for Ctrl-C) with
    no traceback and no more than click's blank line, wherever it lands: click's own
    handling says `Aborted!` and exits 1, which a script cannot tell from a failure."""

    def main(
        self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
        standalone_mode: bool = True, **extra: Any,
    ) -> Any:  # fmt: skip
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        escape_unencodable()
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
        except (KeyboardInterrupt, Interrupted) as err:
            sys.exit(exit_code(err))
        except click.Abort as err:  # raised from the KeyboardInterrupt, or a prompt's EOF
            if isinstance(err.__cause__ or err.__context__, KeyboardInterrupt):
                sys.exit(exit_code(KeyboardInterrupt()))
            click.echo("Aborted!", err=True)
            sys.exit(EXIT_FAILED)
        except click.ClickException as err:
            err.show()
            sys.exit(err.exit_code)
        except Exception as err:  # a Ctrl-C that Python wrapped (runner.errors.interruption)
            stop = interruption(err)
            if stop is None:
                raise
            sys.exit(exit_code(stop))
        # Without standalone mode click returns an Exit's code (--help: 0), else what the
        # command returned (None: done).
        sys.exit(code if isinstance(code, int) else 0)


def configure_logging(verbose: int) -> None:
    """-v: what the runner does (INFO); -vv: everything, libraries included (DEBUG)."""
    if not verbose:
        return
    import logging  # here: only -v needs it, and `runner --help` starts without it

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


class WorkersType(click.ParamType):
    """--workers N, or MIN:MAX for an elastic run: (None, N) or (MIN, MAX)."""

    name = "workers"

    def convert(self, value: Any, param: Any, ctx: Any) -> tuple[int | None, int]:
        if isinstance(value, tuple):
            return value
        low, sep, high = str(value).partition(":")
        try:
            numbers = (int(low), int(high)) if sep else (None, int(low))
        except ValueError:
            self.fail(f"expected N or MIN:MAX (2 or 2:4), got {value!r}", param, ctx)
        if numbers[1] < 1 or (numbers[0] is not None and not 1 <= numbers[0] <= numbers[1]):
            self.fail(f"expected N >= 1 or 1 <= MIN <= MAX, got {value!r}", param, ctx)
        return numbers


WORKERS = WorkersType()
MAX_PENDING_S = 30 * 24 * 3600.0  # a month: beyond it, a typo


class Seconds(click.ParamType):
    """A timeout in seconds: finite, 1 to MAX_PENDING_S (FloatRange lets nan and inf through,
    and an infinite timeout would be recorded in job.json as JSON no parser has to accept)."""

    name = "seconds"

    def convert(self, value: Any, param: Any, ctx: Any) -> float:
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not (math.isfinite(seconds) and 1 <= seconds <= MAX_PENDING_S):
            self.fail(f"{value!r} is not a number of seconds from 1 to {MAX_PENDING_S:,.0f}",
                      param, ctx)  # fmt: skip
        return seconds


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
        click.option("--runtime", metavar="NAME",
                     help="TrainJob runtime (default: the stack's, else torch-distributed)."),
        click.option("--pending-timeout", type=Seconds(), metavar="SECONDS",
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
        "--link", metavar="RATE[,delay=D][,jitter=J][,loss=P%]", default=None,
        help="Give every worker a link of this rate (100mbit, 1gbit, 500kbit), and optionally a "
        "one-way delay, jitter and loss (100mbit,delay=5ms,loss=0.1%): here, shaped network "
        "namespaces; on a cluster, pod bandwidth limits (a rate only).",
    )(fn)  # fmt: skip


def threads_option(fn: F) -> F:
    return click.option(
        "--threads", "threads_per_worker", type=click.IntRange(min=1, max=1024), default=None,
        metavar="T", help="Intra-op CPU threads per worker, local runs (default: "
        "OMP_NUM_THREADS, else the cores / the workers; a sweep: / its most workers, in "
        "every cell).",
    )(fn)  # fmt: skip


def warn_oversubscribed(placement: Placement) -> None:
    """One line on stderr when a local run's workers x threads exceed the cores here."""
    from runner.job import threads

    if placement.threads_per_worker is not None:
        why = threads.oversubscribed(placement.world_size, placement.threads_per_worker)
        if why:
            errors.print(f"warning: {why}", markup=False, soft_wrap=True)


def device_option(fn: F) -> F:
    return click.option(
        "--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True,
        help="What each worker computes on (cuda: one GPU per worker).",
    )(fn)  # fmt: skip


def yes_option(fn: F) -> F:
    return click.option("--yes", "-y", is_flag=True, help="Do it without asking.")(fn)


def no_blank_ids(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> tuple[str, ...]:
    """RUN|STUDY... as _not_empty checks RUN: a blank id is a prefix of every id."""
    for value in values:
        _not_empty(ctx, param, value)
    return values


def run_argument(fn: F) -> F:
    return click.argument("run_id", metavar="RUN", callback=_not_empty)(fn)


def _not_empty(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """An empty RUN is a prefix of every run id, so it would name the only run there is:
    `runner cancel "$RUN" --yes` with RUN unset must not cancel it."""
    if not value.strip():
        raise click.BadParameter(
            "is empty; give a run id or a unique prefix of one (`runner runs` lists them)"
        )
    return value
