"""The field table (docs/api.md's source) names exactly what the request models declare and refuse."""

import pytest

from gateway.api.fields import BOTH, CHAT, COMPLETIONS, FIELDS, REFUSED
from serving.openai.schemas import UNSUPPORTED, ChatCompletionRequest, CompletionRequest

MODELS = {CHAT: ChatCompletionRequest, COMPLETIONS: CompletionRequest}


def test_every_declared_or_refused_field_is_in_the_table_and_nothing_else():
    declared = set(ChatCompletionRequest.model_fields) | set(CompletionRequest.model_fields)
    assert set(FIELDS) == declared | set(UNSUPPORTED)
    assert {name for name, (_, status, _) in FIELDS.items() if status == REFUSED} == set(UNSUPPORTED)


@pytest.mark.parametrize("name", [n for n, (_, status, _) in FIELDS.items() if status != REFUSED])
def test_each_served_field_is_declared_where_the_table_says(name):
    where = FIELDS[name][0]
    for endpoint, model in MODELS.items():
        assert (name in model.model_fields) == (where in (BOTH, endpoint)), (name, endpoint)


@pytest.mark.parametrize("name", sorted(UNSUPPORTED))
def test_each_refused_field_is_named_in_the_refusal(name):
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], name: {"asks": "something"}}
    assert ChatCompletionRequest.model_validate(body).refused_field()[0] == name


def test_an_unknown_field_is_named():
    body = {"model": "m", "prompt": "hi", "frobnicate": 1}
    assert CompletionRequest.model_validate(body).refused_field() == ("frobnicate", "unknown field: frobnicate")
