"""`runner doctor --stack S`: every step of docs/clusters.md from zero to `runner submit
--stack S`, checked on this machine in the guide's order.

The stack's settings file and its settings (read as `pulumi up` reads them, through the
program's own parser: contract/stackconfig/config.py), the Pulumi CLI, a login, the stack in
the backend, the `infra` extra in the program's virtualenv (.venv, Pulumi.yaml's runtime), the
runner's `kubernetes` extra, the provider's own tools, credentials, APIs and GPU quota
(runner/doctor/clouds.py), and last whether the stack is up. A step that needs an earlier
one that is missing is not asked (its line says which); nothing is changed anywhere.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from contract.stack import OUTPUT_NAMES
from runner.doctor import clouds
from runner.doctor.checks import Check, ask, missing, passed, tool
from runner.doctor.local import extra, pip_install

PULUMI_INSTALL = "curl -fsSL https://get.pulumi.com | sh (https://www.pulumi.com/docs/install/)"
# What the program imports (pyproject.toml's `infra` extra), per provider.
INFRA_MODULES = ("pulumi", "pulumi_kubernetes", "pulumi_command", "pulumi_docker_build")
PROVIDER_MODULES = {"gke": ("pulumi_gcp",), "eks": ("pulumi_aws", "pulumi_eks"), "kind": ()}
VENV_PYTHON = Path(".venv") / "bin" / "python"  # Pulumi.yaml: runtime.options.virtualenv


def checks(project: Path, stack: str) -> list[Check]:
    cfg, out = _settings(project, stack)
    pulumi = tool("pulumi", ["version"], PULUMI_INSTALL)
    out.append(pulumi)
    if pulumi.ok:
        out += _pulumi_backend(project, stack)
    out.append(_infra_venv(project, cfg.provider if cfg else None))
    out.append(extra("kubernetes"))
    out.append(tool("docker", ["version", "--format", "{{.Server.Version}}"], clouds.DOCKER_FIX,
                    failing=clouds.DOCKER_DOWN))  # fmt: skip
    if cfg is not None:
        out += clouds.checks(cfg, stack)
    out.append(tool("kubectl", ["version", "--client"], clouds.KUBECTL_FIX, optional=True))
    if pulumi.ok and all(c.ok or c.optional for c in out):
        out.append(_deployed(project, stack))
    return out


def _settings(project: Path, stack: str) -> tuple[Any, list[Check]]:
    """The stack's settings as `pulumi up` reads them, and what `up` needs on top of valid
    settings (contract.stackconfig.config.check_deployable: a cloud stack's apiAllowedCidrs)."""
    step, path = "stack settings", f"stacks/Pulumi.{stack}.yaml"
    try:
        from contract.stackconfig.config import ConfigError, check_deployable
        from runner.stack import settings
    except ImportError as err:  # yaml: the kubernetes, report and infra extras bring it
        return None, [missing(step, f"cannot be read: {err}", pip_install("kubernetes"))]
    if not settings.has_file(project, stack):
        fix = f"pulumi stack init {stack}, then cp stacks/Pulumi.kind.yaml {path} (or another)"
        return None, [missing(step, f"no {path}", fix)]
    try:
        cfg = settings.load(project, stack)
    except settings.StackSettingsError as err:
        return None, [missing(step, _without_fix(str(err)), _fix_of(str(err), stack, path))]
    found = passed(step, f"{path}: provider {cfg.provider}, job API {cfg.job_api}")
    try:
        check_deployable(cfg)
    except ConfigError as err:
        return cfg, [found, missing("settings for pulumi up", _without_fix(str(err)),
                                    _fix_of(str(err), stack, path))]  # fmt: skip
    return cfg, [found]


def _without_fix(message: str) -> str:
    return message.rpartition("; fix: ")[0] or message


def _fix_of(message: str, stack: str, path: str) -> str:
    """The fix a settings error names, for this stack (`pulumi config set ... --stack S`)."""
    fix = message.rpartition("; fix: ")[2]
    if not fix or fix == message:
        return f"edit {path}"
    return fix + f" --stack {stack}" if fix.startswith("pulumi config") else fix


def _pulumi_backend(project: Path, stack: str) -> list[Check]:
    whoami = ask(["pulumi", "whoami", "--non-interactive"], cwd=project)
    if not whoami.ok:
        return [
            missing("pulumi logged in", whoami.last_error(),
                    "pulumi login (Pulumi Cloud), or pulumi login --local (state on this disk)"),
        ]  # fmt: skip
    listed = ask(["pulumi", "stack", "ls", "--json", "--non-interactive"], cwd=project)
    names = listed.json()
    known = [str(s.get("name", "")).rpartition("/")[2] for s in names or [] if isinstance(s, dict)]
    if not listed.ok or not isinstance(names, list):
        stack_check = missing("stack in the backend", f"pulumi stack ls: {listed.last_error()}",
                              "pulumi login, then pulumi stack ls")  # fmt: skip
    elif stack not in known:
        stack_check = missing("stack in the backend", f"no stack {stack} in this backend",
                              f"pulumi stack init {stack}")  # fmt: skip
    else:
        stack_check = passed("stack in the backend", f"{stack} exists")
    return [passed("pulumi logged in", whoami.first_line()), stack_check]


def _infra_venv(project: Path, provider: str | None) -> Check:
    """The `infra` extra in the interpreter Pulumi runs the program with (project/.venv)."""
    step = "the infra extra in .venv (the Pulumi program's)"
    python = project / VENV_PYTHON
    fix = f".venv/bin/pip install -c constraints.txt -e '.[infra]' (in {project})"
    if not python.exists():
        return missing(step, f"no {VENV_PYTHON}", "make demo, then " + fix)
    modules = [*INFRA_MODULES, *PROVIDER_MODULES.get(provider or "", ())]
    probe = (
        "import importlib.util, sys\n"
        f"print(' '.join(m for m in {modules!r} if importlib.util.find_spec(m) is None))"
    )
    answer = ask([str(python), "-c", probe], cwd=project)
    if not answer.ok:
        return missing(step, f"{VENV_PYTHON} failed: {answer.last_error()}", "make demo")
    if absent := answer.out.split():
        return missing(step, f"{', '.join(absent)} not installed", fix)
    return passed(step, ", ".join(modules))


def _deployed(project: Path, stack: str) -> Check:
    """Last: the stack is up (its outputs are what the runner reads)."""
    step = "stack deployed"
    answer = ask(["pulumi", "stack", "output", "--json", "--stack", stack], cwd=project)
    outputs = answer.json()
    absent = sorted(set(OUTPUT_NAMES) - set(outputs if isinstance(outputs, dict) else {}))
    if answer.ok and not absent:
        return passed(step, f"every output present: runner submit cnn-digits --stack {stack}")
    why = answer.last_error() if not answer.ok else f"no output {', '.join(absent)} yet"
    return missing(step, why, f"pulumi up --stack {stack}")
