"""The LLM judge (:class:`LLMJudgeWorldModel`): AutoResearch's world model of the WMRL method.

A frozen instruction-tuned LLM reads the task text and the agent's code and predicts the
structured outcome real execution would give (status, quality bucket, feedback), scored on the
real grader's scale (``docs/method.md``, "World model"). This module holds the world model and
its generation; the answer format is :mod:`.parser`, the prompt :mod:`.prompt`, the JSON
constraint for transformers :mod:`.decoding`; the model-free pre-check is the real grader's own
(:func:`~wmrl_envs.envs.autoresearch.grading.check_source`).

Decoding under the constraint, per backend: transformers masks the logits with one llguidance
matcher per sequence (it first consumes the prefill :data:`~.parser.PREFILL`; within
:data:`~.decoding.CLOSE_RESERVE` tokens of the budget it closes the feedback string, so the
object is always complete); vLLM in process and ``vllm serve`` use their own structured outputs
with the same schema, and the prompt then stops before the prefill. The judge may share its
model with the policy (a ``peft.PeftModel``): it predicts with the adapters disabled, under
``torch.no_grad()``, and restores every train/eval mode and ``requires_grad`` flag afterwards.
A known limitation of small judges is in ``docs/autoresearch.md``, "The LLM judge".
"""

from __future__ import annotations

import contextlib
import re
import time
import warnings
from typing import Any, Sequence

from wmrl_envs.envs.autoresearch.grading import (
    BUCKET_POSITIONS,
    QUALITY_BUCKETS,
    STATUSES,
    check_source,
    score_from_status,
)
from wmrl_envs.utils import check_arg
from wmrl_envs.world_models.base import WorldModelPrediction

from .decoding import CLOSE_RESERVE, JsonConstraint, brace_stopping, constraint_processor, frozen_backbone, judge_grammar
from .parser import FEEDBACK_MAX_CHARS, PREFILL, full_answer, judge_json_schema, parse_judge_output_with_reason
from .prompt import SYSTEM_PROMPT, JudgePrompt, format_predicted_feedback

__all__ = ["LLMJudgeWorldModel"]


class LLMJudgeWorldModel:
    """World model that asks a causal LM to predict a solution's sandbox outcome.

    Implements :class:`wmrl_envs.world_models.base.WorldModel` following Yang et al.,
    arXiv 2608.12564 (``docs/method.md``, "World model"; the module docstring says how).

    Args:
        model: a Hugging Face causal LM (``generate`` API), possibly a ``peft.PeftModel``
            shared with the policy. It is used as is (not copied); its device is the device
            of its first parameter.
        tokenizer: its tokenizer; a chat template is used when present. Padding is done on
            the left whatever the tokenizer's setting.
        max_new_tokens: most generated tokens per prediction (int > 0).
        temperature: sampling temperature; ``<= 0`` means greedy decoding.
        top_p: nucleus-sampling mass in (0, 1].
        top_k: top-k sampling cut-off (int, 0 disables).
        batch_size: most actions per ``generate`` call.
        max_prompt_tokens: most tokens of the whole prompt (chat template + task + code +
            prefill); task text and code are cut in the middle (at line boundaries where
            possible) to fit, the code keeping at least 60 % of the budget left.
        seed: when given, every ``generate`` call is seeded with ``seed + k`` (``k`` counts
            calls) inside :func:`torch.random.fork_rng`, so runs are reproducible and the
            caller's global RNG stream is left untouched; ``None`` uses the global RNG.
        disable_adapters: predict with PEFT adapters (LoRA, ...) disabled, i.e. with the
            frozen backbone (default ``True``).
        system_prompt: replaces :data:`SYSTEM_PROMPT` (for prompt experiments).
        stop_at_brace: without the JSON constraint, stop a sequence's generation at the
            first generated token that contains ``}`` (the end of the JSON answer), which
            saves decoding time (an answer cut there inside the feedback string is no
            prediction). Constrained decoding ends at the object's ``}`` by itself.
        constrained: decode under the JSON constraint (:func:`judge_json_schema`).
            ``None`` (default): whenever the backend can (transformers with llguidance;
            a generator whose ``supports_json_schema`` is true), else only the strict
            parser, with a warning; ``True``: required (``ValueError`` if the backend
            cannot); ``False``: never (the strict parser alone, e.g. to measure the
            constraint's cost).
        max_feedback_chars: ``maxLength`` of the predicted feedback (characters); longer
            unconstrained answers are no prediction.
        decoding: ``"sample"`` (reference: sample the JSON answer and parse it) or
            ``"expected"``: read the model's next-token distribution over the five statuses
            right after :data:`PREFILL` and, given ``valid``, over the four buckets, and
            score the *expected* value ``Σ p(status)·score(status)`` (valid: ``0.5 + 0.5·Σ
            p(bucket)·pos(bucket)``). One prompt pass plus a few tokens, no decoding; the
            status/bucket reported are the most likely ones, the feedback has no model log.
            A small judge whose sampled answer barely depends on the code (SmolLM2-135M:
            always the first listed status) still shifts these probabilities with the code,
            which the isotonic debiaser can use.
        generator: a :class:`~wmrl_envs.world_models.vllm_backend.TextGenerator` that does the
            generation instead of ``model.generate`` — vLLM in process or an OpenAI-compatible
            server (see :meth:`from_vllm`, :meth:`from_server`); the prompt, the parser and the
            scores stay the same, and ``model`` may then be ``None`` (the tokenizer is still
            needed: it renders the chat template and counts tokens). Only
            ``decoding="sample"``.

    Attributes:
        n_model_calls: actions graded by the model so far (int).
        n_generate_calls: batched ``generate`` calls so far (int).
        n_precheck: actions decided by the deterministic pre-check (int).
        n_parse_errors: model answers that were no prediction (int).
        n_forced_close: constrained answers whose feedback was closed at the token budget (int).
        constrained: whether answers are decoded under the JSON constraint (bool).
        json_schema: the constraint (:func:`judge_json_schema`, dict).
        prompt: the :class:`~.prompt.JudgePrompt` (system prompt, token budget).
        seconds: wall-clock seconds spent in the model (tokenise + generate + decode).
        tokens_generated: generated tokens so far (int, EOS and padding excluded).

    Raises:
        ValueError: invalid sampling or size arguments, ``max_prompt_tokens`` smaller than
            the prompt template (≈215 SmolLM2 tokens) plus 64, ``constrained=True`` with a
            backend that cannot be constrained, or a ``max_new_tokens`` too small for a
            constrained answer.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        max_new_tokens: int = 64,
        temperature: float = 0.7,
        top_p: float = 0.8,
        top_k: int = 20,
        batch_size: int = 8,
        max_prompt_tokens: int = 1024,
        seed: int | None = None,
        disable_adapters: bool = True,
        system_prompt: str | None = None,
        stop_at_brace: bool = True,
        decoding: str = "sample",
        generator: Any = None,
        constrained: bool | None = None,
        max_feedback_chars: int = FEEDBACK_MAX_CHARS,
    ) -> None:
        if generator is not None and decoding != "sample":
            raise ValueError("decoding='expected' reads next-token probabilities from the local model; "
                             "with a generator (vLLM / server) use decoding='sample'")
        if generator is None and model is None:
            raise ValueError("pass a model (transformers) or a generator (vLLM / OpenAI-compatible server)")
        check_arg(max_new_tokens >= 1, "max_new_tokens", ">= 1", max_new_tokens)
        check_arg(batch_size >= 1, "batch_size", ">= 1", batch_size)
        check_arg(0.0 < top_p <= 1.0, "top_p", "in (0, 1]", top_p)
        check_arg(top_k >= 0, "top_k", ">= 0", top_k)
        check_arg(max_prompt_tokens >= 128, "max_prompt_tokens", ">= 128", max_prompt_tokens)
        self.model = model
        self.tokenizer = tokenizer
        self.max_new_tokens = int(max_new_tokens)
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.top_k = int(top_k)
        self.batch_size = int(batch_size)
        self.seed = seed
        self.disable_adapters = bool(disable_adapters)
        self.stop_at_brace = bool(stop_at_brace)
        if decoding not in ("sample", "expected"):
            raise ValueError(f"decoding must be 'sample' or 'expected', got {decoding!r}")
        self.decoding = decoding
        self.generator = generator
        self._choice_ids: tuple[list[int], list[int], list[int]] | None = None
        self._brace_ids: Any = None
        self.max_feedback_chars = int(max_feedback_chars)
        self.json_schema = judge_json_schema(self.max_feedback_chars)
        self._ll: tuple[Any, str] | None = None  # (llguidance tokenizer, grammar), built lazily
        self.n_forced_close = 0
        self.n_model_calls = 0
        self.n_generate_calls = 0
        self.n_precheck = 0
        self.n_parse_errors = 0
        self.seconds = 0.0
        self.tokens_generated = 0
        if getattr(tokenizer, "pad_token_id", None) is None and getattr(tokenizer, "eos_token", None):
            tokenizer.pad_token = tokenizer.eos_token
        self.prompt = JudgePrompt(
            tokenizer, system_prompt=SYSTEM_PROMPT if system_prompt is None else str(system_prompt),
            max_prompt_tokens=int(max_prompt_tokens),
        )
        self.constrained = self._resolve_constrained(constrained) if decoding == "sample" else False
        if self.constrained and generator is None:
            need = self.prompt.n_tokens('ran_no_sub", "bucket": "fair", "feedback": ""}') + CLOSE_RESERVE
            if self.max_new_tokens < need:
                raise ValueError(
                    f"max_new_tokens={self.max_new_tokens} cannot hold a constrained answer: it needs at "
                    f"least {need} tokens (the fields and {CLOSE_RESERVE} to close the feedback); raise "
                    "max_new_tokens or pass constrained=False"
                )

    def _resolve_constrained(self, constrained: bool | None) -> bool:
        """Whether this backend decodes under the JSON constraint (see ``constrained``)."""
        if constrained is False:
            return False
        if self.generator is not None:
            ok = bool(getattr(self.generator, "supports_json_schema", False))
            why = (f"the generator {type(self.generator).__name__} cannot constrain its output to a JSON "
                   "schema (supports_json_schema is false)")
        else:
            try:
                self._ll_grammar()
                ok, why = True, ""
            except (ImportError, ValueError, RuntimeError) as err:
                ok, why = False, f"llguidance cannot constrain this tokenizer ({err})"
        if ok:
            return True
        if constrained:
            raise ValueError(f"constrained=True, but {why}; pass constrained=False to rely on the strict parser")
        warnings.warn(f"{why}: judge answers are checked by the strict parser only", RuntimeWarning, stacklevel=3)
        return False

    def _ll_grammar(self) -> tuple[Any, str]:
        """The llguidance tokenizer and the compiled JSON-schema grammar (built once).

        Raises:
            ImportError: llguidance is not installed.
            ValueError: the tokenizer is not a fast (Rust) tokenizer, or the grammar is invalid.
        """
        if self._ll is None:
            self._ll = judge_grammar(self.tokenizer, self.json_schema)
        return self._ll

    @classmethod
    def from_smollm2(cls, *, cache_dir: Any = None, dtype: Any = None, **kwargs: Any) -> "LLMJudgeWorldModel":
        """Build a judge on SmolLM2-135M-Instruct (:func:`~wmrl_envs.world_models.smollm2.load_smollm2`).

        Args:
            cache_dir: cache folder passed to ``load_smollm2``.
            dtype: parameter dtype (default ``torch.float32``).
            **kwargs: constructor keyword arguments (``max_new_tokens``, ``seed``, ...).

        Returns:
            The judge.

        Raises:
            FileNotFoundError: SmolLM2 weights are not installed.
        """
        import torch

        from wmrl_envs.world_models.smollm2 import load_smollm2

        model, tokenizer = load_smollm2(cache_dir=cache_dir, dtype=dtype or torch.float32)
        return cls(model, tokenizer, **kwargs)

    @classmethod
    def from_vllm(cls, model: str, tokenizer: Any = None, *, llm_kwargs: dict[str, Any] | None = None,
                  **kwargs: Any) -> "LLMJudgeWorldModel":
        """A judge generating with an in-process ``vllm.LLM(model)``.

        Args:
            model: model folder or hub id.
            tokenizer: the model's tokenizer (default: ``AutoTokenizer.from_pretrained(model)``).
            llm_kwargs: ``vllm.LLM`` arguments (``gpu_memory_utilization``, ``dtype``, ...).
            **kwargs: constructor keyword arguments (``max_new_tokens``, ``seed``, ...).

        Raises:
            ImportError: vLLM is not installed.
        """
        from wmrl_envs.world_models.vllm_backend import VLLMGenerator

        if tokenizer is None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(model)
        return cls(None, tokenizer, generator=VLLMGenerator(model=model, **(llm_kwargs or {})), **kwargs)

    @classmethod
    def from_server(cls, base_url: str, model: str, tokenizer: Any, *, api_key: str | None = None,
                    timeout_s: float = 120.0, structured_outputs: str | None = "structured_outputs",
                    **kwargs: Any) -> "LLMJudgeWorldModel":
        """A judge generating on an OpenAI-compatible completions server (e.g. ``vllm serve``).

        Args:
            base_url: API root, e.g. ``"http://gpu-node:8000/v1"``.
            model: the served model's name.
            tokenizer: the served model's tokenizer (renders the chat template locally).
            api_key, timeout_s, structured_outputs: see
                :class:`~wmrl_envs.world_models.vllm_backend.OpenAICompatibleGenerator`
                (``structured_outputs=None`` for a server without structured outputs: the
                strict parser alone then decides).
            **kwargs: constructor keyword arguments.
        """
        from wmrl_envs.world_models.vllm_backend import OpenAICompatibleGenerator

        gen = OpenAICompatibleGenerator(base_url, model, api_key=api_key, timeout_s=timeout_s,
                                        structured_outputs=structured_outputs)
        if structured_outputs is None:  # an explicit choice: the strict parser alone, no warning
            kwargs.setdefault("constrained", False)
        return cls(None, tokenizer, generator=gen, **kwargs)

    # ---------------------------------------------------------------- state
    _COUNTERS = ("n_model_calls", "n_generate_calls", "n_precheck", "n_parse_errors", "n_forced_close", "seconds",
                 "tokens_generated")

    def state_dict(self) -> dict[str, float]:
        """The judge's state: its counters (JSON-serialisable). With ``seed`` set, the ``k``-th
        ``generate`` call samples with ``seed + k``, so the call counter is the whole of its random
        state: a run resumed with :meth:`load_state_dict` samples what the uninterrupted run would
        have (the wrapper saves it with its correction state, issue 37 item 3)."""
        return {k: getattr(self, k) for k in self._COUNTERS}

    def load_state_dict(self, state: dict[str, float]) -> None:
        """Restore :meth:`state_dict`'s counters.

        Raises:
            ValueError: ``state`` has a key the judge does not keep.
        """
        unknown = sorted(set(state) - set(self._COUNTERS))
        if unknown:
            raise ValueError(f"LLMJudgeWorldModel.load_state_dict: unknown keys {unknown}; expected {list(self._COUNTERS)}")
        for k, v in state.items():
            setattr(self, k, float(v) if k == "seconds" else int(v))

    # ---------------------------------------------------------------- stats
    def stats(self) -> dict[str, float]:
        """Counters as a dict (for logging): calls, pre-checks, parse errors, seconds, tokens/s."""
        return {
            "n_model_calls": self.n_model_calls,
            "n_generate_calls": self.n_generate_calls,
            "n_precheck": self.n_precheck,
            "n_parse_errors": self.n_parse_errors,
            "n_forced_close": self.n_forced_close,
            "seconds": self.seconds,
            "tokens_generated": self.tokens_generated,
            "tokens_per_s": self.tokens_generated / self.seconds if self.seconds > 0 else 0.0,
        }

    # ---------------------------------------------------------------- prompts
    @property
    def system_prompt(self) -> str:
        """The system message (:data:`~.prompt.SYSTEM_PROMPT` unless ``system_prompt=`` was given)."""
        return self.prompt.system_prompt

    @property
    def max_prompt_tokens(self) -> int:
        """Most tokens of the whole prompt (int)."""
        return self.prompt.max_prompt_tokens

    def build_prompt(self, context: Any, code: str) -> str:
        """The full judge prompt (chat template applied, ends with :data:`~.parser.PREFILL`).

        When task text and code do not fit in ``max_prompt_tokens`` tokens, the task text's
        :attr:`JudgePrompt.droppable_sections <.prompt.JudgePrompt.droppable_sections>` are
        removed first (the AutoResearch prompt ends with a ``## Starter code`` section, a
        script the action usually repeats), then task text and code are cut in the middle, at
        line boundaries; the code keeps ``max(60 % of the room, room - task)`` tokens
        (:meth:`JudgePrompt.build <.prompt.JudgePrompt.build>`).

        Args:
            context: the observation (a dict with ``"prompt"``, or the task text itself).
            code: the action (Python source).

        Returns:
            The prompt text.
        """
        return self.prompt.build(context, code)

    # ---------------------------------------------------------------- model plumbing
    def _device(self) -> Any:
        import torch

        try:
            return next(self.model.parameters()).device
        except (StopIteration, AttributeError):
            return torch.device("cpu")

    def _brace_token_ids(self) -> Any:
        """1-D int64 tensor of the ids of all tokens whose text contains ``}`` (cached)."""
        import torch

        if self._brace_ids is None:
            tok = self.tokenizer
            ids = [i for i, t in enumerate(tok.convert_ids_to_tokens(list(range(len(tok))))) if t and "}" in t]
            self._brace_ids = torch.tensor(ids, dtype=torch.long)
        return self._brace_ids

    def _generate(self, prompts: list[str]) -> list[tuple[str, int]]:
        """Run one batched generation. Returns ``(continuation_text, n_new_tokens)`` per prompt."""
        import torch

        if self.generator is not None:
            seed = None if self.seed is None else int(self.seed) + self.n_generate_calls
            kwargs: dict[str, Any] = {"stop": ["}"] if self.stop_at_brace else []}
            if self.constrained:  # the schema writes the whole object: the prompt stops before the prefill
                prompts = [p[: -len(PREFILL)] if p.endswith(PREFILL) else p for p in prompts]
                kwargs = {"stop": [], "json_schema": self.json_schema}
            texts = self.generator.generate(
                prompts, max_new_tokens=self.max_new_tokens, temperature=self.temperature, top_p=self.top_p,
                top_k=self.top_k, seed=seed, **kwargs,
            )
            self.n_generate_calls += 1
            return [(t, self.prompt.n_tokens(t)) for t in texts]

        tok = self.tokenizer
        enc = self._encode_left(prompts)
        device = self._device()
        input_ids = enc["input_ids"].to(device)
        attention_mask = enc["attention_mask"].to(device)
        eos = getattr(tok, "eos_token_id", None)
        pad = tok.pad_token_id if tok.pad_token_id is not None else eos
        gen_kwargs: dict[str, Any] = dict(
            input_ids=input_ids,
            attention_mask=attention_mask,
            max_new_tokens=self.max_new_tokens,
            pad_token_id=pad,
            eos_token_id=eos,
            use_cache=True,
            num_return_sequences=1,  # whatever the (policy's) generation_config says
        )
        constraint = None
        if self.constrained:
            ll_tok, grammar = self._ll_grammar()
            constraint = JsonConstraint(
                ll_tok, grammar, tok(PREFILL, add_special_tokens=False)["input_ids"],
                tok('"}', add_special_tokens=False)["input_ids"], eos if isinstance(eos, int) else eos[0],
                batch=input_ids.shape[0], max_new_tokens=self.max_new_tokens, reserve=CLOSE_RESERVE,
            )
            gen_kwargs["logits_processor"] = constraint_processor(constraint)
        elif self.stop_at_brace:
            gen_kwargs["stopping_criteria"] = brace_stopping(self._brace_token_ids())
        if self.temperature > 0:
            gen_kwargs.update(
                do_sample=True, temperature=self.temperature, top_p=self.top_p, top_k=self.top_k
            )
        else:
            gen_kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)

        rng_devices = [device] if device.type == "cuda" else []
        with contextlib.ExitStack() as stack:
            if self.seed is not None:
                stack.enter_context(torch.random.fork_rng(devices=rng_devices))
                torch.manual_seed(int(self.seed) + self.n_generate_calls)
            stack.enter_context(torch.no_grad())
            stack.enter_context(frozen_backbone(self.model, self.disable_adapters))
            out = self.model.generate(**gen_kwargs)
        self.n_generate_calls += 1
        if constraint is not None:
            self.n_forced_close += constraint.n_forced_close

        new = out[:, input_ids.shape[1] :].cpu()
        stop_ids = set(eos) if isinstance(eos, (list, tuple)) else ({eos} if eos is not None else set())
        if pad is not None:
            stop_ids.add(pad)
        results = []
        for row in new.tolist():
            n = len(row)
            for j, t in enumerate(row):
                if t in stop_ids:
                    n = j
                    break
            results.append((tok.decode(row[:n], skip_special_tokens=True), n))
        return results

    def _choices(self) -> tuple[list[int], list[int], list[int]]:
        """First token ids of each status and bucket word, and the ids of the bridge text."""
        if self._choice_ids is None:
            tok = self.tokenizer
            first = lambda w: tok(w, add_special_tokens=False)["input_ids"][0]  # noqa: E731
            st = [first(w) for w in STATUSES]
            bk = [first(w) for w in QUALITY_BUCKETS]
            if len(set(st)) != len(st) or len(set(bk)) != len(bk):
                raise ValueError("decoding='expected' needs status and bucket words with distinct first tokens")
            bridge = tok('valid", "bucket": "', add_special_tokens=False)["input_ids"]
            self._choice_ids = (st, bk, bridge)
        return self._choice_ids

    def _encode_left(self, prompts: list[str]) -> Any:
        """Tokenise a batch with left padding (whatever the tokenizer's own setting)."""
        tok = self.tokenizer
        old_side = getattr(tok, "padding_side", "left")
        tok.padding_side = "left"
        try:
            return tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        finally:
            tok.padding_side = old_side

    def _expected(self, prompts: list[str]) -> list[tuple[str, str, float, dict[str, float]]]:
        """Expected-score grading of one batch (see ``decoding`` in the class docstring)."""
        import torch

        st, bk, bridge = self._choices()
        enc = self._encode_left(prompts)
        device = self._device()
        ids, attn = enc["input_ids"].to(device), enc["attention_mask"].to(device)
        b = ids.shape[0]
        with torch.no_grad(), frozen_backbone(self.model, self.disable_adapters):
            out = self.model(input_ids=ids, attention_mask=attn, use_cache=True)
            p_status = torch.softmax(out.logits[:, -1, st].float(), dim=-1)
            nxt = torch.tensor([bridge] * b, device=device)
            attn2 = torch.cat([attn, torch.ones_like(nxt)], dim=1)
            out2 = self.model(input_ids=nxt, attention_mask=attn2, cache=out.past_key_values, use_cache=False)
            p_bucket = torch.softmax(out2.logits[:, -1, bk].float(), dim=-1)
        self.n_generate_calls += 1
        pos = torch.tensor([BUCKET_POSITIONS[w] for w in QUALITY_BUCKETS])
        results = []
        for r in range(b):
            ps, pb = p_status[r].cpu(), p_bucket[r].cpu()
            valid_score = 0.5 + 0.5 * float((pb * pos).sum())
            score = sum(
                float(ps[k]) * (valid_score if w == "valid" else score_from_status(w)) for k, w in enumerate(STATUSES)
            )
            status = STATUSES[int(ps.argmax())]
            bucket = QUALITY_BUCKETS[int(pb.argmax())] if status == "valid" else None
            probs = {w: float(ps[k]) for k, w in enumerate(STATUSES)}
            probs.update({f"bucket_{w}": float(pb[k]) for k, w in enumerate(QUALITY_BUCKETS)})
            results.append((status, bucket, float(score), probs))
        return results

    # ---------------------------------------------------------------- protocol
    def predict(self, contexts: Sequence[Any], actions: Sequence[Any]) -> list[WorldModelPrediction]:
        """Predict the sandbox outcome of each action.

        Actions that fail the pre-check (empty → ``malformed``, not compilable →
        ``syntax_err``, both score 0.0) are decided without the model; the others are
        graded by the model in batches of ``batch_size`` (left padding; prompts of similar
        token length are batched together to limit padding). Answers that are no
        prediction (:func:`parse_judge_output`) count as ``runtime_err`` (score 0.1,
        ``extras["parse_error"] = True``), as in the reference.

        Args:
            contexts: B observations (AutoResearch observation dicts with keys
                ``"task_id"``, ``"prompt"``, ``"feedback"``, ``"turn"``).
            actions: B actions (Python source strings).

        Returns:
            B :class:`~wmrl_envs.world_models.base.WorldModelPrediction`, in order, each with
            ``score`` (float in [0, 1]), ``status``, ``feedback`` (the predicted sandbox
            feedback in the layout of :func:`~wmrl_envs.envs.autoresearch.observation.format_feedback`, see
            :func:`format_predicted_feedback`),
            ``observation`` (``next_observation(context, feedback)`` of the AutoResearch
            env; ``None`` if that fails for this context), ``raw_output`` (the answer
            read: ``PREFILL + continuation``, or the whole object a constrained generator
            or one that ignored the prefill wrote; empty for pre-checked actions),
            ``model_called`` and ``extras`` = ``{"bucket", "parse_error", "new_tokens",
            "log"}`` (``bucket``: ``None`` unless valid; ``log``: the predicted program
            output alone; plus ``"parse_reason"`` (str) for an answer that is no prediction
            and ``"precheck": True`` for pre-checked actions).

        Raises:
            ValueError: ``contexts`` and ``actions`` differ in length.
            ImportError: the AutoResearch env module (``next_observation``) is missing.
        """
        from wmrl_envs.envs.autoresearch.observation import next_observation

        if len(contexts) != len(actions):
            raise ValueError(f"got {len(contexts)} contexts but {len(actions)} actions")
        results: list[WorldModelPrediction | None] = [None] * len(actions)

        def predicted(i: int, status: str, score: float, feedback: str, **fields: Any) -> WorldModelPrediction:
            """Prediction ``i``: its score, status, feedback and the next observation built from them."""
            return WorldModelPrediction(score=score, status=status, feedback=feedback,
                                        observation=_next_obs(next_observation, contexts[i], feedback), **fields)

        todo: list[int] = []
        for i, code in enumerate(actions):
            decided = check_source(code)  # the real grader's host pre-check: both decide these alike
            if decided is None:
                todo.append(i)
                continue
            status, message, stderr = decided
            self.n_precheck += 1
            score = score_from_status(status)
            feedback = format_predicted_feedback(status, stderr, score, message=message, runtime_s=0.0)
            results[i] = predicted(i, status, score, feedback, raw_output="", model_called=False,
                                   extras={"bucket": None, "parse_error": False, "new_tokens": 0, "precheck": True,
                                           "log": stderr})

        if not todo:
            return [r for r in results if r is not None]
        # Batch prompts of similar length together (less left padding; prefill dominates).
        t0 = time.perf_counter()
        prompts = {i: self.build_prompt(contexts[i], actions[i]) for i in todo}
        if len(todo) > self.batch_size:
            lengths = {i: self.prompt.n_tokens(prompts[i]) for i in todo}
            todo = sorted(todo, key=lambda i: lengths[i])
        self.seconds += time.perf_counter() - t0
        for start in range(0, len(todo), self.batch_size):
            idx = todo[start : start + self.batch_size]
            t0 = time.perf_counter()
            if self.decoding == "expected":
                for i, (status, bucket, score, probs) in zip(idx, self._expected([prompts[i] for i in idx])):
                    self.n_model_calls += 1
                    feedback = format_predicted_feedback(status, "", score, bucket=bucket)
                    results[i] = predicted(i, status, score, feedback, raw_output="", model_called=True,
                                           extras={"bucket": bucket, "parse_error": False, "new_tokens": 0, "log": "",
                                                   "probs": probs})
                self.seconds += time.perf_counter() - t0
                continue
            outs = self._generate([prompts[i] for i in idx])
            self.seconds += time.perf_counter() - t0
            for i, (continuation, n_new) in zip(idx, outs):
                self.n_model_calls += 1
                self.tokens_generated += n_new
                raw = full_answer(continuation)
                parsed, reason = parse_judge_output_with_reason(raw, self.max_feedback_chars)
                if parsed is None:
                    self.n_parse_errors += 1
                    if self.constrained and self.n_parse_errors == 1:
                        warnings.warn(
                            f"a constrained judge answer is no prediction ({reason}): the answer was cut "
                            "at max_new_tokens, or the backend ignored the JSON constraint (a vLLM server "
                            "ignores fields it does not know, e.g. guided_json on vLLM >= 0.12); it counts "
                            "as runtime_err", RuntimeWarning, stacklevel=2)
                    status, bucket, score, log = "runtime_err", None, score_from_status("runtime_err"), ""
                else:
                    status, score = parsed.status, parsed.score
                    bucket = parsed.bucket if status == "valid" else None
                    log = parsed.feedback if re.search(r"\w", parsed.feedback) else ""  # "..." is no log
                feedback = format_predicted_feedback(status, log, score, bucket=bucket)
                results[i] = predicted(i, status, score, feedback, raw_output=raw, model_called=True,
                                       extras={"bucket": bucket, "parse_error": parsed is None, "new_tokens": n_new,
                                               "log": log, **({"parse_reason": reason} if parsed is None else {})})
        return [r for r in results if r is not None]


def _next_obs(fn: Any, context: Any, feedback: str) -> Any:
    try:
        return fn(context, feedback)
    except Exception:  # a context the env cannot continue: no predicted observation
        return None

