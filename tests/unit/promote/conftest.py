"""The promotion unit tests' project: the shipped r1 and r2 in it, records as record.json files."""

import pytest

from tests.support.promotion_records import write_record  # noqa: F401 - fixture used by name


@pytest.fixture
def project_releases() -> str:
    """The shared `project` fixture (tests/conftest.py) copies the shipped r1 and r2 in."""
    return "shipped"
