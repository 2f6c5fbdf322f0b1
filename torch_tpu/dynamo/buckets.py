"""Which padded size a dynamic dimension runs at (torch.compile(backend="tpu")).

A symbolic size (Dynamo's `dynamic=True`, `torch._dynamo.mark_dynamic`) is rounded
up to a bucket so that a few programs serve every size: powers of two by default,
or the sizes given to `torch_tpu.set_dynamic_buckets` / the backend option
`torch.compile(..., options={"dynamic_buckets": [...]})`. A bucket never exceeds
the symbol's upper bound (mark_dynamic's `max`, or a bound Dynamo derived), so a
program is never traced at a size the graph cannot take. `False` turns buckets
off: every size compiles its own program.
"""
import threading

_lock = threading.Lock()
_default = "pow2"


def set_dynamic_buckets(buckets="pow2"):
    """Sets the process-wide bucket policy for dynamic dimensions of graphs compiled
    after the call: "pow2" (the default), an increasing list of sizes (a size above
    the largest one rounds up to the next power of two), or False (one program per
    size). Returns the previous policy."""
    global _default
    policy = normalize(buckets)
    with _lock:
        prev, _default = _default, policy
    return prev


def get_dynamic_buckets():
    return _default


def normalize(buckets):
    if buckets is None or buckets == "pow2":
        return "pow2"
    if buckets is False:
        return False
    sizes = sorted({int(b) for b in buckets})
    if not sizes or sizes[0] < 1:
        raise ValueError(f"dynamic buckets must be positive sizes, got {buckets!r}")
    return tuple(sizes)


def _next_pow2(n):
    return 1 << max(0, (int(n) - 1).bit_length())


def bucket_for(n, policy, upper=None):
    """The padded size for a real size n (policy as normalize() returns it), capped
    at the symbol's upper bound when it has one."""
    if policy == "pow2":
        b = _next_pow2(n)
    else:
        b = next((s for s in policy if s >= n), None)
        if b is None:
            b = _next_pow2(n)
    if upper is not None and b > upper:
        b = max(n, upper)
    return b
