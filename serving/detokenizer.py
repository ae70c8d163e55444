"""Incremental detokenization with stop strings.

Text is released only when it is final: not the tail of an unfinished UTF-8
sequence, and not a possible beginning of a stop string. A matched stop
string is not part of the output (OpenAI semantics).
"""

from tokenizers import Tokenizer

REPLACEMENT = "\ufffd"


class IncrementalDetokenizer:
    def __init__(self, tokenizer: Tokenizer, stop_strings: tuple[str, ...] = ()) -> None:
        self._tokenizer = tokenizer
        self._stop_strings = tuple(s for s in stop_strings if s)
        self._holdback = max((len(s) - 1 for s in self._stop_strings), default=0)
        self._token_ids: list[int] = []
        # Only a window is decoded per token: ids[_prefix_offset:_read_offset] were decoded
        # already, ids[_read_offset:] are new (several while a UTF-8 character is incomplete).
        self._prefix_offset = self._read_offset = 0
        self._text = ""  # all decoded text so far
        self._released = 0  # characters of _text already returned
        self.is_stopped = False

    def push(self, token_id: int) -> str:
        """Add a token; return the newly final text. Sets is_stopped on a stop string."""
        assert not self.is_stopped
        self._token_ids.append(token_id)
        ids = self._token_ids
        seen = self._tokenizer.decode(ids[self._prefix_offset : self._read_offset], skip_special_tokens=True)
        window = self._tokenizer.decode(ids[self._prefix_offset :], skip_special_tokens=True)
        if window.endswith(REPLACEMENT) or len(window) <= len(seen):
            return ""  # an incomplete multi-byte character (wait for its next byte), or no text
        self._text += window[len(seen) :]
        self._prefix_offset, self._read_offset = self._read_offset, len(ids)
        for stop in self._stop_strings:
            # A stop can only newly appear in the unreleased tail plus what was held back.
            at = self._text.find(stop, max(0, self._released - len(stop)))
            if at != -1:
                self.is_stopped = True
                self._text = self._text[:at]
                return self._release(len(self._text))
        return self._release(len(self._text) - self._holdback)

    def flush(self) -> str:
        """Release what was held back (the sequence ended for another reason)."""
        return self._release(len(self._text))

    def _release(self, upto: int) -> str:
        if upto <= self._released:
            return ""
        out = self._text[self._released : upto]
        self._released = upto
        return out
