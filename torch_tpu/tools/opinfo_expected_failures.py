"""Expected failures of the OpInfo differential check, each with its reason.

Keys: (OpInfo name, dtype name, grad) -> reason. Nothing else is skipped: an op
that fails and is not listed here fails the check.
"""

EXPECTED = {
    # ("name", "float32", False): "why",
}


def reason(name, dtype_name, grad):
    return EXPECTED.get((name, dtype_name, grad))
