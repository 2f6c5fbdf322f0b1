"""Each test starts with Dynamo's caches empty, in Strict Eager, with no records of
earlier compiled graphs: tests neither share compiled frames nor hit Dynamo's
recompile limit because of one another."""
import pytest
import torch
import torch_tpu


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    torch_tpu.set_execution_mode("strict_eager")
    torch_tpu.debug.reset_compiled_graphs()
    yield
    torch._dynamo.reset()
    torch_tpu.set_execution_mode("strict_eager")
