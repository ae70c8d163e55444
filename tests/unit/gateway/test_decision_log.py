"""The decision log's records (gateway/decision_log.py): one line each, whatever the caller's words."""

import json
from pathlib import Path
from types import SimpleNamespace

from gateway.decision_log import DecisionLog


def test_a_usage_record_is_one_line_whatever_the_user_writes(tmp_path):
    path = tmp_path / "decisions.jsonl"
    log = DecisionLog(path)
    users = ["u-1", "a\u2028b", "c\u0085d", "e\u2029f", "名前"]
    for user in users:
        log.usage("chatcmpl-1", "default", user, SimpleNamespace(prompt_tokens=3, completion_tokens=2,
                                                                 cached_prompt_tokens=0), "ok")  # fmt: skip
    log.close()
    text = path.read_text(encoding="utf-8")
    assert len(text.splitlines()) == len(users)
    assert [json.loads(line)["user"] for line in text.splitlines()] == users


def test_a_log_moved_away_by_logrotate_is_made_again(tmp_path):
    """After `mv decisions.jsonl decisions.jsonl.1` (logrotate's default) every record went into the moved file, and
    the configured one never came back (a review)."""
    path = tmp_path / "decisions.jsonl"
    log = DecisionLog(path)
    usage = SimpleNamespace(prompt_tokens=3, completion_tokens=2, cached_prompt_tokens=0)
    log.usage("chatcmpl-1", "default", None, usage, "ok")
    path.rename(tmp_path / "decisions.jsonl.1")
    log.usage("chatcmpl-2", "default", None, usage, "ok")
    log.close()
    assert [json.loads(line)["request_id"] for line in path.read_text().splitlines()] == ["chatcmpl-2"]
    assert json.loads((tmp_path / "decisions.jsonl.1").read_text())["request_id"] == "chatcmpl-1"


def test_a_log_that_cannot_be_written_drops_records_and_never_fails_its_request(tmp_path, caplog):
    """(a review) With the log's folder gone, reopening it after the move raised past logging's own guard: every
    routed request was a 500 and its tenant's slot was held for good. Now the record is dropped, counted, said once,
    and records are written again once the folder is back."""
    from gateway import metrics

    folder = tmp_path / "logs"
    folder.mkdir()
    path = folder / "decisions.jsonl"
    log = DecisionLog(path)
    usage = SimpleNamespace(prompt_tokens=3, completion_tokens=2, cached_prompt_tokens=0)
    dropped = metrics.DECISION_LOG_DROPPED._value.get()
    log.usage("chatcmpl-1", "default", None, usage, "ok")
    path.unlink()
    folder.rmdir()
    with caplog.at_level("WARNING", logger="gateway.decision_log"):
        for i in range(3):
            log.usage(f"chatcmpl-gone-{i}", "default", None, usage, "ok")  # no exception
        folder.mkdir()
        log.usage("chatcmpl-back", "default", None, usage, "ok")
    log.close()
    assert metrics.DECISION_LOG_DROPPED._value.get() - dropped == 3
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2 and "cannot write (FileNotFoundError" in said[0] and "written again" in said[1], said
    assert [json.loads(line)["request_id"] for line in path.read_text().splitlines()] == ["chatcmpl-back"]


def test_on_a_full_disk_records_are_dropped_counted_once_each_and_start_and_shutdown_go_on(tmp_path, monkeypatch):
    """(a review) On a full disk the buffered stream wrote some records counted as dropped later, close() raised
    (uvicorn: "Application shutdown failed"), and a start that had to end a cut line failed the gateway's start."""
    from gateway import decision_log, metrics

    usage = SimpleNamespace(prompt_tokens=3, completion_tokens=2, cached_prompt_tokens=0)
    dropped = metrics.DECISION_LOG_DROPPED._value.get()
    log = DecisionLog(Path("/dev/full"))  # every write: ENOSPC
    for i in range(5):
        log.usage(f"chatcmpl-{i}", "default", None, usage, "ok")
    log.close()  # no exception
    assert metrics.DECISION_LOG_DROPPED._value.get() - dropped == 5

    cut = tmp_path / "decisions.jsonl"
    cut.write_text('{"ts": 1')

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(decision_log, "open", full, raising=False)
    DecisionLog(cut).close()  # starts: the line stays cut, and replay counts it
