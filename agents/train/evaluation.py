"""Held-out evaluation: avg@k leaderboard percentile, as the WMRL paper reports it.

avg@k (Yang et al., arXiv 2608.12564; ``docs/method.md``, "Evaluation"): per task, the best
leaderboard position score ``pos`` over k independent trajectories (a trajectory without a
valid submission counts 0), averaged over the tasks of each category, then averaged across
categories. Reported as a percentile (0–100). :func:`avg_at_k_estimate` estimates the same
quantity from n >= k trajectories per task (:func:`expected_best_of_k`), with a lower variance
than one draw of k.
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from collections import defaultdict
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from agents.train.config import TrainConfig
from agents.train.rollout import rollout_episode
from wmrl_envs.core import EXECUTION, CorrectionConfig
from wmrl_envs.core.ungraded import CAUSE_KEY, TooManyUngradedError

if TYPE_CHECKING:
    from agents.train.build import Components

__all__ = ["avg_at_k", "expected_best_of_k", "avg_at_k_estimate", "evaluate", "evaluation_wrapper", "finite_mean",
           "heldout_spread"]


def avg_at_k(
    positions: Mapping[str, Sequence[float | None]],
    categories: Mapping[str, str],
    k: int | None = None,
) -> dict[str, object]:
    """avg@k leaderboard percentile.

    Args:
        positions: per task id, the position scores ``pos`` in [0, 1] of its trajectories
            (``None`` for a trajectory without a valid submission).
        categories: per task id, its category.
        k: use the first k trajectories of each task (default: all given).

    Returns:
        ``{"overall": float, "per_category": {category: float}, "per_task": {task: float}}``,
        all in percent (0–100).

    Raises:
        ValueError: a task has no trajectories or no category, or ``k < 1``.

    Example:
        >>> avg_at_k({"a": [0.5, None], "b": [None], "c": [1.0]}, {"a": "x", "b": "x", "c": "y"})["overall"]
        62.5
    """
    if k is not None and k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    per_task: dict[str, float] = {}
    by_cat: dict[str, list[float]] = defaultdict(list)
    for task, pos in positions.items():
        traj = list(pos)[: k if k is not None else None]
        if not traj:
            raise ValueError(f"task {task!r} has no trajectories")
        if task not in categories:
            raise ValueError(f"task {task!r} has no category")
        best = max((float(p) if p is not None else 0.0) for p in traj)
        per_task[task] = 100.0 * best
        by_cat[categories[task]].append(100.0 * best)
    per_cat = {c: sum(v) / len(v) for c, v in sorted(by_cat.items())}
    overall = sum(per_cat.values()) / len(per_cat) if per_cat else float("nan")
    return {"overall": overall, "per_category": per_cat, "per_task": per_task}


def expected_best_of_k(positions: Sequence[float | None], k: int) -> float:
    """Unbiased estimate of avg@k's per-task term, E[best position of k trajectories], from n >= k draws.

    avg@k (:func:`agents.train.evaluation.avg_at_k`) scores a task by the best of k trajectories; one
    draw of k is a noisy estimate of its expectation. With n >= k i.i.d. trajectories, the mean of
    the best over all C(n, k) subsets of size k is unbiased and has a lower variance (the estimator
    of pass@k of Chen et al., 2021, arXiv:2107.03374, applied to the maximum): with the positions
    sorted ascending ``x_(1) <= ... <= x_(n)``, it is ``sum_i x_(i) C(i-1, k-1) / C(n, k)``. With
    ``k == n`` it is the best of the n draws (avg@k itself); with ``k == 1`` their mean.

    Args:
        positions: the n trajectories' position scores in [0, 1]; ``None`` (no valid
            submission) counts as 0, as in avg@k.
        k: trajectories per task of avg@k (1 <= k <= n).

    Returns:
        The estimate in [0, 1] (float).

    Raises:
        ValueError: ``k < 1`` or ``k > n``.

    Example:
        >>> round(expected_best_of_k([0.0, 0.5, 1.0], 2), 6)  # best of the pairs (0, .5), (0, 1), (.5, 1)
        0.833333
    """
    from math import comb

    x = np.sort(np.asarray([0.0 if p is None else float(p) for p in positions], dtype=float))
    n = x.size
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, n={n}] (draws per task), got k={k}")
    w = np.array([comb(i, k - 1) for i in range(n)], dtype=float) / comb(n, k)
    return float((w * x).sum())


def avg_at_k_estimate(positions: Mapping[str, Sequence[float | None]], categories: Mapping[str, str],
                      k: int, draws: int | None = None) -> tuple[float, dict[str, float], dict[str, float]]:
    """avg@k (percent) from each task's draws, aggregated as :func:`agents.train.evaluation.avg_at_k`.

    Args:
        positions: per task, its trajectories' position scores in draw order (``None``: no
            valid submission); a task without trajectories is left out.
        categories: per task, its category.
        k: k of avg@k (a task with fewer draws uses all of them).
        draws: use only the first ``draws`` trajectories of each task (``None``: all), which is
            an evaluation with fewer draws on the same stream.

    Returns:
        ``(overall, per_category, per_task)``: per task 100 × :func:`expected_best_of_k`;
        per category the mean over its tasks; overall the mean over categories.
    """
    per_task = {}
    for t, p in positions.items():
        p = list(p)[: draws if draws is not None else None]
        if p:
            per_task[t] = 100.0 * expected_best_of_k(p, min(k, len(p)))
    by_cat: dict[str, list[float]] = {}
    for t, v in per_task.items():
        by_cat.setdefault(categories[t], []).append(v)
    per_cat = {c: statistics.fmean(v) for c, v in sorted(by_cat.items())}
    return (statistics.fmean(per_cat.values()) if per_cat else float("nan")), per_cat, per_task


def _task_arrays(ev: Mapping[str, Any], tasks: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per task (in ``tasks`` order): its avg@k term (percent), the sum and the count of its finite scores."""
    k, traj = int(ev["k"]), ev["trajectories"]
    best = [100.0 * max((0.0 if p is None else float(p)) for p in traj[t]["positions"][:k]) for t in tasks]
    fin = [[float(x) for x in traj[t]["scores"] if x is not None and math.isfinite(x)] for t in tasks]
    return np.asarray(best), np.asarray([sum(f) for f in fin]), np.asarray([len(f) for f in fin], dtype=float)


def heldout_spread(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None, n_boot: int = 2000,
                   seed: int = 0, level: float = 0.95) -> dict[str, Any]:
    """The spread of the held-out figures over the held-out tasks: Student-t intervals of avg@k
    (``overall``) and ``mean_score`` before and after training, and of their paired difference
    after − before.

    Each figure is a weighted mean over tasks: avg@k weights task i by ``1 / (C n_c(i))`` (the mean
    over C categories of the mean over a category's tasks, as :func:`avg_at_k` computes it), the
    mean score pools the tasks' graded trajectories (a ratio of sums). Its interval treats the tasks
    as exchangeable draws: the standard error is ``sqrt(sum u_i^2 / (n (n - 1)))`` over the n tasks'
    linearised contributions ``u_i`` (``n w_i (x_i - estimate)`` for a weighted mean; ``(y_i - R m_i)
    / mean(m)`` for the ratio R of score sums y to counts m), with n − 1 degrees of freedom; the
    difference uses each task's after − before contribution, so it pairs the same tasks. A task's
    figures come from its own k draws, so the interval carries the noise of those draws too. Over a
    handful of tasks this is the honest width: the percentile bootstrap within categories it
    replaces (issue 36) had no spread from a category of one task and was too narrow elsewhere.

    Args:
        before, after: :func:`evaluate`'s results (their ``trajectories``, ``k``); ``None`` or a
            result without ``trajectories`` (a run resumed from an older checkpoint) gives
            ``None`` for its part.
        n_boot, seed: unused (kept for callers of the bootstrap this replaced).
        level: coverage of the intervals, in (0, 1).

    Returns:
        ``{"method", "level", "before", "after", "difference"}``; ``before``/``after`` are
        ``{"overall", "overall_ci": [lo, hi], "mean_score", "mean_score_ci", "n_tasks"}`` (percent
        for avg@k, reward scale for the score), ``difference`` the same for after − before on the
        tasks graded both times. Each interval is clipped to its figure's range (avg@k [0, 100], the
        mean score the reward scale [0, 1]; a difference [-100, 100] and [-1, 1]): from 2 or 3
        tasks t's quantile (12.7, 4.3) reaches past it. A part is ``None`` when it has no trajectories; a CI is ``None`` with fewer
        than 2 tasks or no finite score. No NaN.

    Raises:
        ValueError: ``level`` not in (0, 1).

    Example:
        >>> ev = {"k": 1, "trajectories": {"a": {"category": "x", "positions": [0.2], "scores": [0.2]},
        ...                                "b": {"category": "x", "positions": [0.6], "scores": [0.6]}}}
        >>> sp = heldout_spread(ev, None)["before"]
        >>> sp["overall"], [round(v, 1) for v in sp["overall_ci"]]
        (40.0, [0.0, 100.0])
    """
    from scipy import stats

    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")

    def usable(ev: Mapping[str, Any] | None) -> dict[str, Any]:
        return dict(ev["trajectories"]) if ev and ev.get("trajectories") else {}

    tb, ta = usable(before), usable(after)

    def ci(point: float, u: np.ndarray) -> list[float] | None:
        n = u.size
        if n < 2 or not math.isfinite(point) or not np.all(np.isfinite(u)):
            return None
        half = float(stats.t.ppf((1 + level) / 2, n - 1) * math.sqrt(float(np.sum(u * u)) / (n * (n - 1))))
        return [point - half, point + half]

    def clip(interval: list[float] | None, top: float, paired: bool) -> list[float] | None:
        if interval is None:
            return None
        return [max(interval[0], -top if paired else 0.0) + 0.0, min(interval[1], top)]  # + 0.0: no -0.0

    def part(evs: list[Mapping[str, Any]], tasks: list[str]) -> dict[str, Any] | None:
        if not tasks:
            return None
        cat = evs[-1]["trajectories"]
        cats = [cat[t]["category"] for t in tasks]
        per_cat = {c: cats.count(c) for c in set(cats)}
        n = len(tasks)
        w = np.asarray([1.0 / (len(per_cat) * per_cat[c]) for c in cats])
        arrays = [_task_arrays(ev, tasks) for ev in evs]
        overall, u_overall, score, u_score = 0.0, np.zeros(n), 0.0, np.zeros(n)
        for sign, (best, s_sum, cnt) in zip((-1.0, 1.0) if len(evs) == 2 else (1.0,), arrays):
            m = float(np.sum(w * best))
            overall, u_overall = overall + sign * m, u_overall + sign * n * w * (best - m)
            total = float(cnt.sum())
            r = float(s_sum.sum()) / total if total > 0 else float("nan")
            score, u_score = score + sign * r, u_score + sign * (s_sum - r * cnt) / (total / n if total > 0 else 1.0)
        paired = len(evs) == 2
        # avg@k lies in [0, 100] percent, the mean score in [0, 1] (a difference in [-100, 100], [-1, 1])
        return {"overall": float(overall), "overall_ci": clip(ci(overall, u_overall), 100.0, paired),
                "mean_score": score if math.isfinite(score) else None,
                "mean_score_ci": clip(ci(score, u_score), 1.0, paired), "n_tasks": n}

    common = [t for t in tb if t in ta]
    return {"method": "Student-t interval over the held-out tasks (weighted as the figure; each task with its k "
                      "trajectories); the difference pairs the same tasks",
            "level": level,
            "before": part([before], list(tb)) if tb else None,
            "after": part([after], list(ta)) if ta else None,
            "difference": part([before, after], common) if common else None}


def finite_mean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    return float(np.mean(xs)) if xs else None


def evaluation_wrapper(env: Any, cfg: TrainConfig) -> Any:
    """The wrapper's evaluation mode over the training env: no world model, every group executed
    for real (``anchor_fraction=1``), ``training=False`` (nothing is learned or routed), its own
    ledger (evaluation is never counted in the training compute)."""
    from wmrl_envs import AnchoredWorldModelWrapper

    wrapper = AnchoredWorldModelWrapper(env, None, correction=CorrectionConfig(anchor_fraction=1.0), group_size=cfg.eval_k,
                                        max_ungraded_share=cfg.max_ungraded_share, episode_steps=cfg.max_turns)
    wrapper.training = False
    return wrapper


def evaluate(c: Components, cfg: TrainConfig) -> dict[str, Any]:
    """Held-out avg@k with real execution, through the wrapper's evaluation mode
    (:func:`evaluation_wrapper`; not counted in the training compute).

    Ungraded trajectories (the machinery failed: ``info["wmrl"]["ungraded_cause"]`` is set) are
    left out of avg@k and of the mean score, counted by cause in ``"ungraded"``, and warned
    about; a task left with no graded trajectory is left out (``"n_tasks_ungraded"``).

    Returns:
        :func:`agents.train.evaluation.avg_at_k`'s dict (percent) plus ``mean_score`` (reward scale),
        ``statuses`` (trajectories by grading status), ``generation_s`` and ``execution_s``
        (seconds), ``n_tasks``, ``k``, ``ungraded`` (``{cause: trajectories}``),
        ``n_tasks_ungraded`` and ``trajectories``: per task with a graded trajectory,
        ``{"category": str, "positions": [pos in [0, 1] or None], "scores": [reward]}`` in draw
        order, one entry per graded trajectory (what :func:`heldout_spread` resamples).

    Raises:
        TooManyUngradedError: at least ``cfg.max_ungraded_share`` of the trajectories are ungraded.
    """
    if c.eval_wrapper is None:
        c.eval_wrapper = evaluation_wrapper(c.env, cfg)
    wrapper, policy = c.eval_wrapper, c.policy
    if cfg.max_turns > 1:
        return _evaluate_multi_turn(c, cfg)
    specs = [c.get_task(t) for t in c.heldout_tasks]
    contexts = [wrapper.begin_group(options={"task_id": t})[0] for t in c.heldout_tasks]
    prompts = [policy.build_prompt(ctx, spec) for ctx, spec in zip(contexts, specs)]
    t0 = time.perf_counter()
    samples = policy.sample(prompts, cfg.eval_k)
    gen_s = time.perf_counter() - t0
    positions: dict[str, list[float | None]] = {}
    scores: dict[str, list[float]] = {}
    test_scores: dict[str, list[float]] = {}
    statuses: dict[str, int] = {}
    ungraded: dict[str, int] = {}
    messages: dict[str, str] = {}
    t0 = time.perf_counter()
    for t, ctx, spec, texts in zip(c.heldout_tasks, contexts, specs, samples.texts):
        group = wrapper.score_group([policy.completion_to_action(x, spec) for x in texts], options={"task_id": t},
                                    context=ctx)
        positions[t], scores[t], test_scores[t] = [], [], []
        for reward, info in zip(group.rewards, group.infos):
            statuses[info.get("status", "?")] = statuses.get(info.get("status", "?"), 0) + 1
            cause = info["wmrl"][CAUSE_KEY]
            if cause is not None:  # the machinery failed: not the agent's score
                ungraded[cause] = ungraded.get(cause, 0) + 1
                messages[cause] = str(info.get("message") or info.get("error") or "")
                continue
            positions[t].append(info.get("position") if info.get("status") == "valid" else None)
            scores[t].append(float(reward))
            if info.get("relative") is not None:  # --reward relative: the test half's score
                test_scores[t].append(float(info["relative"]["test_score"]))
    exec_s = time.perf_counter() - t0
    return _eval_result(c, cfg, positions, scores, statuses, ungraded, messages, gen_s, exec_s, test_scores)


def _evaluate_multi_turn(c: Components, cfg: TrainConfig) -> dict[str, Any]:
    """:func:`evaluate` with multi-turn episodes: ``eval_k`` episodes per held-out task, each
    rolled out turn by turn with real feedback (:func:`rollout_episode`); a trajectory's position
    is the best valid one over its turns, its score the episode's real score (max over turns);
    ``statuses`` counts turns. ``generation_s`` and ``execution_s`` are then the two shares of the
    episodes' wall-clock (the evaluation wrapper's ledger gives the execution share)."""

    wrapper, policy = c.eval_wrapper, c.policy
    positions: dict[str, list[float | None]] = {}
    scores: dict[str, list[float]] = {}
    test_scores: dict[str, list[float]] = {}
    statuses: dict[str, int] = {}
    ungraded: dict[str, int] = {}
    messages: dict[str, str] = {}
    t0, exec0 = time.perf_counter(), wrapper.loop.ledger.seconds(EXECUTION)
    for t in c.heldout_tasks:
        spec = c.get_task(t)
        positions[t], scores[t], test_scores[t] = [], [], []
        for _ in range(cfg.eval_k):
            _, infos, _ = rollout_episode(wrapper, policy, t, spec)
            for info in infos:
                statuses[info.get("status", "?")] = statuses.get(info.get("status", "?"), 0) + 1
            final = infos[-1]
            cause = final["wmrl"][CAUSE_KEY]
            if cause is not None:  # the machinery failed: not the agent's score
                ungraded[cause] = ungraded.get(cause, 0) + 1
                messages[cause] = str(final.get("message") or final.get("error") or "")
                continue
            valid = [i.get("position") for i in infos if i.get("status") == "valid" and i.get("position") is not None]
            positions[t].append(max(valid) if valid else None)
            scores[t].append(float(final["wmrl"]["real_score"]))
            rel = [float(i["relative"]["test_score"]) for i in infos if i.get("relative") is not None]
            if rel:  # --reward relative: the episode's best test-half score
                test_scores[t].append(max(rel))
    exec_s = wrapper.loop.ledger.seconds(EXECUTION) - exec0
    return _eval_result(c, cfg, positions, scores, statuses, ungraded, messages,
                        max(0.0, time.perf_counter() - t0 - exec_s), exec_s, test_scores)


def _eval_result(c: Components, cfg: TrainConfig, positions: dict[str, list[float | None]], scores: dict[str, list[float]],
                 statuses: dict[str, int], ungraded: dict[str, int], messages: dict[str, str], gen_s: float,
                 exec_s: float, test_scores: dict[str, list[float]] | None = None) -> dict[str, Any]:
    """The result dict of :func:`evaluate` (avg@k over graded trajectories) after the stop rule.

    Raises:
        TooManyUngradedError: at least ``cfg.max_ungraded_share`` of the trajectories are ungraded.
    """
    n_traj, n_ungraded = len(c.heldout_tasks) * cfg.eval_k, sum(ungraded.values())
    if n_ungraded:
        logging.getLogger(__name__).warning(
            "held-out evaluation: %d of %d trajectories ungraded (%s); left out of avg@k", n_ungraded, n_traj, ungraded
        )
        if cfg.max_ungraded_share is not None and n_ungraded >= cfg.max_ungraded_share * n_traj:
            raise TooManyUngradedError(n_ungraded, n_traj, cfg.max_ungraded_share, ungraded, messages)
    graded_positions = {t: p for t, p in positions.items() if p}
    res = avg_at_k(graded_positions, {t: c.get_task(t).category for t in c.heldout_tasks}, k=cfg.eval_k)
    res.update(mean_score=finite_mean([x for t in positions for x in scores[t]]), statuses=statuses,
               generation_s=gen_s, execution_s=exec_s, n_tasks=len(c.heldout_tasks), k=cfg.eval_k, ungraded=ungraded,
               n_tasks_ungraded=len(positions) - len(graded_positions),
               trajectories={t: {"category": c.get_task(t).category, "positions": p, "scores": scores[t],
                                 **({"test_scores": test_scores[t]} if test_scores and test_scores.get(t) else {})}
                             for t, p in graded_positions.items()})
    if any("test_scores" in v for v in res["trajectories"].values()):
        from agents.train.relative import copy_baseline

        res["copy_baseline"] = copy_baseline(res["trajectories"])
    return res
