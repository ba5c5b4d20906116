"""The few non-streaming calls the benchmark makes: models, tokenize, Prometheus metrics.

They are rare and small, so plain blocking HTTP (urllib) keeps them simple; the streaming
requests that are measured go through `flows.bench.client`. Bodies are read through the wire
models of `flows.engine_api.wire`; metrics through `flows.engine_api.metrics`.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from flows.engine_api.metrics import DEFAULT_METRICS, OPTIONAL_METRICS, parse_prometheus
from flows.engine_api.wire import ModelList, TokenizeResponse
from flows.errors import BenchError

__all__ = ["DEFAULT_METRICS", "Endpoint", "parse_prometheus"]


@dataclass
class Endpoint:
    """An OpenAI-compatible server: base URL, optional API key, metric names.

    `optional_names` are read when the server exports them and never reported missing (the
    prefix-cache counters, say, which only a session replay needs).
    """

    base_url: str
    api_key: str | None = None
    metric_names: dict[str, str] | None = None
    metrics_path: str = "/metrics"
    timeout_s: float = 30.0
    optional_names: dict[str, str] = field(default_factory=lambda: dict(OPTIONAL_METRICS))

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise BenchError(f"{self.base_url}: not an http(s) URL")
        self.base_url = self.base_url.rstrip("/")

    def _request(self, path: str, body: Any = None) -> bytes:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.base_url + path, data=data, headers=headers)  # noqa: S310 - scheme checked
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:  # noqa: S310
                return bytes(response.read())
        except urllib.error.HTTPError as error:
            detail = error.read()[:300].decode(errors="replace")
            raise BenchError(f"{self.base_url}{path}: HTTP {error.code}: {detail}") from error
        except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
            raise BenchError(f"{self.base_url}{path}: {error}") from error

    def models(self) -> dict[str, int | None]:
        """Served model ids and their context length when the server says (GET /v1/models)."""
        listing = ModelList.model_validate_json(self._request("/v1/models"))
        return {card.id: card.max_model_len for card in listing.data}

    def tokenize(self, text: str, model: str | None = None) -> list[int]:
        """Token ids of `text` by the server's own tokenizer (POST /tokenize)."""
        body: dict[str, Any] = {"prompt": text}
        if model:
            body["model"] = model
        return TokenizeResponse.model_validate_json(self._request("/tokenize", body)).tokens

    def metrics_text(self) -> str:
        """The server's whole Prometheus exposition, labels included."""
        return self._request(self.metrics_path).decode()

    def metrics(self) -> dict[str, float]:
        """The mapped metrics (running, waiting, token counters) that the server exports."""
        names = {**self.optional_names, **(self.metric_names or DEFAULT_METRICS)}
        values = parse_prometheus(self.metrics_text())
        return {key: values[name] for key, name in names.items() if name in values}

    def missing_metrics(self) -> list[str]:
        """Mapped metrics the server does not export (their checks are then off)."""
        names = self.metric_names or DEFAULT_METRICS
        found = self.metrics()
        return [key for key in names if key not in found]

    def wait_idle(self, timeout_s: float, poll_s: float = 0.05) -> dict[str, float]:
        """Wait until running = waiting = 0 and return that snapshot.

        Raises:
            BenchError: if the engine is still busy after `timeout_s`.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            snapshot = self.metrics()
            if not snapshot.get("running") and not snapshot.get("waiting"):
                return snapshot
            if time.monotonic() > deadline:
                raise BenchError(
                    f"{self.base_url}: not idle after {timeout_s:g}s "
                    f"(running={snapshot.get('running')}, waiting={snapshot.get('waiting')})"
                )
            time.sleep(poll_s)
