"""Fault tests share a real full disk (tests/support/disk.py)."""

from tests.support.disk import small_disk  # noqa: F401 - fixture used by name
