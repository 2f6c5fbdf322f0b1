"""The numerics check finds a wrong tpu result: the op, its inputs, the Python line.

A wrong lowering is simulated by a private op whose tpu (PrivateUse1) kernel
computes something else than its CPU kernel: exactly what a buggy lowering looks
like from the outside.
"""
import warnings

import pytest
import torch
import torch_tpu
from torch_tpu.debug import NumericsMismatch, check_numerics

from conftest import run_python

_LIB = torch.library.Library("tpu_numerics_test", "DEF")
_LIB.define("shifted_add(Tensor a, Tensor b) -> Tensor")
_LIB.impl("shifted_add", lambda a, b: a + b, "CPU")
_LIB.impl("shifted_add", lambda a, b: a + b + 0.5, "PrivateUse1")   # the "bug"
_LIB.define("bump_(Tensor(a!) x) -> ()")                            # mutates, returns nothing


def _bump_cpu(x):
    x.add_(1)


def _bump_tpu(x):
    x.add_(2)                                                        # the "bug"


_LIB.impl("bump_", _bump_cpu, "CPU")
_LIB.impl("bump_", _bump_tpu, "PrivateUse1")
shifted_add = torch.ops.tpu_numerics_test.shifted_add
bump_ = torch.ops.tpu_numerics_test.bump_


def small_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                               torch.nn.Linear(16, 4)).to("tpu")


def test_correct_training_step_has_no_mismatch():
    model = small_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(6, 8).to("tpu")
    with check_numerics() as mode:
        loss = torch.nn.functional.mse_loss(model(x), torch.zeros(6, 4, device="tpu"))
        loss.backward()
        opt.step()
    assert mode.mismatches == []
    assert mode.checked >= 10       # forward, backward and optimizer ops were compared


def test_wrong_op_is_reported_with_inputs_and_line():
    model = small_model()
    x = torch.randn(6, 8).to("tpu")
    with pytest.raises(NumericsMismatch) as info:
        with check_numerics():
            y = model(x)
            z = shifted_add(y, y)  # LINE-OF-BAD-OP
            z.sum().item()
    m = info.value.mismatch
    assert m.op == "tpu_numerics_test::shifted_add"
    assert m.inputs == ["Tensor(float32, [6, 4]) on tpu:0"] * 2
    assert "max abs diff 0.5" in m.problem
    text = str(info.value)
    assert "shifted_add" in text and "[6, 4]" in text
    src = open(__file__).read().splitlines()
    line = next(i + 1 for i, s in enumerate(src) if s.strip().endswith("# LINE-OF-BAD-OP"))
    assert m.user_frames()[-1].lineno == line and m.user_frames()[-1].filename == __file__
    assert f"line {line}" in text


def test_only_the_culprit_is_reported_not_what_follows():
    # Every later op is compared on the (wrong) values the tpu gave it, so it agrees
    # with the CPU: the report points at the one op that is wrong.
    x = torch.randn(5, 3).to("tpu")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with check_numerics(raise_on_mismatch=False) as mode:
            y = torch.sin(x)
            z = shifted_add(y, x)
            out = (z * 2).softmax(dim=1).sum(dim=0)
            out.cpu()
    assert [m.op for m in mode.mismatches] == ["tpu_numerics_test::shifted_add"]
    assert mode.first_mismatch is mode.mismatches[0]
    assert len([x for x in w if "numerics check" in str(x.message)]) == 1
    # The computation itself was not changed by checking it.
    torch.testing.assert_close(out.cpu(), ((x.cpu().sin() + x.cpu() + 0.5) * 2).softmax(1).sum(0))


def test_mutated_argument_is_compared():
    x = torch.zeros(4).to("tpu")
    with pytest.raises(NumericsMismatch, match="argument x"):
        with check_numerics():
            bump_(x)


def test_tolerance_can_be_widened():
    x = torch.randn(3).to("tpu")
    with check_numerics(atol=1.0) as mode:
        shifted_add(x, x).cpu()
    assert mode.mismatches == []


def test_environment_variable_checks_the_whole_program():
    r = run_python("""
        import torch, torch_tpu
        lib = torch.library.Library("tpu_numerics_env", "DEF")
        lib.define("bad(Tensor a) -> Tensor")
        lib.impl("bad", lambda a: a * 2, "CPU")
        lib.impl("bad", lambda a: a * 3, "PrivateUse1")
        x = torch.ones(2, 3).to("tpu")
        y = (x + 1).relu()
        torch.ops.tpu_numerics_env.bad(y)
        print("NOT REACHED")
    """, env={"TORCH_TPU_CHECK_NUMERICS": "1"})
    assert r.returncode != 0
    assert "NumericsMismatch" in r.stderr and "tpu_numerics_env::bad" in r.stderr
    assert "Tensor(float32, [2, 3]) on tpu:0" in r.stderr
    assert "NOT REACHED" not in r.stdout
