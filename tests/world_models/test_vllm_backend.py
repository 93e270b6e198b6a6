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

from wmrl_envs.envs.autoresearch.llm_judge import PREFILL, LLMJudgeWorldModel, judge_json_schema
from wmrl_envs.world_models.vllm_backend import GeneratorError, OpenAICompatibleGenerator

_CONSTRAINT_FIELDS = ("structured_outputs", "response_format", "guided_json")


class CompletionsServer:
    """``POST /v1/completions`` that answers ``valid/high`` for code using RandomForest, else a runtime error.

    Like a vLLM server with structured outputs, it writes the whole JSON object when the request
    carries a JSON schema, and the continuation of the prefill otherwise; code containing
    ``TWO_OBJECTS`` gets two objects, code containing ``PROSE`` gets prose (a model the
    constraint did not hold)."""

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
                constrained = any(k in body for k in _CONSTRAINT_FIELDS)
                for i, p in enumerate(body["prompt"]):
                    text = ('valid", "bucket": "high", "feedback": "accuracy 0.93"}' if "RandomForest" in p
                            else 'runtime_err", "bucket": "low", "feedback": "NameError: name \'foo\' is not defined"}')
                    if constrained:
                        text = PREFILL + text
                    if "TWO_OBJECTS" in p:
                        text = text + ' {"status": "valid"}'
                    if "PROSE" in p:
                        text = "The script will probably run fine."
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


ACTIONS = [
    "from sklearn.ensemble import RandomForestRegressor\nmodel = RandomForestRegressor()\n",
    "model = foo()\n",
    "def broken(:\n",  # pre-check: syntax error, never sent
]


@pytest.mark.parametrize("constrained", [True, False])
def test_judge_on_a_completions_server(server, tokenizer, constrained):
    judge = LLMJudgeWorldModel.from_server(server.url, "smollm2", tokenizer, api_key="k", batch_size=8, seed=5,
                                           structured_outputs="structured_outputs" if constrained else None)
    assert judge.constrained is constrained
    preds = judge.predict([_context()] * 3, ACTIONS)
    assert [p.status for p in preds] == ["valid", "runtime_err", "syntax_err"]
    assert preds[0].score == pytest.approx(0.5 + 0.5 * 0.75)  # valid, bucket high (pos 0.75)
    assert preds[1].score == pytest.approx(0.1) and preds[2].score == 0.0
    assert preds[0].raw_output.startswith(PREFILL) and preds[2].model_called is False
    assert judge.n_parse_errors == 0
    assert len(server.requests) == 1  # one request per batch
    req = server.requests[0]
    assert req["path"] == "/v1/completions" and req["model"] == "smollm2" and req["auth"] == "Bearer k"
    assert len(req["prompt"]) == 2 and req["include_stop_str_in_output"] is True
    if constrained:  # vLLM's structured outputs write the whole object: no prefill, no stop string
        assert req["structured_outputs"] == {"json": judge_json_schema()}
        assert all(not p.endswith(PREFILL) and p.endswith("assistant\n") for p in req["prompt"])
        assert "stop" not in req
    else:  # the strict parser alone: prefilled prompt, stop at the brace, no schema sent
        assert not any(k in req for k in _CONSTRAINT_FIELDS)
        assert all(p.endswith(PREFILL) for p in req["prompt"]) and req["stop"] == ["}"]
    assert (req["temperature"], req["top_p"], req["top_k"], req["seed"]) == (0.7, 0.8, 20, 5)
    assert judge.n_model_calls == 2 and judge.n_precheck == 1 and judge.tokens_generated > 0
    judge.predict([_context()], [ACTIONS[1]])
    assert server.requests[1]["seed"] == 6  # seed + k for the k-th call


@pytest.mark.parametrize(
    "how,field",
    [
        ("structured_outputs", lambda s: {"structured_outputs": {"json": s}}),
        ("response_format", lambda s: {"response_format": {
            "type": "json_schema", "json_schema": {"name": "judge_prediction", "schema": s, "strict": True}}}),
        ("guided_json", lambda s: {"guided_json": s}),
    ],
)
def test_structured_output_payloads(server, tokenizer, how, field):
    judge = LLMJudgeWorldModel.from_server(server.url, "m", tokenizer, structured_outputs=how, max_feedback_chars=120)
    preds = judge.predict([_context()], [ACTIONS[0]])
    req = server.requests[0]
    schema = judge_json_schema(120)
    assert {k: req[k] for k in _CONSTRAINT_FIELDS if k in req} == field(schema)
    assert preds[0].status == "valid" and preds[0].extras["parse_error"] is False


def test_a_server_that_ignores_the_constraint_is_caught_by_the_strict_parser(server, tokenizer):
    """A server that drops the schema field (vLLM >= 0.12 ignores guided_json): its prose and its
    two objects are no prediction, and the judge warns."""
    judge = LLMJudgeWorldModel.from_server(server.url, "m", tokenizer, structured_outputs="guided_json")
    with pytest.warns(RuntimeWarning, match="ignored the JSON constraint"):
        preds = judge.predict([_context()] * 3, ["x = 1  # PROSE\n", "x = 2  # TWO_OBJECTS\n", "model = foo()\n"])
    assert [p.status for p in preds] == ["runtime_err"] * 3
    assert [p.extras["parse_error"] for p in preds] == [True, True, False]
    assert judge.n_parse_errors == 2


def test_the_prompt_is_the_transformers_judge_prompt(server, tokenizer):
    local = LLMJudgeWorldModel(object(), tokenizer, constrained=False)  # never generates here: only builds prompts
    code = "model = foo()\n"
    LLMJudgeWorldModel.from_server(server.url, "m", tokenizer, structured_outputs=None).predict([_context()], [code])
    assert server.requests[0]["prompt"] == [local.build_prompt(_context(), code)]
    LLMJudgeWorldModel.from_server(server.url, "m", tokenizer).predict([_context()], [code])
    assert server.requests[1]["prompt"] == [local.build_prompt(_context(), code)[: -len(PREFILL)]]


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
    with pytest.raises(ValueError, match="structured_outputs"):
        OpenAICompatibleGenerator("http://h/v1", "m", structured_outputs="guided_regex")
    with pytest.raises(ValueError, match="cannot constrain"):
        LLMJudgeWorldModel(None, tokenizer, generator=OpenAICompatibleGenerator("http://h/v1", "m", structured_outputs=None),
                           constrained=True)
    with pytest.warns(RuntimeWarning, match="strict parser only"):
        LLMJudgeWorldModel(None, tokenizer, generator=OpenAICompatibleGenerator("http://h/v1", "m", structured_outputs=None))
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


@pytest.mark.parametrize("api", ["structured_outputs", "guided_decoding"])
def test_in_process_vllm_sampling_params(monkeypatch, api):
    """VLLMGenerator hands the schema to vLLM's own structured outputs, in the field of the installed
    version (a stand-in ``vllm`` module records the SamplingParams; vLLM itself needs a GPU)."""
    import sys
    import types

    from wmrl_envs.world_models.vllm_backend import VLLMGenerator

    class Params:
        def __init__(self, **kw):
            self.kw = kw

    class SamplingParams(Params):
        pass

    seen = []

    class LLM:
        def generate(self, prompts, params, use_tqdm=False):
            seen.append(params.kw)
            return [types.SimpleNamespace(outputs=[types.SimpleNamespace(text=f"out{i}")]) for i in range(len(prompts))]

    vllm = types.ModuleType("vllm")
    vllm.SamplingParams, vllm.LLM = SamplingParams, LLM
    sp = types.ModuleType("vllm.sampling_params")
    if api == "structured_outputs":
        sp.StructuredOutputsParams = type("StructuredOutputsParams", (Params,), {})
    else:  # vLLM < 0.11
        sp.GuidedDecodingParams = type("GuidedDecodingParams", (Params,), {})
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", sp)
    gen = VLLMGenerator(LLM())
    assert gen.supports_json_schema is True
    schema = judge_json_schema()
    assert gen.generate(["a", "b"], max_new_tokens=8, temperature=0.0, top_p=1.0, top_k=0, json_schema=schema) == ["out0", "out1"]
    assert seen[0][api].kw == {"json": schema} and seen[0]["max_tokens"] == 8
    gen.generate(["a"], max_new_tokens=8, temperature=0.7, top_p=0.8, top_k=20)
    assert "structured_outputs" not in seen[1] and "guided_decoding" not in seen[1]
