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
