"""Routing decisions as JSON lines, for `tandem policy replay`. Never the prompt or completion text."""

import json
import logging
import logging.handlers
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
            _end_a_torn_line(path)
            # Thread-safe, appends; reopened where the file was moved away (logrotate's default: every record after
            # went into the rotated file, and the configured one never came back; a review)
            handler = logging.handlers.WatchedFileHandler(path, encoding="utf-8")
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


def _end_a_torn_line(path: Path) -> None:
    """Ends the log's last line where a crash or a full disk cut it short: the next record went on the same line,
    and replay refused the whole log at it (a review)."""
    try:
        with open(path, "rb+") as f:
            if f.seek(0, 2) and (f.seek(-1, 2), f.read(1))[1] != b"\n":
                f.write(b"\n")
    except FileNotFoundError:
        pass
