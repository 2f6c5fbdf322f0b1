"""torch_tpu.debug.report(): what ran, compiled, came from the cache, fell back to the
CPU (and where), was materialised, and crossed between host and device."""
import torch
import torch_tpu


def _unlowered_op():
    lowered = set(torch_tpu.debug.lowered_ops())
    for name, fn in [("aten::angle", torch.angle), ("aten::histc", lambda x: torch.histc(x, bins=4)),
                     ("aten::_logcumsumexp", lambda x: torch.logcumsumexp(x, 0)),
                     ("aten::i0", torch.i0), ("aten::erfinv", lambda x: torch.erfinv(x * 0.1)),
                     ("aten::digamma", lambda x: torch.digamma(x.abs() + 1)),
                     ("aten::lgamma", lambda x: torch.lgamma(x.abs() + 1))]:
        if name not in lowered and name + ".out" not in lowered:
            return name, fn
    raise AssertionError("every candidate op has a lowering: pick another one for this test")


def test_report_names_fallback_ops_and_the_line_that_first_hit_them():
    name, fn = _unlowered_op()
    x = torch.randn(5).to("tpu")
    torch_tpu.debug.reset_metrics()
    fn(x)  # FIRST-FALLBACK
    fn(x)
    m = torch_tpu.debug.metrics()
    op = next(k for k in m["cpu_fallback_counts"] if k.startswith(name))
    assert m["cpu_fallback_counts"][op] == 2
    src = open(__file__).read().splitlines()
    line = next(i + 1 for i, s in enumerate(src) if s.strip().endswith("# FIRST-FALLBACK"))
    site = m["cpu_fallback_sites"][op]
    assert site.startswith(f"{__file__}:{line} in ")
    text = torch_tpu.debug.report()
    assert f"{op}: 2  (first at {__file__}:{line}" in text


def test_report_covers_compiles_cache_and_transfers():
    torch_tpu.debug.reset_metrics()
    x = torch.randn(9, 2).to("tpu")
    (x - 1).cpu()
    text = torch_tpu.debug.report()
    for part in ("ops executed", "programs compiled", "program cache", "memory:", "disk:",
                 "executions", "host -> device", "device -> host", "CPU-fallback ops"):
        assert part in text, part
    m = torch_tpu.debug.metrics()
    assert m["bytes_to_device"] >= 72 and m["bytes_to_host"] >= 72


def test_report_prints_modes_and_materialisations_when_reported(monkeypatch):
    real = torch_tpu.debug.metrics

    def with_mode_counters():
        m = dict(real())
        m["ops_by_mode"] = {"strict_eager": 7, "defer_and_fuse": 5}
        m["materializations"] = {"item": 2, "cpu_fallback": 1}
        return m
    monkeypatch.setattr(torch_tpu.debug, "metrics", with_mode_counters)
    m = with_mode_counters()
    text = torch_tpu.debug.report()
    for mode, n in m["ops_by_mode"].items():
        assert f"{mode}: {n}" in text
    assert "materialisations" in text
    for reason, n in m["materializations"].items():
        assert f"{reason}: {n}" in text
