"""WMRL inside TRL's ``GRPOTrainer``: a reward function and a trainer subclass.

TRL (``trl>=1.16``) scores completions with reward functions of the contract
``f(prompts, completions, **kwargs) -> list[float | None]`` (``None`` = this completion could
not be graded; TRL leaves it out of its group's mean and standard deviation and gives it a zero
advantage), sync or ``async``. Its sampler (``RepeatSampler``) lays a generation batch out as
whole groups: the ``num_generations`` completions of one prompt are consecutive rows, and every
dataset column of the prompt's row (e.g. ``task_id``) is passed in ``kwargs`` as a list with
one entry per completion.

This module plugs the WMRL method (Yang et al., arXiv 2608.12564; ``docs/method.md``) into
that loop without re-implementing any of it:

* :class:`WMRLRewardFunction` cuts the batch into its groups and scores each group with
  :meth:`wmrl_envs.AnchoredWorldModelWrapper.score_group` — the wrapper's
  :class:`~wmrl_envs.core.AnchorRouter` routes the whole group to real execution (anchor) or
  to the world model, and its :class:`~wmrl_envs.core.WMRLCorrector` applies the isotonic
  debiaser ``f̂`` to world-model groups and records the anchor pairs and the disagreement of
  anchor groups. Rewards: real scores on anchor groups, ``f̂(r̂)`` on world-model groups.
  :class:`AsyncWMRLRewardFunction` is the ``async`` variant (TRL 1.16 runs async reward
  functions concurrently on its own event loop).
* :class:`WMRLGRPOTrainer` applies the anchor weight ``ρ`` to the post-normalisation
  advantages of anchor rows, by multiplying what ``GRPOTrainer._generate_and_score_completions``
  returns (why there: ``docs/method.md``, "Third-party RL loops").
* Several processes (``accelerate launch``, ``torchrun``: ``torch.distributed`` initialised):
  TRL calls the reward function on each process's slice of the generation batch, and a group
  may be split over two slices. Process 0 then scores the whole batch with its wrapper — the
  others send it their rows (``all_gather_object``) and get their rewards, routes and weights
  back (``broadcast_object_list``) — so routes are drawn once per batch from one seeded router,
  whole groups are routed together wherever their rows are, every anchor pair reaches one
  corrector, and each process weights its own rows. Real executions and world-model calls run
  on process 0 only (the other processes wait in the collective: keep a generation batch's
  scoring well inside the process group's time-out, 30 minutes by default).

Contents:
    * :class:`WMRLRewardFunction`, :class:`AsyncWMRLRewardFunction` — the reward functions.
    * :class:`WMRLBatch` — what one reward call did (routes, weights, group results).
    * :class:`WMRLGRPOTrainer` — ``GRPOTrainer`` with ρ on anchor advantages, the wrapper's
      ``training`` flag following train/eval, and the correction state saved in (and restored
      from) every checkpoint folder as ``wmrl_state.json``.
    * :func:`completion_text` — the text of a standard or conversational completion.
    * :func:`default_reset_args`, :data:`ActionFn`, :data:`ResetArgsFn` — how a row becomes
      the group's reset arguments and a completion becomes an action.
    * :data:`WMRL_STATE_FILE` — the name of that file.

Example:
    >>> from agents.adapters.trl import WMRLRewardFunction, WMRLGRPOTrainer  # doctest: +SKIP
    >>> reward = WMRLRewardFunction(wrapper, num_generations=4)              # doctest: +SKIP
    >>> trainer = WMRLGRPOTrainer(model=model, reward_funcs=reward, args=GRPOConfig(
    ...     output_dir="out", num_generations=4, per_device_train_batch_size=16),
    ...     train_dataset=dataset)                                           # doctest: +SKIP
    >>> trainer.train()                                                      # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import math
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from trl import GRPOTrainer

from wmrl_envs.core import ANCHOR, Route
from wmrl_envs.wrappers import AnchoredWorldModelWrapper, GroupRollout

__all__ = [
    "WMRL_STATE_FILE",
    "ActionFn",
    "ResetArgsFn",
    "WMRLBatch",
    "WMRLRewardFunction",
    "AsyncWMRLRewardFunction",
    "WMRLGRPOTrainer",
    "completion_text",
    "default_reset_args",
]

WMRL_STATE_FILE = "wmrl_state.json"
"""File name of the wrapper's routing/correction state inside a checkpoint folder."""

ActionFn = Callable[[str, dict[str, Any]], Any]
"""``to_action(completion_text, row) -> action``: ``row`` holds the row's dataset columns and
``"prompt"``; the action is what the wrapped env's ``step`` takes (AutoResearch: Python source)."""

ResetArgsFn = Callable[[dict[str, Any]], tuple[int | None, dict[str, Any] | None]]
"""``reset_args(row) -> (seed, options)``: the reset arguments shared by one group."""


def completion_text(completion: Any) -> str:
    """The text of one TRL completion.

    Args:
        completion: a str (standard format) or a list of message dicts (conversational
            format, ``[{"role": "assistant", "content": ...}]``; ``content`` may be a str or a
            list of ``{"type": "text", "text": ...}`` parts).

    Returns:
        The text (str); the contents of several assistant messages are joined by newlines.

    Raises:
        TypeError: any other type.
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, (list, tuple)):
        parts: list[str] = []
        for msg in completion:
            if not isinstance(msg, dict):
                raise TypeError(f"a conversational completion holds message dicts, got {type(msg).__name__}")
            if msg.get("role", "assistant") != "assistant":
                continue
            content = msg.get("content", "")
            if isinstance(content, str):
                parts.append(content)
            else:
                parts.extend(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
        return "\n".join(parts)
    raise TypeError(f"a completion is a str or a list of messages, got {type(completion).__name__}")


def default_reset_args(row: dict[str, Any]) -> tuple[int | None, dict[str, Any] | None]:
    """Reset arguments of a group from its row: ``options={"task_id": row["task_id"]}``.

    The seed is ``row["seed"]`` when the dataset has a ``seed`` column, else ``None``; the
    options are ``None`` when there is no ``task_id`` column (the env then draws its task).
    """
    seed = row.get("seed")
    options = {"task_id": row["task_id"]} if row.get("task_id") is not None else None
    return (None if seed is None else int(seed)), options


def _identity_action(text: str, row: dict[str, Any]) -> str:
    return text


@dataclass
class WMRLBatch:
    """What one reward call did. Per-row lists have length B = ``n_groups × num_generations``.

    Attributes:
        routes: route of each row's group (``"anchor"`` / ``"world_model"``).
        group_ids: the wrapper's running group id of each row (int).
        advantage_weights: ρ for anchor rows (the value when the group was routed), 1.0 for
            world-model rows (float).
        rewards: the returned rewards (float, ``None`` = ungraded).
        groups: one :class:`~wmrl_envs.wrappers.anchored.GroupRollout` per group, in order.
        num_generations: G used to cut the batch.
        seconds: wall-clock seconds of the whole call.
    """

    routes: list[Route] = field(default_factory=list)
    group_ids: list[int] = field(default_factory=list)
    advantage_weights: list[float] = field(default_factory=list)
    rewards: list[float | None] = field(default_factory=list)
    groups: list[GroupRollout] = field(default_factory=list)
    num_generations: int = 0
    seconds: float = 0.0

    @property
    def n_anchor_groups(self) -> int:
        """Anchor groups in the batch."""
        return sum(1 for g in self.groups if g.route == ANCHOR)


class WMRLRewardFunction:
    """TRL reward function that routes whole GRPO groups to real execution or a world model.

    Each call cuts the B rows into ``B / G`` groups of G consecutive rows (TRL's layout; the
    rows of a group must share their prompt), turns each completion into an action with
    ``to_action``, and scores each group with ``wrapper.score_group(actions, seed=...,
    options=...)`` — one batched world-model call per group, real execution of the G actions
    on anchor groups — where ``(seed, options) = reset_args(row)`` of the group's first row.
    While the wrapper is training, every call is one routing step: ``wrapper.plan_step(B / G)``
    draws its routes first (``anchor_fraction`` of the groups with stochastic rounding, at
    least ``min_anchor_groups`` per window of ``anchor_window`` calls; the default window of 1
    gives every generation batch its anchors).

    Args:
        wrapper: an outcome-mode :class:`~wmrl_envs.AnchoredWorldModelWrapper` around the
            expensive env (e.g. ``AutoResearchEnv`` with a bubblewrap sandbox) and a world
            model (any object with ``predict(contexts, actions)``); its router, corrector and
            cost ledger are the ones used and updated.
        num_generations: G, completions per prompt (``GRPOConfig.num_generations``). May be
            ``None`` when the function is used by :class:`WMRLGRPOTrainer`, which sets it.
        to_action: ``to_action(completion_text, row) -> action`` (:data:`ActionFn`);
            default: the completion text itself.
        reset_args: ``reset_args(row) -> (seed, options)`` (:data:`ResetArgsFn`); default
            :func:`default_reset_args` (``options={"task_id": row["task_id"]}``).
        plan_per_call: draw the routes of each call as one step (default ``True``); ``False``
            leaves the schedule to the wrapper's ``groups_per_step`` blocks.
        name: the name TRL logs the reward under (``rewards/<name>/mean``).

    Attributes:
        last_batch: the :class:`WMRLBatch` of the latest call, this process's rows (``None``
            before the first).
        last_global_batch: several processes, process 0: the whole generation batch's
            :class:`WMRLBatch` (``None`` otherwise).
        n_calls: calls so far (int).
        __name__: ``name``.

    Raises:
        TypeError: ``wrapper`` is not an ``AnchoredWorldModelWrapper``.
        ValueError: the wrapper is in reward mode, or ``num_generations < 1``.

    Several processes: see the module docstring (process 0 scores the whole generation batch;
    :attr:`last_batch` holds this process's rows, :attr:`last_global_batch` on process 0 the
    whole batch). Every process must build the function with an equal wrapper; only process
    0's is used and updated (its state is what checkpoints save).

    Warns:
        UserWarning: (once) the realised anchor fraction exceeds ``anchor_fraction`` because the
            router's floor of ``min_anchor_groups`` per ``anchor_window`` calls is above
            ``anchor_fraction × groups per call × anchor_window`` (one process at 0.25 with 2
            groups per call realises 0.5); the message names the batch size, ``anchor_window``
            or ``min_anchor_groups`` that fixes it.

    Calling it raises:
        ValueError: ``num_generations`` unset; ``len(completions) != len(prompts)``; the batch
            is not a whole number of groups; the rows of a group have different prompts or
            reset arguments.

    Example:
        >>> import gymnasium as gym
        >>> import wmrl_envs
        >>> from wmrl_envs.world_models import WorldModelPrediction
        >>> class LenWM:  # predicts a score from the action's length
        ...     def predict(self, contexts, actions):
        ...         return [WorldModelPrediction(score=min(len(a), 10) / 10) for a in actions]
        >>> class TextEnv(gym.Env):  # one step; real score: share of 'a' characters
        ...     observation_space = gym.spaces.Text(64)
        ...     action_space = gym.spaces.Text(64)
        ...     def reset(self, *, seed=None, options=None):
        ...         return "write", {}
        ...     def step(self, action):
        ...         return "done", action.count("a") / max(len(action), 1), True, False, {}
        >>> w = wmrl_envs.AnchoredWorldModelWrapper(TextEnv(), LenWM(), group_size=2,
        ...                                         correction=wmrl_envs.CorrectionConfig(anchor_fraction=0.5))
        >>> reward = WMRLRewardFunction(w, num_generations=2)
        >>> r = reward(["p", "p", "q", "q"], ["aa", "ab", "b", "bbbb"])
        >>> len(r), reward.last_batch.n_anchor_groups
        (4, 1)
    """

    def __init__(
        self,
        wrapper: AnchoredWorldModelWrapper,
        num_generations: int | None = None,
        *,
        to_action: ActionFn | None = None,
        reset_args: ResetArgsFn | None = None,
        plan_per_call: bool = True,
        name: str = "wmrl",
    ) -> None:
        if not isinstance(wrapper, AnchoredWorldModelWrapper):
            raise TypeError(f"wrapper must be an AnchoredWorldModelWrapper, got {type(wrapper).__name__}")
        if wrapper.mode != "outcome":
            raise ValueError(
                "WMRLRewardFunction scores single-step completions (outcome mode); the wrapper is in "
                f"{wrapper.mode!r} mode"
            )
        if num_generations is not None and num_generations < 1:
            raise ValueError(f"num_generations must be >= 1, got {num_generations}")
        self.wrapper = wrapper
        self.num_generations = num_generations
        self.to_action: ActionFn = to_action or _identity_action
        self.reset_args: ResetArgsFn = reset_args or default_reset_args
        self.plan_per_call = bool(plan_per_call)
        self.__name__ = str(name)
        self.last_batch: WMRLBatch | None = None
        self.last_global_batch: WMRLBatch | None = None
        self.n_calls = 0
        self._floor_warned = False

    # ------------------------------------------------------------------ scoring
    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        """Score one TRL batch (see the class docstring).

        Args:
            prompts: B prompts (str or message lists), G consecutive equal ones per group.
            completions: B completions (str or message lists).
            **kwargs: what TRL passes: ``completion_ids``, ``trainer_state``, ``log_extra``,
                ``log_metric`` and every dataset column as a list of B values.

        Returns:
            B rewards: real scores on anchor groups, calibrated world-model scores ``f̂(r̂)``
            on world-model groups (reward scale of the env; AutoResearch: [0, 1]); ``None`` =
            ungraded.
        """
        return self._score(prompts, completions, **kwargs)

    def _score(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        dist = _distributed()
        if dist is None:
            return self._score_local(prompts, completions, **kwargs)
        return self._score_shared(dist, prompts, completions, **kwargs)

    def _score_shared(self, dist: Any, prompts: Sequence[Any], completions: Sequence[Any],
                      **kwargs: Any) -> list[float | None]:
        """Several processes (``torch.distributed`` initialised, world size > 1): process 0 scores
        the whole generation batch with its wrapper, the others send their rows and receive
        theirs back (see the class docstring)."""
        t0 = time.perf_counter()
        b = len(prompts)
        if len(completions) != b:
            raise ValueError(f"got {b} prompts but {len(completions)} completions")
        columns = {k: list(v) for k, v in kwargs.items()
                   if isinstance(v, (list, tuple)) and len(v) == b and k != "completion_ids"}
        parts: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(parts, (list(prompts), list(completions), columns))
        rank = dist.get_rank()
        sizes = [len(p[0]) for p in parts]
        offset = sum(sizes[:rank])
        payload: list[Any] = [None]
        if rank == 0:
            try:
                keys = [k for k in columns if all(k in p[2] for p in parts)]
                all_prompts = [x for p in parts for x in p[0]]
                all_completions = [x for p in parts for x in p[1]]
                all_columns = {k: [x for p in parts for x in p[2][k]] for k in keys}
                others = {k: v for k, v in kwargs.items() if k not in columns and k != "completion_ids"}
                self._score_local(all_prompts, all_completions, **all_columns, **others)
                payload = [("ok", self.last_batch)]
            except BaseException as exc:  # every process raises it, none waits forever
                payload = [("error", exc)]
        dist.broadcast_object_list(payload, src=0)
        status, value = payload[0]
        if status == "error":
            raise value
        full: WMRLBatch = value
        g = full.num_generations
        rows = slice(offset, offset + b)
        first, last = offset // g, (offset + b + g - 1) // g
        batch = WMRLBatch(routes=full.routes[rows], group_ids=full.group_ids[rows],
                          advantage_weights=full.advantage_weights[rows], rewards=full.rewards[rows],
                          groups=full.groups[first:last], num_generations=g)
        batch.seconds = time.perf_counter() - t0
        if rank != 0:
            self.last_batch = batch
            self.n_calls += 1
        else:
            self.last_global_batch = full
            self.last_batch = batch
        return list(batch.rewards)

    def _score_local(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        t0 = time.perf_counter()
        g = self.num_generations
        if g is None:
            raise ValueError(
                "num_generations is not set: pass WMRLRewardFunction(wrapper, num_generations=G) "
                "with G = GRPOConfig.num_generations, or train with WMRLGRPOTrainer"
            )
        b = len(prompts)
        if len(completions) != b:
            raise ValueError(f"got {b} prompts but {len(completions)} completions")
        if b == 0 or b % g:
            raise ValueError(
                f"a batch of {b} completions is not a whole number of groups of num_generations={g}; "
                "TRL lays out G consecutive completions per prompt (over all processes): is num_generations the trainer's?"
            )
        columns = {k: v for k, v in kwargs.items() if isinstance(v, (list, tuple)) and len(v) == b and k != "completion_ids"}
        n_groups = b // g
        if self.wrapper.training and self.plan_per_call:
            self.wrapper.plan_step(n_groups)
        batch = WMRLBatch(num_generations=g)
        for k in range(n_groups):
            rows = range(k * g, (k + 1) * g)
            first = rows[0]
            row0 = {**{c: v[first] for c, v in columns.items()}, "prompt": prompts[first]}
            seed, options = self.reset_args(row0)
            actions = []
            for i in rows:
                row = {**{c: v[i] for c, v in columns.items()}, "prompt": prompts[i]}
                if i != first:
                    if prompts[i] != prompts[first]:
                        raise ValueError(
                            f"rows {first} and {i} are in one group of {g} but have different prompts; TRL "
                            "puts the num_generations completions of a prompt in consecutive rows — is "
                            "num_generations the trainer's?"
                        )
                    if self.reset_args(row) != (seed, options):
                        raise ValueError(f"rows {first} and {i} are in one group but give different reset arguments")
                actions.append(self.to_action(completion_text(completions[i]), row))
            out = self.wrapper.score_group(actions, seed=seed, options=options)
            batch.groups.append(out)
            batch.routes.extend([out.route] * g)
            batch.group_ids.extend([out.group_id] * g)
            batch.advantage_weights.extend([float(out.advantage_weight)] * g)
            batch.rewards.extend(out.rewards)
        batch.seconds = time.perf_counter() - t0
        self.last_batch = batch
        self.n_calls += 1
        if self.wrapper.training and self.plan_per_call:
            self._warn_if_floor_lifts(n_groups)
        log_metric = kwargs.get("log_metric")
        if callable(log_metric) and self.wrapper.training:
            stats = self.wrapper.loop.stats()
            log_metric("wmrl/rho", float(stats["rho"]))
            log_metric("wmrl/anchor_groups", float(batch.n_anchor_groups))
            log_metric("wmrl/realised_anchor_fraction", float(stats["realised_anchor_fraction"]))
            log_metric("wmrl/anchor_pairs", float(stats["anchor_pairs"]))
            log_metric("wmrl/executions", float(stats["executions"]))
            log_metric("wmrl/ungraded_rollouts", float(stats["ungraded_rollouts"]))
            for key in ("r", "anchor_fraction", "world_model_cost_share"):  # what a run shows; None: not yet defined
                log_metric(f"wmrl/{key}", float("nan") if stats[key] is None else float(stats[key]))
        return list(batch.rewards)


    def _warn_if_floor_lifts(self, n_groups: int) -> None:
        """Warn once when the router's floor, not ``anchor_fraction``, sets the realised fraction.

        Each call is one routing step of ``n_groups`` groups and the router keeps at least
        ``min_anchor_groups`` anchor groups per window of ``anchor_window`` steps; when that
        floor is above ``anchor_fraction × n_groups × anchor_window`` (e.g. 0.25 with 2 groups
        per call: one anchor of 2, a realised 0.5) more groups run for real than configured.
        """
        if self._floor_warned:
            return
        router = self.wrapper.loop.router
        f, m, w = float(router.anchor_fraction), int(router.min_anchor_groups), int(router.anchor_window)
        if self.wrapper.loop.adaptive is not None or f <= 0 or m <= f * n_groups * w + 1e-9:
            return
        realised = router.realised_fraction
        if realised <= f:
            return
        self._floor_warned = True
        g = self.num_generations or 1
        need_groups = math.ceil(m / (f * w) - 1e-9)
        need_window = math.ceil(m / (f * n_groups) - 1e-9)
        warnings.warn(
            f"realised anchor fraction {realised:g} for a configured {f:g}: each reward call is one routing step "
            f"of {n_groups} group(s), and the router keeps at least min_anchor_groups={m} anchor group(s) per "
            f"anchor_window={w} step(s), so more groups run for real than configured. Fix: {need_groups} groups "
            f"per call ({need_groups * g} completions per generation batch over all processes: "
            "GRPOConfig.per_device_train_batch_size x steps_per_generation x processes, with "
            f"num_generations={g}), or CorrectionConfig(anchor_window={need_window}) (the floor then holds per "
            "window of calls), or min_anchor_groups=0 (no floor; a run may then have no anchor group)",
            UserWarning,
            stacklevel=3,
        )


class AsyncWMRLRewardFunction(WMRLRewardFunction):
    """The ``async`` variant of :class:`WMRLRewardFunction` (same arguments and results).

    TRL 1.16 detects an async ``__call__`` and awaits it on its own event loop together with
    the other async reward functions (``asyncio.gather``). The scoring itself — sandboxed
    execution, world-model inference — is blocking, so it runs in a worker thread
    (:func:`asyncio.to_thread`) and the event loop stays free for the other functions.
    Groups are still scored one after the other (one wrapper, one env).

    Example:
        >>> import asyncio
        >>> rewards = asyncio.run(async_reward(prompts, completions))  # doctest: +SKIP
    """

    async def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:  # type: ignore[override]
        """Score one TRL batch in a worker thread (see :meth:`WMRLRewardFunction.__call__`)."""
        return await asyncio.to_thread(self._score, prompts, completions, **kwargs)


def _distributed() -> Any:
    """``torch.distributed`` when it is initialised with more than one process, else ``None``."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist
    return None


def _cpu_has_bf16_kernels() -> bool:
    """Whether PyTorch runs bf16 matrix products on this CPU with oneDNN kernels (AVX-512 or AMX).

    Without them (AVX2-only x86 CPUs, e.g. AMD EPYC before Zen 4) a bf16 ``torch.mm`` takes a
    generic path: measured 9 GFLOP/s against 100 GFLOP/s in float32 on one core, so bf16
    autocast makes training ~14x slower instead of faster. Asks
    ``torch.ops.mkldnn._is_mkldnn_bf16_supported`` (the check ``torch._inductor`` uses); if
    that op is missing (a build without oneDNN), the CPU's ``avx512_bf16`` / ``amx_bf16`` flags.
    """
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        caps = torch.cpu.get_capabilities()
        return bool(caps.get("avx512_bf16") or caps.get("amx_bf16"))


class WMRLGRPOTrainer(GRPOTrainer):
    """``trl.GRPOTrainer`` that multiplies the advantages of anchor-group rows by ρ.

    Takes exactly ``GRPOTrainer``'s arguments; ``reward_funcs`` must contain exactly one
    :class:`WMRLRewardFunction` (or :class:`AsyncWMRLRewardFunction`), possibly next to other
    reward functions (e.g. a format reward; ρ then multiplies the whole row's advantage).

    What it changes (see the module docstring for why):

    * ``_generate_and_score_completions`` — the parent computes rewards and the plain GRPO
      advantages ``A`` (B rows, float32); this override returns ``A * w`` with ``w`` the
      reward function's :attr:`WMRLBatch.advantage_weights` for the same rows (ρ on anchor
      groups, 1 on world-model groups), in training only. Evaluation batches are scored with
      the wrapper's ``training`` flag off (corrections frozen, routes = ``eval_route``,
      default real execution) and with ``num_generations_eval``.
    * checkpoints — ``_save_checkpoint`` also writes the wrapper's router / debiaser /
      denoiser / ledger state to ``<checkpoint>/wmrl_state.json``; resuming
      (``train(resume_from_checkpoint=...)``) loads it back.

    Logged metrics: ``wmrl/rho``, ``wmrl/anchor_groups``, ``wmrl/realised_anchor_fraction``,
    ``wmrl/anchor_pairs``, ``wmrl/executions`` (per generation batch, through TRL's
    ``log_metric``). TRL's completions table (``log_completions=True``) shows the advantages
    *before* the ρ multiplication.

    Attributes:
        wmrl_reward: the WMRL reward function.
        wrapper: its :class:`~wmrl_envs.AnchoredWorldModelWrapper`.

    Raises:
        ValueError: no or several WMRL reward functions; a reward function whose
            ``num_generations`` differs from ``args.num_generations``.
        RuntimeError: (during training) the WMRL reward function was not called exactly once
            for a batch, or returned weights for a different number of rows.

    Warns:
        UserWarning: training on CPU with bf16 mixed precision (TRL's default ``bf16=True``) on
            a CPU without bf16 matrix kernels, where it is ~14x slower than float32.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        on_cpu = self.accelerator.device.type == "cpu"
        if on_cpu and self.accelerator.mixed_precision == "bf16" and not _cpu_has_bf16_kernels():
            warnings.warn(
                "bf16 mixed precision on a CPU without bf16 matrix kernels (no AVX-512/AMX, e.g. an AVX2-only "
                "AMD EPYC): PyTorch falls back to a generic bf16 path, ~14x slower than float32 for SmolLM2's "
                "forward + backward (measured); TRL's GRPOConfig defaults to bf16=True — pass bf16=False",
                stacklevel=2,
            )
        found = [f for f in self.reward_funcs if isinstance(f, WMRLRewardFunction)]
        if len(found) != 1:
            raise ValueError(
                f"WMRLGRPOTrainer needs exactly one WMRLRewardFunction in reward_funcs, found {len(found)}"
            )
        self.wmrl_reward: WMRLRewardFunction = found[0]
        g = self.wmrl_reward.num_generations
        if g is not None and g != self.num_generations:
            raise ValueError(
                f"the WMRL reward function has num_generations={g} but the trainer {self.num_generations}; "
                "pass the same G (or leave the reward function's unset)"
            )

    @property
    def wrapper(self) -> AnchoredWorldModelWrapper:
        """The anchored wrapper of the WMRL reward function."""
        return self.wmrl_reward.wrapper

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        fn = self.wmrl_reward
        training = bool(self.model.training)
        prev_training, prev_g = fn.wrapper.training, fn.num_generations
        fn.num_generations = self.num_generations if training else self.num_generations_eval
        if not training:
            fn.wrapper.training = False
        calls = fn.n_calls
        try:
            output = super()._generate_and_score_completions(inputs)
        finally:
            fn.wrapper.training = prev_training
            fn.num_generations = prev_g
        if not training:
            return output
        if fn.n_calls != calls + 1 or fn.last_batch is None:
            raise RuntimeError(
                f"the WMRL reward function ran {fn.n_calls - calls} times for one batch (expected once)"
            )
        adv = output["advantages"]
        w = torch.tensor(fn.last_batch.advantage_weights, dtype=adv.dtype, device=adv.device)
        if w.shape[0] != adv.shape[0]:
            raise RuntimeError(f"{w.shape[0]} advantage weights for {adv.shape[0]} rows")
        output["advantages"] = adv * (w if adv.dim() == 1 else w.unsqueeze(1))
        return output

    # ------------------------------------------------------------------ checkpoints
    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        super()._save_checkpoint(model, trial)
        if self.args.should_save:
            from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

            folder = Path(self._get_output_dir(trial=trial)) / f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            if folder.is_dir():
                self.wrapper.save(folder / WMRL_STATE_FILE)

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is not None and os.path.isfile(os.path.join(checkpoint, WMRL_STATE_FILE)):
            self.wrapper.load(os.path.join(checkpoint, WMRL_STATE_FILE))
