"""Routing decisions as JSON lines, for `tandem policy replay`. Never the prompt or completion text."""

import contextlib
import json
import logging
import logging.handlers
import sys
import time
from pathlib import Path

from gateway import metrics
from gateway.classify.features import RequestFeatures
from gateway.policy.explain import features_dict

log = logging.getLogger(__name__)


class _Appender(logging.handlers.WatchedFileHandler):
    """Thread-safe, appends; reopened where the file was moved away (logrotate's default: every record after went
    into the rotated file, and the configured one never came back; a review). A record it cannot write (the folder
    gone, a full disk, no file descriptors left) is dropped and counted, said in one line until one is written
    again: it never fails the request it records (a review: the reopening raised past logging's own guard, each
    request was a 500, and the slots of its tenant were held for good)."""

    failing: str | None = None  # why the last record could not be written

    def emit(self, record: logging.LogRecord) -> None:
        self._failed = False
        try:
            super().emit(record)  # reopening (after a move) is outside FileHandler's guard
        except Exception as exc:  # noqa: BLE001 - see the class
            self._dropped(exc)
        if not self._failed and self.failing is not None:
            log.warning("decision log %s: written again (%s before)", self.baseFilename, self.failing)
            self.failing = None

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        self._dropped(None)

    def _dropped(self, exc: BaseException | None) -> None:
        self._failed = True
        stream, self.stream = self.stream, None  # its buffer held records it would write later, counted as dropped
        if stream is not None:  # (a review); the next record opens the file again
            with contextlib.suppress(OSError, ValueError):
                stream.close()
        exc = exc or sys.exc_info()[1]
        why = f"{type(exc).__name__}: {getattr(exc, 'strerror', None) or exc}" if exc else "unknown"
        metrics.DECISION_LOG_DROPPED.inc()
        if self.failing is None:
            log.error("decision log %s: cannot write (%s); records are dropped, and counted in "
                      "tandem_gateway_decision_log_dropped_total, until it can", self.baseFilename, why)  # fmt: skip
        self.failing = why


class DecisionLog:
    def __init__(self, path: Path) -> None:
        self._logger = logging.getLogger(f"tandem.decisions.{path}")
        self._logger.propagate = False
        self._logger.setLevel(logging.INFO)
        if not self._logger.handlers:
            if Path(path).is_file():  # (a pipe or /dev/stdout has no last line to end)
                _end_a_torn_line(path)
            handler = _Appender(path, encoding="utf-8")
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

    def usage(
        self,
        request_id: str,
        tenant: str,
        user: str | None,
        usage,
        status: str,
        choice: int | None = None,
        counts_prompt: bool = True,
    ) -> None:
        """When a request ends: its tokens, per tenant and (for requests that are not private) OpenAI's `user`. A
        request of several choices (`n`, a completions batch's prompts) writes a line per `choice`, its prompt's
        tokens on the prompt's first choice only (`counts_prompt`), so a tenant's lines add up to the usage its
        callers were told (a review: n=3 counted the prompt three times)."""
        entry = {"kind": "usage", "ts": round(time.time(), 3), "request_id": request_id, "tenant": tenant,
                 "user": user, "status": status}  # fmt: skip
        if choice is not None:
            entry["choice"] = choice
        if usage is not None:
            entry |= {
                "prompt_tokens": usage.prompt_tokens if counts_prompt else 0,
                "completion_tokens": usage.completion_tokens,
                "cached_tokens": usage.cached_prompt_tokens if counts_prompt else 0,
            }
        # In ASCII: a `user` holding U+2028 or U+0085 was a line break where a reader splits lines as Python's
        # splitlines() does (a review)
        self._logger.info(json.dumps(entry, separators=(",", ":")))

    def close(self) -> None:
        for handler in list(self._logger.handlers):
            with contextlib.suppress(OSError):  # a full disk fails the last flush: the shutdown goes on (a review)
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
    except OSError as exc:  # a disk still full: the gateway starts, and replay counts the cut record (a review)
        log.warning("decision log %s: could not end its last line (%s)", path, exc.strerror or exc)
