"""The decision log's records (gateway/decision_log.py): one line each, whatever the caller's words."""

import json
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
