"""Every shell command in README.md and docs/*.md runs as written, or names the test that runs it.

Commands are the lines of fenced blocks tagged `sh` (an indented line continues the one above,
`# ...` is a comment); every fenced block must carry a tag, so no command hides in an untagged
one. COMMANDS maps each command, exactly as shown, to how it is checked:

- `Here`: run by this module from the checkout (`sparkgate` in-process, `python -m` and `make -n`
  as subprocesses) with the promised exit code and output. A synopsis runs with the given argv.
- `Elsewhere`: a slower test (integration, lab, or one that needs a built release) runs it; the
  test must exist, and `how` says what it runs when that is not the literal command.
- `NotRun`: no test runs it, and `why` says why. Kept short on purpose.

Every `--flag` a `sparkgate` or `python -m` command shows must be in that command's `--help`,
every command shown must be mapped, every mapping must still be shown, and every relative link
between the pages must resolve, anchors included, and every source path a page names must exist.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from flows.cli import main

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\S*)\s*$")
GROUPS = {"cluster", "lab", "bench", "image"}  # sparkgate commands that take a subcommand


@dataclass(frozen=True)
class Here:
    """Run by this module: `argv` (default: the command as shown), exit `code`, output `says`."""

    says: str
    code: int = 0
    argv: tuple[str, ...] = ()


@dataclass(frozen=True)
class Elsewhere:
    """Run by `test` (path::name); `how` says what it runs when not the literal command."""

    test: str
    how: str = "the command as shown"


@dataclass(frozen=True)
class NotRun:
    """No test runs it; `why` says why."""

    why: str


INTEGRATION = "tests/integration"
RESUME = (
    f"{INTEGRATION}/test_qualify_flow.py::"
    "test_a_qualification_killed_in_the_benchmark_resumes_there"
)
CLUSTER_CLI = f"{INTEGRATION}/test_cluster_cli.py::test_start_status_logs_stop"
BENCH_ENGINE = (
    f"{INTEGRATION}/test_bench_engine.py::test_release_local_writes_receipts_for_every_workload"
)
NIGHTLY = (
    f"{INTEGRATION}/test_schedule_server.py::"
    "test_the_nightly_deployment_runs_on_a_worker_and_publishes_its_record"
)
SCALE_OUT = (
    "tests/lab/test_scale_out_postgres.py::"
    "test_two_workers_two_clusters_one_run_per_cluster_on_postgres"
)
PROMOTE_CLI = (
    "tests/unit/promote/test_pointer_and_cli.py::test_promote_then_rollback_updates_pointer_and_log"
)
PER_CLUSTER = (
    "tests/unit/promote/test_per_cluster.py::"
    "test_promote_and_rollback_move_one_clusters_pointer_only"
)
CALIBRATE = (
    f"{INTEGRATION}/test_calibrate_flow.py::test_calibrate_publishes_gaps_the_benchmark_gate_uses"
)
PEER_LIVE = "tests/unit/research/test_peer_live.py::test_peer_check_runs_both_tools_in_one_session"
RECORDS_CLI = "tests/unit/record/test_cli.py::test_records_show_and_compare_by_name"
COMPARE_CLI = "tests/unit/bench/test_compare_cli.py::test_slower_candidate_fails_with_exit_1"
TP3_BENCH = "tests/unit/bench/data/recipe-bench/2026-10-05-r6-tp3-bench.json"
RECIPE_DATA = "tests/unit/bench/data/recipe-bench"
CROSS_ENGINE = (
    "tests/integration/test_bench_engine.py::"
    "test_a_single_stream_run_keeps_host_facts_and_compares_across_clusters"
)
RECIPE_EXAMPLE = "examples/spark-ds41f"
R6X, R6Y = f"{RECIPE_EXAMPLE}/releases/r6x.yaml", f"{RECIPE_EXAMPLE}/releases/r6y.yaml"
TRIANGLE = f"{RECIPE_EXAMPLE}/clusters/tp3-triangle.yaml"
RECIPE_TEST = "the example files themselves: tests/unit/spec/test_recipe_examples.py"
LAB_IMAGES = (
    "tests/lab/test_lab_image_builds.py::"
    "test_an_adopted_tag_and_a_command_build_qualify_and_promote_runs_the_recorded_image"
)
SESSIONS = f"{INTEGRATION}/test_session_workload.py::"
SESSION_RECORD = f"{SESSIONS}test_a_recorded_agent_session_replays_with_per_turn_numbers"
SESSION_SUITE = f"{SESSIONS}test_the_shipped_example_replays_alone_and_in_its_suite"
COMMANDS: dict[str, Here | Elsewhere | NotRun] = {
    # README.md
    # make: a dry run shows the recipe; the lead runs `make demo` and `make test` on a fresh clone
    "make demo": Here("sparkgate qualify releases/r2.yaml --no-wait", argv=("make", "-n", "demo")),
    "make test": Here("bin/pytest", argv=("make", "-n", "test")),
    "make unit": Here("not integration and not lab", argv=("make", "-n", "unit")),
    "source .venv/bin/activate": Elsewhere(
        "tests/unit/test_names.py::test_the_venv_puts_sparkgate_on_path",
        "`source .venv/bin/activate` in bash, then `command -v sparkgate`",
    ),
    "sparkgate --version": Here("sparkgate "),
    # docs/cli.md, docs/configuration.md
    "sparkgate validate PATH...": Elsewhere(
        "tests/unit/spec/test_corpus.py::test_shipped_file_validates", "every shipped file"
    ),
    "sparkgate schema [--out config/schema]": Elsewhere(
        "tests/unit/spec/test_render.py::test_schema_command_writes_every_kind", "--out TMP"
    ),
    "sparkgate schema": Elsewhere(
        "tests/unit/spec/test_render.py::test_committed_schemas_are_current",
        "--out TMP, compared with the committed config/schema",
    ),
    "sparkgate render RELEASE [--cluster C] [--node N] [--json] [--show-secrets]": Elsewhere(
        "tests/unit/spec/test_render.py::test_render_json_on_stdout",
        "render releases/r2.yaml --node local1 --json",
    ),
    "sparkgate validate config releases": Here(says="releases/r2.yaml: ok (release)"),
    "sparkgate render releases/r2.yaml --node local1": Here(says="--rank 1"),
    "sparkgate qualify RELEASE [--cluster C] [--fresh] [--no-wait] [--json] [--plan] [-v]": (
        Elsewhere(
            RESUME,
            "qualify r2 --no-wait on a private cluster, killed, then run again to resume; --plan: "
            "tests/unit/flow/test_qualify_plan.py; -v: test_promote.py's approve",
        )
    ),
    "sparkgate qualify releases/r2.yaml --plan": Here(says="plan, nothing is run"),
    "sparkgate cluster start RELEASE [--cluster C] [--empty-cache KIND[@NODE]]... [--json]": (
        Elsewhere(CLUSTER_CLI, "cluster start r1 -c FILE")
    ),
    "sparkgate cluster status [--cluster C] [--json]": Elsewhere(CLUSTER_CLI, "-c FILE --json"),
    "sparkgate cluster logs [--cluster C] [--node N] [--tail N]": Elsewhere(
        CLUSTER_CLI, "-c FILE --node n1"
    ),
    "sparkgate cluster stop [--cluster C]": Elsewhere(CLUSTER_CLI, "-c FILE"),
    "sparkgate cluster unlock [--cluster C] --force": Elsewhere(
        "tests/unit/cluster/test_lock_cli.py::test_unlock_needs_force_and_names_the_holder"
    ),
    "sparkgate records [--experiments DIR] [--write-index]": Elsewhere(RECORDS_CLI),
    "sparkgate records --brief": Elsewhere(
        "tests/unit/record/test_brief.py::test_records_brief_prints_them",
        "records --brief --experiments tests/data/records/schema-1",
    ),
    "sparkgate show RECORD [--raw]": Elsewhere(RECORDS_CLI, "show r2 --raw"),
    "sparkgate verify RECORD": Elsewhere(
        "tests/unit/record/test_cli.py::test_verify_exits_0_when_clean_and_1_listing_problems"
    ),
    "sparkgate compare RECORD_A RECORD_B": Elsewhere(RECORDS_CLI),
    # docs/docker-and-lab.md
    "sparkgate doctor [--cluster C] [--json]": Elsewhere(
        "tests/unit/cluster/test_preflight_cli.py::test_doctor_json_and_warn_passes"
    ),
    "sudo sparkgate lab up [--nodes 3]": Elsewhere(
        "tests/lab/test_lab_lifecycle.py::test_up_then_down_leaves_nothing",
        "lab_up(), the function behind the command, not the CLI",
    ),
    "sudo sparkgate lab down": Elsewhere(
        "tests/lab/test_lab_lifecycle.py::test_up_then_down_leaves_nothing",
        "lab_down(), the function behind the command, not the CLI",
    ),
    "sudo sparkgate lab up --docker": Elsewhere(
        "tests/lab/test_lab_docker.py::test_lab_with_one_dockerd_per_host",
        "lab_up(docker=True), the function behind the command, not the CLI",
    ),
    "sparkgate doctor --cluster lab": Elsewhere(
        "tests/lab/test_ssh_lock_and_doctor.py::test_doctor_over_ssh_and_with_a_cut_link",
        "run_preflight() on the lab's cluster file, the function behind `doctor`",
    ),
    "sparkgate image build RELEASE [--cluster C] [--json]": Elsewhere(
        "tests/lab/test_docker.py::test_the_cli_builds_for_a_docker_cluster_file",
        "image build r1 --cluster FILE --json on three private daemons",
    ),
    # docs/engine.md
    "python -m sparkengine make-model --out DIR [--seed S] [--size tiny|small] "
    "[--max-context 8192]": (
        Elsewhere(
            BENCH_ENGINE,
            "make-model --out DIR --size tiny, in its engine fixture",
        )
    ),
    "python -m sparkengine serve --rank R --nnodes N --head HOST:PORT --port P --model DIR "
    "--cache kernels=PATH --cache jit=PATH [--mlp-kernel reference|fused]": Elsewhere(
        BENCH_ENGINE,
        "two ranks of serve with these flags (no --mlp-kernel), in its engine fixture",
    ),
    # docs/faulty-releases.md
    "sparkgate qualify releases/faulty/nondeterministic.yaml --no-wait": Elsewhere(
        f"{INTEGRATION}/test_faulty_releases.py::test_a_faulty_release_fails_at_its_own_gate",
        "qualify of an overlay of it with trimmed gates, on a private cluster, --no-wait --json",
    ),
    # docs/scheduling-and-promotion.md
    "sparkgate notify URL [--allow-private]": Elsewhere(
        f"{INTEGRATION}/test_notify_server.py::test_a_qualification_that_fails_posts_its_verdict_and_url",
        "notify http://127.0.0.1:PORT/hook --allow-private against a real server",
    ),
    "sparkgate qualify releases/r2.yaml [--no-wait]": Elsewhere(
        f"{INTEGRATION}/test_promote.py::test_approve_from_another_process_promotes",
        "qualify of a trimmed r1 overlay that waits for a decision",
    ),
    "sparkgate replay tests/data/recipe-thread/r6n-third-attempt/dgx1.log "
    "--engine config/engines/vllm-recipe.yaml": Here(
        says="cold-boots gate: fails: collective_failure on dgx1 (1 lines)"
    ),
    "sparkgate replay dgx1.log dgx2.log dgx3.log dgx4.log "
    "--cluster config/examples/tp4-ring.yaml": (
        Elsewhere(
            "tests/unit/spec/test_vllm_profile.py::"
            "test_replaying_captured_boot_logs_prints_what_the_gate_would_record",
            "replay of two rank logs of quoted vLLM lines through the recipe profile (--engine)",
        )
    ),
    "sparkgate approve r2 [-c CLUSTER] [--by NAME] [--reason TEXT]": Elsewhere(
        f"{INTEGRATION}/test_promote.py::test_approve_from_another_process_promotes",
        "approve r1 -c CLUSTER --by --reason from a second process",
    ),
    "sparkgate approve same -c CLUSTER --by NAME --accept-inconclusive TEXT": Elsewhere(
        f"{INTEGRATION}/test_promote_inconclusive.py"
        "::test_an_inconclusive_run_waits_and_only_an_accepted_approval_promotes",
        "approve same from a second process, refused without the flag, then with it",
    ),
    "sparkgate reject r2 --reason TEXT [-c CLUSTER] [--by NAME]": Elsewhere(
        f"{INTEGRATION}/test_promote.py::"
        "test_reject_as_printed_by_the_waiting_qualification_leaves_the_pointer",
        "reject -c CLUSTER --reason as the waiting qualify printed it, pasted into a shell",
    ),
    "sparkgate promote releases/r2.yaml [--deploy] [-c CLUSTER] [--by NAME] [--reason TEXT]": (
        Elsewhere(
            PER_CLUSTER,
            "promote r1 -c alpha --by alice, promote r2 -c beta; without -c in "
            f"{PROMOTE_CLI}; --deploy in "
            "test_a_failed_deploy_rolls_the_pointer_back_and_logs_the_evidence",
        )
    ),
    "sparkgate rollback [--deploy] [-c CLUSTER] [--by NAME] [--reason TEXT]": Elsewhere(
        PER_CLUSTER,
        f"rollback -c beta --by carol --reason pager; without -c in {PROMOTE_CLI}",
    ),
    "export PREFECT_HOME=$PWD/.sparkgate/prefect "
    "PREFECT_SERVER_ANALYTICS_ENABLED=false DO_NOT_TRACK=1": (
        Elsewhere(
            NIGHTLY,
            "a private PREFECT_HOME with analytics off (tests/support/prefect_server.py)",
        )
    ),
    "prefect server start --host 127.0.0.1 --port 4200": Elsewhere(
        NIGHTLY,
        "server start --host 127.0.0.1 --port FREE --no-ui",
    ),
    "export PREFECT_API_URL=http://127.0.0.1:4200/api": Elsewhere(
        NIGHTLY,
        "PREFECT_API_URL of that server for every client and the worker",
    ),
    "prefect work-pool create sparkgate --type process": Elsewhere(
        NIGHTLY,
        "with --overwrite",
    ),
    "prefect worker start --pool sparkgate --limit 1": Elsewhere(
        NIGHTLY,
        "with --name test-worker",
    ),
    "prefect --no-prompt deploy --all": Elsewhere(NIGHTLY),
    "prefect deployment run nightly-qualification/nightly -p release=r1": Elsewhere(
        NIGHTLY,
        "the API call this command makes (POST /deployments/ID/create_flow_run), release=r1",
    ),
    "PREFECT_SERVER_DATABASE_CONNECTION_URL=postgresql+asyncpg://USER:PASSWORD@HOST:5432/prefect"
    " \\ prefect server start --host 127.0.0.1 --port 4200 --no-ui": Elsewhere(
        SCALE_OUT,
        "server start --host 127.0.0.1 --port FREE --no-ui on the test's own PostgreSQL "
        "(postgresql+asyncpg://sparkgate@127.0.0.1:FREE/prefect, tests/support/postgres.py)",
    ),
    "export PREFECT_API_URL=http://127.0.0.1:4200/api SPARKGATE_ROOT=$PWD": Elsewhere(
        SCALE_OUT,
        "PREFECT_API_URL of that server and SPARKGATE_ROOT of the shared project for the "
        "workers and the terminal run",
    ),
    "prefect deployment run nightly-qualification/nightly -p release=r1 -p cluster=lab": (
        Elsewhere(SCALE_OUT)
    ),
    "prefect deployment run nightly-qualification/nightly -p release=r1 -p cluster=local": (
        Elsewhere(SCALE_OUT)
    ),
    "sparkgate qualify releases/r1.yaml -c lab --no-wait": Elsewhere(
        SCALE_OUT, "in the shared project, PREFECT_API_URL set"
    ),
    "sparkgate records": Elsewhere(SCALE_OUT, "in the shared project"),
    # docs/statistics.md
    "sparkgate bench run URL --suite release-local --out DIR [--label r2] "
    "[--engine config/engines/vllm-recipe.yaml]": Elsewhere(
        BENCH_ENGINE,
        "bench run URL --suite (release-local trimmed) --out DIR --label r1",
    ),
    "sparkgate bench import RECIPE_BENCH_JSON --out DIR [--label r6]": Elsewhere(
        "tests/unit/bench/test_compare_cli.py::test_import_then_compare_recipe_reports"
    ),
    "sparkgate bench show ARM": Here(says="prefill", argv=("bench", "show", TP3_BENCH)),
    "sparkgate bench compare NEW OLD [OLD2 ...] [--again C2 ...] [--ledger L.json] [--tolerance 3] "
    "[--out DIR] [--json]": Elsewhere(
        COMPARE_CLI,
        "exit 1 here; exit 3 in test_two_arms_without_ledger_are_inconclusive_exit_3",
    ),
    "sparkgate bench ledger-add C1 C2 --ledger L.json": Elsewhere(
        COMPARE_CLI,
        "ledger-add of two A/A arms before the compare",
    ),
    # docs/session-workloads.md
    "sparkgate bench record URL --out SESSION.jsonl [--port 8001] [--host 127.0.0.1] "
    "[--secret-env NAME]... [--turns N] [--note TEXT]": Elsewhere(
        SESSION_RECORD, "bench record ENGINE --out FILE --port PORT --note T, ended by SIGINT"
    ),
    "python -m flows.research.agent_session http://127.0.0.1:8001 --turns 22": Elsewhere(
        SESSION_RECORD, "agent_session.main([PROXY_URL, '--turns', '22'])"
    ),
    "sparkgate bench replay URL SESSION.jsonl [--pace back_to_back|recorded] [--max-gap-s 60] "
    "[--turns N] [--engine config/engines/vllm-recipe.yaml] [--json]": Elsewhere(
        SESSION_RECORD, "bench replay ENGINE FILE --json, and --pace recorded --turns 3"
    ),
    "sparkgate bench run URL --suite agent-session --out DIR": Elsewhere(
        SESSION_SUITE, "bench run ENGINE --suite (agent-session, one sample, no warm-up) --out DIR"
    ),
    "sparkgate bench variance ARM ARM [ARM ...] [--json]": Elsewhere(
        "tests/unit/bench/test_variance.py::test_the_variance_command_prints_the_table",
        "bench variance of three written arms",
    ),
    "python -m flows.research.sessions_mc [--sessions 400]": Here(
        says="A/A sessions called slower",
        argv=("python", "-m", "flows.research.sessions_mc", "--sessions", "10"),
    ),
    "python -m flows.research.sessions RELEASE [--previous P] [--sessions N]": Elsewhere(
        f"{INTEGRATION}/test_sessions_script.py::test_one_aa_session_is_run_and_kept",
        "one A/A session of a trimmed r1 with the short suite on a private cluster",
    ),
    "python -m flows.research.shifted RELEASE SESSIONS... [--slowdown S ...] "
    "[--report-only W ...]": Elsewhere(
        "tests/unit/research/test_shifted.py::"
        "test_recorded_folders_are_read_in_arm_order_and_the_command_prints_the_table",
        "main() over written session folders, with --slowdown and --report-only",
    ),
    "python -m flows.research.noise SESSIONS... [--metric M]": Elsewhere(
        "tests/unit/research/test_noise.py::"
        "test_recorded_sessions_are_read_and_the_scattering_point_comes_out_noisier",
        "main() over written session folders",
    ),
    "python -m flows.research.montecarlo [--sessions 4000]": Here(
        says="false-positive",
        argv=("python", "-m", "flows.research.montecarlo", "--sessions", "100"),
    ),
    "python -m flows.research.overhead [--rate 5000 --streams 50]": Here(
        says="CPU per chunk",
        argv=(
            "python",
            "-m",
            "flows.research.overhead",
            "--rate",
            "500",
            "--streams",
            "5",
            "--seconds",
            "1",
        ),
    ),
    "python -m sparkengine.steadiness [--boots 6] [--seconds 40] [--pin] [--env K=V]": Elsewhere(
        "engine/tests/test_engine_steadiness.py::test_the_command_boots_measures_and_reports_json",
        "--boots 2 --seconds 6 --probe-seconds 1 --pin --json",
    ),
    "python -m flows.research.peer [--setup] --out DIR": Elsewhere(
        PEER_LIVE,
        "--out DIR with a small load; skipped when the peer venv (--setup) is absent",
    ),
    "sparkgate calibrate releases/r1.yaml [--arms 3] [--gated-only] [--cluster local] [--json]": (
        Elsewhere(
            CALIBRATE, "calibrate of an r1 overlay --arms 2 --gated-only on a private cluster"
        )
    ),
    # docs/recipe.md, the walkthrough: validate and render run here; the rest needs the real
    # triangle, and each names the test that runs the same command on a private cluster
    "make setup": Here("pip install", argv=("make", "-n", "-B", "setup")),
    "sparkgate validate examples/": Here(
        says="examples/spark-ds41f/releases/r6y.yaml: ok (release)"
    ),
    f"sparkgate render {R6Y} --cluster {TRIANGLE}": Here(says="shape: tp3-triangle"),
    f"sparkgate qualify {R6Y} --plan --cluster {TRIANGLE}": Here(
        says="run the release's build command"
    ),
    f"sparkgate doctor --cluster {TRIANGLE}": Elsewhere(
        "tests/unit/cluster/test_preflight_cli.py::test_doctor_json_and_warn_passes",
        f"needs the triangle; the test runs doctor on a test cluster file ({RECIPE_TEST})",
    ),
    f"sparkgate calibrate {R6X} --arms 3 --cluster {TRIANGLE}": Elsewhere(
        CALIBRATE, f"needs the triangle; calibrate --arms 2 of an r1 overlay ({RECIPE_TEST})"
    ),
    f"sparkgate qualify {R6X} --cluster {TRIANGLE}": Elsewhere(
        f"{INTEGRATION}/test_promote.py::test_approve_from_another_process_promotes",
        f"needs the triangle; a qualify that waits for a decision ({RECIPE_TEST})",
    ),
    "sparkgate approve r6x --by NAME --reason TEXT": Elsewhere(
        f"{INTEGRATION}/test_promote.py::test_approve_from_another_process_promotes",
        "needs the triangle's waiting qualify; approve from a second process",
    ),
    f"sparkgate qualify {R6Y} --cluster {TRIANGLE} --no-wait": Elsewhere(
        LAB_IMAGES, "needs the triangle; qualify of an r6y whose build is a command, on the lab"
    ),
    "sparkgate show r6y": Elsewhere(RECORDS_CLI, "show r2 --raw"),
    f"sparkgate promote {R6Y} --deploy -c {TRIANGLE} --by NAME --reason TEXT": Elsewhere(
        LAB_IMAGES, "needs the triangle; promote r6y --by lab --deploy on the lab"
    ),
    f"sparkgate rollback --deploy -c {TRIANGLE} --by NAME --reason TEXT": Elsewhere(
        f"{INTEGRATION}/test_promote.py::test_deploy_of_a_release_that_crashes_on_boot_rolls_back",
        "needs the triangle; the previous release redeployed by a rollback (here the automatic "
        f"one), and rollback --by in {PROMOTE_CLI}",
    ),
    # docs/host-probes.md
    "sparkgate doctor --cluster local": Elsewhere(
        "tests/unit/cluster/test_preflight.py::test_preflight_finds_flock_on_the_local_head",
        "run_preflight() on config/local.yaml with private workdirs (its ports may be taken by "
        "another run here): its host facts read OK",
    ),
    "sparkgate validate config/examples/tp3-triangle.yaml config/examples/tp4-ring.yaml": Here(
        says="config/examples/tp4-ring.yaml: ok (cluster)"
    ),
    "pytest tests/unit/gates/test_arm_hygiene.py tests/unit/cluster/test_preflight.py -q": (
        Elsewhere(
            "tests/unit/gates/test_arm_hygiene.py::"
            "test_a_limit_crossed_during_an_arm_marks_it_keeps_it_and_measures_it_again",
            "both files run in every unit run",
        )
    ),
    # docs/host-probes.md: your cluster against the published record
    "sparkgate bench run URL --suite single-stream --out DIR -c CLUSTER [--label mine]": Elsewhere(
        f"{CROSS_ENGINE}",
        "bench run ENGINE --suite (single-stream trimmed) --out DIR --label mine -c local",
    ),
    "sparkgate bench run URL --suite single-stream --out DIR --facts FACTS": Elsewhere(
        f"{CROSS_ENGINE}",
        "bench run ENGINE --suite (single-stream trimmed) --out DIR --facts (the r6d manifest)",
    ),
    "sparkgate bench compare DIR RECORD [--experiments DIR] [--out DIR]": Elsewhere(
        "tests/unit/record/test_record_arms.py::test_compare_a_users_arm_with_a_record_side_by_side",
        "bench compare ARM RECORD --out DIR, RECORD as a folder and as a name with --experiments",
    ),
    f"sparkgate bench compare {RECIPE_DATA}/2026-10-05-karmic-kraken-r6-tp4.json "
    f"{RECIPE_DATA}/baseline-2026-10-10-karmic-kraken-r6d.json": Here(says="nvidia_driver", code=1),
    "pytest tests/unit/cluster/test_host_layers.py tests/unit/gates/test_cross_session.py -q": (
        Elsewhere(
            "tests/unit/cluster/test_host_layers.py::"
            "test_a_reversible_host_change_qualifies_with_alternating_arms",
            "both files run in every unit run",
        )
    ),
    "pytest tests/lab/test_host_layers_over_ssh.py -q": Elsewhere(
        "tests/lab/test_host_layers_over_ssh.py::"
        "test_a_reversible_host_change_qualifies_with_alternating_arms_over_ssh",
        "every lab run (as root: network namespaces and sshd)",
    ),
    # docs/peer-check.md
    "python -m flows.research.peer --setup": NotRun(
        "downloads torch and guidellm into .sparkgate/peer-venv; test_peer_live uses that venv"
    ),
    "python -m flows.research.peer --out DIR": Elsewhere(
        PEER_LIVE,
        "with the small load below; skipped when the peer venv is absent",
    ),
    "python -m flows.research.peer --out DIR --loads 1:2,4:4 --max-tokens 16": Elsewhere(
        PEER_LIVE,
        "peer.main(['--out', DIR, '--loads', '1:2,4:4', '--max-tokens', '16'])",
    ),
}


def _blocks(page: Path) -> list[tuple[str, int, list[str]]]:
    """(tag, first line, lines) of every fenced block."""
    found: list[tuple[str, int, list[str]]] = []
    open_block: tuple[str, int, list[str]] | None = None
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        fence = FENCE.match(line)
        if open_block is None and fence:
            open_block = (fence.group(1), number, [])
        elif open_block is not None and line.strip() == "```":
            found.append(open_block)
            open_block = None
        elif open_block is not None:
            open_block[2].append(line)
    return found


def _commands(lines: list[str]) -> list[str]:
    """Command lines of an `sh` block: continuations joined, comments dropped."""
    commands: list[str] = []
    for line in lines:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line[0].isspace() and commands:
            commands[-1] += " " + line.strip()
        else:
            commands.append(line.strip())
    return [re.sub(r"\s+#\s.*$", "", command) for command in commands]


def shown() -> dict[str, str]:
    """Every command shown in the pages, with where it is shown first."""
    commands: dict[str, str] = {}
    for page in PAGES:
        for tag, line, lines in _blocks(page):
            if tag == "sh":
                for command in _commands(lines):
                    commands.setdefault(command, f"{page.relative_to(ROOT)}:{line}")
    return commands


def test_every_fenced_block_has_a_tag() -> None:
    untagged = [
        f"{p.relative_to(ROOT)}:{line}" for p in PAGES for tag, line, _ in _blocks(p) if not tag
    ]
    assert not untagged, f"tag these blocks (sh for commands, text otherwise): {untagged}"


def test_every_command_shown_is_mapped_and_every_mapping_is_shown() -> None:
    commands = shown()
    unmapped = {command: where for command, where in commands.items() if command not in COMMANDS}
    assert not unmapped, f"add these to COMMANDS with the test that runs them: {unmapped}"
    stale = sorted(set(COMMANDS) - set(commands))
    assert not stale, f"no page shows these any more: {stale}"


def test_every_named_test_exists() -> None:
    for command, check in COMMANDS.items():
        if isinstance(check, Elsewhere):
            path, name = check.test.split("::")
            source = (ROOT / path).read_text(encoding="utf-8")
            assert f"def {name}(" in source, f"{command!r}: {check.test} does not exist"


def test_not_run_stays_short() -> None:
    assert sum(isinstance(check, NotRun) for check in COMMANDS.values()) <= 2


def _program(command: str) -> list[str]:
    """The argv that names the command: `sparkgate bench compare`, `python -m MODULE sub`."""
    words = command.removeprefix("sudo ").split()
    if words[0] == "sparkgate":
        return words[:3] if words[1] in GROUPS else words[:2]
    if words[:2] == ["python", "-m"]:
        sub = [w for w in words[3:4] if re.fullmatch(r"[a-z][a-z-]*", w)]
        return [*words[:3], *sub]
    return []


def _help(program: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    if program[0] == "sparkgate":
        capsys.readouterr()
        assert main([*program[1:], "--help"]) == 0
        return capsys.readouterr().out
    done = subprocess.run(
        [sys.executable, *program[1:], "--help"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return done.stdout


def test_every_flag_shown_is_in_the_commands_help(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    helps: dict[str, str] = {}
    for command in shown():
        program = _program(command)
        if not program:
            continue
        key = " ".join(program)
        if key not in helps:
            helps[key] = _help(program, capsys)
        flags = re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", command.split(key, 1)[1])
        missing = [flag for flag in flags if flag not in helps[key]]
        assert not missing, f"{command!r}: {key} --help has no {missing}"


HERE = [command for command, check in COMMANDS.items() if isinstance(check, Here)]


@pytest.mark.parametrize("command", HERE)
def test_command_runs_as_shown(
    command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    check = COMMANDS[command]
    assert isinstance(check, Here)
    argv = list(check.argv) or command.split()
    monkeypatch.chdir(ROOT)
    if argv[0] == "sparkgate" or argv[0] not in ("make", "python"):
        capsys.readouterr()
        code = main(argv[1:] if argv[0] == "sparkgate" else argv)
        captured = capsys.readouterr()
        output = captured.out + captured.err
    else:
        program = [sys.executable, *argv[1:]] if argv[0] == "python" else argv
        done = subprocess.run(program, capture_output=True, text=True, check=False, cwd=ROOT)
        code, output = done.returncode, done.stdout + done.stderr
    assert code == check.code, output[-3000:]
    assert check.says in " ".join(output.split()), output[-3000:]  # rich wraps long lines


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_relative_link_resolves() -> None:
    broken: list[str] = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.name}: {target}")
            elif anchor and linked.suffix == ".md":
                headings = re.findall(r"^#+ (.+)$", linked.read_text(encoding="utf-8"), re.M)
                if anchor not in {_slug(h) for h in headings}:
                    broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, broken


WRITTEN = {"config/promoted.yaml"}  # written by `sparkgate promote`, not shipped


def test_every_source_path_named_exists() -> None:
    """Module and file paths the pages name (`flows/...`, `tests/...`, `config/...`) exist."""
    missing: list[str] = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for path in re.findall(r"`((?:flows|tests|config|releases|engine)/[\w./-]+)`", text):
            shipped = path not in WRITTEN and not any(ch in path for ch in "<*")
            if shipped and not (ROOT / path).exists():
                missing.append(f"{page.name}: {path}")
    assert not missing, missing
