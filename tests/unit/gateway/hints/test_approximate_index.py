"""The gateway's routing-history index: leading-block counts, bounded memory."""

from gateway.hints.approximate_index import ApproximateIndex


def test_approximate_index_counts_leading_blocks_and_stays_bounded():
    index = ApproximateIndex(capacity=5)
    hashes = [bytes([i]) * 16 for i in range(4)]
    index.record("a", hashes)
    index.record("b", hashes[:2])
    assert index.match(hashes, ["a", "b", "c"]) == {"a": 4, "b": 2}  # c holds none: left out
    assert index.match([hashes[1], hashes[0]], ["a"]) == {"a": 2}  # any order: both are held
    index.record("c", [bytes([9]) * 16, bytes([8]) * 16])
    assert len(index) == 5  # the least recently used hash went
    assert index.match(hashes, ["a"]) == {"a": 2}  # hashes[2] was least recently recorded (b renewed 0 and 1)
