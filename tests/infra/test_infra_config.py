"""StackConfig validation: the schema in Pulumi.yaml, the parser, and fuzzed invalid configs.

Every invalid value must raise a ConfigError naming its key and a `pulumi config set` fix,
and the real program run on it must fail before registering a single resource.
"""

from __future__ import annotations

import re
import shlex
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from infra_harness import REPO, cli_config, evaluate, project_schema, stack_names

from contract.stackconfig import stackfiles
from contract.stackconfig.config import (
    KEYS,
    ConfigError,
    StackConfig,
    check_deployable,
    gke_account_id,
    parse_stack_config,
)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
ROOT = "/repo"


def raw_config(stack: str, **changes: str) -> dict[str, str]:
    values = {k.removeprefix("stackbench:"): v for k, v in cli_config(stack).items()}
    return values | changes


def parse(stack: str, **changes: str) -> StackConfig:
    return parse_stack_config(raw_config(stack, **changes), stack, ROOT)


def validate(stack: str, **changes: str) -> StackConfig:
    """What the program does before any resource: parse, then check it can be deployed."""
    cfg = parse(stack, **changes)
    check_deployable(cfg)
    return cfg


@pytest.mark.parametrize("written", ["/srv/results/", "//srv//results", "/srv/./results/."])
def test_a_results_dir_is_kept_in_the_one_spelling_docker_reports_its_mount_in(written):
    # infra/kind.py tells the stack's own cluster by the mount's source: another spelling of
    # the same folder would take its own leftover cluster for someone else's.
    assert parse("kind", resultsDir=written).results_dir == "/srv/results"


def test_pulumi_yaml_declares_exactly_the_keys_the_parser_reads():
    assert set(project_schema()) == set(KEYS)
    assert all(spec.get("description") for spec in project_schema().values())


def test_only_provider_has_no_default():
    assert [k for k, spec in project_schema().items() if "default" not in spec] == ["provider"]


@pytest.mark.parametrize("stack", stack_names())
def test_every_stack_file_parses(stack):
    cfg = parse(stack)
    assert cfg.stack == stack and cfg.max_nodes >= 1


def test_stack_files_only_set_declared_keys():
    for stack in stack_names():
        keys = {k for k in cli_config(stack) if k.startswith("stackbench:")}
        assert {k.removeprefix("stackbench:") for k in keys} <= set(KEYS), stack


def test_gpu_count_error_names_key_and_fix():
    with pytest.raises(ConfigError) as err:
        parse("gke-a100-1x8", gpusPerNode="4")
    assert err.value.key == "gpusPerNode"
    assert str(err.value) == (
        "stackbench:gpusPerNode must be 8 for nvidia-tesla-a100 on a2-highgpu-8g, got 4; "
        "fix: pulumi config set stackbench:gpusPerNode 8"
    )


def fix_argv(err: ConfigError) -> list[str]:
    """The error's fix as the shell would read it (a stray quote raises ValueError here)."""
    return shlex.split(str(err).split("; fix: ", 1)[1])


def test_list_key_fix_uses_path_syntax():
    with pytest.raises(ConfigError) as err:
        validate("eks-gpu-8", apiAllowedCidrs="[]")
    assert fix_argv(err.value) == [
        "pulumi", "config", "set", "--path", "stackbench:apiAllowedCidrs[0]", "203.0.113.7/32"
    ]  # fmt: skip


def test_an_undeclared_key_is_refused_with_the_key_it_was_meant_to_be():
    """Pulumi hands the program every key of the stack file; one the program does not read
    (a typo) would leave the stack built as if it were not there."""
    with pytest.raises(ConfigError) as err:
        parse_stack_config(raw_config("gke-cpu-16") | {"maxnodes": "3"}, "gke-cpu-16", ROOT)
    assert err.value.key == "maxnodes"
    assert "did you mean maxNodes?" in str(err.value)
    assert fix_argv(err.value) == [
        "pulumi", "config", "rm", "stackbench:maxnodes",
        "&&", "pulumi", "config", "set", "stackbench:maxNodes", "VALUE",
    ]  # fmt: skip


def test_an_undeclared_key_stops_the_program_before_any_resource():
    registered: list = []
    with pytest.raises(ConfigError) as err:
        evaluate("gke-cpu-16", {"stackbench:maxnodes": "3"}, record=registered)
    assert err.value.key == "maxnodes" and registered == []


def test_an_undeclared_key_in_a_stack_file_is_refused_where_the_runner_reads_it(tmp_path):
    (tmp_path / "Pulumi.yaml").write_text((REPO / "Pulumi.yaml").read_text())
    (tmp_path / "stacks").mkdir()
    text = (REPO / "stacks" / "Pulumi.kind.yaml").read_text()
    (tmp_path / "stacks" / "Pulumi.kind.yaml").write_text(text + "  stackbench:spott: true\n")
    with pytest.raises(ConfigError, match=r"stackbench:spott .*did you mean spot\?"):
        stackfiles.load(tmp_path, "kind")


@pytest.mark.parametrize("value", ["1_0", "\u0668", "0x8", "8e0"])
def test_integer_keys_take_only_what_the_cli_calls_an_integer(value):
    with pytest.raises(ConfigError) as err:
        parse("gke-cpu-16", maxNodes=value)
    assert err.value.key == "maxNodes"


@pytest.mark.parametrize(
    "name",
    ["gke-gpu-8-europe-west4-study", "gke-gpu-8-europe-west4-abc", "GKE-gpu", "gke_gpu", "a--b"],
)
def test_a_stack_name_no_cloud_would_take_is_refused_before_any_resource(name):
    """GCP service account ids (sb-<stack>-results) hold 30 characters: a longer name was cut
    short, into an id ending in '-' or one shared by the nodes' and the jobs' accounts; and
    registries, kind and buckets take lowercase names only."""
    with pytest.raises(ConfigError) as err:
        parse_stack_config(raw_config("gke-gpu-8"), name, ROOT)
    assert err.value.key == "stack" and str(err.value).startswith(f"stack name {name!r} ")
    assert "pulumi stack rename" in str(err.value)


@pytest.mark.parametrize("length", range(1, 26))
def test_every_gke_stack_name_taken_gives_two_valid_distinct_account_ids(length):
    name = "gke-gpu-8-europe-west4-ab"[:length].rstrip("-") or "g"
    stack = parse_stack_config(raw_config("gke-gpu-8"), name, ROOT).stack
    ids = {gke_account_id(stack, suffix) for suffix in ("-nodes", "-results")}
    assert len(ids) == 2
    assert all(re.fullmatch(r"[a-z][-a-z0-9]{4,28}[a-z0-9]", i) for i in ids), ids


def test_missing_key_is_named():
    raw = raw_config("kind")
    del raw["provider"]
    with pytest.raises(ConfigError, match=r"stackbench:provider is not set"):
        parse_stack_config(raw, "kind", ROOT)


def test_values_are_typed_and_defaults_resolved():
    cfg = parse("gke-gpu-8", spot="true", apiAllowedCidrs='["10.0.0.0/8"]')
    assert cfg.spot is True and cfg.gpus_per_node == 1 and cfg.api_allowed_cidrs == ("10.0.0.0/8",)
    assert cfg.deletion_protection is True and cfg.api_open_to_internet is False
    assert cfg.system_machine_type == "e2-standard-4" and cfg.image_variant == "cuda"
    assert parse("kind").results_dir == f"{ROOT}/results/.kind-store/kind"


# --- fuzzing: (stack, key, invalid value) -> ConfigError naming that key ---------------------

junk = st.text(string.ascii_letters + string.digits + " -_./[]{}\"'", max_size=12)


def not_in(options):
    return junk.filter(lambda s: s.strip() not in options)


def ints_outside(lo: int, hi: int):
    return st.one_of(st.integers(max_value=lo - 1), st.integers(min_value=hi + 1)).map(str)


def bad_int(lo, hi):
    return st.one_of(
        ints_outside(lo, hi),
        junk.filter(lambda s: not s.strip().lstrip("-").isdigit()),
        st.sampled_from(["1_0", "\u0668", "1.0", "0x1"]),  # Python's int() takes the first two
    )


bad_cidrs = st.one_of(
    junk.filter(lambda s: not s.strip().startswith("[")),
    st.sampled_from(
        ['"10.0.0.0/8"', "{}", "[1]", '["10.0.0.1/8"]', '["::/0"]', '["300.1.1.1/32"]']
    ),
    st.lists(junk.filter(lambda s: "/" not in s), min_size=1, max_size=3).map(
        lambda xs: str(xs).replace("'", '"')
    ),
)
bad_version = junk.filter(lambda s: not re.fullmatch(r"\d+\.\d+\.\d+", s.strip()))

# Invalid whatever the stack: (key, strategy).
ANY_STACK = [
    ("provider", not_in(("kind", "gke", "eks"))),
    ("jobApi", not_in(("trainjob", "pytorchjob"))),
    ("gpuDriverVersion", not_in(("DEFAULT", "LATEST"))),
    ("spot", junk.filter(lambda s: s.strip().lower() not in ("true", "false"))),
    ("systemNodeCount", bad_int(1, 10)),
    ("maxNodes", bad_int(1, 1000)),
    ("gpusPerNode", bad_int(0, 16)),
    ("trainerVersion", bad_version),
    ("trainingOperatorVersion", bad_version),
    ("devicePluginVersion", bad_version),
    ("namespace", st.one_of(st.sampled_from(["", "Bench", "kube-x", "a_b", "-a", "a" * 64]))),
    ("kubernetesVersion", st.sampled_from(["", "1", "1.28", "v1.33", "2.0", "latest", "1.x"])),
]
# Invalid for the cloud stacks.
# Valid CIDRs that reach a /7 or wider: the internet, refused without apiOpenToInternet.
internet = st.integers(0, 7).map(lambda bits: f'["0.0.0.0/{bits}"]')
CLOUD = [
    ("apiAllowedCidrs", bad_cidrs),
    ("apiAllowedCidrs", st.just("[]")),
    ("apiAllowedCidrs", internet),
    ("deletionProtection", junk.filter(lambda s: s.strip().lower() not in ("true", "false"))),
    ("region", st.sampled_from(["", "us", "europe west1", "US-EAST-1", "moon-base-9z"])),
    ("nodeMachineType", st.sampled_from(["", "N1-STANDARD-4", "g5 xlarge", "-x"])),
]
GPU_STACKS = [s for s in stack_names() if raw_config(s)["gpusPerNode"] != "0"]
CLOUD_STACKS = [s for s in stack_names() if raw_config(s)["provider"] != "kind"]


@st.composite
def invalid(draw):
    """A stack file with one key made invalid, and the key the error must name."""
    choice = draw(st.sampled_from(["any", "cloud", "gpu", "kind"]))
    if choice == "any":
        stack = draw(st.sampled_from(stack_names()))
        key, value = draw(
            st.sampled_from(ANY_STACK).flatmap(lambda kv: st.tuples(st.just(kv[0]), kv[1]))
        )
    elif choice == "cloud":
        stack = draw(st.sampled_from(CLOUD_STACKS))
        key, value = draw(
            st.sampled_from(CLOUD).flatmap(lambda kv: st.tuples(st.just(kv[0]), kv[1]))
        )
        if key == "region" and raw_config(stack)["provider"] == "eks":
            value = value.replace("moon-base-9z", "us-central1")  # a GCP region is no AWS one
    elif choice == "gpu":
        stack = draw(st.sampled_from(GPU_STACKS))
        raw = raw_config(stack)
        key = draw(st.sampled_from(["gpusPerNode", "gpuType"]))
        if key == "gpusPerNode":
            value = str(
                draw(st.sampled_from([3, 5, 6, 7, 9, 16]).filter(lambda n: str(n) != raw[key]))
            )
        else:
            value = draw(st.sampled_from(["nvidia-quantum-9000", "nvidia-tesla-k80x", "tpu-v5"]))
    else:
        stack = "kind"
        key, value = draw(
            st.sampled_from(
                [
                    ("resultsDir", "relative/dir"),
                    ("resultsDir", "/"),  # the create hands the folder to the pods' user
                    ("resultsDir", "/home"),
                    ("resultsDir", "/srv/results/../../etc"),
                    ("gpusPerNode", "1"),
                    ("kubernetesVersion", "1.33"),
                    ("maxNodes", "17"),
                ]
            ).map(tuple)
        )
    return stack, key, value


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(invalid())
def test_every_invalid_value_raises_an_error_naming_its_key(case):
    stack, key, value = case
    with pytest.raises(ConfigError) as err:
        validate(stack, **{key: value})
    assert err.value.key == key, (case, str(err.value))
    message = str(err.value)
    assert message.startswith(f"stackbench:{key} ") and "fix: pulumi config set " in message
    argv = fix_argv(err.value)  # a command a shell can run as printed
    assert argv[:3] == ["pulumi", "config", "set"] and argv[-2].startswith(f"stackbench:{key}")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(invalid())
def test_invalid_config_stops_the_program_before_any_resource(case):
    stack, key, value = case
    registered = []
    with pytest.raises(ConfigError) as err:
        evaluate(stack, {f"stackbench:{key}": value}, record=registered)
    assert err.value.key == key
    assert registered == []


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(stack_names()), st.integers(0, 1000), st.integers(1, 1000))
def test_min_nodes_above_max_nodes_is_refused(stack, min_nodes, max_nodes):
    changes = {"minNodes": str(min_nodes), "maxNodes": str(max_nodes)}
    if min_nodes <= max_nodes and (raw_config(stack)["provider"] != "kind" or max_nodes <= 16):
        assert parse(stack, **changes).max_nodes == max_nodes
        return
    with pytest.raises(ConfigError) as err:
        parse(stack, **changes)
    assert err.value.key in ("minNodes", "maxNodes")
