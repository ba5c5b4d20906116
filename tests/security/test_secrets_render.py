"""Attack: `sparkgate render` printed an HF_TOKEN value and a private key. Secrets are now
redacted in the table and in `--json` unless `--show-secrets` is given; references are shown as
written and never resolved."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from flows.cli import main
from tests.support.overlays import cluster_overlay, overlay, write_yaml

HF = "hf_secret_value_for_render"
PIP = "pip-password-value"
LISTED = "mlx5_listed_secret"


@pytest.fixture
def specs(tmp_path: Path) -> tuple[Path, Path]:
    """A release with a literal HF_TOKEN, a reference and a secret build arg; a cluster that
    lists one more secret key on a node override."""
    release = overlay(
        tmp_path / "releases" / "r1.yaml", "releases/r1.yaml",
        engine={"env": {"HF_TOKEN": HF, "OTHER_TOKEN": "{env:SPARKGATE_TEST_SECRET}"}},
        build={"args": {"PIP_PASSWORD": PIP}},
    )  # fmt: skip
    cluster = cluster_overlay(tmp_path / "cluster.yaml", "rendertest", tmp_path)
    document = yaml.safe_load(cluster.read_text())
    document["set"]["secret_keys"] = ["NCCL_IB_HCA"]
    document["set"]["nodes"][1]["overrides"] = {"env": {"NCCL_IB_HCA": LISTED}}
    write_yaml(cluster, document)
    return release, cluster


def _render(specs: tuple[Path, Path], *extra: str) -> str:
    release, cluster = specs
    assert main(["render", str(release), "-c", str(cluster), *extra]) == 0
    return ""


def test_render_prints_no_secret(
    specs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _render(specs)
    _render(specs, "--json")
    printed = capsys.readouterr()
    shown = printed.out + printed.err
    for value in (HF, PIP, LISTED):
        assert value not in shown
    assert "<redacted>" in shown
    assert "{env:SPARKGATE_TEST_SECRET}" in shown


def test_render_json_redacts_release_cluster_and_plans(
    specs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _render(specs, "--json")
    document = json.loads(capsys.readouterr().out)
    assert document["release"]["engine"]["env"]["HF_TOKEN"] == "<redacted>"
    assert document["release"]["build"]["args"]["PIP_PASSWORD"] == "<redacted>"
    assert document["cluster"]["nodes"][1]["overrides"]["env"]["NCCL_IB_HCA"] == "<redacted>"
    plans = {plan["node"]: plan for plan in document["plans"]}
    assert plans["rendertest1"]["env"]["NCCL_IB_HCA"] == "<redacted>"
    assert plans["rendertest0"]["env"]["HF_TOKEN"] == "<redacted>"
    assert plans["rendertest0"]["env"]["PYTHONUNBUFFERED"] == "1"


def test_render_show_secrets_prints_them(
    specs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _render(specs, "--json", "--show-secrets")
    document = json.loads(capsys.readouterr().out)
    assert document["release"]["engine"]["env"]["HF_TOKEN"] == HF
    assert document["release"]["build"]["args"]["PIP_PASSWORD"] == PIP
    plans = {plan["node"]: plan for plan in document["plans"]}
    assert plans["rendertest1"]["env"]["NCCL_IB_HCA"] == LISTED
    # a reference is never resolved, not even here
    assert plans["rendertest0"]["env"]["OTHER_TOKEN"] == "{env:SPARKGATE_TEST_SECRET}"


def test_render_outside_a_boot_has_an_empty_boot_token(
    specs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _render(specs, "--json", "--show-secrets")
    document = json.loads(capsys.readouterr().out)
    assert all(plan["env"]["SPARKENGINE_BOOT_TOKEN"] == "" for plan in document["plans"])
