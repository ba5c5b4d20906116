"""The recipe double's pure parts, without root or docker.

The entry point maps the recipe's serve argv onto the bundled engine's documented options, and
every line it prints for an engine event is read by the vllm-recipe profile as that event's phase.
The lab overlay of the example triangle changes only addresses, users and paths: every other
value of the resolved cluster is the example's. The double's checkout tracks the recipe's
classification in sparkgate's release-tests schema, where the example releases read it. The lab's
`runc` lowers only a memlock ask above this machine's limit, for a container being started.
"""

from __future__ import annotations

import io
import json
import os
import resource
import shutil
import subprocess
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import yaml
from sparkengine.metrics import Metrics

from flows.bench.capacity import kv_capacity
from flows.bench.runner import check_context
from flows.cluster.boot.timeline import LogReader
from flows.cluster.lab.hosts import LabPlan, sshd_config_text
from flows.engine_api.metrics import engine_step_times, parse_prometheus, scrape_names
from flows.errors import BenchError
from flows.spec.cluster import Cluster
from flows.spec.engine import EngineProfile
from flows.spec.load import load_model
from flows.spec.release_tests import ReleaseTests
from flows.spec.suite import Suite
from tests.lab.recipe_double import double, runc_memlock, vllm_double
from tests.support.paths import ROOT

PROFILE = ROOT / "config" / "engines" / "vllm-recipe.yaml"
TRIANGLE = ROOT / "examples" / "spark-ds41f" / "clusters" / "tp3-triangle.yaml"
CLASSIFICATION = ROOT / "examples" / "spark-ds41f" / "config" / "release-tests.yaml"
UNLIMITED = 2**64 - 1  # what docker puts in the bundle for --ulimit=memlock=-1:-1 (uint64 -1)
DOUBLE_CONTEXT = 16384  # the double's model (double.make_spark_files)
ALLOWED = 8 * 2**20  # this sandbox's hard memlock limit (8 MiB)
SERVE = ["serve", "/models", "--served-model-name", "deepseek-v4.1-flash", "--host", "0.0.0.0",
         "--port", "8000", "--tensor-parallel-size", "3", "--block-size", "256",
         "--enable-prefix-caching", "--max-num-seqs", "8", "--nnodes", "3", "--node-rank", "1",
         "--master-addr", "10.0.1.71", "--master-port", "9999", "--headless"]  # fmt: skip


def test_the_recipe_argv_becomes_the_engines_options() -> None:
    options = vllm_double.parse(SERVE)
    env = {"TILELANG_CACHE_DIR": "/cache/kkref/jit/tilelang",
           "TRITON_CACHE_DIR": "/cache/kkref/jit/triton"}  # fmt: skip
    argv = vllm_double.engine_argv(options, env)
    assert argv[1:4] == ["-m", "sparkengine", "serve"]
    flags = dict(zip(argv[4::2], argv[5::2], strict=False))
    assert flags["--rank"] == "1"
    assert flags["--nnodes"] == "3"
    assert flags["--head"] == "10.0.1.71:9999"
    assert flags["--model"] == "/models"
    assert flags["--served-model-name"] == "deepseek-v4.1-flash"
    assert flags["--max-seqs"] == "8"
    assert "kernels=/cache/kkref/jit/tilelang" in argv
    assert "jit=/cache/kkref/jit/triton" in argv
    assert "--host" not in argv  # a headless worker serves no API


@pytest.mark.parametrize(
    ("record", "phase"),
    [
        ({"event": "loaded", "seconds": 1.5}, "weights_loaded"),
        ({"event": "rendezvous", "seconds": 0.1}, "rendezvous"),
        ({"event": "ready", "port": 8000}, "ready"),
        ({"event": "compile_after_freeze", "family": "mlp"}, "compile_after_preparation"),
        (
            {"event": "collective_failure", "peer": 2, "seq": 24, "timeout_s": 10},
            "collective_failure",
        ),
        ({"event": "fatal", "error": "ModelError", "message": "bad"}, "fatal"),
    ],
)
def test_each_engine_event_prints_a_line_the_recipe_profile_reads_as_its_phase(
    record: dict[str, Any], phase: str, tmp_path: Path
) -> None:
    profile = load_model(PROFILE, EngineProfile)
    options = vllm_double.parse([*SERVE[:-1], "--model-dir-unused"])
    options.model = str(tmp_path)
    printed = io.StringIO()
    with redirect_stdout(printed):
        vllm_double.translate(record, vllm_double.Lines(1), options)
    reader = LogReader(profile.logs, node="dgx2", rank=1)
    events = reader.read(printed.getvalue().splitlines())
    assert phase in [event.name for event in events], printed.getvalue()
    raw = reader.read([json.dumps({"ts": "2026-12-06T00:00:00+00:00", **record})])
    assert raw == []  # the passed-through JSON line is never read as a second event


def test_the_doubles_metrics_are_read_by_the_recipe_profile_as_vllms() -> None:
    """The double's engine exports vLLM's names (`--metric-names vllm`), so the benchmark reads
    the engine step time from vLLM's inter-token latency, as on the Sparks, and nothing the
    profile names is missing but the speculative-decoding counters and per-request TPOT."""
    argv = vllm_double.engine_argv(vllm_double.parse(SERVE), {})
    assert argv[-2:] == ["--metric-names", "vllm"]
    engine = Metrics("vllm", "deepseek-v4.1-flash", kv_blocks=4096, block_size=16)
    profile = load_model(PROFILE, EngineProfile).metrics.model_dump(exclude={"path", "compiles"})
    names = scrape_names(profile)
    before = _read(engine.render(), names)
    engine.observe_step(0.030, 0.01, decoded=0)  # a prefill: no request waited for a next token
    engine.observe_step(0.020, 0.01, decoded=4)
    engine.observe_step(0.040, 0.01, decoded=4)
    engine.running, engine.generation_tokens = 4, 9
    after = _read(engine.render(), names)
    assert {key for key in names if key not in after} == {
        "spec_drafts", "spec_accepted_tokens", "token_seconds_sum", "token_seconds_count"
    }  # fmt: skip
    assert (after["running"], after["generation_tokens"]) == (4, 9)
    assert engine_step_times(before, after) == {"engine_step_ms": pytest.approx(30.0)}
    assert kv_capacity(engine.render())["kv_capacity_tokens"] == 4096 * 16


def _read(exposition: str, names: dict[str, str]) -> dict[str, float]:
    found = parse_prometheus(exposition)
    return {key: found[name] for key, name in names.items() if name in found}


def test_the_rank_refuses_without_the_display_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARK3_DISPLAY_CARVEOUT_WEIGHTS", "1")
    monkeypatch.setattr(vllm_double, "DRM_NODE", "/nonexistent/card0")
    printed = io.StringIO()
    with redirect_stdout(printed):
        assert vllm_double.refuse_without_display_device(vllm_double.Lines(0))
    assert (
        "display carve-out cannot hold 848 MiB of weights (/nonexistent/card0:"
        in printed.getvalue()
    )
    profile = load_model(PROFILE, EngineProfile)
    reader = LogReader(profile.logs, node="dgx1", rank=0)
    assert [e.name for e in reader.read(printed.getvalue().splitlines())] == ["fatal"]
    monkeypatch.setenv("SPARK3_DISPLAY_CARVEOUT_WEIGHTS", "0")
    assert not vllm_double.refuse_without_display_device(vllm_double.Lines(0))


def _without(document: Any, root: str) -> Any:
    """The document with the lab's root taken out of every path (what the overlay moved)."""
    if isinstance(document, str):
        return document.replace(root, "")
    if isinstance(document, list):
        return [_without(item, root) for item in document]
    if isinstance(document, dict):
        return {key: _without(value, root) for key, value in document.items()}
    return document


def test_the_lab_overlay_changes_only_addresses_users_and_paths(tmp_path: Path) -> None:
    example = load_model(TRIANGLE, Cluster)
    lab = {
        "transport": {"user": "root", "key_file": "/lab/key", "known_hosts": "/lab/kh"},
        "nodes": [{"address": f"198.18.13.{10 + i}",
                   "overrides": {"docker_daemon": f"unix:///lab/{i}.sock"}} for i in range(3)],
    }  # fmt: skip
    root = tmp_path / "spark"
    workdirs = {node.name: f"{root}/{node.name}{double.RECIPE_CHECKOUT}" for node in example.nodes}
    changes = double.lab_overlay(example.model_dump(mode="json"), lab, root, workdirs)
    overlay = TRIANGLE.with_name("lab-triangle-test.yaml")
    try:
        overlay.write_text(yaml.safe_dump({"kind": "cluster", "extends": TRIANGLE.name,
                                           "set": changes}))  # fmt: skip
        moved = load_model(overlay, Cluster).model_dump(mode="json")
    finally:
        overlay.unlink()
    original = example.model_dump(mode="json")
    assert moved["runtime"]["run_args"][-2].startswith(f"--mount=type=bind,source={root}/dev/dri")
    assert f"--device={root}/dev/infiniband:/dev/infiniband" in moved["runtime"]["run_args"]
    for node, lab_node in zip(moved["nodes"], lab["nodes"], strict=True):
        assert node["address"] == lab_node["address"]
        assert node["overrides"]["docker_daemon"] == lab_node["overrides"]["docker_daemon"]
        assert node["workdir"] == workdirs[node["name"]]
        node["address"], node["overrides"]["docker_daemon"] = None, None
        node["workdir"] = double.RECIPE_CHECKOUT
    for node in original["nodes"]:
        node["address"], node["workdir"] = None, double.RECIPE_CHECKOUT
        node["overrides"]["docker_daemon"] = None
    assert moved["engine"]["ready"]["url"] == "http://{address}:{port}/v1/models"
    moved["engine"]["ready"]["url"] = original["engine"]["ready"]["url"]  # an address
    for key in ("user", "key_file", "known_hosts"):
        assert moved["transport"][key] == lab["transport"][key]
        moved["transport"][key] = original["transport"][key] = None
    for index, argument in enumerate(original["runtime"]["run_args"]):
        if argument == "--device=/dev/infiniband":  # the lab device folder at the same target
            original["runtime"]["run_args"][index] = "--device=/dev/infiniband:/dev/infiniband"
    assert _without(moved, str(root)) == original


@pytest.mark.parametrize("name", ["release-tp3", "single-stream"])
def test_the_doubles_suites_change_only_sizes_and_the_clusters_tolerance(name: str) -> None:
    thread = load_model(ROOT / "config" / "suites" / f"{name}.yaml", Suite)
    document = thread.model_dump(mode="json", exclude_defaults=True)
    resized = Suite.model_validate(double.at_double_size(document, tolerance=0.2))
    check_context(resized, DOUBLE_CONTEXT)  # fits what the double serves
    if name == "release-tp3":  # the thread's 1M prefill does not
        with pytest.raises(BenchError, match="prefill needs 1000001 tokens per request"):
            check_context(thread, DOUBLE_CONTEXT)
    assert resized.name == thread.name  # the releases name it, as on the Sparks
    assert resized.client.processes == 1
    kept = resized.model_dump(mode="json", exclude={"description", "client"})
    original = thread.model_dump(mode="json", exclude={"description", "client"})
    for mine, theirs in zip(kept["workloads"], original["workloads"], strict=True):
        gate = mine.pop("gate")
        if theirs.pop("gate") is False:
            assert gate is False  # reported only, as on the Sparks
        else:
            assert gate == {"metrics": None, "tolerance": 0.2, "tolerances": {}}
        for key in double.DOUBLE_SIZES:
            if key in theirs:
                assert 0 < _total(mine.pop(key)) <= _total(theirs.pop(key))
    assert kept == original


def _total(size: int | list[int]) -> int:
    return sum(size) if isinstance(size, list) else size


def test_a_lab_session_has_its_own_home_and_daemon_and_the_extra_path(tmp_path: Path) -> None:
    plan = LabPlan(prefix="sg-x", docker=True, session_path=("/double/bin",))
    from flows.cluster.lab.hosts import _session_env  # noqa: PLC0415 - private, tested here

    env = _session_env(plan, "sg-x-0", tmp_path)
    assert env["DOCKER_HOST"] == f"unix://{tmp_path.resolve()}/docker/sg-x-0/api.sock"
    assert env["PATH"].startswith("/double/bin:/usr/local/sbin:")
    text = sshd_config_text("198.18.0.10", tmp_path, tmp_path / "keys", env)
    setenv = [line for line in text.splitlines() if line.startswith("SetEnv ")]
    home = f"{tmp_path}/hosts/sg-x-0/home"  # its own, never the controller's dotfiles
    assert setenv == [f"SetEnv HOME={home} DOCKER_HOST={env['DOCKER_HOST']} PATH={env['PATH']}"]
    assert _session_env(LabPlan(prefix="sg-x"), "sg-x-0", tmp_path) == {"HOME": home}


def test_the_checkout_tracks_the_recipes_classification_in_sparkgates_schema(
    tmp_path: Path,
) -> None:
    checkout = tmp_path / "spark-ds41f"
    double.make_checkout(
        checkout, base_image="sparkgate-base:x", tag="vllm-ds41f-kkref:0-r6x", tests=["tests/t.py"]
    )
    written = checkout / "config" / "release-tests.json"  # the example releases' checkout path
    assert json.loads(written.read_text())["kind"] == "release-tests"
    example, read = load_model(CLASSIFICATION, ReleaseTests), load_model(written, ReleaseTests)
    assert read.patterns == example.patterns
    assert read.files == example.files
    assert double.git(checkout, "ls-files", "config/release-tests.json") == (
        "config/release-tests.json"
    )
    assert double.git(checkout, "status", "--porcelain", "--untracked-files=all") == ""


def _bundle(memlock: tuple[int, int] | None) -> dict[str, Any]:
    rlimits = [{"type": "RLIMIT_NOFILE", "hard": 1048576, "soft": 1048576}]
    if memlock is not None:
        rlimits.append({"type": "RLIMIT_MEMLOCK", "soft": memlock[0], "hard": memlock[1]})
    rlimits.append({"type": "RLIMIT_STACK", "hard": 67108864, "soft": 67108864})
    return {"ociVersion": "1.0.2-dev", "process": {"args": ["vllm"], "rlimits": rlimits}}


def test_a_container_start_names_its_bundle_and_container_and_no_other_command_does() -> None:
    # containerd's runc shim (go-runc) starts a container this way.
    shim = ["--root", "/run/docker/runtime-runc/moby", "--log", "/b/log.json", "--log-format",
            "json", "create", "--bundle", "/b", "--pid-file", "/b/pid", "0123abcd"]  # fmt: skip
    assert runc_memlock.starting(shim) == runc_memlock.Start(bundle="/b", container="0123abcd")
    assert runc_memlock.starting(["run", "-b=/c", "--detach", "x"]) == runc_memlock.Start("/c", "x")
    assert runc_memlock.starting(["--debug", "create", "y"]) == runc_memlock.Start(".", "y")
    for other in (["--root", "create", "start", "y"], ["state", "y"], ["--version"], []):
        assert runc_memlock.starting(other) is None, other


def test_an_unlimited_memlock_ask_is_lowered_to_what_the_machine_allows_and_nothing_else() -> None:
    config = _bundle((UNLIMITED, UNLIMITED))
    changed, lowering = runc_memlock.lowered(config, ALLOWED)
    assert lowering == runc_memlock.Lowering(asked=(UNLIMITED, UNLIMITED), given=(ALLOWED, ALLOWED))
    assert changed == _bundle((ALLOWED, ALLOWED))
    assert config == _bundle((UNLIMITED, UNLIMITED))  # the caller's document is left as it was
    assert json.loads(runc_memlock.log_line("0123abcd", lowering)) == {
        "container": "0123abcd",
        "asked": {"soft": UNLIMITED, "hard": UNLIMITED},
        "given": {"soft": ALLOWED, "hard": ALLOWED},
    }
    _, only_hard = runc_memlock.lowered(_bundle((65536, UNLIMITED)), ALLOWED)
    assert only_hard == runc_memlock.Lowering(asked=(65536, UNLIMITED), given=(65536, ALLOWED))


@pytest.mark.parametrize(
    ("memlock", "allowed"),
    [(None, ALLOWED), ((65536, ALLOWED), ALLOWED), ((UNLIMITED, UNLIMITED), None)],
    ids=["no memlock ask", "within the limit", "an unlimited machine"],
)
def test_a_start_the_machine_allows_passes_untouched(
    memlock: tuple[int, int] | None, allowed: int | None
) -> None:
    assert runc_memlock.lowered(_bundle(memlock), allowed) == (_bundle(memlock), None)


def test_a_bundle_asking_more_than_this_machine_allows_is_lowered_in_place_and_logged(
    tmp_path: Path,
) -> None:
    (tmp_path / "config.json").write_text(json.dumps(_bundle((UNLIMITED, UNLIMITED))))
    log = tmp_path / runc_memlock.LOG_NAME
    lowering = runc_memlock.lower_in_bundle(runc_memlock.Start(str(tmp_path), "0123abcd"), log)
    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    if hard == resource.RLIM_INFINITY:  # a machine that grants the recipe's ask: nothing to do
        assert lowering is None
        assert not log.exists()
        return
    assert lowering == runc_memlock.Lowering(asked=(UNLIMITED, UNLIMITED), given=(hard, hard))
    assert json.loads((tmp_path / "config.json").read_text()) == _bundle((hard, hard))
    assert log.read_text() == runc_memlock.log_line("0123abcd", lowering)


@pytest.mark.docker  # under CI=true a missing runc fails this test instead of skipping it
@pytest.mark.skipif(shutil.which("runc") is None, reason="runc is not installed (docker.io)")
def test_the_written_runc_execs_the_real_runc_never_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = shutil.which("runc")
    assert real is not None
    folder = tmp_path / "runc"
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")  # as the lab's dockerd has it
    stub = double.write_runc_wrapper(folder) / "runc"
    assert shutil.which("runc") == str(stub)
    assert str(Path(real).resolve()) in stub.read_text()
    passed = subprocess.run([stub, "--version"], capture_output=True, text=True, check=True)
    direct = subprocess.run([real, "--version"], capture_output=True, text=True, check=True)
    assert passed.stdout == direct.stdout
    assert not (folder / runc_memlock.LOG_NAME).exists()
