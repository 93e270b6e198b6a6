"""The judge's vLLM / OpenAI-compatible generation backends.

The server path is tested against a real HTTP server in this process that speaks the
completions API (it answers from a fixed script: the point is the client's contract — one
request per batch, vLLM's sampling fields, choices matched by index, clear errors — and that
the judge's prompts, parser and scores are the same whichever backend generates). The
in-process vLLM path runs only where vLLM is installed (GPU machines).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from wmrl_envs.world_models.llm_judge import PREFILL, LLMJudgeWorldModel
from wmrl_envs.world_models.vllm_backend import GeneratorError, OpenAICompatibleGenerator


class CompletionsServer:
    """``POST /v1/completions`` that answers ``valid/high`` for code using RandomForest, else a runtime error."""

    def __init__(self, status: int = 200):
        self.requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
                if status != 200:
                    self.send_response(status)
                    self.end_headers()
                    self.wfile.write(b'{"error": "overloaded"}')
                    return
                choices = []
                for i, p in enumerate(body["prompt"]):
                    text = ('valid", "bucket": "high", "feedback": "accuracy 0.93"}' if "RandomForest" in p
                            else 'runtime_err", "feedback": "NameError: name \'foo\' is not defined"}')
                    choices.append({"index": i, "text": text, "finish_reason": "stop"})
                choices.reverse()  # servers may return choices out of order: matched by index
                data = json.dumps({"choices": choices}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *a):
                pass

        self.httpd = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()


@pytest.fixture
def server():
    s = CompletionsServer()
    yield s
    s.close()


@pytest.fixture(scope="module")
def tokenizer():
    from wmrl_envs.world_models.smollm2 import load_smollm2_tokenizer

    return load_smollm2_tokenizer()


def _context():
    return {"task_id": "house-prices", "prompt": "Predict house prices (r2).", "feedback": "", "turn": 0}


def test_judge_on_a_completions_server(server, tokenizer):
    judge = LLMJudgeWorldModel.from_server(server.url, "smollm2", tokenizer, api_key="k", batch_size=8, seed=5)
    actions = [
        "from sklearn.ensemble import RandomForestRegressor\nmodel = RandomForestRegressor()\n",
        "model = foo()\n",
        "def broken(:\n",  # pre-check: syntax error, never sent
    ]
    preds = judge.predict([_context()] * 3, actions)
    assert [p.status for p in preds] == ["valid", "runtime_err", "syntax_err"]
    assert preds[0].score == pytest.approx(0.5 + 0.5 * 0.75)  # valid, bucket high (pos 0.75)
    assert preds[1].score == pytest.approx(0.1) and preds[2].score == 0.0
    assert preds[0].raw_output.startswith(PREFILL) and preds[2].model_called is False
    assert len(server.requests) == 1  # one request per batch
    req = server.requests[0]
    assert req["path"] == "/v1/completions" and req["model"] == "smollm2" and req["auth"] == "Bearer k"
    assert len(req["prompt"]) == 2 and all(p.endswith(PREFILL) for p in req["prompt"])
    assert req["stop"] == ["}"] and req["include_stop_str_in_output"] is True
    assert (req["temperature"], req["top_p"], req["top_k"], req["seed"]) == (0.7, 0.8, 20, 5)
    assert judge.n_model_calls == 2 and judge.n_precheck == 1 and judge.tokens_generated > 0
    judge.predict([_context()], [actions[1]])
    assert server.requests[1]["seed"] == 6  # seed + k for the k-th call


def test_the_prompt_is_the_transformers_judge_prompt(server, tokenizer):
    remote = LLMJudgeWorldModel.from_server(server.url, "m", tokenizer)
    local = LLMJudgeWorldModel(object(), tokenizer)  # never generates here: only builds prompts
    code = "model = foo()\n"
    remote.predict([_context()], [code])
    assert server.requests[0]["prompt"] == [local.build_prompt(_context(), code)]


def test_server_errors_are_clear(tokenizer):
    bad = CompletionsServer(status=503)
    try:
        gen = OpenAICompatibleGenerator(bad.url, "m")
        with pytest.raises(GeneratorError, match="HTTP 503"):
            gen.generate(["x"], max_new_tokens=4, temperature=0.0, top_p=1.0, top_k=0)
        assert "top_k" not in bad.requests[0] and "seed" not in bad.requests[0]  # greedy: no sampling fields
    finally:
        bad.close()
    gen = OpenAICompatibleGenerator("http://127.0.0.1:9/v1", "m", timeout_s=2)
    with pytest.raises(GeneratorError, match="cannot reach"):
        gen.generate(["x"], max_new_tokens=4, temperature=0.7, top_p=0.8, top_k=20)
    with pytest.raises(ValueError, match="http"):
        OpenAICompatibleGenerator("gpu-node:8000", "m")
    with pytest.raises(ValueError, match="decoding"):
        LLMJudgeWorldModel(None, tokenizer, generator=gen, decoding="expected")
    with pytest.raises(ValueError, match="model"):
        LLMJudgeWorldModel(None, tokenizer)


def test_in_process_vllm(tokenizer):
    pytest.importorskip("vllm")
    from wmrl_envs.world_models.smollm2 import load_smollm2

    load_smollm2()  # make sure the fp32 cache folder exists
    from wmrl_envs.world_models.smollm2 import default_cache_dir

    judge = LLMJudgeWorldModel.from_vllm(str(default_cache_dir()), tokenizer, llm_kwargs={"max_model_len": 2048}, seed=0)
    preds = judge.predict([_context()] * 2, ["model = foo()\n", "from sklearn.linear_model import Ridge\nmodel = Ridge()\n"])
    assert all(p.model_called and p.score is not None for p in preds)
