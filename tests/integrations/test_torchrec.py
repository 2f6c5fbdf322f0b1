"""TorchRec on tpu (see docs/torchrec.md): the fbgemm jagged ops TorchRec's
KeyedJaggedTensor / EmbeddingBagCollection path calls and fbgemm's dense table-batched
embedding lookup run as lowered tpu kernels (no CPU fallback) and match the CPU;
bad lengths/offsets/ids raise; fbgemm's fused TBE (lookup + optimizer in the backward)
and row-wise bucketizing run on tpu; DistributedModelParallel over 2 ranks matches 1
rank with data_parallel, table_wise and row_wise tables (and the CPU/Gloo run);
the DLRM example's --torchrec variant agrees with the CPU. The EBC smoke test runs by
default; the rest is marked slow (`pytest --slow`)."""
import copy
import json
import os
import subprocess
import sys

import pytest
import torch

torchrec = pytest.importorskip("torchrec")
import fbgemm_gpu  # noqa: E402,F401  (loaded by torchrec; named for the ops below)
import torch_tpu.debug  # noqa: E402
from conftest import TPU, assert_close_cpu  # noqa: E402
from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
fbgemm = torch.ops.fbgemm


def fallbacks():
    return torch_tpu.debug.metrics()["cpu_fallback_counts"]


def ebc_step(device):
    """EBC forward and backward on a KJT whose offsets are computed on `device`."""
    torch.manual_seed(0)
    tables = [EmbeddingBagConfig(name=f"t{i}", embedding_dim=4 + 2 * i, num_embeddings=20 + i,
                                 feature_names=[f"f{i}"]) for i in range(3)]
    ebc = EmbeddingBagCollection(tables=tables, device=torch.device("cpu")).to(device)
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(0, 4, (3 * 4,), generator=g)
    values = torch.randint(0, 20, (int(lengths.sum()),), generator=g)
    kjt = KeyedJaggedTensor(keys=["f0", "f1", "f2"], values=values.to(device),
                            lengths=lengths.to(device))
    offsets = kjt.offsets()                       # fbgemm::asynchronous_complete_cumsum
    permuted = kjt.permute([2, 0, 1])             # fbgemm::permute_2D_sparse_data
    out = ebc(permuted)
    loss = sum((v * v).sum() for v in out.to_dict().values())
    loss.backward()
    return out.values(), offsets, permuted.values(), [p.grad for p in ebc.parameters()]


def test_ebc_forward_backward_matches_cpu_without_fallback():
    cpu = ebc_step("cpu")
    torch_tpu.debug.reset_metrics()
    tpu = ebc_step(TPU)
    assert fallbacks() == {}
    assert_close_cpu(tpu[0], cpu[0])
    assert_close_cpu(tpu[1], cpu[1])
    assert_close_cpu(tpu[2], cpu[2])
    for a, b in zip(tpu[3], cpu[3]):
        assert_close_cpu(a, b)


@pytest.mark.slow
def test_jagged_ops_match_cpu():
    lengths = torch.tensor([[1, 2, 0], [3, 1, 1], [2, 0, 2]], dtype=torch.int32)
    values = torch.arange(12.0)
    weights = torch.rand(12)
    perm = torch.tensor([2, 0, 1], dtype=torch.int32)
    torch_tpu.debug.reset_metrics()
    for lens in (lengths, lengths.long()):
        for cs in (fbgemm.asynchronous_complete_cumsum, fbgemm.asynchronous_exclusive_cumsum,
                   fbgemm.asynchronous_inclusive_cumsum):
            assert_close_cpu(cs(lens.flatten().to(TPU)), cs(lens.flatten()))
    for total in (12, None):
        ref = fbgemm.permute_2D_sparse_data(perm, lengths, values, weights, 12)
        got = fbgemm.permute_2D_sparse_data(perm.to(TPU), lengths.to(TPU), values.to(TPU),
                                            weights.to(TPU), total)
        for a, b in zip(got, ref):
            assert_close_cpu(a, b)
    # A subset of the features, repeated: the result's length is data.
    sub = torch.tensor([1, 1], dtype=torch.int32)
    ref = fbgemm.permute_2D_sparse_data(sub, lengths, values, None, None)
    got = fbgemm.permute_2D_sparse_data(sub.to(TPU), lengths.to(TPU), values.to(TPU), None, None)
    assert got[2] is None and ref[2] is None
    assert_close_cpu(got[0], ref[0])
    assert_close_cpu(got[1], ref[1])
    offsets = torch.tensor([0, 2, 2, 5, 6])
    dense_values = torch.randn(6, 3)
    ref = fbgemm.jagged_to_padded_dense(dense_values, [offsets], [2], -1.0)
    assert_close_cpu(fbgemm.jagged_to_padded_dense(dense_values.to(TPU), [offsets.to(TPU)], [2], -1.0), ref)
    padded = torch.randn(4, 3, 3)
    ref = fbgemm.dense_to_jagged(padded, [offsets])[0]
    assert_close_cpu(fbgemm.dense_to_jagged(padded.to(TPU), [offsets.to(TPU)], 6)[0], ref)
    csr = torch.tensor([0, 1, 3], dtype=torch.int32)
    seg_values = torch.randn(6)
    ref = fbgemm.segment_sum_csr(2, csr, seg_values)
    assert_close_cpu(fbgemm.segment_sum_csr(2, csr.to(TPU), seg_values.to(TPU)), ref)
    assert fallbacks() == {}


@pytest.mark.slow
def test_jagged_to_padded_dense_backward_matches_cpu():
    offsets = torch.tensor([0, 2, 2, 5, 6])
    v = torch.randn(6, 3, requires_grad=True)
    vt = v.detach().to(TPU).requires_grad_()
    w = torch.randn(4, 2, 3)
    (fbgemm.jagged_to_padded_dense(v, [offsets], [2]) * w).sum().backward()
    (fbgemm.jagged_to_padded_dense(vt, [offsets.to(TPU)], [2]) * w.to(TPU)).sum().backward()
    assert_close_cpu(vt.grad, v.grad)


@pytest.mark.slow
def test_bad_lengths_and_ids_raise():
    lengths = torch.tensor([[1, 2], [3, 1]]).to(TPU)
    values = torch.arange(7).to(TPU)
    with pytest.raises(IndexError, match="permute index"):
        fbgemm.permute_2D_sparse_data(torch.tensor([0, 2]).to(TPU), lengths, values, None,
                                      7)[1].cpu()
    with pytest.raises(RuntimeError, match="permuted_lengths_sum"):
        fbgemm.permute_2D_sparse_data(torch.tensor([1, 0]).to(TPU), lengths, values, None, 6)[1].cpu()
    with pytest.raises(IndexError, match="values has 5 elements"):
        fbgemm.permute_2D_sparse_data(torch.tensor([1, 0]).to(TPU), lengths, values[:5], None,
                                      7)[1].cpu()
    with pytest.raises(RuntimeError, match="non-negative"):
        fbgemm.permute_2D_sparse_data(torch.tensor([1, 0]).to(TPU),
                                      torch.tensor([[1, -1], [3, 1]]).to(TPU), values, None,
                                      4)[1].cpu()
    with pytest.raises(IndexError, match="but values has 3 rows"):
        fbgemm.jagged_to_padded_dense(torch.randn(3, 2).to(TPU), [torch.tensor([0, 2, 5]).to(TPU)],
                                      [4]).cpu()


@pytest.mark.slow
def test_block_bucketize_matches_cpu():
    """Row-wise sharding's split of each bag by the rank owning each id's row block,
    including ids past block_size * my_size, weights, the sequence permutation, and
    keep_orig_idx."""
    f = fbgemm.block_bucketize_sparse_features
    g = torch.Generator().manual_seed(0)
    torch_tpu.debug.reset_metrics()
    for t, b, m, seq, weighted, keep in [(3, 4, 2, False, False, False), (4, 2, 3, True, True, False),
                                         (2, 3, 2, False, True, True), (1, 1, 1, False, False, False)]:
        lengths = torch.randint(0, 4, (t * b,), generator=g)
        sizes = torch.randint(1, 6, (t,), generator=g)
        ids = torch.randint(0, 20, (int(lengths.sum()),), generator=g)
        w = torch.rand(ids.numel(), generator=g) if weighted else None
        ref = f(lengths, ids, False, seq, sizes, m, w, keep_orig_idx=keep)
        got = f(lengths.to(TPU), ids.to(TPU), False, seq, sizes.to(TPU), m,
                None if w is None else w.to(TPU), keep_orig_idx=keep)
        for a, r in zip(got, ref):
            assert (a is None) == (r is None)
            if r is not None:
                assert_close_cpu(a, r)
    assert fallbacks() == {}
    lengths, sizes = torch.tensor([1, 2]), torch.tensor([4])
    with pytest.raises(RuntimeError, match="lengths add up to 3, but there are 2 indices"):
        f(lengths.to(TPU), torch.tensor([1, 2]).to(TPU), False, False, sizes.to(TPU), 2)[0].cpu()
    with pytest.raises(IndexError, match="index -1 is negative"):
        f(lengths.to(TPU), torch.tensor([1, -1, 2]).to(TPU), False, False, sizes.to(TPU), 2)[0].cpu()


def tbe_module():
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
        DenseTableBatchedEmbeddingBagsCodegen, PoolingMode)
    torch.manual_seed(0)
    return DenseTableBatchedEmbeddingBagsCodegen([(10, 4), (7, 8), (5, 4)],
                                                 feature_table_map=[0, 1, 2, 1],
                                                 pooling_mode=PoolingMode.SUM, use_cpu=True)


def tbe_batch():
    g = torch.Generator().manual_seed(3)
    lengths = torch.randint(0, 4, (4 * 3,), generator=g)
    rows = [10, 7, 5, 7]
    ids = torch.cat([torch.randint(0, rows[i // 3], (int(n),), generator=g)
                     for i, n in enumerate(lengths)])
    return ids, torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])


@pytest.mark.slow
def test_dense_tbe_lookup_matches_cpu():
    """fbgemm's dense table-batched embedding bags with their tables on tpu: the
    lookup is the lowered op and its backward the lowered tpu::tbe_dense_backward."""
    m = tbe_module()
    mt = copy.deepcopy(m).to(TPU)
    ids, offsets = tbe_batch()
    psw = torch.rand(ids.numel())
    for w in (None, psw):
        out = m(ids, offsets, w)
        out.pow(2).sum().backward()
        torch_tpu.debug.reset_metrics()
        ot = mt(ids.to(TPU), offsets.to(TPU), None if w is None else w.to(TPU))
        ot.pow(2).sum().backward()
        assert fallbacks() == {}
        assert_close_cpu(ot, out)
        assert_close_cpu(mt.weights.grad, m.weights.grad)
        m.weights.grad = mt.weights.grad = None
    # Mean pooling with per-sample weights, against autograd over plain PyTorch ops
    # (fbgemm 1.8's CPU backward disagrees with its own forward for this combination).
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
        DenseTableBatchedEmbeddingBagsCodegen, PoolingMode)
    mean = DenseTableBatchedEmbeddingBagsCodegen([(10, 4)], pooling_mode=PoolingMode.MEAN,
                                                 use_cpu=True).to(TPU)
    table = mean.weights.detach().cpu().view(10, 4).requires_grad_()
    i, o, w = torch.tensor([1, 2, 2, 5]), torch.tensor([0, 3, 4]), torch.tensor([0.5, 2.0, 1.0, 3.0])
    ref = torch.stack([(table[i[:3]] * w[:3, None]).sum(0) / 3, table[i[3]] * w[3]])
    ref.pow(2).sum().backward()
    got = mean(i.to(TPU), o.to(TPU), w.to(TPU))
    got.pow(2).sum().backward()
    assert_close_cpu(got, ref.detach())
    assert_close_cpu(mean.weights.grad.view(10, 4), table.grad)
    bad = ids.clone()
    bad[-1] = 7  # the last feature's table has 7 rows
    with pytest.raises(IndexError, match="embedding row 7 is out of range"):
        mt(bad.to(TPU), offsets.to(TPU)).cpu()


def fused_tbe_module(device, optimizer, features=(0, 1, 2, 1)):
    """fbgemm's fused TBE (TorchRec's `fused` kernel) in the layout TorchRec builds for
    a device other than CUDA/MTIA: host layout (EmbeddingLocation.HOST, ComputeDevice.CPU)
    on `device`; tables from the dense TBE module above."""
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import (
        ComputeDevice, EmbeddingLocation, PoolingMode)
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
        SplitTableBatchedEmbeddingBagsCodegen)
    m = SplitTableBatchedEmbeddingBagsCodegen(
        [(r, d, EmbeddingLocation.HOST, ComputeDevice.CPU) for r, d in [(10, 4), (7, 8), (5, 4)]],
        feature_table_map=list(features), optimizer=optimizer, learning_rate=0.1, eps=1e-8,
        pooling_mode=PoolingMode.SUM, device=torch.device(device))
    with torch.no_grad():
        for dst, src in zip(m.split_embedding_weights(), tbe_module().split_embedding_weights()):
            dst.copy_(src)
    return m


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", ["EXACT_SGD", "EXACT_ROWWISE_ADAGRAD"])
def test_fused_tbe_lookup_and_update_match_cpu(optimizer):
    """The fused lookup (forward, then the optimizer applied in the backward) on tpu
    against fbgemm's CPU kernels, over three steps, with per-sample weights once.
    Two features share a table, except for row-wise Adagrad, whose fbgemm 1.8 CPU
    kernel refuses shared tables ("num of rows processed by adagrad")."""
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    opt = getattr(EmbOptimType, optimizer)
    features = (0, 1, 2) if optimizer == "EXACT_ROWWISE_ADAGRAD" else (0, 1, 2, 1)
    torch_tpu.debug.reset_metrics()  # building the module included
    m, mt = fused_tbe_module("cpu", opt, features), fused_tbe_module(TPU, opt, features)
    ids, offsets = tbe_batch()
    if len(features) == 3:  # drop the fourth feature's bags
        offsets = offsets[:10]
        ids = ids[:int(offsets[-1])]
    for step, w in enumerate([None, torch.rand(ids.numel()), None]):
        out = m(ids, offsets, w)
        ot = mt(ids.to(TPU), offsets.to(TPU), None if w is None else w.to(TPU))
        assert_close_cpu(ot, out)
        (out * out).sum().backward()
        (ot * ot).sum().backward()
    assert fallbacks() == {}
    for a, b in zip(mt.split_embedding_weights(), m.split_embedding_weights()):
        assert_close_cpu(a, b)
    if optimizer == "EXACT_ROWWISE_ADAGRAD":
        for a, b in zip(mt.split_optimizer_states(), m.split_optimizer_states()):
            assert_close_cpu(a[0], b[0])


@pytest.mark.slow
def test_fused_tbe_bad_input_raises():
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    mt = fused_tbe_module(TPU, EmbOptimType.EXACT_SGD)
    ids, offsets = tbe_batch()
    bad = ids.clone()
    bad[-1] = 7  # the last feature's table has 7 rows
    with pytest.raises(IndexError, match="embedding row 7 is out of range"):
        mt(bad.to(TPU), offsets.to(TPU)).cpu()
    past = offsets.clone()
    past[-1] = ids.numel() + 2  # lengths that add up to more ids than there are
    with pytest.raises(IndexError, match="outside the"):
        mt(ids.to(TPU), past.to(TPU)).cpu()
    with pytest.raises(RuntimeError, match="non-decreasing"):
        mt(ids.to(TPU), offsets.flip(0).to(TPU)).cpu()


def run_dmp(world, sharding, *flags, timeout=600):
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={world}",
           "--master_port=0", "--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:0",
           os.path.join(HERE, "torchrec_dmp_run.py"), sharding, *flags]
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"torchrun did not finish within {timeout}s: {e}")
    lines = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
    assert p.returncode == 0 and lines, (p.stdout + p.stderr)[-8000:]
    return json.loads(lines[-1][len("RESULT "):])


@pytest.mark.slow
def test_dmp_two_ranks_match_one_rank():
    one, two = run_dmp(1, "data_parallel"), run_dmp(2, "data_parallel")
    assert two["devices"] == ["tpu:0", "tpu:0"] and one["devices"] == ["tpu:0"]
    # TorchRec keeps the (replicated, dense TBE) tables on the CPU for devices other than
    # CUDA/MTIA: their lookup runs there, counted; nothing else leaves the device.
    lookup = "fbgemm::dense_embedding_codegen_lookup_function"
    assert all(set(f) <= {lookup} for f in one["fallbacks"] + two["fallbacks"]), (one, two)
    torch.testing.assert_close(torch.tensor(two["losses"]), torch.tensor(one["losses"]),
                               rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(torch.tensor(two["pooled"]), torch.tensor(one["pooled"]),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["strict_eager", "defer_and_fuse"])
def test_dlrm_example_torchrec_check(mode):
    p = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "dlrm", "train.py"),
                        "--torchrec", "--check", "--quiet", "--mode", mode,
                        "--tables", "1000,100,10", "--batch", "64"],
                       capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert p.returncode == 0 and "check: OK" in p.stdout, (p.stdout + p.stderr)[-6000:]
    assert "CPU-fallback ops 0" in p.stdout, p.stdout[-3000:]


def assert_same_training(got, ref):
    torch.testing.assert_close(torch.tensor(got["losses"]), torch.tensor(ref["losses"]),
                               rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(torch.tensor(got["pooled"]), torch.tensor(ref["pooled"]),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_dmp_table_wise_two_ranks_match_one_rank_and_cpu():
    """Tables sharded table-wise over 2 ranks on tpu (fbgemm's fused TBE with EXACT_SGD,
    the ids and pooled embeddings exchanged by all-to-alls on the tpu process group):
    the same training as 1 rank, and as 1 rank on the CPU with fbgemm's own kernels."""
    two, one = run_dmp(2, "table_wise"), run_dmp(1, "table_wise")
    cpu = run_dmp(1, "table_wise", "--cpu")
    assert two["devices"] == ["tpu:0", "tpu:0"] and one["devices"] == ["tpu:0"]
    assert "rank:1/tpu:0" in two["plan"] and "fused" in two["plan"]
    assert two["fallbacks"] == [{}, {}] and one["fallbacks"] == [{}], (one, two)
    assert_same_training(two, one)
    assert_same_training(one, cpu)


@pytest.mark.slow
def test_dmp_table_wise_rowwise_adagrad_matches_cpu():
    two = run_dmp(2, "table_wise", "--optim", "rowwise_adagrad")
    cpu = run_dmp(1, "table_wise", "--optim", "rowwise_adagrad", "--cpu")
    assert two["fallbacks"] == [{}, {}], two
    assert_same_training(two, cpu)


@pytest.mark.slow
def test_dmp_row_wise_two_ranks_match_one_rank():
    """Each table's rows split over 2 ranks: ids bucketized by row block, all-to-all,
    lookup, reduce-scatter of the pooled sums."""
    two, one = run_dmp(2, "row_wise"), run_dmp(1, "row_wise")
    assert "row_wise" in two["plan"] and "rank:1/tpu:0" in two["plan"]
    assert two["fallbacks"] == [{}, {}] and one["fallbacks"] == [{}], (one, two)
    assert_same_training(two, one)


@pytest.mark.slow
@pytest.mark.parametrize("sharding", ["table_wise", "row_wise"])
def test_dlrm_example_sharded_check(sharding):
    """The DLRM example's TorchRec model under DMP over 2 ranks: 3 steps on tpu agree
    with the same 2 ranks on the CPU (Gloo, fbgemm's kernels), no CPU-fallback op."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
           "--master_port=0", "--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:0",
           os.path.join(ROOT, "examples", "dlrm", "train.py"), "--torchrec", "--sharding",
           sharding, "--check", "--quiet", "--tables", "1000,100,10", "--batch", "64"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert p.returncode == 0 and "check: OK" in p.stdout, (p.stdout + p.stderr)[-6000:]
    assert "CPU-fallback ops 0" in p.stdout, p.stdout[-3000:]
