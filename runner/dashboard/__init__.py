"""`runner dashboard`: a local, read-only web app over the results directory.

    data.py     the one reader of run directories and studies (file names, formats, damage)
    files.py    reading beneath the results directory: no links, no escape, capped, tails
    curves.py   a run's events as chart series, built incrementally
    views.py    the study and comparison pages' payloads, from runner.results
    live.py     what a page's server-sent event stream carries, polled from the files
    server.py   aiohttp: the JSON API, the stream, the page (static/, vendored libraries)

Nothing here is imported by the runner's start-up path: runner/cli/dashboard.py imports the
server only when the command runs.
"""
