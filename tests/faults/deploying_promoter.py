"""`sparkgate promote REL --deploy` in a real process whose deploy hangs until it is signalled.

`python deploying_promoter.py RELEASE CLUSTER_FILE MARK` runs the real CLI; only the
qualification check (these releases were never built) and the deploy (it writes MARK, then
waits) are replaced. The test sends SIGTERM while it waits.
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from flows.settings import prefect_environment

prefect_environment()

from flows.cli import main  # noqa: E402
from flows.promotion import promote  # noqa: E402
from flows.promotion.models import PromotedEntry  # noqa: E402


def entry(release_file: Path, *, by: str, reason: str, **_: object) -> PromotedEntry:
    return PromotedEntry(
        release=release_file.stem, release_file=str(release_file), build_digest="a" * 64,
        record=f"experiments/{release_file.stem}", at=datetime.now(UTC), by=by, reason=reason,
    )  # fmt: skip


def hanging_deploy(*_args: object, **_kwargs: object) -> tuple[str | None, list[str]]:
    Path(sys.argv[3]).write_text("deploying")
    time.sleep(120)
    return None, []


if __name__ == "__main__":
    promote.checked_entry = entry  # type: ignore[assignment]
    promote.deploy = hanging_deploy
    sys.exit(main(["promote", sys.argv[1], "--deploy", "-c", sys.argv[2], "--by", "op"]))
