"""python -m torch_tpu.tools.hf_coverage: shrunk configs, every task head, forward and
backward on tpu vs the CPU in worker processes, a resumable table file and totals."""
import pytest
import torch

from torch_tpu.tools import hf_coverage
from torch_tpu.tools.hf_entry import check_one


def _run(tmp_path, capsys, *argv, name="table.tsv"):
    out = tmp_path / name
    assert hf_coverage.main([*argv, "--out", str(out)]) == 0
    return hf_coverage.read_table(str(out)), capsys.readouterr().out


def test_hf_coverage_reports_pass_and_writes_table(tmp_path, capsys):
    rows, text = _run(tmp_path, capsys, "--only", "llama", "bert")
    by_head = {(r["model_type"], r["head"]): r for r in rows}
    for key in [("llama", "causal_lm"), ("bert", "masked_lm"), ("llama", "seq_cls")]:
        assert by_head[key]["status"] == "pass", by_head[key]
        assert float(by_head[key]["grad_err"]) <= 1e-2  # the training step's gradients match too
        assert by_head[key]["cpu_fallback_ops"] == ""
    assert "architectures matching the CPU (every buildable head): 2/2 = 100.0%" in text
    assert "architectures with no CPU fallback:                  2/2 = 100.0%" in text


@pytest.mark.slow
def test_resume_skips_done_entries_and_shards_split_the_work(tmp_path, capsys):
    rows, _ = _run(tmp_path, capsys, "--only", "gpt2", "--no-train")
    first = {(r["model_type"], r["head"]) for r in rows}
    assert ("gpt2", "causal_lm") in first
    # Same command again: nothing left to do, the table is unchanged (no duplicate rows).
    rows2, text = _run(tmp_path, capsys, "--only", "gpt2", "--no-train")
    assert len(rows2) == len(rows)
    # Two jobs over two model types: each shard takes one, every entry appears once.
    rows3, _ = _run(tmp_path, capsys, "--only", "gpt2", "opt", "--no-train", "--jobs", "2",
                    name="two.tsv")
    keys = [(r["model_type"], r["head"]) for r in rows3]
    assert len(keys) == len(set(keys))
    assert {k[0] for k in keys} == {"gpt2", "opt"}
    assert all(r["status"] == "pass" for r in rows3), rows3


@pytest.mark.slow
def test_compiled_mode(tmp_path, capsys):
    rows, text = _run(tmp_path, capsys, "--only", "llama", "--mode", "compiled")
    causal = next(r for r in rows if r["head"] == "causal_lm")
    assert causal["status"] == "pass", causal
    assert float(causal["grad_err"]) <= 1e-2
    assert "hf_coverage (compiled" in text


def test_report_only_writes_markdown_summary(tmp_path, capsys):
    table = tmp_path / "t.tsv"
    cols = hf_coverage.COLUMNS
    lines = ["\t".join(cols),
             "a\tbase\tpass\t1e-07\t1e-06\t1.0\t\t",
             "a\tcausal_lm\tmismatch\t5e-02\t1e-06\t1.0\t\t",
             "b\tbase\tpass\t1e-07\t1e-06\t1.0\taten::histc\t",
             "c\tbase\tskip\t\t\t0.1\t\tcpu: ValueError: no",
             "d\tbase\terror\t\t\t\t\tcrashed: worker exit -11 (signal 11)"]
    table.write_text("\n".join(lines) + "\n")
    md = tmp_path / "s.md"
    assert hf_coverage.main(["--report-only", "--out", str(table), "--summary", str(md)]) == 0
    text = capsys.readouterr().out
    # a fails (one head mismatches), b passes with a fallback, c is not buildable, d errors.
    assert "4 model types, 3 buildable on the CPU" in text
    assert "architectures matching the CPU (every buildable head): 1/3 = 33.3%" in text
    assert "architectures with no CPU fallback:                  1/3 = 33.3%" in text
    assert "aten::histc 1; 1" in text
    assert "d/base: error crashed" in text
    assert md.read_text().startswith("# hf_coverage: strict_eager")


def test_entry_timeout_is_not_swallowed_by_dynamo(tmp_path, capsys):
    # The alarm lands inside Dynamo's compile, which catches Exception: the entry must
    # still end as a timeout (not as a wrapped compile error, nor run on past the limit).
    rows, _ = _run(tmp_path, capsys, "--only", "gpt2", "--mode", "compiled", "--timeout", "1")
    assert rows
    for r in rows:
        assert r["status"] == "pass" or r["detail"] == "timed out after 1s", r
        assert float(r["seconds"]) < 60, r  # cut at the limit by the driver, not run to the end


def test_report_counts_random_by_design_apart(tmp_path, capsys):
    table = tmp_path / "t.tsv"
    lines = ["\t".join(hf_coverage.COLUMNS),
             "a\tbase\tpass\t1e-07\t1e-06\t1.0\t\t",
             "r\tbase\trng\t1e+00\t\t1.0\t\tthe CPU's own output changes with the seed",
             "m\tbase\tmismatch\t5e-02\t1e-06\t1.0\t\t"]
    table.write_text("\n".join(lines) + "\n")
    assert hf_coverage.main(["--report-only", "--out", str(table)]) == 0
    text = capsys.readouterr().out
    # r is neither a match nor a failure: out of the comparable architectures, listed apart
    assert "3 model types, 3 buildable on the CPU, 1 of them random by design (rng: r)" in text
    assert "architectures matching the CPU (every buildable head): 1/2 = 50.0%" in text
    assert "3 buildable, 1 pass, 1 mismatch, 0 error, 1 rng, 0 skip" in text
    assert "failing architectures: 1 (1 heads); and 1 random by design (rng), listed last" in text
    assert text.index("m/base: mismatch") < text.index("r/base: rng")


class _Cfg:
    vocab_size = 99


class _Embed(torch.nn.Module):
    main_input_name = "input_ids"

    def __init__(self, cfg):
        super().__init__()
        self.emb = torch.nn.Embedding(cfg.vocab_size, 8)

    def forward(self, input_ids, attention_mask=None):
        return {"logits": self.emb(input_ids)}


class _NoisyEmbed(_Embed):
    """Draws noise in eval mode (as ViLT's patch sampling or VITS's duration noise do)."""

    def forward(self, input_ids, attention_mask=None):
        h = self.emb(input_ids)
        return {"logits": h + torch.randn_like(h)}


@pytest.mark.parametrize("cls, status", [(_Embed, "pass"), (_NoisyEmbed, "rng")])
def test_an_entry_whose_cpu_output_changes_with_the_seed_is_rng(cls, status):
    import torch_tpu
    row = check_one(cls, _Cfg(), "strict_eager", True, 1e-3, torch, torch_tpu)
    assert row["status"] == status, row
    if status == "rng":
        assert "the CPU's own output changes with the seed" in row["detail"], row


def test_shrink_makes_configs_small():
    import transformers
    cfg = hf_coverage.shrink(transformers.LlamaConfig(), "llama")
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.vocab_size) == (2, 32, 99)


def test_shrink_keeps_latent_attention_heads_whole():
    # latent attention expands keys and values to every query head: fewer key/value
    # heads would repeat them again (a torch.compile-only failure in deepseek_v3)
    import transformers
    cfg = hf_coverage.shrink(transformers.DeepseekV3Config(), "deepseek_v3")
    assert cfg.num_key_value_heads == cfg.num_attention_heads == 4
    assert hf_coverage.shrink(transformers.LlamaConfig(), "llama").num_key_value_heads == 2


@pytest.mark.slow
def test_hf_coverage_ci_subset(tmp_path, capsys):
    """The fixed CI subset of about 20 architectures: each matches the CPU."""
    rows, text = _run(tmp_path, capsys, "--subset", "ci")
    bad = [r for r in rows if r["status"] in ("mismatch", "error")]
    assert not bad, bad
