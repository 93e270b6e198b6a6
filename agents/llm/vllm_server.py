"""The policy's completions from a vLLM server, with the LoRA weights pushed after every update.

On a GPU, sampling G completions per group is where a GRPO step spends most of its time, and
vLLM (continuous batching, paged attention) does it several times faster than
``transformers.generate``. TRL's server mode runs vLLM as a separate process (``trl vllm-serve``)
and pushes the policy's weights to it after each update; :class:`VLLMServerSampler` does the
same with vLLM's own OpenAI-compatible server and its runtime LoRA loading, so no extra
package is needed on the trainer's side:

* start the server with LoRA enabled and runtime updates allowed, on a path the trainer writes
  to (the same machine, or a shared file system)::

      VLLM_ALLOW_RUNTIME_LORA_UPDATING=True vllm serve MODEL --enable-lora --max-lora-rank 16

* :meth:`VLLMServerSampler.sync` saves the policy's adapter (peft's ``save_pretrained``) into
  ``adapter_dir/step-<k>`` and registers it with ``POST /v1/load_lora_adapter`` under the name
  ``wmrl-policy-<k>`` (the previous adapter is unloaded); :meth:`VLLMServerSampler.sample` sends
  one ``POST /v1/completions`` per batch (``n = G``, ``model`` = that adapter, the policy's
  temperature, stop strings and a seed) and asks for the sampled tokens as token ids
  (``logprobs=0, return_tokens_as_token_ids=true``), so the update scores exactly the tokens the
  server sampled, not a re-tokenisation of its text.

:class:`VLLMColocatedSampler` is the experimental in-process variant (TRL's "colocate" mode: a
``vllm.LLM`` in the trainer's process, the adapter passed as a ``LoRARequest``).

Only LoRA: full fine-tuning would need the whole weights pushed (TRL's NCCL weight sync), which
this module does not do. The trainer's log-probabilities are always recomputed locally by the
policy (``LLMPolicy.grpo_logprobs``), so the loss does not depend on the server's numerics. The
method: ``docs/method.md``.
"""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Sequence

__all__ = ["VLLMServerSampler", "VLLMColocatedSampler", "ServerError"]


class ServerError(RuntimeError):
    """The vLLM server failed or answered something unusable; the message says what and how to fix it."""


class VLLMServerSampler:
    """Samples completions of the current policy on a vLLM OpenAI-compatible server.

    Args:
        base_url: the API root, e.g. ``"http://gpu-node:8000/v1"``.
        base_model: the served base model's name (``--served-model-name``, or the path/id given
            to ``vllm serve``).
        adapter_dir: folder the adapters are written to; the server must be able to read it.
        api_key: sent as ``Authorization: Bearer ...`` when given.
        timeout_s: seconds per request.

    Attributes:
        lora_name: the adapter requests go to (``None`` before the first :meth:`sync`: the base model).
        n_syncs, n_requests: counters.

    The adapters are named ``<name_prefix>-<k>``: two runs on one server (``wmrl train``'s WMRL
    arm and its real arm) need different prefixes, since a name the server already holds is
    refused.

    Raises:
        ValueError: ``base_url`` is not an http(s) URL.
    """

    def __init__(self, base_url: str, base_model: str, *, adapter_dir: str | Path, api_key: str | None = None,
                 timeout_s: float = 300.0, name_prefix: str = "wmrl-policy") -> None:
        if not str(base_url).startswith(("http://", "https://")):
            raise ValueError(f"the vLLM server URL must start with http:// or https://, got {base_url!r}")
        self.base_url = str(base_url).rstrip("/")
        self.base_model = base_model
        self.adapter_dir = Path(adapter_dir)
        self.api_key = api_key
        self.timeout_s = float(timeout_s)
        self.name_prefix = str(name_prefix)
        self.lora_name: str | None = None
        self._lora_path: Path | None = None
        self.n_syncs = 0
        self.n_requests = 0

    # ------------------------------------------------------------------ http
    def _post(self, path: str, body: dict[str, Any]) -> Any:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(f"{self.base_url}{path}", data=json.dumps(body).encode(), headers=headers,
                                     method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                text = resp.read().decode()
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")[:500]
            hint = (" (start the server with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, and make "
                    f"{self.adapter_dir} readable by it)" if "lora" in path else "")
            raise ServerError(f"{self.base_url}{path} answered HTTP {e.code}: {detail}{hint}") from e
        except (urllib.error.URLError, TimeoutError, OSError) as e:
            raise ServerError(f"cannot reach the vLLM server at {self.base_url} ({e}); is `vllm serve` running and "
                              "is the URL the API root (ending in /v1)?") from e
        self.n_requests += 1
        try:
            return json.loads(text) if text.strip() else {}
        except json.JSONDecodeError:
            return text

    # ------------------------------------------------------------------ weights
    def sync(self, policy: Any) -> str:
        """Push the policy's current LoRA adapter to the server; later samples use it.

        Args:
            policy: an :class:`agents.llm.policy.LLMPolicy` with ``finetune="lora"``.

        Returns:
            The adapter's name on the server.

        Raises:
            ValueError: the policy is fully fine-tuned (no adapter to push).
            ServerError: the server refused to load it.
        """
        if getattr(policy, "finetune", "lora") != "lora":
            raise ValueError("the vLLM server path pushes LoRA adapters; a fully fine-tuned policy (--finetune full) "
                             "samples locally (drop --vllm-url)")
        k = self.n_syncs
        name, path = f"{self.name_prefix}-{k}", self.adapter_dir / f"step-{k}"
        if path.exists():
            shutil.rmtree(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        policy.save_adapter(path)
        self._post("/load_lora_adapter", {"lora_name": name, "lora_path": str(path.resolve())})
        old_name, old_path = self.lora_name, self._lora_path
        self.lora_name, self._lora_path = name, path
        self.n_syncs += 1
        if old_name is not None:
            try:
                self._post("/unload_lora_adapter", {"lora_name": old_name})
            finally:
                if old_path is not None:
                    shutil.rmtree(old_path, ignore_errors=True)
        return name

    # ------------------------------------------------------------------ sampling
    def sample(self, prompts: Sequence[str], group_size: int, *, max_new_tokens: int, temperature: float,
               stop: Sequence[str], seed: int) -> list[list[list[int]]]:
        """Sample ``group_size`` completions of each prompt with the last synced adapter.

        Args:
            prompts: the rendered prompts (chat template applied, assistant turn pre-filled).
            group_size: G, completions per prompt (the request's ``n``).
            max_new_tokens, temperature: as the policy's.
            stop: stop strings (included in the completion, as the local path keeps them).
            seed: the request's seed (vLLM seeds each request's sampling with it).

        Returns:
            Per prompt, G lists of sampled token ids.

        Raises:
            ServerError: unreachable server, HTTP error, or an answer without ``len(prompts) × G``
                choices carrying token ids.
        """
        prompts = list(prompts)
        if not prompts:
            return []
        body = {
            "model": self.lora_name or self.base_model, "prompt": prompts, "n": int(group_size),
            "max_tokens": int(max_new_tokens), "temperature": float(temperature), "top_p": 1.0, "seed": int(seed),
            "stop": list(stop), "include_stop_str_in_output": True, "skip_special_tokens": False,
            "logprobs": 0, "return_tokens_as_token_ids": True,
            # the prompt text already holds the chat template's special tokens, and the trainer scores it
            # tokenised without adding more (a BOS added here would be a prompt the loss never sees)
            "add_special_tokens": False,
        }
        answer = self._post("/completions", body)
        choices = answer.get("choices") if isinstance(answer, dict) else None
        want = len(prompts) * int(group_size)
        if not isinstance(choices, list) or len(choices) != want:
            raise ServerError(f"expected {want} choices from {self.base_url}/completions, got "
                              f"{len(choices) if isinstance(choices, list) else type(answer).__name__}")
        out: list[list[list[int]]] = [[[] for _ in range(group_size)] for _ in prompts]
        for pos, ch in enumerate(choices):
            idx = int(ch.get("index", pos))
            tokens = ((ch.get("logprobs") or {}).get("tokens")) if isinstance(ch, dict) else None
            if not isinstance(tokens, list) or not all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
                raise ServerError("the server's choices carry no token ids (logprobs.tokens as 'token_id:N'); it needs "
                                  "vLLM's return_tokens_as_token_ids (vLLM >= 0.6)")
            out[idx // group_size][idx % group_size] = [int(t.split(":", 1)[1]) for t in tokens]
        return out


class VLLMColocatedSampler:
    """Experimental: the policy's completions from an in-process ``vllm.LLM`` beside the trainer.

    TRL's "colocate" mode: one process holds the trained model and a vLLM engine on the same GPU
    (give the engine a share of the memory with ``gpu_memory_utilization``). The adapter reaches
    the engine as a ``LoRARequest`` whose folder :meth:`sync` rewrites after each update (a new
    request id per sync, so vLLM loads the new weights). Needs ``pip install vllm`` (CUDA); not
    run on the project's CPU machines, where only its calls into vLLM are tested.

    Args:
        model: the base model's folder or hub id (the same weights as the policy's backbone).
        adapter_dir: folder the adapters are written to.
        max_lora_rank: the policy's LoRA rank (vLLM needs it up front).
        llm: a ready ``vllm.LLM`` built with ``enable_lora=True`` (then the next three are unused).
        gpu_memory_utilization: the engine's share of the GPU memory.
        **llm_kwargs: further ``vllm.LLM`` arguments (``dtype``, ``max_model_len``, ...).

    Raises:
        ImportError: vLLM is not installed (the message says what to do instead).
    """

    def __init__(self, model: str, *, adapter_dir: str | Path, max_lora_rank: int = 16, llm: Any = None,
                 gpu_memory_utilization: float = 0.3, name_prefix: str = "wmrl-policy", **llm_kwargs: Any) -> None:
        try:
            import vllm
        except ImportError as e:
            raise ImportError("--vllm-colocate needs vLLM in this environment (`pip install vllm`, CUDA); or run "
                              "`vllm serve` and pass --vllm-url instead") from e
        self.llm = llm if llm is not None else vllm.LLM(model=model, enable_lora=True, max_lora_rank=max_lora_rank,
                                                        gpu_memory_utilization=gpu_memory_utilization, **llm_kwargs)
        self.adapter_dir = Path(adapter_dir)
        self.lora_request: Any = None
        self.name_prefix = str(name_prefix)
        self.n_syncs = 0

    def sync(self, policy: Any) -> str:
        """Write the policy's adapter and point later samples at it (see :meth:`VLLMServerSampler.sync`).

        Raises:
            ValueError: the policy is fully fine-tuned.
        """
        from vllm.lora.request import LoRARequest

        if getattr(policy, "finetune", "lora") != "lora":
            raise ValueError("--vllm-colocate pushes LoRA adapters; a fully fine-tuned policy samples with transformers")
        k = self.n_syncs
        path = self.adapter_dir / f"step-{k}"
        if path.exists():
            shutil.rmtree(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        policy.save_adapter(path)
        old = self.lora_request
        self.lora_request = LoRARequest(f"{self.name_prefix}-{k}", k + 1, str(path.resolve()))
        self.n_syncs += 1
        if old is not None:
            shutil.rmtree(old.lora_path, ignore_errors=True)
        return self.lora_request.lora_name

    def sample(self, prompts: Sequence[str], group_size: int, *, max_new_tokens: int, temperature: float,
               stop: Sequence[str], seed: int) -> list[list[list[int]]]:
        """As :meth:`VLLMServerSampler.sample`, with ``vllm.LLM.generate`` and the current ``LoRARequest``."""
        from vllm import SamplingParams

        params = SamplingParams(n=int(group_size), max_tokens=int(max_new_tokens), temperature=float(temperature),
                                top_p=1.0, stop=list(stop) or None, include_stop_str_in_output=True, seed=int(seed))
        tok = self.llm.get_tokenizer()  # token ids, as the trainer tokenises them (no special tokens added)
        requests = [{"prompt_token_ids": tok(p, add_special_tokens=False)["input_ids"]} for p in prompts]
        outputs = self.llm.generate(requests, params, lora_request=self.lora_request, use_tqdm=False)
        return [[list(c.token_ids) for c in o.outputs] for o in outputs]
