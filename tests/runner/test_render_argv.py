"""The workload's command line in a rendered job: its config reaches the container exactly as
recorded, whatever `$(...)` it holds, through a port of Kubernetes' own $(VAR) expansion."""

from __future__ import annotations

import json

import pytest

from runner.backends.kubernetes.render import render
from runner.job.spec import Placement, resolve, workload_argv
from tests.runner.k8s_helpers import RUN_ID, stack_connection
from tests.runner.manifests import pod_templates


def kubernetes_expand(text: str, env: dict[str, str]) -> str:
    """What the kubelet makes of a container's command and args: Kubernetes' $(VAR) expansion
    (k8s.io/kubernetes third_party/forked/golang/expansion, Expand), ported line for line:
    `$$` is a literal `$`, `$(NAME)` the variable's value when it is defined, left as it is
    when it is not, and `$` before anything else stays."""
    out, checkpoint, cursor = [], 0, 0
    while cursor < len(text):
        if text[cursor] == "$" and cursor + 1 < len(text):
            out.append(text[checkpoint:cursor])
            rest = text[cursor + 1 :]
            if rest[0] == "$":
                out.append("$")
                advance = 1
            elif rest[0] == "(" and ")" in rest:
                name = rest[1 : rest.index(")")]
                out.append(env.get(name, f"$({name})"))
                advance = rest.index(")") + 1
            elif rest[0] == "(":
                out.append("$(")
                advance = 1
            else:
                out.append("$" + rest[0])
                advance = 1
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    return "".join(out) + text[checkpoint:]


def test_the_port_of_kubernetes_expansion_reads_as_upstream_tests_say():
    env = {"VAR_A": "A", "VAR_EMPTY": ""}
    cases = {  # from upstream's expand_test.go
        "$(VAR_A)": "A", "___$(VAR_A)___": "___A___", "$(VAR_EMPTY)": "",
        "$$(VAR_A)": "$(VAR_A)", "$$$(VAR_A)": "$A", "$(VAR_DNE)": "$(VAR_DNE)",
        "$$$$$$(BIG_MONEY)": "$$$(BIG_MONEY)", "$(VAR_A": "$(VAR_A", "$VAR_A": "$VAR_A",
        "f000-$$VAR_A": "f000-$VAR_A", "$": "$", "$$": "$", "$$$": "$$",
    }  # fmt: skip
    assert {text: kubernetes_expand(text, env) for text in cases} == cases


@pytest.mark.parametrize(
    ("job_api", "elastic"), [("trainjob", False), ("pytorchjob", False), ("pytorchjob", True)]
)
def test_the_workload_gets_its_config_as_recorded_whatever_dollars_it_holds(job_api, elastic):
    """A --set value travels in the container's args (or command), where the kubelet expands
    $(VAR) from the container's environment and turns $$ into $: unescaped, the workload would
    run with another config than job.json records, and a different one on every node."""
    data_dir = "/data/$(RANK)/$(PET_NODE_RANK)/$(TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE)/a$$b$"
    placement = Placement(
        num_nodes=2, procs_per_node=1, device="cpu", min_workers=1 if elastic else None
    )
    overrides = [
        f"data_dir={data_dir}",
        *(["strategy=allreduce", "compile_model=false"] if elastic else []),
    ]
    spec = resolve("resnet20-cifar10", overrides, placement, run_id=RUN_ID)
    manifest = render(spec, stack_connection(job_api))
    if job_api == "trainjob":
        container = manifest["spec"]["trainer"]
    else:
        container = next(iter(pod_templates(manifest)))["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    env |= {"RANK": "1", "PET_NODE_RANK": "1", "MASTER_ADDR": "job-master-0"}  # the operators'
    argv = container.get("args") or container["command"]
    expanded = [kubernetes_expand(arg, env) for arg in argv]
    config = json.loads(expanded[expanded.index("--config") + 1])
    assert config["data"]["data_dir"] == data_dir == spec.config.to_dict()["data"]["data_dir"]
    assert expanded == workload_argv(spec, output_dir=f"/results/{RUN_ID}", python="python")
