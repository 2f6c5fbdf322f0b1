"""Which Transformers architectures run on tpu, and do they match the CPU?

    python -m torch_tpu.tools.hf_coverage                     # every model type, Strict Eager
    python -m torch_tpu.tools.hf_coverage --subset ci         # the ~20 CI architectures
    python -m torch_tpu.tools.hf_coverage --only llama bert --mode defer_and_fuse
    python -m torch_tpu.tools.hf_coverage --out table.tsv --no-train

For every model type in Transformers' config registry: build the default config,
shrink it (one generic shrinker: few layers, small widths, small vocabulary, applied to
nested text/vision/audio configs too; per-architecture overrides only where needed),
instantiate each available task head (base model, causal LM, masked LM, seq2seq,
sequence classification, image classification), run the forward pass on the CPU and
on tpu from the same weights, and (unless --no-train) one backward pass. Each
(architecture, head) is reported as
  pass      outputs within --rtol (relative to the CPU output's largest magnitude)
  mismatch  the largest error, relative
  error     the exception (building, inputs, CPU run, or tpu run)
  skip      the model could not be built or fed on the CPU (not a tpu problem)
with the ops that fell back to the CPU. The full table goes to --out (TSV), totals
and the top fallback ops to stdout.
"""
import argparse
import collections
import copy
import signal
import sys
import time
import traceback

CI_SUBSET = ["albert", "bart", "bert", "distilbert", "electra", "falcon", "gemma", "gpt2",
             "gpt_neo", "llama", "mistral", "mixtral", "opt", "phi", "qwen2", "qwen2_moe",
             "qwen3", "roberta", "t5", "vit"]

# Generic shrinking: attribute -> small value, applied where the config has it.
_SMALL = {
    "num_hidden_layers": 2, "num_layers": 2, "n_layer": 2, "n_layers": 2, "encoder_layers": 2,
    "decoder_layers": 2, "num_decoder_layers": 2, "num_encoder_layers": 2,
    "hidden_size": 32, "d_model": 32, "n_embd": 32, "dim": 32, "embed_dim": 32,
    "intermediate_size": 64, "d_ff": 64, "ffn_dim": 64, "encoder_ffn_dim": 64,
    "decoder_ffn_dim": 64, "n_inner": 64, "hidden_dim": 64,
    "num_attention_heads": 4, "n_head": 4, "n_heads": 4, "num_heads": 4,
    "encoder_attention_heads": 4, "decoder_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 8, "d_kv": 8,
    "vocab_size": 99, "max_position_embeddings": 128, "n_positions": 128,
    "num_local_experts": 4, "num_experts": 4, "n_routed_experts": 4, "num_experts_per_tok": 2,
    "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32,
    "image_size": 32, "patch_size": 8, "num_channels": 3,
}
# Per-architecture overrides (only where the generic values do not build).
_OVERRIDES = {
    "t5": {"num_heads": 4, "d_kv": 8},
}
_NESTED = ("text_config", "vision_config", "audio_config", "encoder", "decoder")
_HEADS = [
    ("base", "MODEL_MAPPING_NAMES"),
    ("causal_lm", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"),
    ("masked_lm", "MODEL_FOR_MASKED_LM_MAPPING_NAMES"),
    ("seq2seq_lm", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES"),
    ("seq_cls", "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES"),
    ("image_cls", "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES"),
]


def shrink(cfg, model_type):
    """A small copy of `cfg`: every known size attribute it has set to a small value."""
    small = dict(_SMALL, **_OVERRIDES.get(model_type, {}))
    for key, value in small.items():
        if hasattr(cfg, key) and isinstance(getattr(cfg, key), int) and not isinstance(getattr(cfg, key), bool):
            try:
                setattr(cfg, key, min(getattr(cfg, key), value) if key == "num_experts_per_tok" else value)
            except Exception:  # noqa: BLE001 - read-only or validated attributes stay as they are
                pass
    for name in _NESTED:
        sub = getattr(cfg, name, None)
        if sub is not None and hasattr(sub, "to_dict"):
            shrink(sub, model_type)
    if hasattr(cfg, "pad_token_id") and getattr(cfg, "pad_token_id", None) is None:
        cfg.pad_token_id = 0  # sequence classification of a batch needs a pad token
    for key in ("layer_types", "block_types"):  # per-layer lists must match the layer count
        v = getattr(cfg, key, None)
        if isinstance(v, list) and v:
            setattr(cfg, key, v[:getattr(cfg, "num_hidden_layers", len(v))])
    return cfg


def _inputs(model, cfg, torch):
    g = torch.Generator().manual_seed(0)
    name = getattr(model, "main_input_name", "input_ids")
    if name == "pixel_values":
        vc = getattr(cfg, "vision_config", cfg)
        size = getattr(vc, "image_size", 32)
        size = size if isinstance(size, int) else size[0]
        return {"pixel_values": torch.randn(2, getattr(vc, "num_channels", 3), size, size, generator=g)}
    if name != "input_ids":
        raise ValueError(f"no generic inputs for main input {name!r}")
    vocab = getattr(getattr(cfg, "text_config", cfg), "vocab_size", 99) or 99
    ids = torch.randint(3, min(vocab, 99), (2, 8), generator=g)
    feed = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if getattr(cfg, "is_encoder_decoder", False):
        feed["decoder_input_ids"] = ids[:, :6].clone()
    return feed


def _first_float(out, torch):
    for k in ("logits", "last_hidden_state", "prediction_logits"):
        v = getattr(out, k, None) if not isinstance(out, dict) else out.get(k)
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            return v
    vals = out.values() if isinstance(out, dict) else (out.to_tuple() if hasattr(out, "to_tuple") else out)
    for v in vals:
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            return v
    raise ValueError("the model returned no floating-point tensor")


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout("timed out")


def check_one(model_type, head, cls, cfg, train, rtol, torch, torch_tpu):
    """One (architecture, head): returns (status, detail, fallback ops)."""
    try:
        torch.manual_seed(0)
        model = cls(cfg).eval()
        feed = _inputs(model, cfg, torch)
        ref_out = model(**feed)
        ref = _first_float(ref_out, torch)
        if train:
            ref.float().square().mean().backward()
    except _Timeout:
        raise
    except Exception as e:  # noqa: BLE001
        return "skip", f"cpu: {type(e).__name__}: {str(e)[:160]}", {}
    before = dict(torch_tpu.debug.metrics()["cpu_fallback_counts"])
    try:
        tpu_model = copy.deepcopy(model).to("tpu")
        tpu_model.zero_grad(set_to_none=True)
        out = _first_float(tpu_model(**{k: v.to("tpu") for k, v in feed.items()}), torch)
        if train:
            out.float().square().mean().backward()
        got = out.detach().float().cpu()
        torch.tpu.synchronize()
    except _Timeout:
        raise
    except Exception as e:  # noqa: BLE001
        after = torch_tpu.debug.metrics()["cpu_fallback_counts"]
        fb = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
        return "error", f"tpu: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}", fb
    after = torch_tpu.debug.metrics()["cpu_fallback_counts"]
    fb = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
    want = ref.detach().float()
    if got.shape != want.shape:
        return "mismatch", f"shape {tuple(got.shape)} vs {tuple(want.shape)}", fb
    scale = max(want.abs().max().item(), 1e-6)
    err = (got - want).abs().max().item() / scale
    if err != err:  # NaN
        same_nan = torch.equal(torch.isnan(got), torch.isnan(want))
        return ("pass" if same_nan else "mismatch"), f"rel err {err}", fb
    return ("pass" if err <= rtol else "mismatch"), f"rel err {err:.2e}", fb


def main(argv=None):
    p = argparse.ArgumentParser(description="Transformers architectures on tpu vs the CPU")
    p.add_argument("--mode", default="strict_eager", choices=["strict_eager", "defer_and_fuse"])
    p.add_argument("--subset", choices=["all", "ci"], default="all")
    p.add_argument("--only", nargs="*", help="model types to run (default: the subset)")
    p.add_argument("--limit", type=int, default=0, help="at most this many model types")
    p.add_argument("--out", default="hf_coverage.tsv")
    p.add_argument("--rtol", type=float, default=1e-3)
    p.add_argument("--timeout", type=int, default=180, help="seconds per architecture and head")
    p.add_argument("--no-train", action="store_true", help="forward only")
    args = p.parse_args(argv)

    import torch
    import torch_tpu
    import transformers  # noqa: F401
    from transformers.models.auto import configuration_auto, modeling_auto
    transformers.logging.set_verbosity_error()
    import warnings
    warnings.filterwarnings("ignore")

    torch_tpu.set_execution_mode(args.mode)
    types = args.only or (CI_SUBSET if args.subset == "ci" else sorted(configuration_auto.CONFIG_MAPPING_NAMES))
    if args.limit:
        types = types[:args.limit]
    signal.signal(signal.SIGALRM, _alarm)
    table = open(args.out, "w")  # written as it goes: a long sweep can be read while it runs
    table.write("model_type\thead\tstatus\tdetail\tcpu_fallback_ops\n")
    rows, fallback_ops = [], collections.Counter()
    arch_status = {}
    start = time.time()
    for i, mt in enumerate(types):
        try:
            cfg = shrink(configuration_auto.CONFIG_MAPPING[mt](), mt)
        except Exception as e:  # noqa: BLE001
            rows.append((mt, "-", "skip", f"config: {type(e).__name__}: {str(e)[:120]}", ""))
            continue
        for head, mapping in _HEADS:
            cls_name = getattr(modeling_auto, mapping).get(mt)
            if not cls_name or not isinstance(cls_name, str) or not hasattr(transformers, cls_name):
                continue
            signal.alarm(args.timeout)
            try:
                status, detail, fb = check_one(mt, head, getattr(transformers, cls_name),
                                               copy.deepcopy(cfg), not args.no_train, args.rtol,
                                               torch, torch_tpu)
            except _Timeout:
                status, detail, fb = "error", f"timed out after {args.timeout}s", {}
            except Exception as e:  # noqa: BLE001
                status, detail, fb = "error", f"{type(e).__name__}: {str(e)[:160]}", {}
            finally:
                signal.alarm(0)
            fallback_ops.update(fb.keys())
            rows.append((mt, head, status, detail, ",".join(sorted(fb))))
            prev = arch_status.get(mt)
            if status != "skip":
                rank = {"pass": 0, "mismatch": 1, "error": 2}
                fb_any = bool(fb) or (prev and prev[1])
                worst = status if prev is None or rank[status] > rank[prev[0]] else prev[0]
                arch_status[mt] = (worst, fb_any)
        for r in rows:
            if r[0] == mt:
                table.write("\t".join(str(x).replace("\t", " ").replace("\n", " ") for x in r) + "\n")
        table.flush()
        print(f"[{i + 1}/{len(types)}] {mt}: " + ", ".join(
            f"{r[1]}={r[2]}" for r in rows if r[0] == mt), file=sys.stderr, flush=True)
    table.close()
    n = len(arch_status)
    passed = sum(1 for s, _ in arch_status.values() if s == "pass")
    clean = sum(1 for _, fb in arch_status.values() if not fb)
    print(f"hf_coverage ({args.mode}, {'forward+backward' if not args.no_train else 'forward'}, "
          f"rtol {args.rtol}): {len(types)} model types, {n} buildable on the CPU; "
          f"{time.time() - start:.0f}s")
    if n:
        print(f"  match the CPU (every head): {passed}/{n} = {100 * passed / n:.1f}%")
        print(f"  no CPU fallback:            {clean}/{n} = {100 * clean / n:.1f}%")
    print("  top fallback ops (architecture-heads using them): " +
          ", ".join(f"{op} {c}" for op, c in fallback_ops.most_common(15)))
    failing = [r for r in rows if r[2] in ("mismatch", "error")]
    print(f"  failing heads: {len(failing)}")
    for r in failing[:40]:
        print(f"    {r[0]}/{r[1]}: {r[2]} {r[3]}")
    print(f"full table: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
