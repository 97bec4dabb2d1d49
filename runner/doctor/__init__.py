"""`runner doctor`: the steps before a first run, checked on this machine, one line each.

Without a stack, what a local run needs (runner/doctor/local.py); with `--stack S`, every
step of docs/clusters.md from zero to `runner submit --stack S` (runner/doctor/stack.py and,
per provider, clouds.py). Each missing step is named with its fix; nothing is installed or
changed. The checks ask the tools themselves (`pulumi whoami`, `gcloud services list`), so a
test puts its own executables first on PATH.
"""
