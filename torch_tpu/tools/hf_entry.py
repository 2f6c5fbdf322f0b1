"""One hf_coverage entry: a Transformers (architecture, task head) built from a shrunk
config, run forward and backward on the CPU and on tpu from the same weights.

The sweep driver (hf_coverage) decides which entries run where; this module only knows
how to shrink a config, feed a model and compare one entry.
"""
import copy
import traceback

# Generic shrinking: attribute -> small value, applied where the config has it.
SMALL = {
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
    "rotary_dim": 4,  # partial rotary (CodeGen, GPT-J): at most the head size
    # multi-head latent attention (DeepSeek V2/V3 family): the rope and no-rope parts of a head
    "qk_rope_head_dim": 4, "qk_nope_head_dim": 4, "qk_head_dim": 8, "v_head_dim": 8,
    "kv_lora_rank": 16, "q_lora_rank": 16,
}
# Per-architecture overrides (only where the generic values do not build).
OVERRIDES = {
    "t5": {"num_heads": 4, "d_kv": 8},
}
_NESTED = ("text_config", "vision_config", "audio_config", "encoder", "decoder")
# (head name, the auto-mapping that names its class per model type)
HEADS = [
    ("base", "MODEL_MAPPING_NAMES"),
    ("causal_lm", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"),
    ("masked_lm", "MODEL_FOR_MASKED_LM_MAPPING_NAMES"),
    ("seq2seq_lm", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES"),
    ("seq_cls", "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES"),
    ("image_cls", "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES"),
]
MODES = ("strict_eager", "defer_and_fuse", "compiled")
MAX_PARAMS = 30_000_000  # larger after shrinking: an unshrunk part (reported as a skip, "size")


def _get(cfg, key, default=None):
    """getattr that also survives attributes which refuse to be read globally (Gemma-4
    style per-layer attributes raise AmbiguousGlobalPerLayerAttributeError)."""
    try:
        return getattr(cfg, key, default)
    except Exception:  # noqa: BLE001
        return default


def _set(cfg, key, value):
    try:
        setattr(cfg, key, value)
    except Exception:  # noqa: BLE001 - read-only or validated attributes stay as they are
        pass


def _sub_configs(cfg):
    names = list(_NESTED) + list((_get(cfg, "sub_configs") or {}).keys())
    seen = set()
    for name in names:
        sub = _get(cfg, name)
        if sub is not None and hasattr(sub, "to_dict") and id(sub) not in seen:
            seen.add(id(sub))
            yield sub


def shrink(cfg, model_type):
    """A small copy of `cfg`: every known size attribute it has set to a small value,
    in the nested configs (text, vision, audio, backbone... towers) too."""
    small = dict(SMALL, **OVERRIDES.get(model_type, {}))
    stages = _get(cfg, "hidden_sizes")
    if isinstance(stages, list) and stages:
        # a convolutional pyramid: narrow stages of one block each; its patch (stem) size and
        # image size stay as they are related (four stride-2 stages need the default image)
        # (with group norms, as BiT's: a bottleneck's quarter width still splits into the groups)
        groups = _get(cfg, "num_groups")
        width = 4 * groups if isinstance(groups, int) and groups > 1 else 32
        _set(cfg, "hidden_sizes", [width * (i + 1) for i in range(len(stages))])
        if isinstance(_get(cfg, "depths"), list):
            _set(cfg, "depths", [1] * len(cfg.depths))
        small = {k: v for k, v in small.items() if k not in ("patch_size", "image_size", "hidden_size")}
        small["image_size"] = 64
    layers_before = _get(cfg, "num_hidden_layers")
    for key, value in small.items():
        old = _get(cfg, key)
        if isinstance(old, int) and not isinstance(old, bool):
            _set(cfg, key, min(old, value) if key == "num_experts_per_tok" else value)
    for sub in _sub_configs(cfg):
        shrink(sub, model_type)
    if hasattr(cfg, "pad_token_id") and _get(cfg, "pad_token_id") is None:
        _set(cfg, "pad_token_id", 0)  # sequence classification of a batch needs a pad token
    vocab = _get(cfg, "vocab_size")
    if isinstance(vocab, int):  # special tokens of the full vocabulary: inside the small one
        for key, small_id in (("pad_token_id", 0), ("bos_token_id", 1), ("eos_token_id", 2),
                              ("decoder_start_token_id", 0), ("sep_token_id", 2), ("cls_token_id", 1)):
            v = _get(cfg, key)
            if isinstance(v, int) and not isinstance(v, bool) and v >= vocab:
                _set(cfg, key, small_id)
    if isinstance(_get(cfg, "qk_rope_head_dim"), int) and hasattr(cfg, "head_dim"):
        _set(cfg, "head_dim", cfg.qk_rope_head_dim)  # latent attention's rotary embedding: its rope part
    if isinstance(_get(cfg, "kv_lora_rank"), int) and isinstance(_get(cfg, "num_key_value_heads"), int):
        # Latent attention expands its keys and values to every query head, and its configs
        # say so (key/value heads = attention heads). Fewer key/value heads would make the
        # attention repeat the already expanded keys: the SDPA call then gets more key than
        # query heads, which the eager path hides only while the mask is None (GQA in SDPA)
        # and torch.compile, which builds the mask, hits.
        _set(cfg, "num_key_value_heads", _get(cfg, "num_attention_heads"))
    layers = _get(cfg, "num_hidden_layers")
    for key in list(vars(cfg)):  # per-layer lists (layer_types, mlp_layer_types...) follow the layer count
        v = _get(cfg, key)
        if isinstance(v, list) and v and isinstance(layers, int) and (
                key.endswith("_types") or len(v) == layers_before) and len(v) > layers \
                and key not in ("hidden_sizes", "depths"):
            _set(cfg, key, v[:layers])
    return cfg


class UnsupportedInput(ValueError):
    """The model's main input is one this tool does not generate."""


def make_inputs(model, cfg, torch):
    g = torch.Generator().manual_seed(0)
    name = getattr(model, "main_input_name", "input_ids")
    if name == "pixel_values":
        vc = getattr(cfg, "vision_config", cfg)
        size = getattr(vc, "image_size", 32)
        size = size if isinstance(size, int) else size[0]
        feed = {"pixel_values": torch.randn(2, getattr(vc, "num_channels", 3), size, size, generator=g)}
        patch = getattr(vc, "patch_size", None)
        import inspect
        if "noise" in inspect.signature(model.forward).parameters and isinstance(patch, int):
            # ViT-MAE masks patches by random noise: drawn here, the same on both sides
            feed["noise"] = torch.rand(2, (size // patch) ** 2, generator=g)
        return feed
    if name == "input_values":  # raw audio (wav2vec2 family): a short waveform
        return {"input_values": torch.randn(2, 1600, generator=g)}
    if name != "input_ids":
        raise UnsupportedInput(f"no generic inputs for main input {name!r}")
    vocab = getattr(getattr(cfg, "text_config", cfg), "vocab_size", 99) or 99
    ids = torch.randint(3, min(vocab, 99), (2, 8), generator=g)
    eos = getattr(getattr(cfg, "text_config", cfg), "eos_token_id", None)
    if isinstance(eos, int) and 0 <= eos < vocab:
        ids[:, -1] = eos  # sequence classification of encoder-decoders pools at the <eos>
    feed = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if getattr(cfg, "is_encoder_decoder", False):
        feed["decoder_input_ids"] = ids.clone()
    return feed


def break_ties(model, torch):
    """Gives the parameters a model initialises to all zeros small random values.

    A zero-initialised router (AFMoE's, for one) scores every expert the same, and which
    of the tied experts topk picks is the kernel's choice, not the model's: the CPU and
    tpu would then differ by the tie-break alone. Random weights are what this tool
    tests anyway."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point() and p.numel() > 1 and not p.any():
                p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.02)


def _meta_param_count(cls, cfg, torch):
    """Parameters of the model built on the meta device (no memory); 0 if that fails
    (the real build then reports its own error)."""
    try:
        with torch.device("meta"):
            return sum(p.numel() for p in cls(copy.deepcopy(cfg)).parameters())
    except Exception:  # noqa: BLE001
        return 0


def _run_cpu(model, cfg, torch):
    """The inputs and the CPU output. A model with two main inputs (CLIP-like text and
    image towers) refuses one alone: then both are given."""
    feed = make_inputs(model, cfg, torch)
    try:
        return feed, first_float(model(**feed), torch)
    except Exception as e:  # noqa: BLE001
        extra = _other_modality(model, cfg, feed, torch)
        if not extra:
            raise
        feed = dict(feed, **extra)
        try:
            return feed, first_float(model(**feed), torch)
        except Exception:  # noqa: BLE001 - the first failure is the one worth reporting
            raise e from None


def _other_modality(model, cfg, feed, torch):
    import inspect
    params = inspect.signature(model.forward).parameters
    if "pixel_values" in params and "pixel_values" not in feed:
        vc = getattr(cfg, "vision_config", cfg)
        size = getattr(vc, "image_size", 32)
        size = size if isinstance(size, int) else size[0]
        g = torch.Generator().manual_seed(2)
        return {"pixel_values": torch.randn(2, getattr(vc, "num_channels", 3), size, size, generator=g)}
    if "input_ids" in params and "input_ids" not in feed:
        tc = getattr(cfg, "text_config", cfg)
        vocab = getattr(tc, "vocab_size", 99) or 99
        ids = torch.randint(3, min(vocab, 99), (2, 8), generator=torch.Generator().manual_seed(3))
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    return {}


def first_float(out, torch):
    for k in ("logits", "last_hidden_state", "prediction_logits"):
        v = getattr(out, k, None) if not isinstance(out, dict) else out.get(k)
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            return v
    vals = out.values() if isinstance(out, dict) else (out.to_tuple() if hasattr(out, "to_tuple") else out)
    for v in vals:
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            return v
    raise ValueError("the model returned no floating-point tensor")


def _rel_err(got, want, torch):
    if got.shape != want.shape:
        return None
    scale = max(want.nan_to_num(0.0, 0.0, 0.0).abs().max().item(), 1e-6)
    both_nan = torch.isnan(got) & torch.isnan(want)
    diff = (got - want).abs().masked_fill(both_nan, 0)
    return diff.max().item() / scale if diff.numel() else 0.0


def _grad_err(cpu_model, tpu_model, torch):
    """Largest gradient error over the parameters, relative to each parameter's
    largest CPU gradient (floored at 1e-3 of the model's largest, so that parameters
    with vanishing gradients do not dominate)."""
    pairs = [(p.grad, q.grad) for p, q in zip(cpu_model.parameters(), tpu_model.parameters())
             if p.grad is not None and p.numel()]
    if not pairs:
        return 0.0
    top = max(g.abs().max().item() for g, _ in pairs) or 1e-6
    worst = 0.0
    for gc, gt in pairs:
        if gt is None:
            return float("inf")
        gt = gt.detach().float().cpu()
        scale = max(gc.abs().max().item(), 1e-3 * top, 1e-12)
        worst = max(worst, (gt - gc.float()).abs().max().item() / scale)
    return worst


def _fallbacks_since(before, torch_tpu):
    after = torch_tpu.debug.metrics()["cpu_fallback_counts"]
    return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


def check_one(cls, cfg, mode, train, rtol, torch, torch_tpu):
    """One (architecture, head) -> dict(status, logits_err, grad_err, fallback, detail).

    status: pass (logits within rtol of the CPU's largest magnitude), mismatch, rng (a
    mismatch, but the CPU's own output changes with the seed: random by design), error
    (the tpu side raised), skip (the CPU side could not build, feed or run the model:
    not a tpu problem, and the entry does not count as buildable)."""
    row = {"status": "", "logits_err": "", "grad_err": "", "fallback": {}, "detail": ""}
    try:
        n_params = _meta_param_count(cls, cfg, torch)
        if n_params > MAX_PARAMS:
            return dict(row, status="skip", detail=f"size: {n_params / 1e6:.0f}M parameters after shrinking")
        torch.manual_seed(0)
        model = cls(cfg).eval()
        break_ties(model, torch)
        feed, ref = _run_cpu(model, cfg, torch)
        if train:
            ref.float().square().mean().backward()
    except UnsupportedInput as e:
        return dict(row, status="skip", detail=f"input: {e}")
    except Exception as e:  # noqa: BLE001
        return dict(row, status="skip", detail=f"cpu: {type(e).__name__}: {_first_line(e)}")
    before = dict(torch_tpu.debug.metrics()["cpu_fallback_counts"])
    try:
        tpu_model = copy.deepcopy(model).to("tpu")
        tpu_model.zero_grad(set_to_none=True)
        run = tpu_model
        if mode == "compiled":
            torch._dynamo.reset()  # fresh frames: no cache-size limit carried over from earlier entries
            run = torch.compile(tpu_model, backend="tpu")
        out = first_float(run(**{k: v.to("tpu") for k, v in feed.items()}), torch)
        if train:
            out.float().square().mean().backward()
        got = out.detach().float().cpu()
        gerr = _grad_err(model, tpu_model, torch) if train else None
        torch.tpu.synchronize()
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()  # into the worker's log (--out's .log<k>), for whoever digs in
        return dict(row, status="error", fallback=_fallbacks_since(before, torch_tpu),
                    detail=f"tpu: {type(e).__name__}: {_first_line(e)}")
    fb = _fallbacks_since(before, torch_tpu)
    want = ref.detach().float()
    err = _rel_err(got, want, torch)
    row.update(fallback=fb, grad_err="" if gerr is None else f"{gerr:.2e}")
    if err is not None and err == err and err <= rtol:
        return dict(row, status="pass", logits_err=f"{err:.2e}")
    drift = _cpu_seed_drift(model, feed, want, rtol, torch)
    if err is None:
        row.update(status="mismatch", detail=f"shape {tuple(got.shape)} vs {tuple(want.shape)}")
    else:
        row.update(status="mismatch", logits_err=f"{err:.2e}",
                   detail="NaN where the CPU has none" if err != err else "")
    if drift:
        row.update(status="rng", detail=f"{drift}; tpu: {row['detail'] or 'rel err ' + row['logits_err']}")
    return row


def _cpu_seed_drift(model, feed, want, rtol, torch):
    """Why the CPU's own output is not reproducible under another seed (random draws
    in eval mode: ViLT's multinomial patch sampling, VITS's duration noise), or ''.
    Such a model's tpu output differs from the CPU's by the draws alone (the device's
    generator is another), so the entry is reported as `rng`, not as a mismatch; a
    deterministic model keeps its mismatch."""
    try:
        torch.manual_seed(12345)
        with torch.no_grad():
            again = first_float(model(**feed), torch).detach().float()
    except Exception:  # noqa: BLE001 - no verdict: the mismatch stands
        return ""
    drift = _rel_err(again, want, torch)
    if drift is None:
        return f"the CPU's own output changes shape with the seed ({tuple(again.shape)} vs {tuple(want.shape)})"
    if drift > rtol:
        return f"the CPU's own output changes with the seed (rel err {drift:.2e})"
    return ""


def _first_line(e):
    text = str(e)
    return (text.strip().splitlines() or [""])[0][:200]
