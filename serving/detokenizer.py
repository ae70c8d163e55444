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
UNFINISHED_TOKENS = 3  # the most tokens the bytes of an unfinished character (3 of its 4 at most) can span
_MOST_CUTS = 8  # token boundaries tried for a cut where bytes never made a character


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
        seen = self._decode(ids[self._prefix_offset : self._read_offset])
        window = self._decode(ids[self._prefix_offset :])
        end = len(ids)
        if window.endswith(REPLACEMENT) and end - self._read_offset > UNFINISHED_TOKENS:
            # Bytes that will never be a character (a character unfinished at the end has its bytes in the last
            # three tokens at most): final, U+FFFD each. Waiting for them made the window, and each decode, grow
            # without end, and an answer of them alone was "". Cut where the text so far reads as it does in the
            # whole window: not inside a character a token ends in the middle of (a vocabulary may hold tokens
            # that span two characters' bytes, and a cut there made a valid character U+FFFD).
            cut = self._final_cut(window)
            if cut is None:
                return ""
            end, window = cut
        elif window.endswith(REPLACEMENT):
            return ""  # an incomplete multi-byte character: wait for its next byte
        if len(window) <= len(seen):
            return ""  # no text yet
        self._accept(end, seen, window)
        if self._stopped_at_stop_string():
            return self._release(len(self._text))
        return self._release(len(self._text) - self._holdback)

    def _final_cut(self, window: str) -> tuple[int, str] | None:
        """The last token index, at least UNFINISHED_TOKENS before the end, whose text up to it is where the whole
        window's begins (so it ends on no character cut in two), and that text; None where none of the last
        _MOST_CUTS is."""
        ids, start = self._token_ids, self._prefix_offset
        for end in range(
            len(ids) - UNFINISHED_TOKENS, max(self._read_offset, len(ids) - UNFINISHED_TOKENS - _MOST_CUTS), -1
        ):
            text = self._decode(ids[start:end])
            if window.startswith(text):
                return end, text
        return None

    def _stopped_at_stop_string(self) -> bool:
        """Whether a stop string is in the text now; if so, the text ends where the first in the text begins (where
        one step's tokens bring two, `stop: ["User:", "\n"]` and a token `\nUser:`: the list's first won, and the
        `\n` was left in the answer, a review; OpenAI and vLLM cut at the earliest)."""
        # A stop can only newly appear in the unreleased tail plus what was held back.
        found = [
            at for stop in self._stop_strings if (at := self._text.find(stop, max(0, self._released - len(stop)))) != -1
        ]
        if not found:
            return False
        self.is_stopped = True
        self._text = self._text[: min(found)]
        return True

    def _decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=True)

    def _accept(self, end: int, seen: str, window: str) -> None:
        """ids[_read_offset:end] decoded: `window` is ids[_prefix_offset:end]'s text, `seen` its part before them.
        Each of those tokens' text starts where it starts in the window: the pieces of one character where the
        character starts; after bytes that are no character (U+FFFD each), past them."""
        ids, unsent = self._token_ids, list(self._unsent)
        for i in range(self._read_offset, end):
            token = unsent[len(unsent) - (len(ids) - i)]  # the last entries of _unsent are the undecoded tokens
            at = len(seen)
            if i > self._read_offset:
                at = len(os.path.commonprefix([self._decode(ids[self._prefix_offset : i]), window]))
            token[3] = len(self._text) + max(0, at - len(seen))
        self._text += window[len(seen) :]
        self._prefix_offset, self._read_offset = self._read_offset, end

    def flush(self) -> str:
        """Release what was held back (the sequence ended for another reason), bytes that never finished a
        character included (U+FFFD each), and every token with it."""
        ids = self._token_ids
        if not self.is_stopped and self._read_offset < len(ids):
            seen = self._decode(ids[self._prefix_offset : self._read_offset])
            window = self._decode(ids[self._prefix_offset :])
            if len(window) > len(seen):
                self._accept(len(ids), seen, window)
                # The bytes that never finished a character are U+FFFD now: a stop string may end in one.
                self._stopped_at_stop_string()
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
