"""The Pulumi program's entry point. Pulumi.yaml names no `main:`, so the Python language host
runs this directory (`runpy.run_path(".")`), which puts it on sys.path: the program is then the
`infra` package, imported like any other (infra/program.py composes it)."""

from infra.program import main

main()
