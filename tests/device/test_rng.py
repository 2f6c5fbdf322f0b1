"""RNG: reproducibility with manual_seed, generator state layout (seed u64, offset u64)."""
import struct

import torch
import torch_tpu


def _seed_offset(state):
    assert state.dtype == torch.uint8 and state.numel() == 16 and state.device.type == "cpu"
    return struct.unpack("<QQ", bytes(state.tolist()))


def test_manual_seed_reproduces():
    torch.tpu.manual_seed(1234)
    a = torch.rand(100, device="tpu").cpu()
    b = torch.randn(10, 10, device="tpu").cpu()
    torch.tpu.manual_seed(1234)
    assert torch.equal(torch.rand(100, device="tpu").cpu(), a)
    assert torch.equal(torch.randn(10, 10, device="tpu").cpu(), b)
    assert ((a >= 0) & (a < 1)).all()
    assert a.unique().numel() > 90  # not constant


def test_consecutive_draws_differ_and_seeds_differ():
    torch.tpu.manual_seed(0)
    a = torch.rand(50, device="tpu").cpu()
    b = torch.rand(50, device="tpu").cpu()
    assert not torch.equal(a, b)
    torch.tpu.manual_seed(1)
    assert not torch.equal(torch.rand(50, device="tpu").cpu(), a)


def test_manual_seed_all_and_torch_manual_seed():
    torch.tpu.manual_seed_all(7)
    a = torch.rand(20, device="tpu").cpu()
    torch.manual_seed(7)  # torch's global seed also seeds the tpu generators
    assert torch.equal(torch.rand(20, device="tpu").cpu(), a)
    torch_tpu.manual_seed(7)
    assert torch.equal(torch.rand(20, device="tpu").cpu(), a)
    assert torch.tpu.initial_seed() == 7


def test_rng_state_layout():
    torch.tpu.manual_seed(0x1122334455)
    seed, offset = _seed_offset(torch.tpu.get_rng_state())
    assert (seed, offset) == (0x1122334455, 0)
    torch.rand(10, device="tpu")
    seed2, offset2 = _seed_offset(torch.tpu.get_rng_state())
    assert seed2 == seed and offset2 > 0


def test_get_set_rng_state_replays():
    torch.tpu.manual_seed(3)
    torch.rand(5, device="tpu")
    state = torch.tpu.get_rng_state()
    a = torch.rand(30, device="tpu").cpu()
    torch.tpu.set_rng_state(state)
    assert torch.equal(torch.rand(30, device="tpu").cpu(), a)
    custom = torch.tensor(list(struct.pack("<QQ", 99, 8)), dtype=torch.uint8)
    torch.tpu.set_rng_state(custom)
    assert _seed_offset(torch.tpu.get_rng_state()) == (99, 8)
    all_states = torch.tpu.get_rng_state_all()
    assert len(all_states) == torch.tpu.device_count()
    torch.tpu.set_rng_state_all(all_states)


def test_bad_rng_state_raises():
    try:
        torch.tpu.set_rng_state(torch.zeros(3, dtype=torch.uint8))
    except RuntimeError as e:
        assert "16 bytes" in str(e)
    else:
        raise AssertionError("a 3-byte RNG state was accepted")


def test_explicit_generator():
    g = torch.Generator(device="tpu")
    g.manual_seed(42)
    a = torch.rand(16, device="tpu", generator=g).cpu()
    torch.tpu.manual_seed(0)  # the default generator does not affect g
    g.manual_seed(42)
    assert torch.equal(torch.rand(16, device="tpu", generator=g).cpu(), a)


def test_explicit_generator_samplers_with_python_metas():
    # exponential_'s meta is Python (torch._refs), which refuses a generator argument.
    def draw(seed):
        g = torch.Generator(device="tpu")
        g.manual_seed(seed)
        return torch.empty(64, device="tpu").exponential_(generator=g).cpu()

    a, b = draw(3), draw(3)
    torch.testing.assert_close(a, b)
    assert not torch.equal(a, draw(4))
    assert (a > 0).all()


def test_normal_and_bernoulli_reproducible():
    torch.tpu.manual_seed(5)
    n1 = torch.empty(500, device="tpu").normal_(2.0, 3.0).cpu()
    b1 = torch.empty(200, device="tpu").bernoulli_(0.3).cpu()
    u1 = torch.empty(100, device="tpu").uniform_(-2.0, 5.0).cpu()
    torch.tpu.manual_seed(5)
    assert torch.equal(torch.empty(500, device="tpu").normal_(2.0, 3.0).cpu(), n1)
    assert torch.equal(torch.empty(200, device="tpu").bernoulli_(0.3).cpu(), b1)
    assert torch.equal(torch.empty(100, device="tpu").uniform_(-2.0, 5.0).cpu(), u1)
    assert set(b1.unique().tolist()) == {0.0, 1.0}
    assert ((u1 >= -2) & (u1 < 5)).all()
    assert abs(n1.mean().item() - 2.0) < 0.5 and abs(n1.std().item() - 3.0) < 0.5
