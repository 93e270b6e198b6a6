"""Rollouts of the training loop and of the evaluation beyond one call of the wrapper: a
multi-turn episode (:func:`rollout_episode`) and a step's groups of them
(:func:`multi_turn_groups`), and ``executor="ray"``'s asynchronous anchor groups
(:func:`async_groups`). A single-turn group is the wrapper's ``begin_group`` / ``score_group``,
called by :mod:`agents.train.loop` and :mod:`agents.train.evaluation` themselves.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

from agents.train.build import Components, InFlight
from agents.train.config import TrainConfig
from wmrl_envs.core import ANCHOR, GENERATION, UPDATE

__all__ = ["rollout_episode", "multi_turn_groups", "async_groups"]


def rollout_episode(wrapper: Any, policy: Any, task_id: str, spec: Any, ledger: Any = None) -> tuple[list[Any], list[Any], Any]:
    """One multi-turn episode of ``task_id`` through the wrapper's per-episode API.

    Each turn: the prompt with the earlier turns (:meth:`agents.llm.policy.LLMPolicy.build_prompt`'s
    ``history``: each completion and the feedback it got, real on anchor groups and predicted by
    the world model on world-model groups), one completion sampled, the action stepped. The
    episode ends when the wrapper says so (its last turn, or an ungraded real turn).

    Returns:
        ``(turns, infos, obs)``: per turn ``(prompt_ids, completion_ids, text)``; per turn the
        step's ``info``; the last observation.
    """
    obs, _ = wrapper.reset(options={"task_id": task_id})
    history: list[tuple[str, str]] = []
    turns, infos = [], []
    while True:
        with ledger.timed(GENERATION, count=1) if ledger is not None else nullcontext():
            s = policy.sample([policy.build_prompt(obs, spec, history=history)], 1)
        text = s.texts[0][0]
        obs, _, terminated, truncated, info = wrapper.step(policy.completion_to_action(text, spec))
        turns.append((s.prompt_ids[0], s.completion_ids[0][0], text))
        infos.append(info)
        if terminated or truncated:
            return turns, infos, obs
        history.append((text, str(obs.get("feedback", "")) if isinstance(obs, dict) else ""))


def multi_turn_groups(c: Components, cfg: TrainConfig, task_ids: list[str], specs: list[Any],
                       groups: list[Any]) -> tuple[Any, list[int]]:
    """A step's groups of multi-turn episodes (``cfg.max_turns > 1``), appended to ``groups``.

    The G episodes of a group are rolled out one after another (:func:`rollout_episode`); the
    wrapper routes the group, scores every turn with the world model, executes the turns of an
    anchor group, and at the group's close corrects it (``wrapper.last_group``: the training
    rewards, max over turns). Each turn becomes one row of the returned samples (its own prompt,
    which holds the earlier turns), so every turn's tokens enter the loss with the episode's advantage.

    Returns:
        ``(samples, turn_rollout)``: a :class:`agents.llm.policy.PolicySamples` with one row per
        turn, and per row the flat index (group × G + episode) of the episode it belongs to.
    """
    from agents.llm.policy import PolicySamples
    from wmrl_envs.wrappers.common import group_rollout

    prompt_ids, completion_ids, texts, turn_rollout = [], [], [], []
    for gi, (t, spec) in enumerate(zip(task_ids, specs)):
        last_infos, last_obs = [], []
        for j in range(cfg.group_size):
            turns, infos, obs = rollout_episode(c.wrapper, c.policy, t, spec, c.wrapper.loop.ledger)
            for p, comp, text in turns:
                prompt_ids.append(list(p))
                completion_ids.append([list(comp)])
                texts.append([text])
                turn_rollout.append(gi * cfg.group_size + j)
            last_infos.append(dict(infos[-1]))
            last_obs.append(obs)
        groups.append(group_rollout(c.wrapper.last_group, last_obs, last_infos))
    samples = PolicySamples(prompt_ids, completion_ids, texts, sum(len(x[0]) for x in completion_ids))
    return samples, turn_rollout


def async_groups(c: Components, cfg: TrainConfig, step: int, task_ids: list[str], specs: list[Any],
                  samples: Any) -> tuple[list[Any], Any, Any, dict[str, Any]]:
    """``executor="ray"``: submit this step's groups, return the groups to train on now.

    Every group is routed and scored by the world model at submission
    (:meth:`~wmrl_envs.distributed.AsyncAnchoredScorer.submit`, unordered): a world-model group is
    corrected at once; an anchor group's executions start on the pool and the log-probabilities of
    its completions under the current (sampling) policy are recorded. The groups trained now are
    this step's world-model groups and every anchor group whose scores have arrived (corrected on
    arrival: its pairs feed the debiaser and ρ then), unless it is more than ``cfg.max_staleness``
    steps old. A late anchor group trains with its recorded log-probabilities as the ratio's
    denominator; the dual-clipped surrogate (:func:`agents.grpo.grpo_loss`, ``dual_clip`` = 3 by
    default) bounds each of its tokens' gradient w.r.t. the log-probability by
    ``max(1 + ε, 3)·|A|`` (A ρ-weighted) whatever its ratio: PPO's clip alone would not for a
    negative advantage, whose gradient grows with the ratio.

    Returns:
        ``(groups, samples, old_logprobs, record)``: the :class:`~wmrl_envs.wrappers.GroupRollout`
        objects to train on, their completions as one :class:`~agents.llm.policy.PolicySamples`
        (rows group after group), a float32 (rows, T) tensor of recorded log-probabilities (NaN:
        none, the on-policy value is used) or ``None``, and the step's asynchrony figures for
        metrics.jsonl (``anchors_submitted``, ``anchors_arrived``, ``anchor_staleness`` (steps),
        ``anchors_stale_dropped``, ``anchors_in_flight``).
    """
    import torch

    from agents.llm.policy import PolicySamples
    policy, g_size = c.policy, cfg.group_size
    fresh: dict[int, tuple[list[int], list[list[int]], list[str]]] = {}
    n_anchor = 0
    for gi, (t, spec) in enumerate(zip(task_ids, specs)):
        actions = [policy.completion_to_action(x, spec) for x in samples.texts[gi]]
        pending = c.scorer.submit(actions, options={"task_id": t})
        part = (samples.prompt_ids[gi], samples.completion_ids[gi], samples.texts[gi])
        if pending.route == ANCHOR:
            n_anchor += 1
            with c.wrapper.loop.ledger.timed(UPDATE, count=0), torch.no_grad():  # one forward pass, charged to the update
                lp, _, _ = policy.grpo_logprobs(samples, list(range(gi * g_size, (gi + 1) * g_size)))
            c.in_flight[pending.group_id] = InFlight(step, *part, lp.detach().cpu())
        else:
            fresh[pending.group_id] = part
    train: list[tuple[Any, tuple[Any, Any, Any], Any]] = []
    staleness, dropped = [], 0
    for g in c.scorer.poll():
        if g.group_id in fresh:
            train.append((g, fresh.pop(g.group_id), None))
            continue
        item = c.in_flight.pop(g.group_id)
        age = step - item.step
        if age > cfg.max_staleness:
            dropped += 1
            continue
        staleness.append(age)
        train.append((g, (item.prompt_ids, item.completion_ids, item.texts), item.old_logprobs if age > 0 else None))
    parts = [p for _, p, _ in train]
    merged = PolicySamples([list(p[0]) for p in parts], [list(p[1]) for p in parts], [list(p[2]) for p in parts],
                           sum(len(x) for p in parts for x in p[1]))
    old = None
    if any(lp is not None for _, _, lp in train):
        width = max(len(x) for p in parts for x in p[1])
        old = torch.full((len(merged), width), float("nan"))
        row = 0
        for _, p, lp in train:
            if lp is not None:
                old[row: row + lp.shape[0], : lp.shape[1]] = lp
            row += len(p[1])
    record = {"anchors_submitted": n_anchor, "anchors_arrived": len(staleness) + dropped, "anchor_staleness": staleness,
              "anchors_stale_dropped": dropped, "anchors_in_flight": len(c.in_flight)}
    return [g for g, _, _ in train], merged, old, record
