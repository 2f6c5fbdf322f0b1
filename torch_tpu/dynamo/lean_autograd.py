"""A lean run-time for the common training graph: AOTAutograd at compile time only.

For a Dynamo graph that needs none of AOTAutograd's run-time calling-convention work
(no input mutation, no output aliasing an input, no RNG, plain tensor inputs and
outputs), the backend traces the joint forward+backward graph once with
aot_export_joint_simple (which refuses mutations and aliasing itself), splits it with
AOTAutograd's default partitioner, and calls the two halves from its own small
autograd.Function: the forward graph's program runs, its saved activations are held
by the Function's context as tpu tensors, and the backward graph's program is
launched directly from the autograd engine. The per-call wrappers AOTAutograd runs
around its own autograd.Function (input/output metadata handling, saved-tensor
bookkeeping, ...) are not needed for such a graph and are skipped; Dynamo's guards
still decide when the graph applies. One is kept: a gradient arriving in another
layout than the tangent the backward graph was traced with is copied into that
layout (as AOTAutograd's tangent coercion does), since the graph's views were
decided from the traced strides.

Anything else takes AOTAutograd's full path (lean() returns None and says why in
LAST_DECLINE, which tests read).
"""
import torch
from torch._functorch.aot_autograd import aot_export_joint_simple
from torch._functorch.partitioners import default_partition

from .graph_runner import CompiledGraph

LAST_DECLINE = []  # why the last graphs were not lean (newest last; tests and debugging)
_KEEP_DECLINES = 32


def _decline(why):
    del LAST_DECLINE[:-_KEEP_DECLINES + 1]
    LAST_DECLINE.append(why)
    return None


def _why_not_lean(gm, example_inputs):
    if not torch.is_grad_enabled():
        return "grad mode is off (an inference graph)"
    if not all(isinstance(a, torch.Tensor) for a in example_inputs):
        return "non-tensor inputs (symbolic sizes)"
    if not any(a.requires_grad for a in example_inputs):
        return "no input requires grad"
    if any(type(a) not in (torch.Tensor, torch.nn.Parameter) and not _is_fake(a)
           for a in example_inputs):
        return "tensor subclass inputs"
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target is torch._C._set_grad_enabled:
            return "grad mode changes inside the graph"
        if n.op == "output":
            outs = n.args[0]
            if not isinstance(outs, (tuple, list)) or not all(
                    isinstance(o, torch.fx.Node) and isinstance(o.meta.get("example_value",
                                                                          o.meta.get("val")),
                                                                torch.Tensor)
                    for o in outs):
                return "outputs that are not a flat tuple of tensors"
    return None


def _is_fake(t):
    from torch._subclasses.fake_tensor import FakeTensor
    return isinstance(t, FakeTensor)


def _random_op(joint):
    for n in joint.graph.nodes:
        if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload) and \
                torch.Tag.nondeterministic_seeded in n.target.tags:
            return str(n.target)
    return None


class _Plan:
    """The two compiled halves and how the Function's calls map onto them."""

    def __init__(self, fw, bw, num_outputs, differentiable, tangent_layouts):
        self.fw = fw
        self.bw = bw
        self.num_outputs = num_outputs
        self.differentiable = differentiable  # output indices that take a tangent
        self.nondiff = [i for i in range(num_outputs) if i not in set(differentiable)]
        self.tangent_layouts = tangent_layouts  # (size, stride) the backward was traced with

    def tangents(self, grads):
        """The gradients of the differentiable outputs, each in its traced layout."""
        out = []
        for i, (size, stride) in zip(self.differentiable, self.tangent_layouts):
            g = grads[i]
            if not _same_layout(g, size, stride):
                g = torch.empty_strided(size, stride, dtype=g.dtype, device=g.device).copy_(g)
            out.append(g)
        return out


def _same_layout(t, size, stride):
    # a size-1 dimension's stride addresses nothing: a view of either layout is the same
    return tuple(t.shape) == size and all(
        n == 1 or a == b for n, a, b in zip(size, t.stride(), stride))


class _LeanFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, plan, *args):
        outs = plan.fw(list(args))
        n = plan.num_outputs
        ctx.save_for_backward(*outs[n:])
        ctx.plan = plan
        results = tuple(outs[:n])
        if plan.nondiff:
            ctx.mark_non_differentiable(*[results[i] for i in plan.nondiff])
        return results

    @staticmethod
    def backward(ctx, *grads):
        if torch.is_grad_enabled():
            raise RuntimeError("torch.compile(backend='tpu') does not support double backward "
                               "(create_graph=True) through a compiled graph")
        plan = ctx.plan
        args = list(ctx.saved_tensors)
        args += plan.tangents(grads)
        return (None, *plan.bw(args))


def lean(gm, example_inputs, decompositions):
    """The lean callable for `gm`, or None (AOTAutograd's full path is taken)."""
    why = _why_not_lean(gm, example_inputs)
    if why:
        return _decline(why)
    try:
        joint = aot_export_joint_simple(gm, tuple(example_inputs), trace_joint=True,
                                        decompositions=decompositions)
    except RuntimeError as e:  # input mutation, output aliasing, pytrees (see its checks)
        return _decline(f"aot_export_joint_simple: {str(e).splitlines()[0][:200]}")
    rand = _random_op(joint)
    if rand:
        return _decline(f"random op {rand} (RNG state inputs)")
    placeholders = [n for n in joint.graph.nodes if n.op == "placeholder"]
    tangents = [n for n in placeholders if n.name.startswith("tangents")]
    (out_node,) = [n for n in joint.graph.nodes if n.op == "output"]
    joint_outs = out_node.args[0]
    fw_outs = list(gm.graph.find_nodes(op="output"))[0].args[0]
    num_outputs = len(fw_outs)
    differentiable = [i for i, o in enumerate(fw_outs)
                      if _value(o).requires_grad and _value(o).is_floating_point()]
    if not differentiable:
        return _decline("no output requires grad")
    # The joint graph: (primals, tangents) -> (outputs, one gradient per primal).
    if len(joint_outs) != num_outputs + len(example_inputs) or \
            len(placeholders) != len(example_inputs) + len(tangents) or \
            len(differentiable) != len(tangents):
        return _decline("the joint graph is not (primals, tangents) -> (outputs, gradients) "
                        f"with {len(differentiable)} tangents")
    _drop_metadata_asserts(joint)
    fw_gm, bw_gm = default_partition(joint, example_inputs, num_fwd_outputs=num_outputs)
    if any(n.op == "placeholder" and not isinstance(n.meta.get("val"), torch.Tensor)
           for n in bw_gm.graph.nodes):
        return _decline("the backward saves symbolic sizes")
    bw_tangents = [n for n in bw_gm.graph.nodes if n.op == "placeholder"][-len(tangents):]
    layouts = [(tuple(_value(n).shape), tuple(_value(n).stride())) for n in bw_tangents]
    if not all(n.name.startswith("tangents") for n in bw_tangents):
        return _decline("the backward graph's last inputs are not the tangents")
    plan = _Plan(CompiledGraph(fw_gm, "forward"), CompiledGraph(bw_gm, "backward"),
                 num_outputs, differentiable, layouts)
    apply = _LeanFunction.apply

    def run(*args):
        return apply(plan, *args)
    run.plan = plan
    return run


def _drop_metadata_asserts(joint):
    """Removes aten._assert_tensor_metadata from the joint graph. Tracing a dtype/device
    conversion (`.to`, `.float()`) records it; it checks metadata the trace has already
    fixed and returns nothing, but the partitioner counts it as an impure op and refuses
    an activation-checkpointed graph that holds one (inductor removes it as well)."""
    target = torch.ops.aten._assert_tensor_metadata.default
    dropped = False
    for n in list(joint.graph.nodes):
        if n.op == "call_function" and n.target is target and not n.users:
            joint.graph.erase_node(n)
            dropped = True
    if dropped:
        joint.recompile()


def _value(node):
    return node.meta.get("example_value", node.meta.get("val"))
