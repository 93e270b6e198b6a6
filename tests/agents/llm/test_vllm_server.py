"""The policy sampling on a vLLM server with its LoRA adapter pushed each step (agents/llm/vllm_server.py).

A scripted HTTP server on localhost stands in for ``vllm serve`` here (no vLLM on these machines):
it answers vLLM's three endpoints the way vLLM documents them and records every request, so
what is checked is what the trainer sends and how it reads the answers. The same client against
a real server: ``WMRL_VLLM_URL=http://HOST:PORT/v1 WMRL_VLLM_MODEL=NAME pytest tests/agents/llm/test_vllm_server.py``
(opt-in; the server started with ``--enable-lora`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``).
"""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from agents.llm.vllm_server import ServerError, VLLMServerSampler


@pytest.fixture(scope="module")
def tokenizer():
    from wmrl_envs.world_models.smollm2 import load_smollm2_tokenizer

    return load_smollm2_tokenizer()


@pytest.fixture()
def server(tokenizer):
    """A scripted vLLM server: LoRA load/unload (checks the adapter folder exists) and completions
    whose j-th choice per prompt is `` Ridge(alpha=j)`` plus a newline, as token ids."""
    requests: list[tuple[str, dict]] = []
    loaded: set[str] = set()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _answer(self, code, payload):
            data = json.dumps(payload).encode() if not isinstance(payload, str) else payload.encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            requests.append((self.path, body))
            if self.path == "/v1/load_lora_adapter":
                if not (Path(body["lora_path"]) / "adapter_config.json").is_file():
                    return self._answer(400, {"error": "no adapter at lora_path"})
                if body["lora_name"] in loaded:  # as vLLM: a name it holds is refused
                    return self._answer(400, {"error": f"The lora adapter '{body['lora_name']}' has already been loaded."})
                loaded.add(body["lora_name"])
                return self._answer(200, "Success: LoRA adapter loaded")
            if self.path == "/v1/unload_lora_adapter":
                loaded.discard(body["lora_name"])
                return self._answer(200, "Success")
            if self.path == "/v1/completions":
                if body["model"] not in loaded | {"base"}:
                    return self._answer(404, {"error": f"model {body['model']} does not exist"})
                choices = []
                for i, _ in enumerate(body["prompt"]):
                    for j in range(body["n"]):
                        text = f" Ridge(alpha={j + 1}.0)\n"
                        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
                        choices.append({"index": i * body["n"] + j, "text": text,
                                        "logprobs": {"tokens": [f"token_id:{t}" for t in ids]}})
                return self._answer(200, {"choices": choices})
            return self._answer(404, {"error": "unknown path"})

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", requests, loaded
    httpd.shutdown()


def _policy(tmp_path_factory, tokenizer, **kw):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from agents.llm.policy import LLMPolicy

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=4, num_key_value_heads=2)
    return LLMPolicy(LlamaForCausalLM(cfg), tokenizer, lora_r=4, max_new_tokens=8, temperature=0.8, seed=3, **kw)


def test_samples_come_from_the_server_with_the_pushed_adapter(server, tokenizer, tmp_path, tmp_path_factory):
    from agents.grpo import GRPOUpdateConfig, grpo_update
    from wmrl_envs.envs.autoresearch.tasks import get_task, list_tasks

    url, requests, loaded = server
    policy = _policy(tmp_path_factory, tokenizer)
    policy.sampler = VLLMServerSampler(url, "base", adapter_dir=tmp_path / "adapters")
    assert policy.sampler.sync(policy) == "wmrl-policy-0" and loaded == {"wmrl-policy-0"}
    specs = [get_task(t) for t in list_tasks("train")[:2]]
    samples = policy.sample([policy.build_prompt({}, s) for s in specs], 3)
    path, body = requests[-1]
    assert path == "/v1/completions" and body["model"] == "wmrl-policy-0" and body["n"] == 3
    assert body["return_tokens_as_token_ids"] is True and body["logprobs"] == 0 and body["stop"] == ["\n"]
    assert body["add_special_tokens"] is False  # the prompt is scored as sent: no BOS added by the server
    assert body["seed"] == 3 * 1_000_003 and body["temperature"] == 0.8 and body["max_tokens"] == 8
    assert samples.texts[1] == [" Ridge(alpha=1.0)\n", " Ridge(alpha=2.0)\n", " Ridge(alpha=3.0)\n"]
    assert samples.completion_ids[0][2] == tokenizer(" Ridge(alpha=3.0)\n", add_special_tokens=False)["input_ids"]
    assert policy.completion_to_action(samples.texts[0][0], specs[0]).count("model = Ridge(alpha=1.0)") == 1
    # the update scores exactly the server's tokens, locally; then the new adapter is pushed
    stats = grpo_update(policy, __import__("torch").optim.AdamW(policy.trainable_parameters(), lr=1e-2), samples,
                        [[0.2, 0.5, 0.9], [0.1, 0.1, 0.6]], [1.0, 1.0], config=GRPOUpdateConfig())
    assert stats["n_rows"] == 6
    assert policy.sampler.sync(policy) == "wmrl-policy-1" and loaded == {"wmrl-policy-1"}
    assert not (tmp_path / "adapters" / "step-0").exists() and (tmp_path / "adapters" / "step-1").is_dir()
    policy.sample([policy.build_prompt({}, specs[0])], 2)
    assert requests[-1][1]["model"] == "wmrl-policy-1" and requests[-1][1]["seed"] == 3 * 1_000_003 + 1


def test_server_failures_say_what_to_fix(server, tokenizer, tmp_path, tmp_path_factory):
    url, requests, loaded = server
    with pytest.raises(ServerError, match="cannot reach the vLLM server.*vllm serve"):
        VLLMServerSampler("http://127.0.0.1:9/v1", "base", adapter_dir=tmp_path, timeout_s=5).sample(
            ["x"], 1, max_new_tokens=2, temperature=1.0, stop=[], seed=0)
    with pytest.raises(ServerError, match="HTTP 404.*does not exist"):
        VLLMServerSampler(url, "not-served", adapter_dir=tmp_path).sample(["x"], 1, max_new_tokens=2, temperature=1.0,
                                                                          stop=[], seed=0)
    with pytest.raises(ValueError, match="must start with http"):
        VLLMServerSampler("gpu-node:8000", "base", adapter_dir=tmp_path)
    full = _policy(tmp_path_factory, tokenizer, finetune="full")
    with pytest.raises(ValueError, match="fully fine-tuned"):
        VLLMServerSampler(url, "base", adapter_dir=tmp_path).sync(full)


@pytest.mark.skipif("WMRL_VLLM_URL" not in os.environ, reason="opt-in: set WMRL_VLLM_URL (and WMRL_VLLM_MODEL) to a "
                    "real `vllm serve --enable-lora` server")
def test_a_real_vllm_server(tmp_path):  # pragma: no cover - needs a server
    """The base model's sampling through the real server: n choices with token ids, the stop string
    kept (pushing an adapter needs one trained for the served model: run wmrl train --vllm-url)."""
    sampler = VLLMServerSampler(os.environ["WMRL_VLLM_URL"], os.environ.get("WMRL_VLLM_MODEL", "base"),
                                adapter_dir=tmp_path / "adapters")
    ids = sampler.sample(["Hello"], 2, max_new_tokens=4, temperature=1.0, stop=["\n"], seed=0)
    assert len(ids) == 1 and len(ids[0]) == 2 and all(1 <= len(x) <= 4 for x in ids[0])


@pytest.mark.slow
def test_wmrl_train_samples_on_the_server_and_pushes_each_update(server, tiny_llama_folder, tmp_path):
    """wmrl train --vllm-url end to end against the scripted server (the judge on a local backbone):
    one adapter pushed before the first step and one after every update, every sampling request
    on the adapter of the moment, and the run trains on the server's tokens; the real arm that
    follows pushes its own adapters under names the server does not hold yet."""
    from agents.cli import main

    url, requests, loaded = server
    run = tmp_path / "run"
    assert main(["train", "--preset", "tiny", "--model", str(tiny_llama_folder), "--judge-model", str(tiny_llama_folder),
                 "--vllm-url", url, "--vllm-served-model", "base", "--run-dir", str(run), "--quiet"]) == 0
    loads = [b["lora_name"] for p, b in requests if p == "/v1/load_lora_adapter"]
    assert loads[:3] == ["wmrl-policy-0", "wmrl-policy-1", "wmrl-policy-2"]  # the WMRL arm: start + 2 updates
    real_loads = loads[3:]  # the real arm: its start + one per update, each a new name
    real_steps = json.loads((run / "real" / "summary.json").read_text())["steps_trained"]
    assert real_steps >= 1 and real_loads == [f"wmrl-real-policy-{k}" for k in range(real_steps + 1)]
    sampled = [b["model"] for p, b in requests if p == "/v1/completions"]
    # evaluation before, step 0, step 1, evaluation after; then the real arm's steps and its evaluation
    # after (its evaluation before is the WMRL arm's: the same initial policy)
    assert sampled[:4] == ["wmrl-policy-0", "wmrl-policy-0", "wmrl-policy-1", "wmrl-policy-2"]
    assert sampled[4:] == real_loads
    assert (run / "real" / "vllm_adapters").is_dir() and json.loads((run / "summary.json").read_text())["arms"]
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert all(r["sample_completions"][0] == " Ridge(alpha=1.0)\n" for r in lines)
    assert main(["train", "--preset", "tiny", "--vllm-url", url, "--finetune", "full",
                 "--run-dir", str(tmp_path / "bad")]) == 2
    # a server that is not there: a clear error at the start, exit 2, and no half-made run folder
    assert main(["train", "--preset", "tiny", "--model", str(tiny_llama_folder), "--vllm-url", "http://127.0.0.1:9/v1",
                 "--run-dir", str(tmp_path / "down"), "--quiet"]) == 2
    assert not (tmp_path / "down").exists()


def test_the_colocated_engine_gets_the_adapter_as_a_lora_request(tokenizer, tmp_path, tmp_path_factory, monkeypatch):
    """--vllm-colocate's calls into vLLM, with a recording stand-in for the ``vllm`` package (not
    installable on these CPU machines): the adapter folder written and passed as a LoRARequest
    with a new id per sync, SamplingParams with n = G and the policy's settings, token ids read."""
    import sys
    import types

    from agents.llm.vllm_server import VLLMColocatedSampler
    from wmrl_envs.envs.autoresearch.tasks import get_task, list_tasks

    calls = []

    class LoRARequest:
        def __init__(self, lora_name, lora_int_id, lora_path):
            assert (Path(lora_path) / "adapter_config.json").is_file()
            self.lora_name, self.lora_int_id, self.lora_path = lora_name, lora_int_id, lora_path

    class SamplingParams:
        def __init__(self, **kw):
            self.kw = kw

    class LLM:
        def __init__(self, **kw):
            calls.append(("LLM", kw))

        def get_tokenizer(self):
            return tokenizer

        def generate(self, prompts, params, lora_request=None, use_tqdm=True):
            assert all(set(p) == {"prompt_token_ids"} for p in prompts)  # token ids, no special tokens added
            calls.append(("generate", params.kw, lora_request))
            ids = tokenizer(" Ridge()\n", add_special_tokens=False)["input_ids"]
            return [types.SimpleNamespace(outputs=[types.SimpleNamespace(token_ids=ids)] * params.kw["n"])
                    for _ in prompts]

    vllm = types.ModuleType("vllm")
    vllm.LLM, vllm.SamplingParams = LLM, SamplingParams
    lora, request = types.ModuleType("vllm.lora"), types.ModuleType("vllm.lora.request")
    request.LoRARequest = LoRARequest
    for name, mod in (("vllm", vllm), ("vllm.lora", lora), ("vllm.lora.request", request)):
        monkeypatch.setitem(sys.modules, name, mod)
    policy = _policy(tmp_path_factory, tokenizer)
    policy.sampler = VLLMColocatedSampler("base-folder", adapter_dir=tmp_path, max_lora_rank=4)
    assert calls[0] == ("LLM", {"model": "base-folder", "enable_lora": True, "max_lora_rank": 4,
                                "gpu_memory_utilization": 0.3})
    assert policy.sampler.sync(policy) == "wmrl-policy-0"
    spec = get_task(list_tasks("train")[0])
    samples = policy.sample([policy.build_prompt({}, spec)], 3)
    _, params, req = calls[-1]
    assert params == {"n": 3, "max_tokens": 8, "temperature": 0.8, "top_p": 1.0, "stop": ["\n"],
                      "include_stop_str_in_output": True, "seed": 3 * 1_000_003}
    assert (req.lora_name, req.lora_int_id) == ("wmrl-policy-0", 1) and samples.texts[0] == [" Ridge()\n"] * 3
    policy.sampler.sync(policy)
    policy.sample([policy.build_prompt({}, spec)], 2)
    assert calls[-1][2].lora_int_id == 2 and not (tmp_path / "step-0").exists()  # a new id: vLLM reloads
