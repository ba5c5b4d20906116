"""The integration tests' `project`: a private sparkgate project (tests/support/project.py).

The local cluster's fixtures (tests/support/local_cluster.py) come from tests/conftest.py.
"""

from tests.support.project import project  # noqa: F401 - fixture used by name
