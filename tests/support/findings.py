"""The findings of the latest hardening round (issue 30) and the tests that reproduce each one.

The suite's closing count (tests/conftest.py) reads this map: besides how many attacks and faults
ran and held, it says how many of the issue's findings, and of its table's rows, were reproduced
by a test that ran and held in this run, by class (the classes of docs/reliability.md), names any
that did not hold, and the rows with findings not run. A finding is held when at least one of its
tests passed and none failed; a test is named by its file or node id prefix.
tests/unit/test_findings_map.py keeps the map true (every row has findings, every named test
exists and is counted).
"""

from __future__ import annotations

from dataclasses import dataclass

ANSWERS = "answers bounded by their request"
CONNECTIONS = "engine connections capped and timed"
ENGINE_INPUT = "engine input validated"
SECRETS = "one secret rule for every command line and text"
FILES = "user-named files read bounded"
URLS = "notify URLs public only"
CLEAN = "clean errors"
COMMANDS = "commands bounded (local and ssh)"
MACHINE = "a machine failure is no verdict on the release"
PREFECT = "every Prefect server authenticated, none behind the run's back"
SLOT = "the cluster's slot given back, its holder named"
BOOT_LOGS = "every boot-log marker a line matches counts"


@dataclass(frozen=True)
class Finding:
    """One thing the attack found, the table row it is in, its class and its tests."""

    row: int
    what: str
    cls: str
    tests: tuple[str, ...]


S, F, LAB = "tests/security/", "tests/faults/", "tests/lab/"
ROWS = {
    1: "high: a ~1 KB structured-output request stalls or kills the engine",
    2: "high: an API key in engine.serve_args written in clear into record.json",
    3: "high: every embedded qualify starts an unauthenticated Prefect temporary server",
    4: "med: a SIGKILLed or stopped qualify holds the cluster's concurrency slot",
    5: "med: disk full during a gate published as the release failing",
    6: "med: the promotion log loses an entry on a short write",
    7: "med: command builds: daemonized grandchild, unbounded output, catastrophic image_line",
    8: "med: boot-log markers are first-match-wins",
    9: "med: engine memory grows with open connections holding partial bodies",
    10: "med: more argv redaction gaps in --plan, render and the record",
    11: "low: replay, open docs, leftover files, engine 500s, tracebacks, verify, FIFO, SSRF",
}
FINDINGS: tuple[Finding, ...] = (
    Finding(1, "nested minItems arrays and a deep const build a huge answer", ANSWERS,
            (f"{S}test_engine_answer_cost.py",)),
    Finding(2, "--api-key in serve_args in record.json", SECRETS,
            (f"{S}test_secrets_serve_args.py", f"{S}test_secrets_argv.py")),
    Finding(3, "a temporary Prefect server, unauthenticated, on the run's database", PREFECT,
            (f"{S}test_one_prefect_server_per_qualify.py", f"{S}test_embedded_prefect_auth.py")),
    Finding(3, "the server orphaned after SIGTERM/SIGKILL", PREFECT,
            (f"{F}test_orphans_embedded_server.py",)),
    Finding(4, "a SIGKILLed holder keeps the slot (recognised only by its lease's age)", SLOT,
            (f"{F}test_cluster_slot_release.py::test_a_killed_holder",
             f"{F}test_slot_holder_liveness.py")),
    Finding(4, "`cluster unlock --force` does not clear the slot", SLOT,
            (f"{F}test_cluster_slot_release.py::test_unlock_force",)),
    Finding(4, "a stopped (SIGSTOP) holder blocks others, unnamed", SLOT,
            (f"{F}test_cluster_slot_release.py::test_the_refusal_and_cluster_status",)),
    Finding(4, "docs say embedded mode takes no slot", SLOT,
            (f"{S}test_embedded_prefect_auth.py::test_embedded_run_takes_no_cluster_slot",)),
    Finding(5, "ENOSPC in a gate published as the release's failure", MACHINE,
            (f"{F}test_gate_machine_failure.py",)),
    Finding(6, "a short write to the promotions log loses an entry", MACHINE,
            (f"{F}test_promotions_log.py",)),
    Finding(7, "a daemonized grandchild holds the stage past its timeout", COMMANDS,
            (f"{F}test_build_command_timeout.py::test_a_daemonized",
             f"{F}test_remote_command_guard.py",
             f"{LAB}test_ssh_command_bounds.py::test_a_daemonized")),
    Finding(7, "a command's output held whole (300 MB -> 909 MiB RSS)", COMMANDS,
            (f"{F}test_build_command_timeout.py::test_a_command_output",
             f"{LAB}test_ssh_command_bounds.py::test_a_command_s_output")),
    Finding(7, "a catastrophic image_line passes validate and runs unbounded", ANSWERS,
            (f"{S}test_build_image_line.py",)),
    Finding(8, "a compile on a weights_loaded line is hidden", BOOT_LOGS,
            (f"{S}test_boot_log_markers.py",)),
    Finding(9, "partial bodies on open connections run the engine out of memory", CONNECTIONS,
            (f"{S}test_engine_connections.py",)),
    Finding(10, "-H Authorization, dash-prefixed values, sh -c strings, URL passwords", SECRETS,
            (f"{S}test_secrets_argv.py",)),
    Finding(11, "replay: deep JSON, /dev/zero, a 1 GiB log, raw ANSI escapes", FILES,
            (f"{S}test_replay_inputs.py",)),
    Finding(11, "the embedded server's /docs and /openapi.json open", PREFECT,
            (f"{S}test_embedded_prefect_auth.py",)),
    Finding(11, "url and auth files left after SIGTERM", PREFECT,
            (f"{F}test_orphans_embedded_server.py",)),
    Finding(11, "engine 500 on required: [{}] and a non-ASCII Authorization", ENGINE_INPUT,
            (f"{S}test_engine_answer_cost.py::test_hostile_schema_values",
             f"{S}test_engine_answer_cost.py::test_a_non_ascii_authorization")),
    Finding(11, "tracebacks: promote -c with 300 characters; notify, API unreachable", CLEAN,
            (f"{F}test_clean_errors_long_names.py", f"{F}test_clean_errors_notify.py")),
    Finding(11, "verify hashes paths outside the record", FILES,
            (f"{S}test_verify_paths.py",)),
    Finding(11, "extends: naming a FIFO hangs validate", FILES,
            (f"{S}test_spec_special_files.py",)),
    Finding(11, "the SSRF filter allows 100.100.100.200 and NAT64/6to4 forms", URLS,
            (f"{S}test_notify_urls.py",)),
)  # fmt: skip

COUNTED = (
    S,
    F,
    *sorted({t.split("::")[0] for f in FINDINGS for t in f.tests if t.startswith(LAB)}),
)
"""Node id prefixes of the tests the closing count counts: attacks, faults, and the lab tests
that reproduce a finding (they run where the lab can)."""


def finding_status(finding: Finding, outcomes: dict[str, str]) -> str:
    """`held`, `not held` (a test of it failed) or `not run`, from node id -> outcome."""
    mine = [
        outcome
        for nodeid, outcome in outcomes.items()
        if any(nodeid.startswith(test) for test in finding.tests)
    ]
    if any(outcome in {"failed", "error"} for outcome in mine):
        return "not held"
    return "held" if "passed" in mine else "not run"


def coverage_lines(outcomes: dict[str, str]) -> list[str]:
    """The closing lines about issue 30: findings and rows held, by class, and the rest named."""
    status = {finding: finding_status(finding, outcomes) for finding in FINDINGS}
    held = [finding for finding, state in status.items() if state == "held"]
    rows_held = {row for row in ROWS if all(status[f] == "held" for f in FINDINGS if f.row == row)}
    classes = sorted({finding.cls for finding in FINDINGS})
    per_class = ", ".join(
        f"{cls} {sum(f in held for f in FINDINGS if f.cls == cls)}/"
        f"{sum(f.cls == cls for f in FINDINGS)}"
        for cls in classes
    )
    summary = (
        f"issue 30: {len(held)} of {len(FINDINGS)} findings held, rows {len(rows_held)} of "
        f"{len(ROWS)} (by class: {per_class})"
    )
    lines = [summary]
    lines += [
        f"issue 30 row {finding.row}, NOT HELD: {finding.what}"
        for finding, state in status.items()
        if state == "not held"
    ]
    unrun = sorted({finding.row for finding, state in status.items() if state == "not run"})
    if unrun:
        lines.append(f"issue 30, findings not run here in rows {', '.join(map(str, unrun))}")
    return lines
