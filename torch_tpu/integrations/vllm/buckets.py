"""The padded shapes the runner uses, so the number of device programs is bounded.

Token counts and request counts are rounded up to powers of two (from a small floor up
to the configured maximum, which is itself a bucket); warm-up runs each once.
"""


def power_of_two_buckets(floor: int, maximum: int) -> list[int]:
    """Powers of two from `floor` below `maximum`, then `maximum` itself."""
    buckets, b = [], max(1, floor)
    while b < maximum:
        buckets.append(b)
        b *= 2
    buckets.append(maximum)
    return buckets


def bucket_for(n: int, buckets: list[int]) -> int:
    """The smallest bucket that holds `n` (n must not exceed the largest)."""
    for b in buckets:
        if n <= b:
            return b
    raise ValueError(f"{n} exceeds the largest bucket {buckets[-1]}")
