"""The scheduling pieces that need no server: embedded mode skips the slot, inputs are checked."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.errors import SpecError
from flows.pipeline.deployments import resolve_spec
from flows.pipeline.schedule import (
    cluster_slot,
    release_slot,
    server_mode,
    slot_name,
    slot_wait_s,
)

ROOT = Path(__file__).resolve().parents[2]


def test_embedded_mode_takes_no_slot() -> None:
    from prefect.settings import PREFECT_API_URL, temporary_settings  # noqa: PLC0415

    with temporary_settings(updates={PREFECT_API_URL: None}), cluster_slot("local") as held:
        assert held is None


def test_the_embedded_servers_url_is_not_server_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    """The embedded server's URL is in the settings while a run lives: it took a slot there."""
    from prefect.settings import PREFECT_API_URL, temporary_settings  # noqa: PLC0415

    from flows.pipeline import embedded  # noqa: PLC0415

    url = "http://127.0.0.1:9/api"
    with temporary_settings(updates={PREFECT_API_URL: url}):
        assert server_mode()  # a configured server
        monkeypatch.setattr(embedded, "_embedded", [url])
        assert not server_mode()
        with cluster_slot("local") as held:
            assert held is None
        assert release_slot("local") == 0


def test_slot_names_the_cluster() -> None:
    assert slot_name("tp3") == "cluster:tp3"


def test_slot_wait_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARKGATE_CLUSTER_SLOT_WAIT_S", raising=False)
    assert slot_wait_s() == 4 * 3600
    monkeypatch.setenv("SPARKGATE_CLUSTER_SLOT_WAIT_S", "90")
    assert slot_wait_s() == 90
    for bad in ("soon", "-1"):
        monkeypatch.setenv("SPARKGATE_CLUSTER_SLOT_WAIT_S", bad)
        with pytest.raises(SpecError, match="SPARKGATE_CLUSTER_SLOT_WAIT_S"):
            slot_wait_s()


def test_deployment_parameters_name_releases_and_clusters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKGATE_ROOT", str(ROOT))
    assert resolve_spec("r2", "releases") == ROOT / "releases/r2.yaml"
    assert resolve_spec("local", "config") == ROOT / "config/local.yaml"
    assert resolve_spec("releases/r1.yaml", "releases") == ROOT / "releases/r1.yaml"
    assert resolve_spec(str(ROOT / "releases/r1.yaml"), "releases") == ROOT / "releases/r1.yaml"
    with pytest.raises(SpecError, match=r"releases: 'r99': no such file \(tried .*r99.yaml"):
        resolve_spec("r99", "releases")


def test_deployment_parameters_are_validated() -> None:
    from flows.pipeline.deployments import nightly_qualification  # noqa: PLC0415

    with pytest.raises(Exception, match="String should match pattern"):
        nightly_qualification.validate_parameters({"release": "r2; rm -rf /"})
    assert nightly_qualification.validate_parameters({"release": "r2"}) == {
        "release": "r2", "cluster": "local", "fresh": False, "wait": False,
    }  # fmt: skip
