"""The release-tests gate: selection and verdict (rules), summary, node I/O (runner, docker)."""
