"""Attack: boot-log markers were first-match-wins (issue 30, med: "a line that matches
`weights_loaded` and also reports a compile hides the compile; replay says 'passes'").

Buffered logs join lines (the recipe's thread, r6n report: rank 0's TileLang messages reached the
Docker log together), so one line can carry both the weights-loaded phase and a compile after
preparation. The reader stopped at the first marker a line matched: the compile vanished and the
cold-boots gate passed a release that compiles while serving. Every marker a line matches now
raises its event. Through the real `sparkgate replay` and the recipe's vLLM profile; the reader's
own case: tests/unit/cluster/test_timeline.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.overlays import ROOT

VLLM = ROOT / "config" / "engines" / "vllm-recipe.yaml"
JOINED = (
    "(EngineCore pid=1) INFO 12-02 10:00:01 Model loading took 40.1 GiB memory and 33.2 seconds; "
    "TileLang JIT compilation during inference: sparse_mla\n"
)


def test_a_compile_on_a_weights_loaded_line_fails_the_cold_boots_gate(tmp_path: Path) -> None:
    log = tmp_path / "n0.log"
    log.write_text(JOINED)
    done = subprocess.run(
        [sys.executable, "-m", "flows", "replay", "--engine", str(VLLM), str(log)],
        capture_output=True, text=True, timeout=120, cwd=ROOT, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "rank 0 weights_loaded:" in done.stdout
    assert "rank 0 compile_after_preparation:" in done.stdout, "the compile was hidden"
    assert "cold-boots gate: fails: 1 compiles after preparation" in done.stdout
