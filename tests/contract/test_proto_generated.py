"""The checked-in generated code must be what `make proto` produces from worker.proto."""

from proto.regen import stale_files


def test_generated_code_matches_proto():
    assert stale_files() == [], "proto/gen is stale: run `make proto` and commit the result"
