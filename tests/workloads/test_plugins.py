"""Extension points: registration, clashes, entry points, --plugin loading, provenance."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from contract.imageplugins import ImagePlugin, package_files, source_sha256
from runner.cli import main
from runner.errors import SpecError
from runner.job.spec import JobSpec, resolve, workload_args, workload_argv
from tests.workloads.plugin_packages import (
    BENCHMARK_FOLDER,
    isolated_registries,
    write_dist_info,
    write_package,
)
from workloads.configuration.train_config import TrainConfig
from workloads.plugins import loading, points, provenance
from workloads.plugins.registry import PluginError, Registry
from workloads.strategies.config import PlainStrategy

TOPK = """
    from dataclasses import dataclass
    from typing import Literal
    from workloads.plugins import points
    from workloads.strategies.config import StrategyConfig


    @points.STRATEGIES.register
    @dataclass(frozen=True, kw_only=True)
    class MyConfig(StrategyConfig):
        name: Literal["{name}"] = "{name}"

        def build(self, model, clock, comm, seed, monitor=None):
            from workloads.strategies.gradients import flat_all_reduce
            return flat_all_reduce(model, comm)
"""


@pytest.fixture
def plugin_root(tmp_path):
    with isolated_registries(tmp_path):
        yield tmp_path


def test_every_built_in_registers_through_the_points_and_says_so():
    for registry in points.POINTS:
        entries = registry.entries()
        assert entries, registry.point
        for entry in entries.values():  # installed plugins (make test's example) are not
            assert entry.built_in == entry.module.startswith(("workloads.", "runner.")), entry
    assert "ddp" in points.STRATEGIES.names() and "cnn-digits" in points.BENCHMARKS.names()
    assert set(TrainConfig.CHOICES["strategy"].names()) == set(points.STRATEGIES.names())


def test_a_plugin_taking_a_built_in_name_is_refused_naming_both(plugin_root):
    write_package(plugin_root, "clash", {"__init__.py": TOPK.format(name="ddp")})
    with pytest.raises(PluginError) as err:
        loading.load(str(plugin_root / "clash"))
    message = str(err.value)
    assert "'ddp' is registered twice, by built in" in message
    assert str(plugin_root / "clash") in message and "\n" not in message
    assert points.STRATEGIES.get("ddp") is PlainStrategy  # the built-in is untouched


def test_a_wrong_type_or_signature_is_refused_when_registered(plugin_root):
    wrong = TOPK.format(name="x").replace(
        "def build(self, model, clock, comm, seed, monitor=None)", "def build(self, model)"
    )
    write_package(plugin_root, "badsig", {"__init__.py": wrong})
    with pytest.raises(PluginError, match=r"has build\(model\); StrategyConfig.build takes"):
        loading.load(str(plugin_root / "badsig"))
    with pytest.raises(PluginError, match="is not a subclass of OptimizerConfig"):
        points.OPTIMIZERS.register(PlainStrategy)


def test_a_plugin_that_fails_to_import_is_one_line_naming_it(plugin_root):
    (plugin_root / "broken.py").write_text("import no_such_module_anywhere\n")
    with pytest.raises(PluginError) as err:
        loading.load(str(plugin_root / "broken.py"))
    assert str(err.value) == (
        f"plugin {plugin_root / 'broken.py'}: import failed: ModuleNotFoundError: "
        "No module named 'no_such_module_anywhere'"
    )
    with pytest.raises(PluginError, match="no such Python file or directory"):
        loading.load(str(plugin_root / "absent.py"))


def test_installed_entry_points_register_with_their_distribution(plugin_root, monkeypatch):
    write_package(plugin_root, "mystrat", {"__init__.py": TOPK.format(name="mine")})
    write_dist_info(plugin_root, "my-strat", "1.2.3", """
        [stackbench.things]
        mine = mystrat:MyConfig
    """)  # fmt: skip
    monkeypatch.syspath_prepend(str(plugin_root))
    # A point of its own: the entry point is read the first time the point is.
    things: Registry[type] = Registry("things", points._literal_names, lambda obj: None, ())
    entry = things.entries()["mine"]
    assert entry.origin == "my-strat==1.2.3" and entry.package == "mystrat"


def test_an_entry_point_that_cannot_load_names_its_distribution(plugin_root, monkeypatch):
    write_dist_info(plugin_root, "bad-dist", "0.1", """
        [stackbench.things]
        gone = not_a_module:Thing
    """)  # fmt: skip
    monkeypatch.syspath_prepend(str(plugin_root))
    things: Registry[type] = Registry("things", points._literal_names, lambda obj: None, ())
    with pytest.raises(PluginError, match=r"^plugin bad-dist==0.1: entry point gone = "
                       r"not_a_module:Thing \(stackbench.things\) failed to load: "
                       r"ModuleNotFoundError"):  # fmt: skip
        things.entries()


def test_a_run_with_a_plugin_is_open_division_and_records_it(plugin_root):
    package = write_package(plugin_root, "mine", {"__init__.py": TOPK.format(name="mine")})
    spec = resolve("cnn-digits", ["strategy=mine"], plugins=[str(package)])
    assert spec.division == "open" and "plugin mine" in spec.open_keys
    (record,) = spec.plugins
    assert record.name == "mine" and record.version is None and record.load == str(package)
    assert workload_args(spec, "/out")[-4:] == [
        "--plugin", str(package), "--expect-plugin", f"mine={record.source_sha256}"
    ]  # fmt: skip
    # The hash is of the source: one byte more and it differs.
    before = record.source_sha256
    (package / "__init__.py").write_text((package / "__init__.py").read_text() + "\n")
    assert provenance.source_hash("mine") != before


def test_a_plugin_the_run_does_not_use_is_refused(plugin_root):
    package = write_package(plugin_root, "unused", {"__init__.py": TOPK.format(name="unused")})
    with pytest.raises(SpecError, match="registers nothing this run uses"):
        resolve("cnn-digits", [], plugins=[str(package)])


def test_a_benchmark_folder_registers_model_data_and_benchmark(plugin_root):
    write_package(plugin_root, "blobsbench", BENCHMARK_FOLDER)
    loading.load(str(plugin_root / "blobsbench"))
    spec = resolve("blobs-mlp")
    assert spec.division == "open"
    assert [r.name for r in spec.plugins] == ["blobsbench"]
    # Loaded before resolving (runner --plugin PATH sweep ...): its workers load it too.
    assert spec.plugins[0].load == str(plugin_root / "blobsbench")
    assert points.MODELS.entry("tiny-mlp").origin == str(plugin_root / "blobsbench")
    config = dataclasses.replace(spec.config)
    assert type(config.data).__name__ == "BlobsData"


def _centers_archive(where: Path) -> tuple[str, str]:
    """A real .tar.gz holding blobs/centers.txt: its file:// URL and SHA-256."""
    archive = where / "blobs-centers.tar.gz"
    (where / "blobs").mkdir()
    (where / "blobs" / "centers.txt").write_text("0 0 0 0\n4 4 4 4\n-4 4 -4 4\n")
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(where / "blobs", arcname="blobs")
    return archive.as_uri(), hashlib.sha256(archive.read_bytes()).hexdigest()


def test_a_benchmark_folder_declares_its_data_source_and_runner_data_fetch_gets_it(plugin_root):
    """The data set's fetch source (URL, checksum, how it is prepared) is the folder's own
    data.py: `runner --plugin FOLDER data fetch blobs` downloads, verifies and unpacks it, and
    refuses the archive in one line once it is not the one whose checksum was declared."""
    (plugin_root / "served").mkdir()
    url, sha256 = _centers_archive(plugin_root / "served")
    folder = write_package(plugin_root, "blobsbench", BENCHMARK_FOLDER,
                           {"CENTERS_URL": url, "CENTERS_SHA256": sha256})  # fmt: skip
    data = plugin_root / "data"
    fetch = ["--plugin", str(folder), "data", "fetch", "blobs", "--dir", str(data)]
    result = CliRunner().invoke(main, fetch)
    assert result.exit_code == 0, result.output
    assert (data / "blobs" / "centers.txt").read_text().startswith("0 0 0 0")
    assert (data / "downloads" / "blobs-centers.tar.gz").is_file()
    # Changed where it is published: the declared checksum refuses it, in one line.
    with tarfile.open(plugin_root / "served" / "blobs-centers.tar.gz", "w:gz") as tar:
        tar.add(plugin_root / "served" / "blobs" / "centers.txt", arcname="blobs/centers.txt")
    result = CliRunner().invoke(main, [*fetch, "--force"])
    assert result.exit_code == 1 and "does not match the published" in result.output
    assert "Traceback" not in result.output


def test_the_installed_example_lists_its_entries_with_its_version():
    """make test installs examples/stackbench-example (pip install -e): its entry points."""
    entry = points.STRATEGIES.entry("topk")
    if entry is None:
        pytest.skip("the example plugin is not installed: make test installs it (pip install "
                    "--no-deps -e examples/stackbench-example)")  # fmt: skip
    assert entry.origin == "stackbench-example==0.1.0"
    assert points.OPTIMIZERS.entry("lamb").origin == entry.origin
    assert points.POLICIES.entry("noise-lr").origin == entry.origin


def test_a_project_folder_with_one_package_loads_it(plugin_root):
    project = plugin_root / "project"
    write_package(project / "src", "inner", {"__init__.py": TOPK.format(name="inner")})
    assert loading.load(str(project)) == "inner"
    assert "inner" in points.STRATEGIES.names()


def _submit_to_a_cluster(root: Path, *extra: str):
    """`runner submit --dry-run` of a run with plugin `mine` to a cluster made elsewhere (a
    kubeconfig naming a server nobody answers at: a dry run renders without calling it)."""
    package = write_package(root, "mine", {"__init__.py": TOPK.format(name="mine")})
    kubeconfig = root / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\nusers: [{name: u, user: {}}]\n"
    )
    return CliRunner().invoke(main, [
        "--results-dir", str(root / "results"), "submit", "cnn-digits", "--dry-run",
        "--kubeconfig", str(kubeconfig), "--image", "reg.example/sb@sha256:" + "a" * 64,
        "--plugin", str(package), "--set", "strategy=mine", *extra,
    ])  # fmt: skip


def contract_hash(package: Path) -> str:
    return source_sha256(package_files(package))


def _image_list(root: Path, sha256: str) -> Path:
    """An image's plugins.json (contract/imageplugins.py), as infra/image.py writes it."""
    path = root / "plugins.json"
    plugin = ImagePlugin("mine", None, sha256, "mine")
    path.write_text(json.dumps([plugin.to_dict()]))
    return path


def test_a_run_with_a_plugin_is_not_sent_to_an_image_not_known_to_carry_it(plugin_root):
    """Nothing says what the image carries: refused before anything is submitted."""
    result = _submit_to_a_cluster(plugin_root)
    assert result.exit_code == 1, result.output
    assert "nothing says that the training image of kubeconfig" in result.output
    assert "--image-plugins FILE" in result.output
    assert "mine (sha256 " in result.output and "Traceback" not in result.output


def test_a_run_with_a_plugin_is_refused_for_an_image_with_other_code_of_it(plugin_root):
    result = _submit_to_a_cluster(plugin_root, "--image-plugins",
                                  str(_image_list(plugin_root, "0" * 64)))  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "does not carry plugin mine" in result.output
    assert "carries: mine (sha256 000000000000)" in result.output


def test_a_run_with_a_plugin_goes_to_an_image_that_carries_it_and_the_job_says_which(
    plugin_root,
):
    """The job loads the plugin as the image installs it (a module, not this machine's
    path), its workers check the hash, and the rendered job names plugin and hash."""
    write_package(plugin_root / "copy", "mine", {"__init__.py": TOPK.format(name="mine")})
    sha256 = contract_hash(plugin_root / "copy" / "mine")  # the same files: the same hash
    result = _submit_to_a_cluster(plugin_root, "--image-plugins",
                                  str(_image_list(plugin_root, sha256)))  # fmt: skip
    assert result.exit_code == 0, result.output
    assert f"stackbench.io/plugins: mine={sha256}" in result.output
    lines = [line.strip() for line in result.output.splitlines()]
    at = lines.index("- --plugin")
    assert lines[at + 1 : at + 4] == ["- mine", "- --expect-plugin", f"- mine={sha256}"]
    assert str(plugin_root) not in result.output  # no path of this machine reaches the pods


def test_the_plugin_at_fault_is_found_on_the_stack_and_named(plugin_root):
    write_package(plugin_root, "mine", {
        "__init__.py": TOPK.format(name="mine"),
        "boom.py": "def explode():\n    raise ValueError('bad')\n",
    })  # fmt: skip
    loading.load(str(plugin_root / "mine"))
    from mine.boom import explode  # type: ignore[import-not-found]

    with pytest.raises(ValueError) as theirs:
        explode()
    assert provenance.plugin_at_fault(theirs.value.__traceback__) == "mine"
    with pytest.raises(KeyError) as ours:  # raised by our code: no plugin to blame
        points.STRATEGIES.get("nothing-of-that-name")
    assert provenance.plugin_at_fault(ours.value.__traceback__) is None
    # What a diverged or hung run's line names: the plugins its config uses.
    config = resolve("cnn-digits", ["strategy=mine"], plugins=[str(plugin_root / "mine")]).config
    assert provenance.used_plugin_names(config, "cnn-digits") == ["mine"]
    assert provenance.used_plugin_names(resolve("cnn-digits").config, "cnn-digits") == []


def test_reading_a_job_never_imports_the_plugin_path_it_names(tmp_path):
    """job.json may be hostile: the path in it is not imported; the error says how to load
    the plugin by hand, and once loaded the job reads back."""
    code = TOPK.format(name="mine") + "\nopen(__file__ + '.imported', 'w').close()\n"
    with isolated_registries(tmp_path):
        package = write_package(tmp_path, "mine", {"__init__.py": code.replace("\n    ", "\n")})
        data = resolve("cnn-digits", ["strategy=mine"], plugins=[str(package)]).to_dict()
    marker = package / "__init__.py.imported"
    marker.unlink()
    with pytest.raises(ValueError, match=f"not loaded .*: runner --plugin {package} COMMAND"):
        JobSpec.from_dict(data)
    assert not marker.exists()
    with isolated_registries(tmp_path):
        loading.load(str(package))
        assert JobSpec.from_dict(data).config.strategy.name == "mine"


def test_a_worker_whose_plugin_is_other_code_than_the_job_expects_ends_in_one_line(plugin_root):
    """The pod's own check (workloads/training/launch.py, --expect-plugin): a real worker
    process whose plugin's files differ from the hash the job was checked against stops
    before training."""
    package = write_package(plugin_root, "mine", {"__init__.py": TOPK.format(name="mine")})
    spec = resolve("cnn-digits", ["strategy=mine"], plugins=[str(package)])
    argv = workload_argv(spec, str(plugin_root / "out"))
    assert argv[argv.index("--expect-plugin") + 1] == f"mine={contract_hash(package)}"
    argv[argv.index("--expect-plugin") + 1] = "mine=" + "0" * 64  # the image's file changed
    env = {"PATH": os.environ["PATH"], "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}  # fmt: skip  # never reached
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines() == [
        "stackbench: plugin mine: the job expects source sha256 000000000000, but here it is "
        f"sha256 {contract_hash(package)[:12]}; rebuild the image or run --local"
    ]
    assert "Traceback" not in proc.stderr


def test_a_sweep_with_a_plugin_is_refused_for_an_image_not_known_to_carry_it(plugin_root):
    """A sweep's runs are checked as submit's are, before the study is written."""
    package = write_package(plugin_root, "mine", {"__init__.py": TOPK.format(name="mine")})
    kubeconfig = plugin_root / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\nusers: [{name: u, user: {}}]\n"
    )
    result = CliRunner().invoke(main, [
        "--results-dir", str(plugin_root / "results"), "--plugin", str(package), "sweep",
        "cnn-digits", "--workers", "1,2", "--kubeconfig", str(kubeconfig),
        "--image", "reg.example/sb@sha256:" + "a" * 64, "--set", "strategy=mine",
    ])  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "nothing says that the training image of kubeconfig" in result.output
    assert not (plugin_root / "results").exists() or not any((plugin_root / "results").iterdir())
