"""The `tpu` Dynamo backend: torch.compile(model, backend="tpu").

Dynamo captures FX graphs (graph breaks split them; shape changes recompile
through its guards). AOTAutograd traces each into functional forward and
backward graphs of core ATen ops, and every graph becomes one fused StableHLO
program (see graph_runner). AOTAutograd's runtime wrapper writes input
mutations back into the caller's tensors; they are kept inside the program
(`copy_` into the input's storage), so BatchNorm running statistics or an
optimizer step are part of the fused program rather than separate eager ops.

Decompositions: PyTorch's core ATen table, less the ops the lowering registry
implements whole (layer-norm / GELU / softmax / NLL backward, ...): a whole-op
lowering is one recorded node instead of ten and is the very code the eager
modes run, so compiled and eager agree and recording costs less.
TORCH_TPU_COMPILE_DECOMPOSITIONS=core uses the full core table. Either way
`_unsafe_view` stays whole (see _KEEP_WHOLE).

Found by name through the `torch_dynamo_backends` entry point (pyproject.toml);
torch_tpu.dynamo.register() registers it by hand where the package metadata
is not installed.
"""
import functools

from torch._decomp import core_aten_decompositions
from torch._dynamo.backends.common import aot_autograd

from .. import _C, settings
from . import buckets, device_interface, lean_autograd
from .bucketed_graph import BucketedGraph, has_symbolic_inputs
from .graph_runner import CompiledGraph

device_interface.register()


def _compiler(kind, policy):
    def compile_graph(gm, example_inputs):
        # Symbolic sizes: a graph runs padded to buckets (bucketed_graph.py). Training
        # graphs too: the forward hands the backward its activations sliced to the real
        # sizes, and the backward pads them again.
        policy_now = buckets.get_dynamic_buckets() if policy is None else policy
        if policy_now is not False and has_symbolic_inputs(gm):
            graph = BucketedGraph(gm, kind, policy_now, lambda rec: CompiledGraph(gm, kind, rec))
        else:
            graph = CompiledGraph(gm, kind)

        # A plain function: AOTAutograd wraps the backward in torch._dynamo.disable,
        # which keeps a function's attributes (_boxed_call) but not an instance's.
        def run(args):
            return graph(args)
        run._boxed_call = True
        run.graph = graph
        return run
    compile_graph.__name__ = f"tpu_{kind}_compiler"
    return compile_graph


# Ops never decomposed. `_unsafe_view` is how AOTAutograd hides from autograd that a
# graph output shares storage with an intermediate (reshape's copying branch:
# clone + _unsafe_view). Decomposed into `view`, the output that the graph hands back
# is a real view of the clone, autograd.Function marks it "a view created inside a
# custom Function" and an in-place write to it afterwards fails (Longformer writes its
# global-attention rows into such a reshape's result) where the CPU's succeeds.
_KEEP_WHOLE = ("aten::_unsafe_view",)


@functools.cache
def decompositions():
    """The decomposition table handed to AOTAutograd (see the module note); built
    once per process, so TORCH_TPU_COMPILE_DECOMPOSITIONS is read at the first compile."""
    table = {op: fn for op, fn in core_aten_decompositions().items() if op.name() not in _KEEP_WHOLE}
    if settings.get("TORCH_TPU_COMPILE_DECOMPOSITIONS") == "core":
        return table
    lowered = set(_C._lowered_op_names())
    return {op: fn for op, fn in table.items() if op.name() not in lowered}


@functools.cache
def _aot_backend(policy=None):
    return aot_autograd(
        fw_compiler=_compiler("forward", policy),
        bw_compiler=_compiler("backward", policy),
        inference_compiler=_compiler("inference", policy),
        decompositions=decompositions(),
        keep_inference_input_mutations=True,
    )


def tpu_backend(gm, example_inputs, options=None, **kwargs):
    """Dynamo backend entry: an FX graph and its example inputs -> a callable.
    A plain training graph takes the lean run-time (lean_autograd.py); anything
    else AOTAutograd's full one.

    options (torch.compile(..., options={...})): "dynamic_buckets": "pow2", a list of
    sizes, or False (one program per size); default: torch_tpu.set_dynamic_buckets."""
    options = dict(options or {})
    policy = buckets.normalize(options.pop("dynamic_buckets")) if "dynamic_buckets" in options else None
    if options:
        raise ValueError(f"torch.compile(backend='tpu'): unknown options {sorted(options)} "
                         "(known: dynamic_buckets)")
    if policy is not None:
        return _aot_backend(policy)(gm, example_inputs, **kwargs)
    if not kwargs and settings.get("TORCH_TPU_COMPILE_LEAN"):
        fn = lean_autograd.lean(gm, example_inputs, decompositions())
        if fn is not None:
            return fn
    return _aot_backend()(gm, example_inputs, **kwargs)
