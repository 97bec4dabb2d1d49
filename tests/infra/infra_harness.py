"""Run the real Pulumi program (the project root's __main__.py) for a stack under Pulumi mocks.

`evaluate(stack)` does what `pulumi up --stack NAME` hands the program: the Pulumi.yaml
defaults overlaid with stacks/Pulumi.NAME.yaml (every value a string, lists as JSON, keys
`stackbench:KEY`; contract/stackconfig/stackfiles.py reads them), then runs the program exactly
as the Python language host does (`run_in_stack(runpy.run_path(<project root>))`, which puts the
root on sys.path for the run). The recording monitor keeps every registered resource with its
options (provider, parent, deletedWith) and the stack outputs as the engine receives them,
secrets marked. Mocks answer with plausible cloud outputs. Pulumi's runtime state is
process-global: each evaluation resets the root stack and config first.
"""

from __future__ import annotations

import asyncio
import runpy
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import yaml
from google.protobuf import json_format
from infra_mocks import CloudMocks
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import settings
from pulumi.runtime.proto import resource_pb2
from pulumi.runtime.stack import run_in_stack
from pulumi.runtime.sync_await import _sync_await

from contract.stackconfig.stackfiles import STACKS_DIR, as_cli_string, cli_values
from contract.stackconfig.stackfiles import stack_names as _stack_names

REPO = Path(__file__).resolve().parents[2]
SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"
SIG_KEY = "4dabf18193072939515e22adb298388d"
# What an operator sets before `pulumi up` on a cloud stack (the files leave it to them).
OPERATOR_CIDR = "198.51.100.7/32"


def stack_names() -> list[str]:
    return _stack_names(REPO)


def project_schema() -> dict[str, dict[str, Any]]:
    return yaml.safe_load((REPO / "Pulumi.yaml").read_text())["config"]


def stack_file_config(stack: str) -> dict[str, Any]:
    return yaml.safe_load((REPO / STACKS_DIR / f"Pulumi.{stack}.yaml").read_text())["config"]


def cli_config(stack: str, overrides: dict[str, Any] | None = None) -> dict[str, str]:
    """The config map the CLI gives the program: schema defaults < stack file < overrides,
    with an operator's address in apiAllowedCidrs where the stack file leaves it empty."""
    values = {f"stackbench:{key}": value for key, value in cli_values(REPO, stack).items()}
    if values["stackbench:provider"] != "kind" and values["stackbench:apiAllowedCidrs"] == "[]":
        values["stackbench:apiAllowedCidrs"] = as_cli_string([OPERATOR_CIDR])
    values |= {key: as_cli_string(v) for key, v in (overrides or {}).items()}
    return values


@dataclass(frozen=True)
class Secret:
    value: Any


@dataclass
class Registered:
    type: str
    name: str
    urn: str
    inputs: dict[str, Any]
    custom: bool
    remote: bool
    provider: str  # "urn::id" of the explicit provider, "" for the default one
    providers: dict[str, str]  # package -> provider ref, as remote components receive them
    parent: str
    deleted_with: str
    dependencies: list[str]
    delete_before_replace: bool


@dataclass
class Evaluation:
    stack: str
    resources: list[Registered] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)

    def of_type(self, type_: str) -> list[Registered]:
        return [r for r in self.resources if r.type == type_]

    def one(self, type_: str, name_suffix: str = "") -> Registered:
        found = [r for r in self.of_type(type_) if r.name.endswith(name_suffix)]
        assert len(found) == 1, f"expected one {type_} *{name_suffix}, got {len(found)}"
        return found[0]

    def by_urn(self, urn: str) -> Registered:
        return next(r for r in self.resources if r.urn == urn)

    def value(self, name: str) -> Any:
        """An output's plain value (secret or not)."""
        out = self.outputs[name]
        return out.value if isinstance(out, Secret) else out


def _unwrap(value: Any) -> Any:
    if isinstance(value, dict):
        if value.get(SIG_KEY) == SECRET_SIG:
            return Secret(_unwrap(value.get("value")))
        return {k: _unwrap(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unwrap(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)  # protobuf Struct numbers are doubles
    return value


class RecordingMonitor(pulumi_mocks.MockMonitor):
    """MockMonitor that records options and stack outputs, without resource references.

    Resource references are turned off: with them, passing one IAM role to two remote
    components (eks.Cluster and eks.ManagedNodeGroup) deadlocks the mock engine.
    """

    def __init__(self, mocks: pulumi_mocks.Mocks, evaluation: Evaluation):
        super().__init__(mocks)
        self.evaluation = evaluation
        self._thread_loops: list[asyncio.AbstractEventLoop] = []
        self._lock = threading.Lock()

    def RegisterResource(self, request):
        self._thread_loop()
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            inputs = json_format.MessageToDict(request.object)
            self.evaluation.resources.append(
                Registered(
                    type=request.type,
                    name=request.name,
                    urn=response.urn,
                    inputs=_unwrap(inputs),
                    custom=request.custom,
                    remote=request.remote,
                    provider=request.provider,
                    providers=dict(request.providers),
                    parent=request.parent,
                    deleted_with=request.deletedWith,
                    dependencies=list(request.dependencies),
                    delete_before_replace=request.deleteBeforeReplace,
                )
            )
        return response

    def Invoke(self, request):
        self._thread_loop()
        return super().Invoke(request)

    def ReadResource(self, request):
        self._thread_loop()
        return super().ReadResource(request)

    def _thread_loop(self) -> None:
        """MockMonitor's Invoke, ReadResource and RegisterResource make an event loop for each
        thread of Pulumi's pool that they run on and never close it: the loop and its two
        sockets were left to the garbage collector, whose ResourceWarnings then failed
        whichever later test turned warnings into errors. The loop is made here instead, and
        closed with the evaluation."""
        if threading.current_thread() is threading.main_thread():
            return  # the main thread's loop is the test's (conftest.py)
        policy = asyncio.get_event_loop_policy()
        try:
            current = policy.get_event_loop()
        except RuntimeError:  # none yet on this thread
            current = None
        if current is not None and not current.is_closed():
            return
        loop = asyncio.new_event_loop()
        policy.set_event_loop(loop)
        with self._lock:
            self._thread_loops.append(loop)

    def close(self) -> None:
        """Closes the loops made for Pulumi's threads (idle once the program has run)."""
        with self._lock:
            loops, self._thread_loops = self._thread_loops, []
        for loop in loops:
            loop.close()

    def RegisterResourceOutputs(self, request):
        if request.urn.split("::")[2] == "pulumi:pulumi:Stack":
            self.evaluation.outputs = _unwrap(json_format.MessageToDict(request.outputs))
        return super().RegisterResourceOutputs(request)

    def SupportsFeature(self, request):
        if request.id == "resourceReferences":
            return type("SupportsFeatureResponse", (), {"hasSupport": False})
        return super().SupportsFeature(request)

    def GetDeploymentInfo(self, request):
        info = super().GetDeploymentInfo(request)
        features = [
            f
            for f in info.supportedFeatures
            if f != resource_pb2.RESOURCE_MONITOR_FEATURE_RESOURCE_REFERENCES
        ]
        return resource_pb2.DeploymentInfo(supportedFeatures=features)


def evaluate(
    stack: str, overrides: dict[str, Any] | None = None, record: list | None = None
) -> Evaluation:
    """Run infra/__main__.py for one stack file under mocks; raises what the program raises.

    `record`, when given, is the list the resources are recorded into, so a caller still
    sees what was registered when the program raises.
    """
    evaluation = Evaluation(stack, resources=record if record is not None else [])
    monitor = RecordingMonitor(CloudMocks(), evaluation)
    pulumi.runtime.set_mocks(
        monitor.mocks, project="stackbench", stack=stack, preview=False, monitor=monitor
    )
    settings.ROOT.set(None)  # run_in_stack makes the root Stack, as the language host does
    pulumi.runtime.set_all_config(cli_config(stack, overrides))
    program = str(REPO)
    try:
        _sync_await(run_in_stack(lambda: runpy.run_path(program, run_name="__main__")))
    finally:
        monitor.close()
    return evaluation


_EVALUATED: dict[str, Evaluation] = {}


def evaluated(stack: str) -> Evaluation:
    """The stack's evaluation at its stack file's own settings, made once per process and
    shared by every test that only reads it (a few seconds each)."""
    if stack not in _EVALUATED:
        _EVALUATED[stack] = evaluate(stack)
    return _EVALUATED[stack]
