"""flows.secrets: which values are secret, how each shape of data is redacted, references."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from flows.errors import SpecError
from flows.secrets import (
    REDACTED,
    Secrets,
    collect,
    explicit_env,
    is_secret,
    reference_problem,
    resolve,
    resolve_env,
)

HF = "hf_secret_value_123"


@pytest.mark.parametrize(
    "name",
    ["HF_TOKEN", "api_key", "OPENAI_API_KEY", "DB_PASSWORD", "aws_secret_access_key",
     "SPARKENGINE_BOOT_TOKEN", "BASIC_AUTH", "GOOGLE_CREDENTIALS", "hf-token", "apikey"],
)  # fmt: skip
def test_secret_names_are_recognised_in_any_case(name: str) -> None:
    assert is_secret(name)


@pytest.mark.parametrize(
    "name",
    ["PYTHONUNBUFFERED", "MAX_TOKENS", "max_tokens", "tokenizer", "AUTHOR", "NCCL_IB",
     # the recipe's launch: token counts, not tokens (docs/recipe.md)
     "--long-prefill-token-threshold", "VLLM_MULTI_STREAM_GEMM_TOKEN_THRESHOLD"],
)  # fmt: skip
def test_ordinary_names_are_not_secret(name: str) -> None:
    assert not is_secret(name)


def test_a_cluster_listed_key_is_secret() -> None:
    assert is_secret("NCCL_IB", ["NCCL_IB"])
    assert collect([{"NCCL_IB": "sensitive-value"}], ["NCCL_IB"]).mapping(
        {"NCCL_IB": "sensitive-value"}
    ) == {"NCCL_IB": REDACTED}


def test_a_mapping_is_redacted_by_key_and_keeps_references() -> None:
    env = {"HF_TOKEN": HF, "KEY_REF": "{env:HF_TOKEN}", "MODE": "fast", "EMPTY_TOKEN": ""}
    assert collect([env]).mapping(env) == {
        "HF_TOKEN": REDACTED, "KEY_REF": "{env:HF_TOKEN}", "MODE": "fast", "EMPTY_TOKEN": "",
    }  # fmt: skip


def test_an_argv_is_redacted_in_every_form() -> None:
    found = collect([{"HF_TOKEN": HF}])
    argv = ["serve", "--api-key", "k-1234567890", "--hf-token=abcdefghijk", "HF_TOKEN=x",
            "--max-tokens", "16", f"--header=Bearer {HF}"]  # fmt: skip
    assert found.argv(argv) == [
        "serve", "--api-key", REDACTED, f"--hf-token={REDACTED}", f"HF_TOKEN={REDACTED}",
        "--max-tokens", "16", f"--header=Bearer {REDACTED}",
    ]  # fmt: skip


def test_free_text_loses_every_literal_secret_value() -> None:
    found = collect([{"HF_TOKEN": HF, "SHORT_KEY": "1"}])
    text = f"python -m x --token {HF} && echo {HF}; count 1"
    assert found.text(text) == f"python -m x --token {REDACTED} && echo {REDACTED}; count 1"


def test_docker_inspect_json_is_redacted_by_key_and_value() -> None:
    found = collect([{"HF_TOKEN": HF}])
    inspect = {
        "Config": {"Env": [f"HF_TOKEN={HF}", "PATH=/usr/bin"], "Cmd": ["serve", HF]},
        "HostConfig": {"RegistryAuth": "c2VjcmV0"},
        "Args": [f"--token={HF}"],
        "Count": 3,
    }
    clean = found.json(inspect)
    assert HF not in str(clean)
    assert clean["Config"]["Env"] == [f"HF_TOKEN={REDACTED}", "PATH=/usr/bin"]
    assert clean["HostConfig"]["RegistryAuth"] == REDACTED
    assert clean["Count"] == 3


def test_spec_dumps_redact_env_args_options_but_keep_data_keys() -> None:
    found = collect([{"HF_TOKEN": HF}])
    dump = {
        "engine": {"env": {"HF_TOKEN": HF, "MODE": "x"}, "options": {"api_key": "abcdefgh1"}},
        "build": {"args": {"PIP_PASSWORD": "p"}},
        "gates": {"determinism": {"max_tokens": 16, "first_token_s": 1.5}},
        "notes": f"uses {HF}",
    }
    clean = found.spec(dump)
    assert clean["engine"]["env"] == {"HF_TOKEN": REDACTED, "MODE": "x"}
    assert clean["engine"]["options"] == {"api_key": REDACTED}
    assert clean["build"]["args"] == {"PIP_PASSWORD": REDACTED}
    assert clean["gates"] == dump["gates"]
    assert clean["notes"] == f"uses {REDACTED}"


def test_secrets_merge() -> None:
    both = Secrets(frozenset({"A"}), ("aaaaaaaaaa",)).merged(Secrets(frozenset({"B"}), ("b",)))
    assert both.names == {"A", "B"}
    assert both.values == ("aaaaaaaaaa", "b")


def test_env_and_file_references_resolve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKGATE_TEST_SECRET", "from-env")
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "hf").write_text("from-file\n")
    env = {"A": "{env:SPARKGATE_TEST_SECRET}", "B": "{file:secrets/hf}", "C": "plain"}
    assert resolve_env(env, tmp_path) == {"A": "from-env", "B": "from-file", "C": "plain"}
    # a literal value with a colon placeholder-like shape is not a reference
    assert resolve("{option.x}") == "{option.x}"


def test_a_missing_reference_names_the_key_never_a_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SPARKGATE_NOT_SET", raising=False)
    with pytest.raises(SpecError, match=r"env\.X: \{env:SPARKGATE_NOT_SET\}: .* not set"):
        resolve_env({"X": "{env:SPARKGATE_NOT_SET}"}, tmp_path)
    with pytest.raises(SpecError, match="cannot read"):
        resolve_env({"X": "{file:missing}"}, tmp_path)


def test_a_file_reference_stays_inside_the_project(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.write_text("private")
    project = tmp_path / "project"
    project.mkdir()
    (project / "link").symlink_to(outside)
    assert reference_problem("{file:../outside}") is not None
    assert reference_problem("{file:/etc/passwd}") is not None
    assert reference_problem("{env:1BAD}") is not None
    with pytest.raises(SpecError, match="outside the project") as caught:
        resolve("{file:link}", key="env.X", root=project)
    assert "private" not in str(caught.value)


def test_the_explicit_environment_keeps_only_allowed_names() -> None:
    script = f'exec {explicit_env(["WANTED"])} "$@"'
    done = subprocess.run(
        ["sh", "-c", script, "sh", "env"],
        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "WANTED": "1", "SSH_AUTH_SOCK": "/s",
             "HF_TOKEN": "operator"},
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    names = {line.split("=", 1)[0] for line in done.stdout.splitlines()}
    assert names == {"PATH", "LANG", "WANTED"}


def test_the_explicit_environment_refuses_a_shell_name() -> None:
    with pytest.raises(SpecError):
        explicit_env(["A;rm -rf /"])


def test_an_unfilled_placeholder_is_shown_as_written() -> None:
    profile_env = {"SPARKENGINE_BOOT_TOKEN": "{boot_token}", "HF_TOKEN": "{option.hf}"}
    found = collect([profile_env])
    assert found.values == ()
    assert found.mapping(profile_env) == profile_env
