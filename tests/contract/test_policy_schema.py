"""policies/schema.json is generated from the pydantic models and must not drift from them."""

import json
from pathlib import Path

import jsonschema
import yaml

from gateway.policy.json_schema import SCHEMA_PATH, render


def test_schema_json_is_fresh():
    assert SCHEMA_PATH.read_text() == render(), "policies/schema.json is stale: run `make schema`"


def shipped_policies() -> list[Path]:
    paths = sorted(SCHEMA_PATH.parent.glob("*.yaml"))
    # the ones the docs name: a glob that found nothing (a moved directory) must not pass
    assert {"default.yaml", "latency-first.yaml", "cost-first.yaml"} <= {p.name for p in paths}, paths
    return paths


def test_every_shipped_policy_satisfies_the_json_schema():
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA_PATH.read_text()))
    for path in shipped_policies():
        validator.validate(yaml.safe_load(path.read_text()))


def test_every_shipped_policy_loads():
    from gateway.policy.loader import load_policy

    for path in shipped_policies():
        assert load_policy(path).rules, path
