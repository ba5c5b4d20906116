"""The record tests' fixtures: synthetic results of all four gates (tests/support/records.py)."""

from tests.support.records import (  # noqa: F401 - fixtures used by name
    cluster,
    helpers,
    published,
    release_r1,
    release_r2,
)
