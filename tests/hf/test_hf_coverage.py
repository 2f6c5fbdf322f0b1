"""python -m torch_tpu.tools.hf_coverage: shrunk configs, every task head, forward and
backward on tpu vs the CPU, a table file and totals."""
import pytest

from torch_tpu.tools import hf_coverage


def _run(tmp_path, capsys, *argv):
    out = tmp_path / "table.tsv"
    assert hf_coverage.main([*argv, "--out", str(out)]) == 0
    rows = [line.split("\t") for line in out.read_text().splitlines()[1:]]
    return rows, capsys.readouterr().out


def test_hf_coverage_reports_pass_and_writes_table(tmp_path, capsys):
    rows, text = _run(tmp_path, capsys, "--only", "llama", "bert")
    by_head = {(r[0], r[1]): r[2] for r in rows}
    assert by_head[("llama", "causal_lm")] == "pass"
    assert by_head[("bert", "masked_lm")] == "pass"
    assert by_head[("llama", "seq_cls")] == "pass"
    assert "match the CPU (every head): 2/2 = 100.0%" in text
    assert "no CPU fallback:            2/2 = 100.0%" in text


def test_shrink_makes_configs_small():
    import transformers
    cfg = hf_coverage.shrink(transformers.LlamaConfig(), "llama")
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.vocab_size) == (2, 32, 99)


@pytest.mark.slow
def test_hf_coverage_ci_subset(tmp_path, capsys):
    """The fixed CI subset of about 20 architectures: each matches the CPU."""
    rows, text = _run(tmp_path, capsys, "--subset", "ci")
    bad = [r for r in rows if r[2] in ("mismatch", "error")]
    assert not bad, bad
