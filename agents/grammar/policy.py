"""``GrammarPolicy``: a fast GRPO policy that writes solutions from a grammar of templates.

The LLM policy (:mod:`agents.llm.policy`) is the method's real agent, but sampling and
scoring it costs seconds per rollout on CPU, which hides what the WMRL benchmark measures:
the cost of *executing* rollouts. ``GrammarPolicy`` is a stand-in agent whose generation costs
milliseconds. It writes each solution by sampling a *program* from a grammar of scikit-learn
solution templates and emits the complete Python source that the AutoResearch sandbox executes
(the task's starter script with its ``model = ...`` line replaced and the needed imports added
above it), so real execution, grading, world models and the WMRL corrections see exactly the
same kind of actions as with the LLM.

The grammar it samples from, the task context it conditions on and the code it emits live
in :mod:`agents.grammar.programs` (the action space); this module holds the distribution over it.

Policy: an independent softmax per slot whose logits are linear in the task's context
features (:class:`agents.grammar.programs.TaskContext`: its problem type selects the grammar; ``phi`` holds multi-class,
size and feature-count buckets, categorical columns, missing values),
``logits = bias + W @ phi(task)``; torch parameters, so
:meth:`GrammarPolicy.log_probs` is exact and differentiable. Only the slots of the chosen
family are part of a program, so the distribution is a tree and ``log p(program)`` is the sum
of the log-probabilities of its choices. ``init="prior"`` starts from :attr:`agents.grammar.programs.Option.prior`
weights (an "instruction-tuned" starting point: mostly sensible code; 11-12% of its programs hold
an option that always fails and 5-8% one that fails on some data, and 22% of 188 logged
executions raised); ``init="uniform"`` from the uniform distribution (55% of 51 raised).

GRPO: the choices of a program are its tokens; :class:`GrammarPolicy` is an
:class:`agents.grpo.GRPOPolicy` (:meth:`GrammarPolicy.grpo_logprobs` returns ``(B, L)``
log-probabilities and a mask), so :func:`agents.grpo.grpo_update` trains it.

Example:
    >>> import torch
    >>> from agents.grpo import GRPOUpdateConfig, grpo_update
    >>> policy = GrammarPolicy(seed=0)
    >>> groups = policy.sample(["house-prices", "land-cover"], group_size=4)   # 2 x 4 programs
    >>> source = groups[0][0].code                                           # the action
    >>> rewards = [[0.1, 0.6, 0.7, 0.5], [0.5, 0.1, 0.9, 0.8]]               # e.g. real scores
    >>> flat = [p for g in groups for p in g]
    >>> opt = torch.optim.Adam(policy.parameters(), lr=0.05)
    >>> stats = grpo_update(policy, opt, flat, rewards, None, config=GRPOUpdateConfig(max_grad_norm=None),
    ...                     old_logprobs=policy.sampling_logprobs(flat))
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from agents.grammar.programs import (
    CONTEXT_FEATURES,
    GRAMMARS,
    Grammar,
    Program,
    TaskContext,
    emit_program,
    task_context,
)

__all__ = ["GrammarPolicy"]


def _entropy(logp: torch.Tensor) -> torch.Tensor:
    """Entropy over the last axis of log-probabilities that are -inf at padding (NaN-free gradients)."""
    finite = torch.isfinite(logp)
    safe = torch.where(finite, logp, torch.zeros_like(logp))
    return -(safe.exp() * safe * finite).sum(-1)


class GrammarPolicy(nn.Module):
    """Softmax-per-slot policy over grammar programs, conditioned on task features.

    For problem type ``t`` with grammar of ``S`` slots (at most ``K`` options each) and task
    features ``phi`` (``D = len(CONTEXT_FEATURES)``), the logits of all slots are
    ``(bias[t] + weight[t] @ phi) / temperature``, an ``(S, K)`` table (padding options masked).
    Parameters: ``bias_<t>`` float32 ``(S, K)`` and ``weight_<t>`` float32 ``(S, K, D)`` per
    problem type; ``parameters()``, ``state_dict()`` and ``load_state_dict()`` are those of
    ``torch.nn.Module``.

    Args:
        grammars: ``{problem_type: Grammar}`` (default :data:`GRAMMARS`).
        init: ``"prior"`` (biases = log of the normalised :attr:`Option.prior` weights) or
            ``"uniform"`` (zero biases). Weights start at zero either way.
        temperature: sampling temperature (> 0), used by log-probabilities too, so the sampled
            and the optimised distributions agree.
        seed: seed of the sampling generator (``torch.Generator``); successive
            :meth:`sample` calls continue its stream.

    Raises:
        ValueError: unknown ``init`` or non-positive temperature.
    """

    def __init__(
        self,
        grammars: Mapping[str, Grammar] | None = None,
        *,
        init: str = "prior",
        temperature: float = 1.0,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if init not in ("prior", "uniform"):
            raise ValueError(f"init must be 'prior' or 'uniform', got {init!r}")
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.grammars: dict[str, Grammar] = dict(grammars or GRAMMARS)
        self.temperature = float(temperature)
        self.init = init
        self.seed = int(seed)
        self.generator = torch.Generator().manual_seed(self.seed)
        d = len(CONTEXT_FEATURES)
        for pt, g in self.grammars.items():
            bias = torch.from_numpy(g.prior_logits()) if init == "prior" else torch.zeros(g.n_slots, g.max_options)
            self.register_parameter(f"bias_{pt}", nn.Parameter(bias.clone()))
            self.register_parameter(f"weight_{pt}", nn.Parameter(torch.zeros(g.n_slots, g.max_options, d)))
            self.register_buffer(f"valid_{pt}", torch.from_numpy(g.valid_mask()), persistent=False)

    def get_extra_state(self) -> dict[str, Any]:
        """Saved in ``state_dict()``: the sampling generator's state and the temperature."""
        return {"generator": self.generator.get_state(), "temperature": self.temperature}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`get_extra_state` saved (``load_state_dict`` calls it)."""
        self.generator.set_state(state["generator"])
        self.temperature = float(state["temperature"])

    # ------------------------------------------------------------------ core tables
    def _grammar(self, problem_type: str) -> Grammar:
        try:
            return self.grammars[problem_type]
        except KeyError:
            raise ValueError(f"no grammar for problem type {problem_type!r}; have {sorted(self.grammars)}") from None

    def _log_table(self, problem_type: str, phi: torch.Tensor) -> torch.Tensor:
        """Log-probabilities (N, S, K) of every option of every slot (-inf at padding)."""
        self._grammar(problem_type)
        bias = getattr(self, f"bias_{problem_type}")
        weight = getattr(self, f"weight_{problem_type}")
        valid = getattr(self, f"valid_{problem_type}")
        logits = (bias.unsqueeze(0) + torch.einsum("skd,nd->nsk", weight, phi)) / self.temperature
        logits = logits.masked_fill(~valid, float("-inf"))
        return torch.log_softmax(logits, dim=-1)

    @staticmethod
    def _phi(contexts: Sequence[TaskContext]) -> torch.Tensor:
        return torch.from_numpy(np.stack([c.features for c in contexts]))

    def slot_log_probs(self, task: Any) -> dict[str, dict[str, float]]:
        """Every slot's option probabilities for one task, as plain floats.

        Args:
            task: task id, ``TaskSpec``, observation dict or :class:`TaskContext`.

        Returns:
            ``{slot key: {option label: probability}}`` (each inner dict sums to 1).
        """
        ctx = task_context(task)
        g = self._grammar(ctx.problem_type)
        with torch.no_grad():
            p = self._log_table(ctx.problem_type, self._phi([ctx]))[0].exp().numpy()
        return {k: {o.label: float(p[s, j]) for j, o in enumerate(g.slot_options[s])} for s, k in enumerate(g.slot_keys)}

    def family_probs(self, task: Any) -> dict[str, float]:
        """``{family: probability}`` for one task (see :meth:`slot_log_probs`)."""
        return self.slot_log_probs(task)["family"]

    def mistake_probability(self, task: Any) -> dict[str, float]:
        """Exact probability that a sampled program contains a mistake option.

        Returns:
            ``{"always": P(some chosen option has fails="always"), "data": P(no such option but
            one with fails="data")}`` for one task.
        """
        probs = self.slot_log_probs(task)
        g = self._grammar(task_context(task).problem_type)

        def p_clean(key: str, kinds: tuple[str, ...]) -> float:
            opts = g.slot_options[g.slot_index(key)]
            return sum(probs[key][o.label] for o in opts if o.fails not in kinds)

        def p_no(kinds: tuple[str, ...]) -> float:
            total = 0.0
            for f in g.families:
                q = probs["family"][f.name] * p_clean("preprocess", kinds)
                for s in f.slots:
                    q *= p_clean(f"{f.name}.{s.name}", kinds)
                total += q
            return total

        no_always = p_no(("always",))
        no_any = p_no(("always", "data"))
        return {"always": 1.0 - no_always, "data": no_always - no_any}

    # ------------------------------------------------------------------ sampling
    @torch.no_grad()
    def sample(self, tasks: Sequence[Any], group_size: int = 1) -> list[list[Program]]:
        """Sample ``group_size`` programs for each task (one GRPO group per task).

        Args:
            tasks: task ids, ``TaskSpec`` objects, observation dicts or :class:`TaskContext`
                objects (repeats allowed: each entry is its own group).
            group_size: G, programs per task (>= 1).

        Returns:
            ``len(tasks)`` lists of G :class:`Program` objects, with ``old_logprobs`` set to the
            sampling policy's per-choice log-probabilities.

        Raises:
            ValueError: ``group_size < 1`` or a task of a problem type without grammar.
        """
        if group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {group_size}")
        ctxs = [task_context(t) for t in tasks]
        out: list[list[Program] | None] = [None] * len(ctxs)
        for pt in dict.fromkeys(c.problem_type for c in ctxs):
            g = self._grammar(pt)
            idx = [i for i, c in enumerate(ctxs) if c.problem_type == pt]
            logp = self._log_table(pt, self._phi([ctxs[i] for i in idx]))  # (T, S, K)
            t, s, k = logp.shape
            probs = logp.exp().unsqueeze(1).expand(t, group_size, s, k).reshape(-1, k)
            draws = torch.multinomial(probs, 1, generator=self.generator).view(t, group_size, s)
            states = torch.randint(0, 100_000, (t, group_size), generator=self.generator)
            draws_np, logp_np, states_np = draws.numpy(), logp.numpy(), states.numpy()
            for ti, i in enumerate(idx):
                group = []
                for j in range(group_size):
                    active = g.active_slots(int(draws_np[ti, j, 1]))
                    opt = tuple(int(draws_np[ti, j, a]) for a in active)
                    prog = emit_program(ctxs[i].task_id, g, active, opt, int(states_np[ti, j]))
                    prog.old_logprobs = tuple(float(logp_np[ti, a, o]) for a, o in zip(active, opt))
                    group.append(prog)
                out[i] = group
        return out  # type: ignore[return-value]

    # ------------------------------------------------------------------ log-probs
    def token_logprobs(self, programs: Sequence[Program]) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-choice log-probabilities of programs under the current policy (with grad).

        Args:
            programs: B programs (any tasks, both problem types).

        Returns:
            ``(logprobs, mask)``: float32 tensors of shape (B, L), L the most choices of a
            program (<= 6); ``logprobs[b, l]`` is the log-probability of program b's l-th
            choice (0 at padding), ``mask`` is 1.0 for real choices and 0.0 for padding.
            Shapes fit :func:`agents.grpo.grpo_loss`.

        Raises:
            ValueError: empty ``programs`` or a problem type without grammar.
        """
        lp, mask, _ = self._gather(programs, with_entropy=False)
        return lp, mask

    def log_probs(self, programs: Sequence[Program]) -> torch.Tensor:
        """Log-probability of each whole program (random state aside), float32 (B,), with grad."""
        lp, mask = self.token_logprobs(programs)
        return (lp * mask).sum(dim=1)

    def token_entropy(self, programs: Sequence[Program]) -> torch.Tensor:
        """Entropy (nats) of each chosen slot's distribution, float32 (B, L), 0 at padding, with grad."""
        _, _, ent = self._gather(programs, with_entropy=True)
        assert ent is not None
        return ent

    def _gather(self, programs: Sequence[Program], with_entropy: bool):
        if not programs:
            raise ValueError("programs is empty")
        b = len(programs)
        length = max(len(p.slot_ids) for p in programs)
        lp = torch.zeros(b, length)
        ent = torch.zeros(b, length) if with_entropy else None
        mask = torch.zeros(b, length)
        for pt in dict.fromkeys(p.problem_type for p in programs):
            rows = [i for i, p in enumerate(programs) if p.problem_type == pt]
            ctxs = [task_context(programs[i].task_id) for i in rows]
            table = self._log_table(pt, self._phi(ctxs))  # (n, S, K)
            slot_idx = torch.zeros(len(rows), length, dtype=torch.long)
            opt_idx = torch.zeros(len(rows), length, dtype=torch.long)
            m = torch.zeros(len(rows), length)
            for r, i in enumerate(rows):
                n = len(programs[i].slot_ids)
                slot_idx[r, :n] = torch.tensor(programs[i].slot_ids)
                opt_idx[r, :n] = torch.tensor(programs[i].option_ids)
                m[r, :n] = 1.0
            per_slot = table.gather(1, slot_idx.unsqueeze(-1).expand(-1, -1, table.shape[-1]))  # (n, L, K)
            chosen = per_slot.gather(2, opt_idx.unsqueeze(-1)).squeeze(-1) * m
            rows_t = torch.tensor(rows)
            lp = lp.index_put((rows_t,), chosen)
            mask[rows_t] = m
            if ent is not None:
                h = _entropy(per_slot) * m
                ent = ent.index_put((rows_t,), h)
        return lp, mask, ent

    def entropy(self, tasks: Sequence[Any]) -> torch.Tensor:
        """Exact entropy (nats) of the whole program distribution for each task, float32 (T,), with grad.

        ``H = H(preprocess) + H(family) + sum_f p(f) * sum_{slots s of f} H(s)`` (the random
        state is not counted).
        """
        ctxs = [task_context(t) for t in tasks]
        out = torch.zeros(len(ctxs))
        for pt in dict.fromkeys(c.problem_type for c in ctxs):
            g = self._grammar(pt)
            rows = [i for i, c in enumerate(ctxs) if c.problem_type == pt]
            table = self._log_table(pt, self._phi([ctxs[i] for i in rows]))
            p = table.exp()
            h = _entropy(table)  # (n, S)
            total = h[:, 0] + h[:, 1]
            for fi, f in enumerate(g.families):
                ids = list(g.family_slot_ids(f.name))
                if ids:
                    total = total + p[:, 1, fi] * h[:, ids].sum(-1)
            out = out.index_put((torch.tensor(rows),), total)
        return out

    # ------------------------------------------------------------------ GRPO
    def freeze_reference(self) -> GrammarPolicy:
        """Snapshot the current policy as GRPO's frozen KL reference and return it.

        :meth:`grpo_logprobs` with ``reference=True`` scores under this snapshot (no grad);
        it is held outside the module's parameters and ``state_dict()``. Call it again to move
        the reference.

        Returns:
            The frozen copy (``requires_grad=False``, eval mode).
        """
        ref = GrammarPolicy(self.grammars, init=self.init, temperature=self.temperature, seed=self.seed)
        ref.load_state_dict(self.state_dict())
        for p in ref.parameters():
            p.requires_grad_(False)
        self.__dict__["_reference"] = ref.eval()  # not a submodule: its parameters stay out of ours
        return ref

    def trainable_parameters(self) -> list[nn.Parameter]:
        """Every parameter (biases and weights of each problem type): what GRPO optimises."""
        return list(self.parameters())

    def grpo_logprobs(
        self,
        samples: Sequence[Program],
        rows: Sequence[int] | np.ndarray,
        *,
        reference: bool = False,
        with_entropy: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Per-choice log-probs of programs ``samples[rows]`` (:class:`agents.grpo.GRPOPolicy`).

        Args:
            samples: the step's programs, flat (group after group, e.g. ``[p for g in
                groups for p in g]`` of :meth:`sample`).
            rows: B indices into ``samples``.
            reference: score under the reference frozen by :meth:`freeze_reference` (no grad).
            with_entropy: also return the per-choice entropies (:meth:`token_entropy`).

        Returns:
            ``(logprobs, mask, entropy)``: float32 (B, L) as :meth:`token_logprobs`, and (B, L)
            entropies or ``None``.

        Raises:
            RuntimeError: ``reference=True`` before :meth:`freeze_reference`.
            ValueError: empty ``rows``.
        """
        programs = [samples[int(i)] for i in np.asarray(rows, dtype=np.int64).reshape(-1)]
        if reference:
            ref = self.__dict__.get("_reference")
            if ref is None:
                raise RuntimeError("no KL reference: call freeze_reference() before a GRPO step with kl_coef > 0")
            with torch.no_grad():
                lp, mask = ref.token_logprobs(programs)
                ent = ref.token_entropy(programs) if with_entropy else None
            return lp, mask, ent
        lp, mask = self.token_logprobs(programs)
        return lp, mask, self.token_entropy(programs) if with_entropy else None

    @staticmethod
    def sampling_logprobs(programs: Sequence[Program]) -> torch.Tensor:
        """The per-choice log-probs recorded at sampling (:attr:`Program.old_logprobs`), stacked.

        Pass as ``old_logprobs=`` to :func:`agents.grpo.grpo_step` (aligned with its rows) or
        :func:`agents.grpo.grpo_update` (all programs of the step).

        Returns:
            float32 (B, L), L the most choices of a program, 0 at padding; a row is NaN (the
            step then uses the current policy's value) when a program has no recorded
            log-probs (built by :func:`build_program`, not sampled).

        Raises:
            ValueError: empty ``programs``.
        """
        if not programs:
            raise ValueError("programs is empty")
        old = torch.zeros(len(programs), max(len(p.slot_ids) for p in programs))
        for i, p in enumerate(programs):
            if p.old_logprobs is not None:
                old[i, : len(p.old_logprobs)] = torch.tensor(p.old_logprobs)
            else:
                old[i] = float("nan")
        return old
