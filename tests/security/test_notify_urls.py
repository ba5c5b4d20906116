"""Attack: `sparkgate notify` let the Prefect server post to 100.100.100.200 (shared address
space, a cloud metadata service) and to link-local 169.254.169.254 written as NAT64
(`64:ff9b::a9fe:a9fe`) or 6to4 (`2002:a9fe:a9fe::`). Every address a notify URL resolves to must
now be public, an IPv6 address carrying an IPv4 one is judged by the IPv4 one, and a refused URL
is exit 2 before the Prefect server is contacted."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from flows.pipeline.notify import url_problem
from tests.support.overlays import ROOT


@pytest.mark.parametrize(
    "url",
    [
        "http://100.100.100.200/latest/meta-data",  # shared address space (RFC 6598)
        "http://169.254.169.254/",
        "http://[64:ff9b::a9fe:a9fe]/",  # NAT64 of 169.254.169.254
        "http://[64:ff9b:1::a9fe:a9fe]/",  # local-use NAT64
        "http://[2002:a9fe:a9fe::1]/",  # 6to4 of 169.254.169.254
        "http://[::ffff:169.254.169.254]/",  # IPv4-mapped
        "http://[2001:0:4136:e378:8000:63bf:5601:5601]/",  # Teredo of a private client
        "http://127.0.0.1:8080/hook",
        "http://10.1.2.3/",
        "http://[fe80::1]/",
        "http://[::1]/",
        "http://0.0.0.0/",
        "http://224.0.0.1/",
        "http://localhost/",
    ],
)
def test_a_url_reaching_inside_the_network_is_refused(url: str) -> None:
    problem = url_problem(url)
    assert problem is not None
    assert "not a public address" in problem


@pytest.mark.parametrize(
    "url", ["https://1.1.1.1/hook", "http://[2606:4700:4700::1111]/", "http://[64:ff9b::101:101]/"]
)
def test_a_public_url_passes(url: str) -> None:
    assert url_problem(url) is None


def test_a_name_is_judged_by_every_address_it_resolves_to() -> None:
    def resolve(_host: str) -> list[str]:
        return ["93.184.216.34", "100.100.100.200"]

    assert "100.100.100.200" in str(url_problem("https://hooks.example.org/x", resolve))


def test_notify_refuses_before_contacting_the_server() -> None:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "flows", "notify", "http://user:pw-in-the-url@100.100.100.200/x"],
        capture_output=True, text=True, timeout=120, cwd=ROOT, check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "PREFECT_API_URL": "http://127.0.0.1:9/api"},
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "not a public address" in done.stderr
    assert "pw-in-the-url" not in done.stdout + done.stderr
    assert time.perf_counter() - started < 30, "the server was contacted first"
