"""Tokenize once: the gateway's chat ids must equal HF apply_chat_template's."""

import pytest
from transformers import AutoTokenizer

from serving.openai.chat_tokenizer import ChatTokenizer

CONVERSATIONS = [
    [{"role": "user", "content": "Hello"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Ünïcödé and 東京?"}],
    [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c\nd"}],
]


@pytest.mark.parametrize("messages", CONVERSATIONS)
def test_chat_ids_equal_hf(demo_checkpoint, messages):
    expected = AutoTokenizer.from_pretrained(demo_checkpoint).apply_chat_template(
        messages, add_generation_prompt=True, return_dict=True
    )["input_ids"]
    assert ChatTokenizer(demo_checkpoint).encode_chat(messages) == expected


def test_encode_is_the_tokenizers_own_encode_on_any_text(demo_checkpoint):
    """encode skips the offsets (encode_batch_fast); the ids must be the full encode's, on text in any script."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    chat = ChatTokenizer(demo_checkpoint)

    @settings(max_examples=300, deadline=None)
    @given(st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=200))
    def same(text):
        assert chat.encode(text) == chat.tokenizer.encode(text, add_special_tokens=False).ids

    same()


def test_a_name_the_template_drops_is_written_into_the_content(demo_checkpoint, tmp_path):
    """(a review) OpenAI's message `name` tells participants of one role apart; the demo's template (as many do)
    never writes it, and it was dropped: the same prompt with or without it. It is written
    before the content where the template drops it, and left to a template that writes it."""
    import shutil

    chat = ChatTokenizer(demo_checkpoint)
    talk = [
        {"role": "system", "content": "Moderate.", "name": "rules"},
        {"role": "user", "content": "I say yes.", "name": "Alice"},
        {"role": "user", "content": "I say no.", "name": "Bob"},
        {"role": "assistant", "content": "Noted.", "name": "mod"},
        {"role": "developer", "content": "Be fair.", "name": "ops"},
    ]
    text = chat.tokenizer.decode(chat.encode_chat(talk), skip_special_tokens=False)
    for said in ("rules: Moderate.", "Alice: I say yes.", "Bob: I say no.", "mod: Noted.", "ops: Be fair."):
        assert said in text, text
    assert chat.unnamed_roles == {"system", "user", "assistant"}

    writes = tmp_path / "writes-names"
    shutil.copytree(demo_checkpoint, writes)
    (writes / "chat_template.jinja").write_text(
        "{% for m in messages %}<{{ m.role }}{% if m.name %} name={{ m.name }}{% endif %}>{{ m.content }}\n"
        "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    own = ChatTokenizer(writes)
    assert own.unnamed_roles == frozenset()
    text = own.tokenizer.decode(own.encode_chat(talk[1:3]), skip_special_tokens=False)
    assert "<user name=Alice>I say yes." in text and "Alice:" not in text
