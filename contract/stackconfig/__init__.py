"""A stack's settings without Pulumi: the keys of Pulumi.yaml parsed and checked together
(config.py, config_values.py, config_checks.py, catalog.py), the one pool-sizing rule
(pools.py) and the stack files read as `pulumi up` reads them (stackfiles.py).

Below both sides of the stack seam: the Pulumi program (infra/) builds from these, and the
runner prices and guards a stack with them (runner/stack/), so neither imports the other.
Standard library only, except stackfiles.load, which parses YAML (imported when called).
"""
