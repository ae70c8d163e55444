"""Incremental detokenization with stop strings.

Text is released only when it is final: not the tail of an unfinished UTF-8
sequence, and not a possible beginning of a stop string. A matched stop
string is not part of the output (OpenAI semantics). A token leaves with the
first character of its text (with its score: OpenAI's log-probabilities
describe the returned text), and the tokens of a matched stop string never
leave: they were scored before the stop could be seen.
"""

import os
from collections import deque

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
        # Tokens not handed out yet, in order: [id, logprob, top, where its text starts in _text (None: undecoded)]
        self._unsent: deque[list] = deque()
        self._flushed = False
        self.is_stopped = False

    def push(self, token_id: int, logprob: float = 0.0, top: tuple | None = None) -> str:
        """Add a token (with its log-probability and alternatives, which `take` hands out with it); return the
        newly final text. Sets is_stopped on a stop string."""
        assert not self.is_stopped
        self._token_ids.append(token_id)
        self._unsent.append([token_id, logprob, top, None])
        ids = self._token_ids
        seen = self._tokenizer.decode(ids[self._prefix_offset : self._read_offset], skip_special_tokens=True)
        window = self._tokenizer.decode(ids[self._prefix_offset :], skip_special_tokens=True)
        if window.endswith(REPLACEMENT) or len(window) <= len(seen):
            return ""  # an incomplete multi-byte character (wait for its next byte), or no text
        self._place(ids, seen, window)
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

    def _place(self, ids: list[int], seen: str, window: str) -> None:
        """Where the text of each token since the last text (ids[_read_offset:]) starts: the pieces of one character
        where it starts; after bytes that are no character (U+FFFD each), past them."""
        undecoded = len(ids) - self._read_offset
        for k, token in enumerate(list(self._unsent)[-undecoded:]):
            at = len(seen)
            if k:
                before = self._tokenizer.decode(
                    ids[self._prefix_offset : self._read_offset + k], skip_special_tokens=True
                )
                at = len(os.path.commonprefix([before, window]))
            token[3] = len(self._text) + max(0, at - len(seen))

    def flush(self) -> str:
        """Release what was held back (the sequence ended for another reason), and every token with it."""
        self._flushed = not self.is_stopped
        return self._release(len(self._text))

    def take(self) -> tuple[tuple[int, ...], tuple[float, ...], tuple]:
        """The tokens whose text has begun to leave since the last call (all of them after `flush`; never those
        of a matched stop string), their log-probabilities, and their alternatives (empty when pushed without)."""
        unsent, ids, logprobs, tops = self._unsent, [], [], []
        while unsent and (self._flushed or (unsent[0][3] is not None and unsent[0][3] < self._released)):
            token, logprob, top, _ = unsent.popleft()
            ids.append(token)
            logprobs.append(logprob)
            if top is not None:
                tops.append(top)
        return tuple(ids), tuple(logprobs), tuple(tops)

    def _release(self, upto: int) -> str:
        if upto <= self._released:
            return ""
        out = self._text[self._released : upto]
        self._released = upto
        return out
