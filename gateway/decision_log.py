"""Routing decisions as JSON lines, for `tandem policy replay`. Never the prompt or completion text."""

import json
import logging
import time
from pathlib import Path

from gateway.classify.features import RequestFeatures
from gateway.policy.explain import features_dict


class DecisionLog:
    def __init__(self, path: Path) -> None:
        self._logger = logging.getLogger(f"tandem.decisions.{path}")
        self._logger.propagate = False
        self._logger.setLevel(logging.INFO)
        if not self._logger.handlers:
            handler = logging.FileHandler(path, encoding="utf-8")  # thread-safe, appends
            handler.setFormatter(logging.Formatter("%(message)s"))
            self._logger.addHandler(handler)

    def record(
        self,
        request_id: str,
        features: RequestFeatures,
        rule: str | None,
        pool: str | None,
        backend: str | None,
        status: str,
        x_request_id: str | None = None,
        prompt: int | None = None,
    ) -> None:
        """`request_id` is the response's `id`; `x_request_id` the X-Request-Id its response carried; `prompt` the
        prompt's place in a completions batch (one decision each)."""
        entry = {
            "ts": round(time.time(), 3),
            "request_id": request_id,
            "x_request_id": x_request_id,
            "features": features_dict(features),
            "rule": rule,
            "pool": pool,
            "backend": backend,
            "status": status,
        }
        if prompt is not None:
            entry["prompt"] = prompt
        self._logger.info(json.dumps(entry, separators=(",", ":")))

    def usage(self, request_id: str, tenant: str, user: str | None, usage, status: str) -> None:
        """When a request ends: its tokens, per tenant and (for requests that are not private) OpenAI's `user`."""
        entry = {"kind": "usage", "ts": round(time.time(), 3), "request_id": request_id, "tenant": tenant,
                 "user": user, "status": status}  # fmt: skip
        if usage is not None:
            entry |= {
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
                "cached_tokens": usage.cached_prompt_tokens,
            }
        # In ASCII: a `user` holding U+2028 or U+0085 was a line break where a reader splits lines as Python's
        # splitlines() does (a review)
        self._logger.info(json.dumps(entry, separators=(",", ":")))

    def close(self) -> None:
        for handler in list(self._logger.handlers):
            handler.close()
            self._logger.removeHandler(handler)
