"""The dashboard's web server: the JSON API, the live stream, the page and its assets.

Why aiohttp: one well-kept package (aio-libs) that is already pinned here (kmock pulls it),
serving HTTP, streamed responses for server-sent events and static files from one asyncio
loop, with no ASGI server beside it; Starlette would need uvicorn and more. Why server-sent
events rather than websockets: updates only flow to the browser, EventSource reconnects by
itself, and each stream's first messages are a snapshot (runner.dashboard.live), so a
reconnect needs no cursor.

Read-only: GET routes only. Binds 127.0.0.1 unless told otherwise, and whatever it binds,
refuses requests whose Host is not one it answers to (runner.dashboard.hosts), so a web page
elsewhere cannot read it through DNS rebinding.
Every response says `X-Content-Type-Options: nosniff`; the app's own responses carry a strict
Content-Security-Policy (scripts from this origin and the one inline import map, by hash);
run files are served as plain text, JSON or a download, sandboxed, never as HTML. File access
is runner.dashboard.data's and runpage's, which never leave the results directory.

Not here: reading run directories (data, runpage), stream contents (live), the page
(static/).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import math
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from contract.files import DamagedFile
from runner.dashboard import data, files, hosts, live, paging, reports, runpage, views
from runner.dashboard.shared import split_keys

STATIC = Path(__file__).parent / "static"
HEARTBEAT_S = 15.0  # a comment line now and then, so proxies and browsers keep the stream
MAX_RUNS_PER_REQUEST = 16  # a comparison or stream of more is refused
TEXT_SUFFIXES = (".log", ".txt", ".jsonl", ".md", ".csv", ".yaml", ".yml")
FILE_CSP = "default-src 'none'; sandbox"
OFFSET = re.compile(r"[0-9]{1,20}")  # a byte offset into a log


@dataclass(frozen=True)
class DashboardConfig:
    results_dir: Path
    host: str = "127.0.0.1"
    port: int = 8765  # 0: any free port (tests)
    poll_s: float = 0.5  # how often a stream looks at the files
    allowed_hosts: tuple[str, ...] = ()  # names it is served under besides its address


CONFIG_KEY = web.AppKey("config", DashboardConfig)
TABLE_KEY = web.AppKey("table", data.RunTable)
CLOSING_KEY = web.AppKey("closing", asyncio.Event)


def app_csp(index_html: str) -> str:
    """The page's policy: this origin only, plus the inline import map by its hash."""
    match = re.search(r'<script type="importmap">(.*?)</script>', index_html, re.DOTALL)
    assert match, "static/index.html must hold its import map"  # a packaging bug, not input
    digest = base64.b64encode(hashlib.sha256(match.group(1).encode()).digest()).decode()
    return (
        f"default-src 'none'; script-src 'self' 'sha256-{digest}'; style-src 'self'; "
        "img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    )


def make_app(config: DashboardConfig) -> web.Application:
    index_html = (STATIC / "index.html").read_text(encoding="utf-8")
    csp = app_csp(index_html)
    app = web.Application(middlewares=[_errors, _host_guard(config)])
    app[CONFIG_KEY] = config
    app[TABLE_KEY] = data.RunTable(config.results_dir)
    app[CLOSING_KEY] = asyncio.Event()

    async def index(request: web.Request) -> web.Response:
        return web.Response(text=index_html, content_type="text/html")

    async def headers(request: web.Request, response: web.StreamResponse) -> None:
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["Cross-Origin-Resource-Policy"] = "same-origin"
        response.headers.setdefault("Content-Security-Policy", csp)
        # Assets revalidate (a 304 when unchanged), so an upgraded package is never stale.
        response.headers.setdefault("Cache-Control", "no-cache")

    async def closing(app: web.Application) -> None:
        app[CLOSING_KEY].set()  # streams end now rather than at the shutdown timeout

    app.on_response_prepare.append(headers)
    app.on_shutdown.append(closing)
    app.router.add_get("/", index)
    app.router.add_static("/static/", STATIC, follow_symlinks=False)
    for path, handler in ROUTES:
        app.router.add_get(path, handler)
    return app


def _host_guard(config: DashboardConfig) -> Any:
    policy = hosts.policy(config.host, config.allowed_hosts)

    @web.middleware
    async def guard(request: web.Request, handler: Any) -> web.StreamResponse:
        # The raw header: aiohttp's request.host falls back to the socket's own address.
        header = request.headers.get("Host")
        if not policy.allows(header):
            return _error(403, policy.refusal(header))
        return await handler(request)

    return guard


@web.middleware
async def _errors(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        return await handler(request)
    except (data.NotFound, files.InvalidPath) as err:
        return _error(404, str(err))
    except DamagedFile as err:
        return _error(403, f"{err.path}: {err.problem}")


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity (a diverged loss, a hostile file): they go as null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _json(payload: Any) -> web.Response:
    text = json.dumps(_finite(payload), allow_nan=False, separators=(",", ":"))
    return web.Response(text=text, content_type="application/json")


async def _call(request: web.Request, fn: Callable[..., Any], *args: Any) -> Any:
    """File reads block: run them off the event loop."""
    return await asyncio.to_thread(fn, request.app[CONFIG_KEY].results_dir, *args)


# ---- routes -------------------------------------------------------------------------------


async def runs(request: web.Request) -> web.Response:
    """A page of the runs table, filtered, sorted and grouped over every run (`q`, `state`,
    `benchmark`, `sort`, `order`, `group`, `offset`, `limit`: runner.dashboard.paging)."""
    try:
        query = paging.parse_query(request.query)
    except paging.BadQuery as err:
        return _error(400, str(err))
    rows = await asyncio.to_thread(request.app[TABLE_KEY].rows)
    return _json(await asyncio.to_thread(paging.page, rows, query))


async def shared_keys(request: web.Request) -> web.Response:
    """The configuration keys every run shares, with their one value."""
    rows = await asyncio.to_thread(request.app[TABLE_KEY].rows)
    return _json(split_keys(rows)[0])


async def run(request: web.Request) -> web.Response:
    return _json(await _call(request, runpage.run_detail, request.match_info["run_id"]))


async def run_curves(request: web.Request) -> web.Response:
    from runner.dashboard import curves

    events = await _call(request, runpage.read_events, request.match_info["run_id"])
    return _json({"run_id": request.match_info["run_id"], **curves.series(events)})


async def run_log(request: web.Request) -> web.Response:
    offset = request.query.get("offset")
    # ASCII digits only, and few: str.isdigit() takes '²', which int() refuses, and int()
    # refuses numbers of over 4300 digits; either was a 500 and a traceback.
    if offset is not None and not OFFSET.fullmatch(offset):
        return _error(400, "offset must be a byte count")
    info = request.match_info
    return _json(await _call(request, runpage.read_log, info["run_id"], info["name"],
                             None if offset is None else int(offset)))  # fmt: skip


async def run_file(request: web.Request) -> web.Response:
    relative = request.match_info["path"]
    body = await _call(request, runpage.read_file, request.match_info["run_id"], relative)
    name = relative.rsplit("/", 1)[-1]
    if name.endswith(".json"):
        content_type = "application/json"
    elif name.endswith(TEXT_SUFFIXES):
        content_type = "text/plain"
    else:
        content_type = "application/octet-stream"
    download = "download" in request.query or content_type == "application/octet-stream"
    disposition = f'{"attachment" if download else "inline"}; filename="{name}"'
    return web.Response(
        body=body, content_type=content_type, charset="utf-8" if "text" in content_type else None,
        headers={"Content-Disposition": disposition, "Content-Security-Policy": FILE_CSP},
    )  # fmt: skip


async def studies(request: web.Request) -> web.Response:
    return _json(await _call(request, reports.list_studies))


async def study(request: web.Request) -> web.Response:
    """A study's report; `?group=KEY`: its series by that configuration key's value."""
    group_by = request.query.get("group") or None

    def page(root: Path, study_id: str) -> dict[str, Any]:
        record = reports.load_study_record(root, study_id)
        runs, problems = reports.load_results(root, record.run_ids)
        return views.study_page(record, runs, problems, group_by)

    return _json(await _call(request, page, request.match_info["study_id"]))


async def compare(request: web.Request) -> web.Response:
    run_ids = _run_ids(request)

    def page(root: Path) -> dict[str, Any]:
        rows = [data.run_row(root, run_id) for run_id in run_ids]
        runs, problems = reports.load_results(root, run_ids)
        return {**views.comparison(rows, runs), "problems": problems}

    return _json(await _call(request, page))


def _run_ids(request: web.Request) -> list[str]:
    run_ids = list(dict.fromkeys(request.query.getall("run", [])))
    if len(run_ids) > MAX_RUNS_PER_REQUEST:
        raise web.HTTPBadRequest(text=f"at most {MAX_RUNS_PER_REQUEST} runs at a time")
    for run_id in run_ids:
        data.run_path(request.app[CONFIG_KEY].results_dir, run_id)  # NotFound: 404
    return run_ids


async def stream(request: web.Request) -> web.StreamResponse:
    """Server-sent events: `?table=1` the runs table's version, `run=ID` (repeatable) runs'
    headers and curves, `log=ID/NAME` one log; see runner.dashboard.live for the messages."""
    feeds = await asyncio.to_thread(_feeds, request)
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache"})  # fmt: skip
    await response.prepare(request)
    closing, poll_s = request.app[CLOSING_KEY], request.app[CONFIG_KEY].poll_s
    last_sent = time.monotonic()
    while not closing.is_set():
        messages = await asyncio.to_thread(live.poll_all, feeds)
        chunks = [_event(name, payload) for name, payload in messages]
        if not chunks and time.monotonic() - last_sent > HEARTBEAT_S:
            chunks = [b": keep-alive\n\n"]
        try:
            for chunk in chunks:
                await response.write(chunk)
        except ConnectionError:  # the page went away
            break
        last_sent = time.monotonic() if chunks else last_sent
        await _sleep_unless(closing, poll_s)
    return response


def _feeds(request: web.Request) -> list[live.Feed]:
    root = request.app[CONFIG_KEY].results_dir
    feeds: list[live.Feed] = []
    if request.query.get("table"):
        feeds.append(live.TableFeed(request.app[TABLE_KEY]))
    feeds += [live.RunFeed(root, run_id) for run_id in _run_ids(request)]
    if "log" in request.query:
        run_id, _, name = request.query["log"].partition("/")
        data.run_path(root, run_id)
        feeds.append(live.LogFeed(root, run_id, name))
    return feeds


def _event(name: str, payload: Any) -> bytes:
    text = json.dumps(_finite(payload), allow_nan=False, separators=(",", ":"))
    return f"event: {name}\ndata: {text}\n\n".encode()  # JSON has no raw newlines


async def _sleep_unless(event: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)


ROUTES: tuple[tuple[str, Callable[[web.Request], Awaitable[web.StreamResponse]]], ...] = (
    ("/api/runs", runs),
    ("/api/keys", shared_keys),
    ("/api/runs/{run_id}", run),
    ("/api/runs/{run_id}/curves", run_curves),
    ("/api/runs/{run_id}/logs/{name}", run_log),
    ("/api/runs/{run_id}/files/{path:.+}", run_file),
    ("/api/studies", studies),
    ("/api/studies/{study_id}", study),
    ("/api/compare", compare),
    ("/api/stream", stream),
)


# ---- running it ---------------------------------------------------------------------------


async def start(config: DashboardConfig) -> tuple[web.AppRunner, str]:
    """Serve on the configured address; the runner (cleanup() stops it) and the base URL.
    OSError when the address cannot be bound (the port is taken)."""
    # Streams end at shutdown (on_shutdown sets CLOSING_KEY); the timeout bounds the rest.
    runner = web.AppRunner(make_app(config), access_log=None, shutdown_timeout=2.0)
    await runner.setup()
    site = web.TCPSite(runner, config.host, config.port)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    host, port = runner.addresses[0][:2]
    shown = f"[{host}]" if ":" in host else host
    return runner, f"http://{shown}:{port}/"


def serve(config: DashboardConfig, on_ready: Callable[[str], None]) -> None:
    """Serve until interrupted (KeyboardInterrupt reaches the caller, after cleanup)."""

    async def main() -> None:
        runner, url = await start(config)
        on_ready(url)
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    asyncio.run(main())
