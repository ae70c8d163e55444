"""What a stand-in for this device's local agent answers the SDK's health probe: an edge agent that holds the test
session's token (tests/conftest.py's TANDEM_LOCAL_TOKEN_FILE, written here if no agent has yet), and proves it."""

import json

from tandem_sdk.local_token import CHALLENGE_HEADER, load_or_create, proof


def health_answer(headers) -> bytes:
    return json.dumps({"kind": "edge", "proof": proof(load_or_create(), headers.get(CHALLENGE_HEADER, ""))}).encode()
