"""How long a worker's requests in flight get when it stops: TANDEM_SHUTDOWN_GRACE_S, as the gateway reads it."""

import pytest

from serving.worker_service import SHUTDOWN_GRACE_S, shutdown_grace_s


def test_the_grace_is_the_variables_and_a_bad_one_is_refused_in_a_line(monkeypatch):
    """5 s cut every stream a rolling update found running, where the pod gave the worker 60 (a review)."""
    monkeypatch.delenv("TANDEM_SHUTDOWN_GRACE_S", raising=False)
    assert shutdown_grace_s() == SHUTDOWN_GRACE_S == 5.0
    monkeypatch.setenv("TANDEM_SHUTDOWN_GRACE_S", "50")
    assert shutdown_grace_s() == 50.0
    for bad in ("soon", "-1", "inf", "nan"):
        monkeypatch.setenv("TANDEM_SHUTDOWN_GRACE_S", bad)
        with pytest.raises(SystemExit, match="TANDEM_SHUTDOWN_GRACE_S=.*: seconds, a number from 0"):
            shutdown_grace_s()
