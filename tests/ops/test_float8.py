"""float8 tensors on tpu (float8_e4m3fn, float8_e5m2, float8_e4m3fnuz, float8_e5m2fnuz):
creation, host copies, casts both ways and views, compared bit for bit (through
.view(torch.uint8)) with PyTorch's CPU casts, which round to nearest even and on
overflow saturate (e4m3fn), go to inf (e5m2) or to NaN (fnuz). Runs in Strict Eager
and Defer & Fuse (tests/conftest.py), plus one torch.compile case."""
import math

import pytest
import torch

import torch_tpu  # noqa: F401

F8 = [torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz]
F8_IDS = ["e4m3fn", "e5m2", "e4m3fnuz", "e5m2fnuz"]
INF, NAN = math.inf, math.nan

# Every class of input the casts treat differently: zeros of both signs, the formats'
# subnormals and halfway points, values at, between and past each format's largest
# finite value, infinities and NaNs of both signs, float32 subnormals.
SPECIAL = [0.0, -0.0, 1e-9, -1e-9, 2.0**-10, 2.0**-9, 3 * 2.0**-11, 2.0**-7, 2.0**-6, 2.0**-17,
           2.0**-16, 3 * 2.0**-18, 2.0**-24, 1e-40, -1e-40, 0.5, -1.75, 3.14159,
           239.9, 240.0, 247.9, 248.0, 250.0, 255.9, 256.0, 447.0, 448.0, 460.0, 464.0,
           464.01, 479.9, 480.0, 500.0, -500.0, 1e6, -1e6, 57344.0, 61439.0, 61440.0,
           65535.0, 65536.0, -65536.0, 3.4e38, INF, -INF, NAN, -NAN]


def bits(t):
    return t.cpu().view(torch.uint8)


def assert_same_bits(tpu_tensor, cpu_tensor):
    assert tpu_tensor.device.type == "tpu"
    assert tpu_tensor.dtype == cpu_tensor.dtype
    assert torch.equal(bits(tpu_tensor), cpu_tensor.view(torch.uint8))


def assert_same_values(tpu_tensor, cpu_tensor):
    """Equal values, NaN where the CPU has NaN, signed zeros alike (NaN payloads of a
    widened float8 NaN are not compared: PyTorch's differ between its own kernels)."""
    got = tpu_tensor.cpu()
    assert got.dtype == cpu_tensor.dtype
    if got.is_floating_point():
        assert torch.equal(got.isnan(), cpu_tensor.isnan())
        keep = ~cpu_tensor.isnan()
        assert torch.equal(got[keep], cpu_tensor[keep])
        assert torch.equal(got[keep].signbit(), cpu_tensor[keep].signbit())
    else:
        assert torch.equal(got, cpu_tensor)


@pytest.mark.parametrize("dtype", F8, ids=F8_IDS)
def test_cast_from_float32_special_values(dtype):
    x = torch.tensor(SPECIAL, dtype=torch.float32)
    assert_same_bits(x.to("tpu").to(dtype), x.to(dtype))


@pytest.mark.parametrize("dtype", F8, ids=F8_IDS)
def test_cast_from_float32_random_bits(dtype):
    # Random float32 bit patterns (every exponent, NaN payloads, subnormals) and a
    # dense sweep around the formats' ranges.
    g = torch.Generator().manual_seed(0)
    x = torch.randint(-2**31, 2**31 - 1, (1 << 16,), dtype=torch.int32, generator=g).view(torch.float32)
    sweep = torch.linspace(-70000, 70000, 20001)
    small = torch.linspace(-2.0**-5, 2.0**-5, 20001)
    for v in (x, sweep, small):
        assert_same_bits(v.to("tpu").to(dtype), v.to(dtype))


@pytest.mark.parametrize("dtype", F8, ids=F8_IDS)
def test_every_float8_value_widens_exactly(dtype):
    every = torch.arange(256, dtype=torch.uint8).view(dtype)
    dev = every.to("tpu")
    assert_same_bits(dev, every)  # host -> device -> host keeps the bits
    for wide in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        assert_same_values(dev.to(wide), every.to(wide))
    for other in F8:  # float8 -> float8 goes through float32, as on the CPU
        assert_same_bits(dev.to(other), every.to(other))


@pytest.mark.parametrize("dtype", F8, ids=F8_IDS)
def test_float8_to_integers_and_bool(dtype):
    # In-range values only: out-of-range float -> integer casts are undefined in C++.
    x = torch.tensor([0.0, -0.0, 0.5, 1.0, -1.5, 2.5, 7.0, -13.0, 96.0, 112.0]).to(dtype)
    dev = x.to("tpu")
    for it in (torch.int8, torch.int32, torch.int64, torch.bool):
        assert_same_values(dev.to(it), x.to(it))
    assert_same_values(dev[dev.to(torch.float32) >= 0].to(torch.uint8),
                       x[x.to(torch.float32) >= 0].to(torch.uint8))


@pytest.mark.parametrize("dtype", F8, ids=F8_IDS)
def test_cast_from_other_dtypes(dtype):
    # Doubles round to float32 first, then to float8 (PyTorch's double rounding):
    # 61439.999999 -> 61440.0f -> e5m2 inf, where one rounding would give 57344.
    d = torch.tensor([464.00000001, 61439.999999, 247.99999999, 1e-300, -3.0, 1e300, -1e300],
                     dtype=torch.float64)
    i = torch.tensor([0, 1, -1, 17, 300, 1000, -1000, 2**40, -2**40])
    b = torch.tensor([True, False])
    g = torch.Generator().manual_seed(1)
    h = torch.randn(4096, generator=g).half() * 3000
    bf = torch.randn(4096, generator=g).bfloat16() * 300
    for v in (d, i, b, h, bf, h.to(torch.int16), i.to(torch.uint8)):
        assert_same_bits(v.to("tpu").to(dtype), v.to(dtype))


@pytest.mark.parametrize("dtype", F8, ids=F8_IDS)
def test_creation(dtype):
    assert_same_bits(torch.zeros(3, 5, dtype=dtype, device="tpu"), torch.zeros(3, 5, dtype=dtype))
    assert_same_bits(torch.ones(7, dtype=dtype, device="tpu"), torch.ones(7, dtype=dtype))
    assert_same_bits(torch.full((2, 3), 3.3, dtype=dtype, device="tpu"),
                     torch.full((2, 3), 3.3, dtype=dtype))
    assert_same_bits(torch.full((4,), -0.0, dtype=dtype, device="tpu"),
                     torch.full((4,), -0.0, dtype=dtype))
    e = torch.empty(4, 4, dtype=dtype, device="tpu")
    assert e.dtype == dtype and e.shape == (4, 4) and e.element_size() == 1
    torch.manual_seed(0)
    r = torch.randn(64, 64, device="tpu").to(dtype)
    assert_same_bits(r, r.cpu().to(torch.float32).to(dtype))  # casts of its own values are exact
    assert_same_bits(r.to(torch.float32).to(dtype), r.cpu())
    z = torch.zeros_like(r)
    assert z.dtype == dtype and not bits(z).any()
    assert_same_bits(r.clone().fill_(-2.75), torch.full((64, 64), -2.75).to(dtype))


@pytest.mark.parametrize("dtype", F8, ids=F8_IDS)
def test_views_reinterpret_bytes(dtype):
    every = torch.arange(256, dtype=torch.uint8)
    dev = every.to("tpu")
    assert_same_bits(dev.view(dtype), every.view(dtype))
    f = dev.view(dtype)
    assert torch.equal(f.view(torch.uint8).cpu(), every)
    assert torch.equal(f.view(torch.int8).cpu(), every.view(torch.int8))
    assert_same_bits(f.view(torch.float8_e5m2), every.view(torch.float8_e5m2))
    # Four float8 values read as one float32 and back.
    assert torch.equal(f.view(torch.float32).cpu().view(torch.int32),
                       every.view(dtype).view(torch.float32).view(torch.int32))
    assert_same_bits(f.view(torch.float32).view(dtype), every.view(dtype))
    # Writing through a uint8 view changes the float8 tensor's storage.
    g = f.clone()
    g.view(torch.uint8)[:4] = 0
    want = every.clone()
    want[:4] = 0
    assert_same_bits(g, want.view(dtype))


@pytest.mark.parametrize("dtype", F8, ids=F8_IDS)
def test_common_ops(dtype):
    g = torch.Generator().manual_seed(2)
    x = (torch.randn(6, 8, generator=g) * 40).to(dtype)
    d = x.to("tpu")
    assert_same_bits(d.clone(), x)
    assert_same_bits(torch.cat([d, d[:2]]), torch.cat([x, x[:2]]))
    assert_same_bits(torch.stack([d, d], 1), torch.stack([x, x], 1))
    assert_same_bits(d.t().contiguous(), x.t().contiguous())
    assert_same_bits(d[1:5:2, ::3].contiguous(), x[1:5:2, ::3].contiguous())
    assert_same_bits(d.reshape(4, 12).t().reshape(-1), x.reshape(4, 12).t().reshape(-1))
    idx = torch.tensor([4, 0, 0, 2])
    assert_same_bits(d[idx.to("tpu")], x[idx])
    assert_same_bits(torch.index_select(d, 1, idx.to("tpu")), torch.index_select(x, 1, idx))
    y = torch.empty_like(d)
    y.copy_(d)
    assert_same_bits(y, x)
    y[1] = d[2]
    want = x.clone()
    want[1] = x[2]
    assert_same_bits(y, want)
    src = torch.randn(6, 8, generator=g)
    y.copy_(src.to("tpu"))  # float32 -> float8 copy on the device
    assert_same_bits(y, src.to(dtype))
    y.copy_(src)  # host -> device with a dtype change
    assert_same_bits(y, src.to(dtype))
    assert_same_bits(d.abs(), x.abs())
    assert torch.equal((d == d).cpu(), x == x)
    assert torch.equal(d.isnan().cpu(), x.isnan())


@pytest.mark.parametrize("dtype", F8, ids=F8_IDS)
def test_amax_for_scaling(dtype):
    # PyTorch's CPU has no amax for float8; the reference widens to float32 first.
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(16, 32, generator=g) * 50).to(dtype)
    d = x.to("tpu")
    want = x.float().abs().amax(dim=1, keepdim=True)
    assert_same_bits(d.abs().amax(dim=1, keepdim=True), want.to(dtype))
    assert_same_bits(d.abs().amax(), want.amax().to(dtype))
    assert torch.equal(d.float().abs().amax().cpu(), want.amax())
    assert torch.equal(d.abs().max().cpu().float(), want.amax())


def test_host_copies_and_print():
    x = torch.tensor([1.5, -0.0, NAN, 448.0]).to(torch.float8_e4m3fn)
    d = x.to("tpu")
    assert_same_bits(d, x)
    assert "float8_e4m3fn" in repr(d) and "device='tpu:0'" in repr(d)
    assert torch.equal(bits(d.cpu()), x.view(torch.uint8))
    out = torch.empty(4, dtype=torch.float8_e4m3fn)
    out.copy_(d)
    assert torch.equal(out.view(torch.uint8), x.view(torch.uint8))
    assert d[0].item() == 1.5


@pytest.mark.strict_only
def test_compiled_cast_round_trip():
    def quantize(x, scale):
        y = (x * scale).to(torch.float8_e4m3fn)
        return y, y.to(torch.float32) / scale

    g = torch.Generator().manual_seed(4)
    x = torch.randn(16, 32, generator=g) * 1000
    scale = torch.tensor(0.7)
    want = quantize(x, scale)
    got = torch.compile(quantize, backend="tpu")(x.to("tpu"), scale.to("tpu"))
    assert_same_bits(got[0], want[0])
    assert torch.equal(got[1].cpu(), want[1])


@pytest.mark.slow
@pytest.mark.strict_only
def test_every_float32_bit_pattern():
    # All 2^32 float32 values into each float8 type, bit for bit (about 3 minutes).
    n = 1 << 24
    for c in range(256):
        x = torch.arange(c * n, (c + 1) * n, dtype=torch.int64).to(torch.int32).view(torch.float32)
        d = x.to("tpu")
        for dtype in F8:
            assert torch.equal(bits(d.to(dtype)), x.to(dtype).view(torch.uint8)), (dtype, c)
