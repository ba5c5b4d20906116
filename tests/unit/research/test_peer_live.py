"""The whole peer check, end to end, when the guidellm venv exists (`--setup` creates it).

A real engine boot and two guidellm runs at a small load: proves the command produces every
raw file and a comparison in which both tools saw the same requests, all of them fresh. The
venv is a separate, heavy install (torch), so without it the test is skipped, saying why.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flows.research import peer

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.mark.skipif(
    not (peer.peer_venv() / "bin" / "guidellm").exists(),
    reason="no guidellm venv: python -m flows.research.peer --setup",
)
def test_peer_check_runs_both_tools_in_one_session(tmp_path: Path) -> None:
    out = tmp_path / "peer"
    code = peer.main(["--out", str(out), "--loads", "1:2,4:4", "--max-tokens", "16"])
    assert code == 0
    for name in ("guidellm-c1.json", "guidellm-c4.json", "ours-c1.json", "ours-c4.json"):
        assert (out / name).is_file(), name
    rows = {(r["load"], r["metric"]): r for r in json.loads((out / "comparison.json").read_text())}
    assert rows[("c1", "requests")]["guidellm"] == rows[("c1", "requests")]["ours"] == 2
    assert rows[("c4", "requests")]["guidellm"] == rows[("c4", "requests")]["ours"] == 4
    for load in ("c1", "c4"):
        assert rows[(load, "ttft_mean_ms")]["guidellm"] > 0
        assert rows[(load, "engine_step_ms")]["ours"] > 0
        # guidellm's mean ITL is the token-weighted mean of its own stamps, like ours
        itl = rows[(load, "itl_mean_ms")]
        assert itl["guidellm"] == pytest.approx(itl["guidellm_ours"], rel=1e-6)
