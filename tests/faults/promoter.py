"""One of several real processes promoting releases into one project at the same time.

`python promoter.py NAME COUNT [CLUSTER]` runs `promote_release` COUNT times (releases NAME-0
...) on CLUSTER's pointer (default: the default cluster's), each a real pointer update and log
line in $SPARKGATE_ROOT; only the qualification check is replaced, since these releases were
never built.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

from flows.settings import prefect_environment

prefect_environment()

from flows.promotion import promote  # noqa: E402
from flows.promotion.models import PromotedEntry  # noqa: E402


def main(name: str, count: int, cluster: str | None = None) -> None:
    for number in range(count):
        release = f"{name}-{number}"

        def entry(
            release_file: Path, *, by: str, reason: str, release: str = release, **_: object
        ) -> PromotedEntry:
            return PromotedEntry(
                release=release, release_file=str(release_file), build_digest="a" * 64,
                record=f"experiments/{release}", at=datetime.now(UTC), by=by, reason=reason,
            )  # fmt: skip

        promote.checked_entry = entry  # type: ignore[assignment]
        promote.promote_release(f"releases/{release}.yaml", by=name, reason="race", cluster=cluster)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), *sys.argv[3:4])
