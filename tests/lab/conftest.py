"""The lab tests' fixture: the session's three namespace hosts with sshd (tests/support/lab.py)."""

from tests.support.lab import lab  # noqa: F401 - fixture used by name
