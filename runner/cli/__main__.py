"""`python -m runner.cli`: the same as the `runner` command."""

from runner.cli.start import main

main()
