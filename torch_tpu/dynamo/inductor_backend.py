"""torch.compile's default backend ("inductor") on tpu: inductor hands each graph
whole to torch_tpu's compiler.

Registered with `register_backend_for_device("tpu", ...)`, inductor's extension
point for a device's code generation (see inductor_hook.py for when):

- `device_custom_pass` (WholeGraphPass): inductor runs it on every post-grad graph
  that touches a tpu tensor, after AOTAutograd and inductor's own decompositions and
  graph passes. It moves the whole graph into one call of
  `torch.ops.tpu_inductor.graph` (inductor_graph_op.py), leaving inductor nothing to
  generate kernels for: its wrapper calls that op, which runs the graph the way
  `torch.compile(backend="tpu")` runs its graphs, as one fused StableHLO program
  called directly after the first call (graph_runner.py).
- scheduling (TpuScheduling): inductor needs one per device; with the whole graph in
  one extern call it is never asked for a kernel, and says so clearly if it is.
- wrapper: PyTorch's Python wrapper.

Why the whole graph rather than inductor's kernels: our compiler's unit is a
program. XLA fuses elementwise work into matmuls and reductions across the whole
graph, and one launch per graph keeps the host time of a call to binding buffers;
generating per-kernel programs from inductor's loop IR (its Pallas route, which needs
JAX) would split the same graph into many programs and launches, and per-op ATen
fallback kernels would run it op by op like Strict Eager. So the default backend gives
the same program as `backend="tpu"` and needs no JAX; what differs is only the
front of the pipeline (inductor's decompositions and passes, AOTAutograd's partitioner
for training graphs).
"""
import operator
import weakref

import torch
from torch._inductor.custom_graph_pass import CustomGraphModulePass, get_hash_for_files

from . import inductor_graph_op


class TpuScheduling:
    """Inductor's per-device kernel generator. The whole-graph pass leaves it no kernel
    to generate; anything else is a bug in that pass, reported as such."""

    def __init__(self, scheduler=None):
        self.scheduler = scheduler

    def get_backend_features(self, device):
        from torch.utils._ordered_set import OrderedSet
        return OrderedSet()

    def can_fuse_vertical(self, node1, node2):
        return False

    def can_fuse_horizontal(self, node1, node2):
        return False

    def can_fuse_multi_outputs_template(self, node1, node2):
        return False

    def fuse(self, node1, node2):
        from torch._inductor.scheduler import FusedSchedulerNode
        return FusedSchedulerNode.fuse(node1, node2)

    def group_fn(self, sizes):
        return tuple(tuple(s) for s in sizes)

    def _no_kernels(self, node, *args, **kwargs):
        raise RuntimeError(
            "tpu: inductor asked for a kernel on the tpu device; torch_tpu hands whole graphs "
            f"to its own compiler and generates no inductor kernels (node: {node}). "
            "Please report this graph; meanwhile torch.compile(backend='tpu') compiles it")

    codegen_node = codegen_template = codegen_mix_order_reduction = _no_kernels
    codegen_nested_reduction = generate_kernel_code_from_nodes = _no_kernels

    def codegen_sync(self):
        pass

    def ready_to_flush(self):
        return False

    def flush(self):
        pass

    def free_buffers_in_scheduler(self):
        if self.scheduler is not None:
            self.scheduler.free_buffers()

    def get_fusion_pair_priority(self, node1, node2):
        return 0

    def codegen_comment(self, node_schedule, kernel_name=None):
        pass


class PythonWrapper:
    """PyTorch's Python wrapper codegen, imported when inductor first builds one."""

    # Inductor may cache the generated wrapper on disk: the graph it calls is found
    # again from its key (inductor_graph_op.py).
    supports_caching = True

    @staticmethod
    def create(*args, **kwargs):
        from torch._inductor.codegen.wrapper import PythonWrapperCodegen
        return PythonWrapperCodegen.create(*args, **kwargs)


def _write_backs(graph):
    """The graph's writes into its inputs: AOTAutograd leaves each as a `copy_` into
    the placeholder. Any other op writing into an input is refused clearly."""
    copies = []
    for n in graph.nodes:
        schema = getattr(n.target, "_schema", None)
        if n.op != "call_function" or schema is None or not schema.is_mutable:
            continue
        if n.target is torch.ops.aten.copy_.default and n.args[0].op == "placeholder" \
                and not n.users:
            copies.append(n)
            continue
        raise NotImplementedError(
            f"tpu: inductor graph mutates with {n.format_node()}; "
            "use torch.compile(backend='tpu') for this program")
    return copies


def _sizes_needing(node, tensors, seen):
    """For a non-tensor graph output (a dynamic-shape forward graph returns sizes for
    its backward): checks it is arithmetic on sizes, and adds to `tensors` the computed
    tensors whose sizes it reads (they become outputs of the graph op)."""
    if node.op == "placeholder" or node in seen:
        return
    if node.op != "call_function" or isinstance(node.meta.get("val"), torch.Tensor):
        raise NotImplementedError(
            f"tpu: inductor graph returns a non-tensor value computed from tensor data "
            f"({node.format_node()}); use torch.compile(backend='tpu') for this program")
    seen.add(node)
    if node.target is torch.ops.aten.sym_size.int:
        x = node.args[0]
        if x.op != "placeholder" and x not in tensors:
            tensors.append(x)
        return
    for a in node.all_input_nodes:
        _sizes_needing(a, tensors, seen)


def _feeds(node, targets):
    """Whether a non-tensor node is needed to compute one of `targets`."""
    if isinstance(node.meta.get("val"), torch.Tensor) or node.op != "call_function":
        return False
    stack, seen = list(targets), set()
    while stack:
        t = stack.pop()
        if t is node:
            return True
        if t in seen or isinstance(t.meta.get("val"), torch.Tensor):
            continue
        seen.add(t)
        stack.extend(t.all_input_nodes)
    return False


def _restore_subgraphs(gm):
    """Inductor runs its passes on a higher-order op's subgraphs (flex_attention's
    score_mod / mask_mod, cond's branches) before their parent, so ours moved each into
    a graph op of its own. The op calls them itself, under vmap for flex_attention,
    which a program cannot take: they are put back as they were, and run inside the
    parent's program."""
    for n in gm.graph.nodes:
        if n.op == "get_attr":
            sub = getattr(gm, n.target, None)
            unmoved = _unmoved.pop(sub, None) if isinstance(sub, torch.fx.GraphModule) else None
            if unmoved is not None:
                sub.graph = unmoved
                sub.recompile()


# Each moved graph's original, while it may still turn out to be a subgraph. Kept
# outside the module (not in gm.meta): inductor pickles a graph module's meta.
_unmoved = weakref.WeakKeyDictionary()


def _copy_graph(g):
    copy = torch.fx.Graph()
    copy.output(copy.graph_copy(g, {}))
    return copy


def whole_graph(gm):
    """Rewrites `gm` in place into one `tpu_inductor.graph` call. Returns False (and
    leaves it as it is) when there is nothing to move."""
    _restore_subgraphs(gm)
    g = gm.graph
    placeholders = [n for n in g.nodes if n.op == "placeholder"]
    out_node = g.output_node()
    outs = out_node.args[0]
    if not any(n.op == "call_function" for n in g.nodes):
        return False
    flat = list(outs) if isinstance(outs, (tuple, list)) else [outs]

    copies = _write_backs(g)
    # Graph outputs computed inside (inputs and Python values are returned as they are;
    # sizes are recomputed outside), then the values written back into inputs.
    computed, sizes = [], set()
    for o in flat + [c.args[1] for c in copies]:
        if isinstance(o, torch.fx.Node) and o.op != "placeholder" and o not in computed:
            if isinstance(o.meta.get("val"), torch.Tensor):
                computed.append(o)
            else:
                sizes.add(o)
    for o in list(sizes):
        _sizes_needing(o, computed, set())

    layout, tensor_args, int_args = [], [], []
    for p in placeholders:
        v = p.meta.get("val")
        if isinstance(v, torch.Tensor):
            layout.append(("t", len(tensor_args)))
            tensor_args.append(p)
        elif isinstance(v, (int, torch.SymInt)):
            layout.append(("i", len(int_args)))
            int_args.append(p)
        else:
            raise NotImplementedError(f"tpu: inductor graph input {p.name} of type {type(v)}")

    _unmoved[gm] = _copy_graph(g)  # in case gm is a subgraph (_restore_subgraphs)
    sub = torch.fx.Graph()
    env = {}
    for n in g.nodes:
        if n.op != "output" and n not in copies:
            env[n] = sub.node_copy(n, lambda x: env[x])
    # A constant returned as it is (inductor folds e.g. the position `iota` into one)
    # would be a storage the program does not write, which keeps the graph from being
    # called directly; returned as a copy it is one of the program's outputs.
    sub.output(tuple(sub.call_function(torch.ops.aten.clone.default, (env[o],))
                     if o.op == "get_attr" else env[o] for o in computed))
    sub_gm = torch.fx.GraphModule(gm, sub)
    key = inductor_graph_op.add(sub_gm, layout)
    dsts = [c.args[0] for c in copies]
    srcs = [c.args[1] for c in copies]

    # The outer graph: placeholders, the call, one getitem per computed output, the
    # size outputs (recomputed from the inputs' and the op's outputs' sizes), the
    # write-back. Built before the output node, then the old nodes are erased.
    old = [n for n in g.nodes if n.op != "placeholder"]
    size_nodes = [n for n in old if n in sizes or _feeds(n, sizes)]
    got = {}
    with g.inserting_before(out_node):
        call = g.call_function(torch.ops.tpu_inductor.graph.default, (key, tensor_args, int_args))
        vals = _fresh([o.meta["val"] for o in computed], placeholders)
        call.meta["val"] = vals
        for i, o in enumerate(computed):
            item = g.call_function(operator.getitem, (call, i))
            item.meta["val"] = vals[i]
            got[o] = item
        for n in size_nodes:
            got[n] = g.node_copy(n, lambda x: got.get(x, x))
        if copies:
            g.call_function(torch.ops.tpu_inductor.write_back.default,
                            (dsts, [got.get(s, s) for s in srcs]))
        mapped = [got.get(o, o) if isinstance(o, torch.fx.Node) else o for o in flat]
        new_out = g.output(type(outs)(mapped) if isinstance(outs, (tuple, list)) else mapped[0])
    new_out.meta.update(out_node.meta)
    for n in reversed(old):
        g.erase_node(n)
    g.lint()
    gm.recompile()
    return True


def _fresh(vals, placeholders):
    """New fake tensors of the outputs' layouts (the op returns new tensors)."""
    from torch._guards import detect_fake_mode
    mode = detect_fake_mode([p.meta.get("val") for p in placeholders])
    if mode is None:
        return vals
    with mode:
        return [torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device=v.device)
                for v in vals]


class WholeGraphPass(CustomGraphModulePass):
    def __call__(self, gm):
        # Ours rather than the TpuInterface PyTorch ships for another TPU stack (as the
        # "tpu" backend does); Dynamo is fully imported by the time a graph gets here.
        from . import device_interface
        device_interface.register()
        whole_graph(gm)

    def uuid(self):
        # Inductor's FX-graph cache keys on this: the generated wrapper depends only on
        # how the graph is moved (this file and the op's).
        return get_hash_for_files((__file__, inductor_graph_op.__file__))


_registered = False


def register():
    """Makes inductor use torch_tpu's compiler for tpu graphs (idempotent)."""
    global _registered
    if _registered:
        return
    from torch._inductor.codegen.common import register_backend_for_device
    register_backend_for_device("tpu", TpuScheduling, PythonWrapper,
                                device_custom_pass=WholeGraphPass())
    _registered = True
