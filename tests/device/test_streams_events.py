"""Streams and events on tpu behave as on CUDA: torch.Stream / torch.Event, torch.tpu's
stream API and torch.accelerator.current_stream, in every execution mode."""
import threading

import pytest
import torch

import torch_tpu
from conftest import run_python

MODES = pytest.mark.parametrize("tpu_execution_mode", ["strict_eager", "defer_and_fuse"],
                                indirect=True, ids=["eager", "fused"])


def _long_work(n=10):
    """Launches a few hundred milliseconds of device work (compiled beforehand) and returns
    its result: long enough that an event recorded right after cannot have completed."""
    x = torch.randn(640, 640, device="tpu")
    for _ in range(n):
        x = torch.tanh(x @ x)
    return x


@pytest.fixture(scope="module", autouse=True)
def _warm():
    _long_work(1).cpu()  # compile outside the tests, so that launches are quick


def test_streams_are_distinct_and_default_is_current():
    s1, s2 = torch.Stream("tpu"), torch.tpu.Stream()
    assert s1.device == torch.device("tpu", 0) and s2.device.type == "tpu"
    assert s1 != s2 and s1.stream_id != s2.stream_id
    assert torch.tpu.current_stream() == torch.tpu.default_stream()
    assert torch.accelerator.current_stream() == torch.tpu.default_stream()
    assert isinstance(torch.tpu.current_stream(), torch.tpu.Stream)
    assert isinstance(torch.tpu.current_stream(), torch.Stream)
    assert isinstance(s1, torch.tpu.Stream) and not isinstance(torch.Stream("cpu"), torch.tpu.Stream)
    assert isinstance(torch.tpu.Event(), torch.tpu.Event) and isinstance(torch.Event("tpu"), torch.tpu.Event)


def test_stream_and_event_objects_mix_with_torch_ones():
    a, b = torch.tpu.Event(enable_timing=True), torch.tpu.Event(enable_timing=True)
    s = torch.tpu.Stream()
    s.record_event(a)
    torch.Stream("tpu").record_event(b)
    b.synchronize()
    assert a.elapsed_time(b) >= 0 or a.elapsed_time(b) < 0  # a float, either order
    s.wait_stream(torch.Stream("tpu"))


def test_stream_context_and_set_stream():
    s = torch.tpu.Stream()
    default = torch.tpu.current_stream()
    with torch.tpu.stream(s):
        assert torch.tpu.current_stream() == s
        assert torch.accelerator.current_stream() == s
    assert torch.tpu.current_stream() == default
    with s:  # torch.Stream is a context manager too
        assert torch.accelerator.current_stream() == s
    assert torch.accelerator.current_stream() == default
    torch.tpu.set_stream(s)
    try:
        assert torch.tpu.current_stream() == s
    finally:
        torch.tpu.set_stream(default)
    with torch.tpu.stream(None):
        assert torch.tpu.current_stream() == default


def test_current_stream_is_per_thread():
    s = torch.tpu.Stream()
    seen = []
    with torch.tpu.stream(s):
        t = threading.Thread(target=lambda: seen.append(torch.tpu.current_stream()))
        t.start()
        t.join()
    assert seen == [torch.tpu.default_stream()]


def test_unrecorded_event_is_complete():
    e = torch.Event("tpu")
    assert e.query()
    e.synchronize()  # no-op


@MODES
def test_query_before_and_after_synchronize(tpu_execution_mode):
    y = _long_work()
    e = torch.tpu.Event()
    e.record()
    assert not e.query(), "the event must wait for the work launched before it"
    e.synchronize()
    assert e.query()
    assert torch.tpu.current_stream().query()
    torch.testing.assert_close(y.cpu().abs().max() <= 1, torch.tensor(True))


@MODES
def test_stream_synchronize_and_query(tpu_execution_mode):
    s = torch.tpu.Stream()
    with torch.tpu.stream(s):
        y = _long_work()  # held: Defer & Fuse computes nothing nobody holds
    assert not s.query()
    s.synchronize()
    assert s.query()
    assert y.shape == (640, 640)


@MODES
def test_wait_event_orders_later_events(tpu_execution_mode):
    """An event recorded on a stream after it waited for `e` completes only after `e`."""
    producer, consumer = torch.tpu.Stream(), torch.tpu.Stream()
    with torch.tpu.stream(producer):
        y = _long_work()
        e = producer.record_event()
    consumer.wait_event(e)
    after = consumer.record_event()
    assert not after.query()
    after.synchronize()
    assert e.query(), "waiting on the consumer's event must have waited for the producer's"
    with torch.tpu.stream(consumer):
        z = y + 1
    torch.testing.assert_close(z.cpu(), y.cpu() + 1)


@MODES
def test_wait_stream(tpu_execution_mode):
    side = torch.tpu.Stream()
    main = torch.tpu.current_stream()
    y = _long_work()
    side.wait_stream(main)
    with torch.tpu.stream(side):
        done = torch.tpu.Event()
        done.record()
    done.synchronize()
    assert main.query()
    torch.testing.assert_close((y * 2).cpu(), y.cpu() * 2)


def test_event_wait_uses_current_stream():
    s = torch.tpu.Stream()
    e = torch.tpu.Event()
    y = _long_work()
    e.record()
    with torch.tpu.stream(s):
        e.wait()  # the current stream (s) waits
        after = s.record_event()
    after.synchronize()
    assert e.query()


def test_event_rerecord_takes_a_new_snapshot():
    e = torch.tpu.Event()
    e.record()
    e.synchronize()
    y = _long_work()
    e.record()
    assert not e.query()
    e.synchronize()
    assert e.query()


def test_elapsed_time():
    start, end = torch.tpu.Event(enable_timing=True), torch.Event("tpu", enable_timing=True)
    start.record()
    y = _long_work()
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end)
    assert isinstance(ms, float) and ms > 0
    assert end.elapsed_time(start) == pytest.approx(-ms)


def test_elapsed_time_needs_timing_and_recording():
    a, b = torch.tpu.Event(), torch.tpu.Event()
    a.record()
    b.record()
    b.synchronize()
    with pytest.raises(ValueError, match="enable_timing"):
        a.elapsed_time(b)
    t1, t2 = torch.tpu.Event(enable_timing=True), torch.tpu.Event(enable_timing=True)
    t1.record()
    with pytest.raises(ValueError, match="recorded"):
        t1.elapsed_time(t2)


def test_event_records_pending_defer_and_fuse_work():
    """Recording an event in Defer & Fuse runs the pending graph: the event covers it."""
    with torch_tpu.execution_mode("defer_and_fuse"):
        x = torch.randn(256, 256, device="tpu")
        y = x @ x + 1
        assert torch_tpu._C._pending_nodes() > 0
        e = torch.tpu.Event()
        e.record()
        assert torch_tpu._C._pending_nodes() == 0
        e.synchronize()
        assert e.query()
        torch.testing.assert_close(y.cpu(), x.cpu() @ x.cpu() + 1, rtol=1e-4, atol=1e-4)


def test_accelerator_synchronize_runs_pending_work():
    with torch_tpu.execution_mode("defer_and_fuse"):
        x = torch.ones(8, device="tpu") * 3
        assert torch_tpu._C._pending_nodes() > 0
        torch.accelerator.synchronize()
        assert torch_tpu._C._pending_nodes() == 0
        assert x.sum().item() == 24


def test_events_around_compiled_code():
    @torch.compile(backend="tpu")
    def step(x):
        for _ in range(6):
            x = torch.tanh(x @ x)
        return x

    x = torch.randn(768, 768, device="tpu") * 0.01  # small values: not chaotic under tanh
    step(x).cpu()  # compile
    start, end = torch.tpu.Event(enable_timing=True), torch.tpu.Event(enable_timing=True)
    start.record()
    y = step(x)
    end.record()
    assert not end.query()
    end.synchronize()
    assert end.query() and start.elapsed_time(end) > 0
    ref = x.cpu()
    for _ in range(6):
        ref = torch.tanh(ref @ ref)
    torch.testing.assert_close(y.cpu(), ref, rtol=1e-3, atol=1e-5)


def test_event_recorded_inside_compiled_function():
    def f(x):
        y = x * 2
        e = torch.tpu.Event()
        e.record()
        return y + 1, e

    x = torch.randn(16, device="tpu")
    y, e = torch.compile(f, backend="tpu")(x)
    e.synchronize()
    assert e.query()
    torch.testing.assert_close(y.cpu(), x.cpu() * 2 + 1)


def test_record_stream_is_accepted():
    s = torch.tpu.Stream()
    x = torch.ones(4, device="tpu")
    x.record_stream(s)
    assert torch_tpu.debug.metrics()["cpu_fallback_counts"].get("aten::record_stream", 0) == 0
    assert x.sum().item() == 4


def test_wait_across_devices():
    """A stream of device 1 made to wait for an event of device 0 completes after it."""
    r = run_python("""
        import torch, torch_tpu
        assert torch.tpu.device_count() == 2
        x = torch.randn(768, 768, device="tpu:0")
        for _ in range(12):
            x = torch.tanh(x @ x)
        e0 = torch.tpu.Event()
        e0.record()
        s1 = torch.tpu.Stream(device="tpu:1")
        s1.wait_event(e0)
        e1 = s1.record_event()
        e1.synchronize()
        assert e0.query()
        print("OK")
    """, env={"TORCH_TPU_CPU_DEVICES": "2"})
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr
