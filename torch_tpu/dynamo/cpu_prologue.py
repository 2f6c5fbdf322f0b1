"""Splits the CPU scalar work out of an AOTAutograd graph, so that the rest can be one
directly called program.

AdamW without capturable=True keeps each parameter's `step` as a CPU 0-dim tensor.
Compiled, its graph increments the steps and computes the bias corrections on the
CPU (a few foreach ops on 0-dim tensors) and hands those scalars to the device ops.
A program cannot recompute CPU values, so such a graph used to be recorded again
on every call. Here the graph becomes two:

  - the prologue: of the nodes whose values are CPU tensors (computed from CPU
    values only), those that must run on the CPU: the CPU inputs' mutations
    (`copy_` into a step tensor) and what they read, factories and random ops. It
    runs eagerly every call and returns the CPU values the device graph reads,
    stacked into one 1-d tensor per dtype;
  - the device graph: the other nodes, the CPU ops that only feed the device
    (the bias corrections) included, reading those scalars from the stacked
    tensors (uploaded with one host-to-device copy per dtype, then `select`ed inside
    the program), so that all its inputs are tpu tensors and it is captured as a
    CompiledTrace like any other graph. Moving that CPU work into the program
    makes one fused foreach op of what the CPU ran as one op per parameter.

The device ops see a tpu 0-dim tensor where they saw a CPU 0-dim one: type
promotion treats both alike (dimension, not device, ranks them), and the moved
ops compute in the same dtype on the device, so results agree with the unsplit
graph to float rounding.
Graphs that do not fit (a CPU value computed from a device value, a CPU value the
device reads that is not 0-dim, a CPU result returned, a mutated CPU input the
device reads) are not split and keep the recording path.
"""
import operator

import torch
import torch.fx as fx


def _is_cpu(val):
    if isinstance(val, torch.Tensor):
        return val.device.type == "cpu"
    if isinstance(val, (list, tuple)) and val:
        return all(isinstance(v, torch.Tensor) and v.device.type == "cpu" for v in val)
    return False


class Split:
    """The two graphs of a split, and how to turn the graph's arguments into the
    device graph's."""

    def __init__(self, prologue, device_gm, cpu_inputs, device):
        self.prologue = prologue        # GraphModule: all graph args -> stacked CPU scalars
        self.device_gm = device_gm      # GraphModule: device args + stacks -> graph results
        self.cpu_inputs = cpu_inputs    # indices of the graph's CPU inputs
        self.device = device

    def device_args(self, args):
        """Runs the prologue (its CPU mutations included) and returns the device
        graph's argument list."""
        stacks = self.prologue(*args)
        skip = self.cpu_inputs
        out = [a for i, a in enumerate(args) if i not in skip]
        out += [s.to(self.device) for s in stacks]
        return out


def split(gm):
    """A Split of `gm`, or None when the graph has no CPU work or it does not fit."""
    g = gm.graph
    placeholders = [n for n in g.nodes if n.op == "placeholder"]
    cpu = set()
    device = None
    for n in g.nodes:
        val = n.meta.get("val")
        if isinstance(val, torch.Tensor) and val.device.type != "cpu" and device is None:
            device = val.device
        if n.op == "placeholder":
            if _is_cpu(val):
                cpu.add(n)
        elif n.op == "call_function":
            if _is_cpu(val) or (n.target is operator.getitem and n.args[0] in cpu):
                if any(i not in cpu for i in n.all_input_nodes):
                    return None  # a CPU value computed from a device value
                cpu.add(n)
    if device is None or not any(n.op == "call_function" for n in cpu):
        return None
    mutated = {n.args[0] for n in cpu
               if n.op == "call_function" and n.target is torch.ops.aten.copy_.default}
    (output,) = [n for n in g.nodes if n.op == "output"]
    if any(i in cpu for i in output.all_input_nodes):
        return None  # a CPU result (the prologue would have to return it)

    # What must run on the CPU: the CPU inputs' mutations and what they read,
    # factories (no input to upload) and random ops (the CPU generator's draws).
    # The rest of the CPU work only feeds the device and moves into the device
    # graph, on the uploaded scalars: one foreach op there instead of one CPU op
    # per parameter here.
    calls = [n for n in g.nodes if n.op == "call_function" and n in cpu]
    keep = set()
    todo = [n for n in calls if n.target is torch.ops.aten.copy_.default or not n.all_input_nodes
            or torch.Tag.nondeterministic_seeded in getattr(n.target, "tags", ())]
    while todo:
        n = todo.pop()
        if n in keep or n.op != "call_function":
            continue
        keep.add(n)
        todo += [i for i in n.all_input_nodes if i in cpu]
    for n in calls:  # an element of a kept foreach result is kept with it
        if n.target is operator.getitem and n.args[0] in keep:
            keep.add(n)
    moved = {n for n in calls if n not in keep}

    # The CPU values the device graph reads (the device nodes and the moved ones),
    # in first-use order.
    needed = []
    for n in g.nodes:
        if n.op != "call_function" or (n in cpu and n not in moved):
            continue
        for i in n.all_input_nodes:
            if i in cpu and i not in moved and i not in needed:
                v = i.meta.get("val")
                if not isinstance(v, torch.Tensor) or v.dim() != 0 or i in mutated:
                    return None
                needed.append(i)
    if not needed:
        return None
    dtypes = []
    for i in needed:
        if i.meta["val"].dtype not in dtypes:
            dtypes.append(i.meta["val"].dtype)

    # The prologue: every placeholder (the caller passes all args), the CPU nodes.
    pg = fx.Graph()
    env = {}
    for p in placeholders:
        env[p] = pg.placeholder(p.name)
        env[p].meta = dict(p.meta)
    kept = [n for n in calls if n in keep]
    # The input mutations: AOTAutograd puts them last, one copy_ per input; when
    # they are, one _foreach_copy_ does them all (one dispatch, not one per step).
    copies = [n for n in kept if n.target is torch.ops.aten.copy_.default]
    tail = len(copies) > 1 and kept[-len(copies):] == copies and not any(
        n.users for n in copies) and all(len(n.args) == 2 and not n.kwargs for n in copies)
    for n in kept[:-len(copies)] if tail else kept:
        env[n] = pg.node_copy(n, lambda a: env[a])
    if tail:
        pg.call_function(torch.ops.aten._foreach_copy_.default,
                         ([env[n.args[0]] for n in copies], [env[n.args[1]] for n in copies]))
    stacks = [pg.call_function(torch.ops.aten.stack.default,
                               ([env[i] for i in needed if i.meta["val"].dtype == dt],))
              for dt in dtypes]
    pg.output(tuple(stacks))
    prologue = fx.GraphModule(gm, pg)

    # The device graph: the device placeholders, one per stack, then the rest.
    dg = fx.Graph()
    denv = {}
    for p in placeholders:
        if p not in cpu:
            denv[p] = dg.placeholder(p.name)
            denv[p].meta = dict(p.meta)
    stack_nodes = [dg.placeholder(f"cpu_scalars_{k}") for k in range(len(dtypes))]
    index = {dt: 0 for dt in dtypes}
    for i in needed:
        dt = i.meta["val"].dtype
        k = dtypes.index(dt)
        denv[i] = dg.call_function(torch.ops.aten.select.int, (stack_nodes[k], 0, index[dt]))
        index[dt] += 1
    for n in g.nodes:
        if n.op == "call_function" and (n not in cpu or n in moved):
            denv[n] = dg.node_copy(n, lambda a: denv[a])
            if n in moved:  # its value is a tpu tensor now (meta says CPU)
                denv[n].meta.pop("val", None)
        elif n.op == "output":
            dg.node_copy(n, lambda a: denv[a])
    device_gm = fx.GraphModule(gm, dg)
    cpu_inputs = frozenset(k for k, p in enumerate(placeholders) if p in cpu)
    return Split(prologue, device_gm, cpu_inputs, device)
