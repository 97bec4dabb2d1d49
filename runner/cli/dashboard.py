"""`runner dashboard`: serve the live web dashboard over the results directory.

A thin shell over runner.dashboard.server, which (with aiohttp) is imported only when the
command runs, so `runner --help` never pays for it.
"""

from __future__ import annotations

import click

from runner.cli.common import Settings, console, handle_errors, pass_settings, plain, require
from runner.errors import RunnerError, SpecError


@click.command()
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True,
              help="Port to serve on (0: any free one).")  # fmt: skip
@click.option(
    "--host", default="127.0.0.1", show_default=True,
    help="Address to bind. Anything but loopback shows your results to the network.",
)  # fmt: skip
@click.option(
    "--allow-host", "allowed_hosts", multiple=True, metavar="NAME",
    help="A host name it is served under besides its address (a DNS name, a proxy's); "
         "requests addressed to any other are refused. Repeatable.",
)  # fmt: skip
@pass_settings
@handle_errors
def dashboard(settings: Settings, port: int, host: str, allowed_hosts: tuple[str, ...]) -> None:
    """Serve a live, read-only web dashboard of the runs and studies in the results directory.

    \b
    Examples:
      runner dashboard
      runner dashboard --port 9000
      runner dashboard --host 0.0.0.0 --allow-host bench.example.org
      runner --results-dir /mnt/results dashboard
    Runs table, run pages with live curves and logs, comparisons, studies. Ctrl-C stops it.
    """
    require("aiohttp", "runner dashboard")
    from runner.dashboard.server import DashboardConfig, serve

    results_dir = settings.results_dir
    config = DashboardConfig(results_dir=results_dir, host=host, port=port,
                             allowed_hosts=_host_names(allowed_hosts))  # fmt: skip

    def ready(url: str) -> None:
        note = "" if results_dir.is_dir() else " (no runs yet: it shows them as they appear)"
        shown = plain(str(results_dir))
        first, *more = open_urls(url, config.allowed_hosts)
        also = "".join(f"; also {plain(u)}" for u in more)
        console.print(f"dashboard of {shown}/ at [bold]{plain(first)}[/bold]{also}{note}; "
                      "Ctrl-C stops it")  # fmt: skip

    try:
        serve(config, ready)
    except OSError as err:
        raise _bind_error(err, host, port) from None
    except KeyboardInterrupt:
        console.print("dashboard stopped")


def open_urls(url: str, allowed: tuple[str, ...]) -> list[str]:
    """Addresses a browser can open for the served `url`. Bound to every address (0.0.0.0,
    ::), which no browser can open, it prints one that the server answers (hosts.policy) and
    others can reach: the first --allow-host name, else this machine's full name, else an
    address of its network interfaces; then loopback, for this machine."""
    import ipaddress
    import urllib.parse

    from runner.dashboard.hosts import ANY_ADDRESS, LOOPBACK_NAMES, local_addresses, machine_names

    parts = urllib.parse.urlsplit(url)
    host = (parts.hostname or "").strip("[]")
    if host not in ANY_ADDRESS:
        return [url]
    here = "[::1]" if host == "::" else "127.0.0.1"
    full_names = sorted(n for n in machine_names() if "." in n and n not in LOOPBACK_NAMES)
    addresses = sorted(
        (a for a in local_addresses() if not ipaddress.ip_address(a).is_loopback
         and not ipaddress.ip_address(a).is_link_local),
        key=lambda a: (ipaddress.ip_address(a).version, a),
    )  # fmt: skip
    first = next(iter([*allowed, *full_names, *addresses]), None)
    out = [] if first is None else [f"[{first}]" if ":" in first else first]
    return [f"http://{name}:{parts.port}/" for name in (*out, here)]


def _bind_error(err: OSError, host: str, port: int) -> Exception:
    """Why the address could not be bound: --host names no address of this machine (bad
    input), or the port is taken or not ours."""
    import errno
    import socket

    reason = err.strerror or str(err)
    if isinstance(err, socket.gaierror) or err.errno == errno.EADDRNOTAVAIL:
        return SpecError("--host", f"cannot serve on {host!r} ({reason}); give an address of "
                         "this machine: 127.0.0.1 (the default), or 0.0.0.0 for all")  # fmt: skip
    return RunnerError(f"cannot serve on {host}:{port} ({reason}); "
                       "choose another port with --port N")  # fmt: skip


def _host_names(names: tuple[str, ...]) -> tuple[str, ...]:
    """--allow-host values as the server compares them; bad input is refused here, so a
    typo never silently admits nothing (or everything)."""
    from runner.dashboard.hosts import canonical

    out = []
    for name in names:
        host = canonical(name)
        if host is None:
            raise SpecError(
                "--allow-host",
                f"{name!r} is not a host name or an IP address (a name only, without scheme, "
                "port or path: bench.example.org)",
            )
        out.append(host)
    return tuple(out)


COMMANDS = (dashboard,)
