"""A stack's settings as `runner cost` and `runner teardown` read them
(contract/stackconfig/stackfiles.py, through the program's own parser), every way they can be
wrong turned into one line.

Wrong settings are the user's to fix (a typo in --stack, an edited stack file), so they are a
StackSettingsError, which the CLI reports as bad input to --stack (exit 2); a caller that
lists many runs (`runner report`) catches it as the RunnerError it also is.
"""

from __future__ import annotations

from pathlib import Path

from contract.stackconfig import stackfiles
from contract.stackconfig.config import ConfigError, StackConfig
from runner.errors import RunnerError


class StackSettingsError(RunnerError):
    """No settings file for the stack, or one that is unreadable or invalid."""


def has_file(project_dir: Path, stack: str) -> bool:
    try:
        stackfiles.stack_file(project_dir, stack)
    except stackfiles.StackFileError:
        return False
    return True


def load(project_dir: Path, stack: str) -> StackConfig:
    """The stack's validated settings; StackSettingsError naming the problem and the fix."""
    import yaml  # the caller has checked it is installed (`require`)

    try:
        return stackfiles.load(project_dir, stack)
    except stackfiles.StackFileError as err:
        raise StackSettingsError(str(err)) from None
    except ConfigError as err:
        raise StackSettingsError(f"stack {stack!r} has an invalid setting: {err}") from None
    except yaml.YAMLError as err:  # a damaged or hand-edited file
        where = getattr(err, "problem_mark", None)
        line = f", line {where.line + 1}" if where is not None else ""
        raise StackSettingsError(
            f"{_unparsable(project_dir, stack)} is not valid YAML{line} "
            f"({getattr(err, 'problem', None) or err}); fix it, or set values with "
            f"`pulumi config set KEY VALUE --stack {stack}`"
        ) from None
    except (OSError, UnicodeDecodeError) as err:
        raise StackSettingsError(f"cannot read the settings of stack {stack!r}: {err}") from None


def _unparsable(project_dir: Path, stack: str) -> Path:
    """Which of Pulumi.yaml and the stack's file YAML refuses (the error does not say)."""
    import yaml

    try:
        yaml.safe_load((project_dir / "Pulumi.yaml").read_text())
    except yaml.YAMLError:
        return project_dir / "Pulumi.yaml"
    return stackfiles.stack_file(project_dir, stack)  # it exists: load() got past it
