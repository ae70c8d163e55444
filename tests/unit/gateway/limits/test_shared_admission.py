"""Choices that share one admission give back what they did not use, each prompt's tokens counted once."""

import asyncio

from gateway.api.generation import _SharedAdmission


class _Recorded:
    released: int | None = -1

    async def release(self, used_tokens=None) -> None:
        self.released = used_tokens


def test_a_batch_with_n_choices_releases_each_prompt_once_and_every_choices_answer():
    recorded = _Recorded()
    shared = _SharedAdmission(recorded, 4)
    # prompts of 1,000 and 500 tokens, n=2: choice 0 of each counts its prompt, choice 1 does not
    shares = [shared.share(0), shared.share(1000), shared.share(0), shared.share(500)]
    used = [1000 + 10, 1000 + 12, 500 + 7, 500 + 9]  # each worker's usage: its prompt and its answer

    async def end_all():
        for share, tokens in zip(shares, used, strict=True):
            await share.release(tokens)

    asyncio.run(end_all())
    assert recorded.released == 1000 + 500 + 10 + 12 + 7 + 9


def test_one_choice_without_usage_means_no_refund():
    recorded = _Recorded()
    shared = _SharedAdmission(recorded, 2)

    async def end_all():
        await shared.share(0).release(None)  # cut off: what it used is unknown
        await shared.share(100).release(110)

    asyncio.run(end_all())
    assert recorded.released is None
