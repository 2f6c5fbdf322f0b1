"""Runs vLLM's scheduled batches on the tpu device with a bounded set of shapes.

Each step's tokens (prefills, decodes and chunked prefills together) form one flat batch
of T tokens from R requests; T and R are padded to power-of-two buckets (buckets.py),
so every device program has one of a fixed set of shapes, and warm_up() runs each
shape once before serving. Padding tokens write nowhere (slot -1) and padding requests
have no tokens; their outputs are dropped on the host.

The model's forward depends on T alone: the attention metadata (a few integers per
request) always has max_num_seqs rows, so one model program serves every request count
of a token bucket. Only the logits gather and the sampler, which are small, take the
request bucket R.

Two ways to run the model, chosen with vLLM's `additional_config={"torch_tpu_compile":
True}` (`--additional-config` of `vllm serve`): eagerly, op by op (the default), or
compiled: `torch.compile(backend="tpu")` of the model's forward, one fused program per
token bucket, all made during warm-up. The sampler runs eagerly
either way.
"""
import time
from dataclasses import dataclass, field

import numpy as np
import torch
import torch_tpu
from vllm.config import set_current_vllm_config
from vllm.forward_context import set_forward_context
from vllm.logger import init_logger
from vllm.model_executor.layers.attention import Attention
from vllm.model_executor.model_loader import get_model
from vllm.sampling_params import SamplingType
from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT, ModelRunnerOutput
from vllm.v1.sample.logits_processor import LogitsProcessors
from vllm.v1.sample.metadata import SamplingMetadata
from vllm.v1.sample.sampler import Sampler
from vllm.v1.worker.utils import bind_kv_cache

from . import fused_moe  # noqa: F401  (registers the MoE method for out-of-tree platforms)
from .attention import TpuAttentionBackend, TpuAttentionMetadata
from .buckets import bucket_for, power_of_two_buckets

logger = init_logger(__name__)

_MIN_TOKEN_BUCKET = 16


@dataclass
class _Request:
    token_ids: list[int]  # prompt followed by the tokens sampled so far
    block_ids: list[int]
    num_computed: int
    params: object  # SamplingParams
    generator: torch.Generator | None = None
    outputs: list[int] = field(default_factory=list)


class TpuModelRunner:
    def __init__(self, vllm_config, device: torch.device):
        self.vllm_config = vllm_config
        self.model_config = vllm_config.model_config
        self.device = device
        self.block_size = vllm_config.cache_config.block_size
        sched = vllm_config.scheduler_config
        self.max_num_reqs = sched.max_num_seqs
        self.max_num_tokens = sched.max_num_batched_tokens
        self.max_blocks_per_req = -(-self.model_config.max_model_len // self.block_size)
        self.token_buckets = power_of_two_buckets(_MIN_TOKEN_BUCKET, self.max_num_tokens)
        self.req_buckets = power_of_two_buckets(1, self.max_num_reqs)
        self.requests: dict[str, _Request] = {}
        self.sampler = Sampler(logprobs_mode=self.model_config.logprobs_mode)
        self.kv_caches: list[torch.Tensor] = []
        self.layer_names: list[str] = []
        self.num_warmup_shapes = 0
        self.warmup_seconds = 0.0
        self.model = None
        extra = vllm_config.additional_config or {}
        self.compiled = bool(extra.get("torch_tpu_compile", False))
        self._model_fn = None

    # ---- set-up -------------------------------------------------------------------
    def load_model(self) -> None:
        with set_current_vllm_config(self.vllm_config):
            self.model = get_model(vllm_config=self.vllm_config)
        self.model.eval()
        self.vocab_size = self.model_config.get_vocab_size()
        self._model_fn = self.model
        if self.compiled:
            # One graph per shape: dynamic=False keeps every bucket a static program.
            self._model_fn = torch.compile(self.model, backend="tpu", dynamic=False)

    def _attention_layers(self) -> dict[str, Attention]:
        ctx = self.vllm_config.compilation_config.static_forward_context
        return {name: m for name, m in ctx.items() if isinstance(m, Attention)}

    def get_kv_cache_spec(self):
        specs = {}
        for name, layer in self._attention_layers().items():
            if layer.kv_sharing_target_layer_name:
                raise NotImplementedError("cross-layer KV sharing is not supported on tpu")
            spec = layer.get_kv_cache_spec(self.vllm_config)
            if spec is not None:
                specs[name] = spec
        return specs

    def initialize_kv_cache(self, kv_cache_config) -> None:
        # Block ids of requests are group 0's. One group: every layer full attention,
        # every layer sliding with one window, or (the platform declines vLLM's hybrid
        # KV-cache manager) a mix of the two (Gemma 2) kept as full-attention blocks;
        # each layer's attention applies its own window either way.
        if len(kv_cache_config.kv_cache_groups) != 1:
            raise NotImplementedError(
                "torch_tpu's model runner supports one KV-cache group (all layers full "
                "attention, or all sliding-window with one window); this model has "
                f"{len(kv_cache_config.kv_cache_groups)}: "
                f"{[type(g.kv_cache_spec).__name__ for g in kv_cache_config.kv_cache_groups]}")
        spec_of = {name: g.kv_cache_spec for g in kv_cache_config.kv_cache_groups
                   for name in g.layer_names}
        # One tensor per layer (vLLM's byte layout is for kernels that view one backing
        # allocation; ours takes each layer's cache as its own device buffer).
        caches = {}
        for name, spec in spec_of.items():
            shape = TpuAttentionBackend.get_kv_cache_shape(
                kv_cache_config.num_blocks, spec.block_size, spec.num_kv_heads, spec.head_size)
            caches[name] = torch.zeros(shape, dtype=spec.dtype, device=self.device)
        self.layer_names = list(caches)
        self._page_bytes = {spec_of[n].page_size_bytes for n in caches}
        bind_kv_cache(caches, self.vllm_config.compilation_config.static_forward_context,
                      self.kv_caches)

    def cache_block_size_bytes(self) -> int:
        return sum(self._page_bytes)

    # ---- requests -----------------------------------------------------------------
    def _update_states(self, so) -> None:
        for req_id in so.finished_req_ids:
            self.requests.pop(req_id, None)
        for req_id in so.preempted_req_ids or ():
            self.requests.pop(req_id, None)
        for new in so.scheduled_new_reqs:
            params = new.sampling_params
            if params is None:
                raise NotImplementedError("pooling models are not supported on tpu")
            gen = None
            if params.sampling_type == SamplingType.RANDOM_SEED:
                gen = torch.Generator(device=self.device)
                gen.manual_seed(params.seed)
            self.requests[new.req_id] = _Request(list(new.prompt_token_ids), list(new.block_ids[0]),
                                                 new.num_computed_tokens, params, gen)
        cached = so.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            req = self.requests[req_id]
            req.num_computed = cached.num_computed_tokens[i]
            new_blocks = cached.new_block_ids[i]
            if req_id in cached.resumed_req_ids:
                req.block_ids = list(new_blocks[0])
                if req_id in cached.all_token_ids:
                    req.token_ids = list(cached.all_token_ids[req_id])
            elif new_blocks is not None:
                req.block_ids.extend(new_blocks[0])

    # ---- one step -----------------------------------------------------------------
    def _to_device(self, array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(array).to(self.device)

    def _run_model(self, input_ids, positions, meta: TpuAttentionMetadata):
        """Hidden states [T, hidden] of a padded batch (metadata of max_num_seqs rows)."""
        attn = {name: meta for name in self.layer_names}
        with set_forward_context(attn, self.vllm_config, num_tokens=input_ids.shape[0],
                                 slot_mapping={}):
            if self.compiled:
                # Dynamo keeps one graph per token bucket: allow them all.
                limit = len(self.token_buckets) + 8
                with torch._dynamo.config.patch(recompile_limit=limit):
                    return self._model_fn(input_ids=input_ids, positions=positions)
            return self.model(input_ids=input_ids, positions=positions)

    def _forward(self, input_ids, positions, meta: TpuAttentionMetadata, logits_indices):
        hidden = self._run_model(input_ids, positions, meta)
        return self.model.compute_logits(hidden[logits_indices])

    def _build_batch(self, req_ids, num_scheduled):
        T = sum(num_scheduled[r] for r in req_ids)
        R = len(req_ids)
        T_pad, R_pad = bucket_for(T, self.token_buckets), bucket_for(R, self.req_buckets)
        bs = self.block_size
        input_ids = np.zeros(T_pad, np.int32)
        positions = np.zeros(T_pad, np.int64)
        slots = np.full(T_pad, -1, np.int64)
        block_tables, seq_lens, qsl = self._empty_metadata(T)
        logits_indices = np.zeros(R_pad, np.int64)
        start = 0
        for r, req_id in enumerate(req_ids):
            req, n = self.requests[req_id], num_scheduled[req_id]
            first = req.num_computed
            pos = np.arange(first, first + n)
            input_ids[start:start + n] = req.token_ids[first:first + n]
            positions[start:start + n] = pos
            blocks = np.asarray(req.block_ids, np.int64)
            slots[start:start + n] = blocks[pos // bs] * bs + pos % bs
            block_tables[r, :len(blocks)] = blocks
            seq_lens[r] = first + n
            qsl[r] = start
            start += n
            logits_indices[r] = start - 1
        meta = TpuAttentionMetadata(self._to_device(qsl), self._to_device(seq_lens),
                                    self._to_device(block_tables), self._to_device(slots))
        return (self._to_device(input_ids), self._to_device(positions), meta,
                self._to_device(logits_indices), R_pad)

    def _empty_metadata(self, T: int):
        """Block tables, seq_lens and query_start_loc of max_num_seqs requests, all
        padding (no tokens: every query start is T)."""
        R = self.max_num_reqs
        return (np.zeros((R, self.max_blocks_per_req), np.int32), np.zeros(R, np.int32),
                np.full(R + 1, T, np.int32))

    def _sampling_metadata(self, reqs: list[_Request], R_pad: int) -> SamplingMetadata:
        params = [r.params for r in reqs]
        greedy = [p.sampling_type == SamplingType.GREEDY for p in params]
        pad = R_pad - len(reqs)
        temperature = np.array([0.0 if g else p.temperature for g, p in zip(greedy, params)]
                               + [0.0] * pad, np.float32)
        top_p = np.array([p.top_p for p in params] + [1.0] * pad, np.float32)
        top_k = np.array([p.top_k if 0 < p.top_k < self.vocab_size else self.vocab_size
                          for p in params] + [self.vocab_size] * pad, np.int32)
        logprobs = [p.logprobs for p in params if p.logprobs is not None]
        max_logprobs = None
        if logprobs:
            max_logprobs = max(self.vocab_size if k == -1 else k for k in logprobs)
        all_greedy = all(greedy)
        empty = torch.empty(0, device=self.device)
        return SamplingMetadata(
            temperature=None if all_greedy else self._to_device(temperature),
            all_greedy=all_greedy,
            all_random=not any(greedy) and pad == 0,
            top_p=self._to_device(top_p) if (top_p < 1).any() else None,
            top_k=self._to_device(top_k) if (top_k < self.vocab_size).any() else None,
            generators={i: r.generator for i, r in enumerate(reqs) if r.generator is not None},
            max_num_logprobs=max_logprobs,
            no_penalties=True,
            prompt_token_ids=None,
            frequency_penalties=empty, presence_penalties=empty, repetition_penalties=empty,
            output_token_ids=[r.outputs for r in reqs] + [[] for _ in range(pad)],
            allowed_token_ids_mask=None,
            bad_words_token_ids={},
            logitsprocs=LogitsProcessors(),
        )

    def _check_supported(self, params) -> None:
        if (params.frequency_penalty or params.presence_penalty
                or params.repetition_penalty != 1.0):
            raise NotImplementedError("sampling penalties are not supported on tpu yet")
        if params.prompt_logprobs is not None:
            raise NotImplementedError("prompt_logprobs are not supported on tpu yet")

    @torch.no_grad()
    def execute_model(self, so) -> ModelRunnerOutput:
        self._update_states(so)
        if so.total_num_scheduled_tokens == 0:
            return EMPTY_MODEL_RUNNER_OUTPUT
        req_ids = list(so.num_scheduled_tokens)
        reqs = [self.requests[r] for r in req_ids]
        for r in reqs:
            self._check_supported(r.params)
        input_ids, positions, meta, logits_indices, R_pad = self._build_batch(
            req_ids, so.num_scheduled_tokens)
        logits = self._forward(input_ids, positions, meta, logits_indices)
        out = self.sampler(logits, self._sampling_metadata(reqs, R_pad))
        sampled = out.sampled_token_ids[:, 0].cpu().tolist()

        # A request still prefilling (a chunk short of its prompt) samples nothing.
        sampled_lists = []
        for i, (req_id, req) in enumerate(zip(req_ids, reqs)):
            done = req.num_computed + so.num_scheduled_tokens[req_id]
            if done >= len(req.token_ids):
                token = sampled[i]
                req.token_ids.append(token)
                req.outputs.append(token)
                sampled_lists.append([token])
            else:
                sampled_lists.append([])
        logprobs = None
        if out.logprobs_tensors is not None:
            lp = out.logprobs_tensors
            logprobs = type(lp)(lp.logprob_token_ids[:len(reqs)], lp.logprobs[:len(reqs)],
                                lp.selected_token_ranks[:len(reqs)]).tolists()
        return ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={r: i for i, r in enumerate(req_ids)},
            sampled_token_ids=sampled_lists,
            logprobs=logprobs,
            prompt_logprobs_dict={r: None for r in req_ids},
        )

    # ---- warm-up ------------------------------------------------------------------
    @torch.no_grad()
    def warm_up(self) -> None:
        """Runs every shape once: the model per token bucket, the logits gather and
        greedy and random sampling per (token bucket, request bucket); afterwards a step
        of any size compiles nothing."""
        # The host tier would run tiny integer ops of a new shape on the host and
        # compile them later, after warm-up; here every op compiles now.
        with torch_tpu.debug.host_tier(False):
            self._warm_up_all()

    def _warm_up_all(self) -> None:
        """The model once per token bucket; the logits gather and the sampler once per
        (token bucket, request bucket) pair with R <= T."""
        self.num_warmup_shapes = 0
        self.warmup_seconds_per_token_bucket = {}
        for T in self.token_buckets:
            start = time.perf_counter()
            tables, lens, qsl = self._empty_metadata(0)
            meta = TpuAttentionMetadata(self._to_device(qsl), self._to_device(lens),
                                        self._to_device(tables),
                                        self._to_device(np.full(T, -1, np.int64)))
            hidden = self._run_model(self._to_device(np.zeros(T, np.int32)),
                                     self._to_device(np.zeros(T, np.int64)), meta)
            for R in self.req_buckets:
                if R > T:
                    continue
                logits = self.model.compute_logits(
                    hidden[self._to_device(np.zeros(R, np.int64))])
                self._warm_up_sampler(logits, R)
                self.num_warmup_shapes += 1
            torch.tpu.synchronize()
            self.warmup_seconds_per_token_bucket[T] = time.perf_counter() - start
            logger.info("torch_tpu: warm-up of token bucket %d took %.1f s", T,
                        self.warmup_seconds_per_token_bucket[T])

    def _warm_up_sampler(self, logits, R: int) -> None:
        from vllm.sampling_params import SamplingParams

        greedy, hot = SamplingParams(temperature=0.0), SamplingParams(temperature=0.8)
        top = SamplingParams(temperature=0.8, top_p=0.9, top_k=5)
        # All greedy, all random, and mixed batches (where() between the two) differ.
        for variant in ([greedy], [hot], [top], [greedy, hot], [greedy, top]):
            reqs = [_Request([], [], 0, variant[i % len(variant)]) for i in range(R)]
            self.sampler(logits, self._sampling_metadata(reqs, R)).sampled_token_ids.cpu()
