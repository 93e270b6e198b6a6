"""``KnownTruthEnv`` (``wmrl/KnownTruth-v0``) and its configurable world model: the method's test bench.

A one-step environment whose expected real score per (task, action) is known exactly, and a
world model whose error against that truth is set along the axes that decide whether WMRL pays
(issue 11, item 4): a monotone distortion, fixed per-action non-monotone bias, zero-mean noise
per call, blind spots (failing actions predicted as good, which a policy can exploit) and a
loss of information; the outcome randomness that the action does not reveal is the
environment's ``outcome_noise_std``. Costs are *declared*, never waited for: an execution
reports ``info["execution_cpu_s"] = execution_cost_s`` and the world model declares
``declared_cpu_s_per_prediction`` (charged per prediction by the cost ledger); nothing sleeps.

Contents:

* :class:`KnownTruthEnv` — the environment; :meth:`~KnownTruthEnv.true_score` and
  :meth:`~KnownTruthEnv.expected_score` give the exact truth (a policy is evaluated without
  sampling noise).
* :class:`WorldModelError` — the world model's error, one frozen dataclass;
  :data:`WORLD_MODEL_ERRORS` — the named quality levels of ``wmrl bench sweep``.
* :class:`KnownTruthWorldModel` — a :class:`~wmrl_envs.world_models.WorldModel` with that error;
  :class:`BreakingWorldModel` — one that switches to another error after a set number of
  predictions (a world model that breaks mid-run).
* :func:`within_group_correlation`, :func:`measured_correlation` — the within-group Pearson and
  Spearman correlation of world-model vs real score that a world model produces (the quality
  axis of the sweep's map).

The method (routing, debiasing, the anchor weight ρ) is in ``docs/method.md``; usage of the
sweep is in ``benchmarks/README.md``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import gymnasium as gym
import numpy as np
from scipy import stats

from wmrl_envs.utils import check_arg
from wmrl_envs.world_models.base import WorldModelPrediction

__all__ = [
    "ENV_ID",
    "WORLD_MODEL_ERRORS",
    "BreakingWorldModel",
    "CorrelationEstimate",
    "KnownTruthEnv",
    "KnownTruthWorldModel",
    "WorldModelError",
    "clipped_normal_mean",
    "measured_correlation",
    "within_group_correlation",
]

ENV_ID = "wmrl/KnownTruth-v0"
"""The Gymnasium id of :class:`KnownTruthEnv`."""


def _is_num(v: object) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(float(v))


def _is_int(v: object) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def clipped_normal_mean(mean: np.ndarray | float, std: float) -> np.ndarray:
    """``E[clip(X, 0, 1)]`` for ``X ~ N(mean, std²)``, exactly (element-wise).

    With ``a = -mean/std`` and ``b = (1-mean)/std``:
    ``E = mean·(Φ(b) − Φ(a)) + std·(φ(a) − φ(b)) + (1 − Φ(b))`` (the truncated-normal first
    moment between 0 and 1, plus the mass clipped to 1). ``std = 0`` gives ``clip(mean, 0, 1)``.

    Args:
        mean: float or array of means.
        std: standard deviation (>= 0).

    Returns:
        float64 array of the shape of ``mean``.
    """
    m = np.asarray(mean, dtype=np.float64)
    if std <= 0:
        return np.clip(m, 0.0, 1.0)
    a, b = -m / std, (1.0 - m) / std
    return m * (stats.norm.cdf(b) - stats.norm.cdf(a)) + std * (stats.norm.pdf(a) - stats.norm.pdf(b)) + stats.norm.sf(b)


class KnownTruthEnv(gym.Env[np.int64, np.int64]):
    """One step: pick one of ``n_actions`` actions for a task; the real score's expectation is known.

    Each task's actions fall in three classes, drawn once from ``table_seed``: a few *good*
    ones (latent quality ``mu`` uniform in [0.75, 0.95]), *failing* ones (``mu = 0``, like
    programs that crash: their outcome is exactly 0) and *mediocre* ones (``mu`` uniform in
    [0.2, 0.6]). A real execution of a non-failing action scores ``clip(mu + ε, 0, 1)`` with
    ``ε ~ N(0, outcome_noise_std²)``: outcome randomness that the action does not reveal. The
    expected score ``E[task, action]`` (:attr:`expected_table`) is that clipped normal's mean
    (:func:`clipped_normal_mean`), so it equals ``mu`` when ``outcome_noise_std = 0``.

    Spaces: observation ``Discrete(n_tasks)`` (the task id), action ``Discrete(n_actions)``; the
    episode terminates after the one step.

    Args:
        n_tasks: number of tasks (>= 1).
        n_actions: number of actions (>= 2).
        good_share: share of each task's actions that are good (at least one good action).
        failing_share: share of each task's actions that fail (score 0).
        outcome_noise_std: standard deviation of ε (score units, >= 0).
        execution_cost_s: the CPU-seconds one execution declares (>= 0), reported as
            ``info["execution_cpu_s"]`` (the step itself is instant).
        table_seed: seed of the action classes and of ``mu``.

    Reset options:
        ``{"task": int}`` fixes the task; otherwise it is drawn from the env's RNG.

    A task or an action is an integer-valued scalar in range (a Python or numpy integer, an
    integer-valued float such as ``2.0``, or a 0-d array of one); ``2.9``, ``"1"``, ``True`` or a
    1-D array raise ValueError instead of being truncated or read from their first element.

    ``info`` of a step: ``score`` (the real score), ``failed`` (a failing action),
    ``execution_cpu_s`` (the declared cost).

    Raises:
        ValueError: a setting out of range (the message names it); from :meth:`reset`,
            :meth:`step`, :meth:`true_score` or :meth:`expected_score`, a task or action that is
            not an integer-valued scalar in range.

    Example:
        >>> env = KnownTruthEnv(n_tasks=2, n_actions=8, outcome_noise_std=0.0)
        >>> obs, _ = env.reset(options={"task": 1})
        >>> _, r, done, _, info = env.step(3)
        >>> r == env.true_score(1, 3), done, info["execution_cpu_s"]
        (True, True, 1.0)
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        n_tasks: int = 4,
        n_actions: int = 24,
        *,
        good_share: float = 0.125,
        failing_share: float = 0.375,
        outcome_noise_std: float = 0.1,
        execution_cost_s: float = 1.0,
        table_seed: int = 0,
    ) -> None:
        def check(ok: bool, name: str, what: str, value: Any) -> None:
            check_arg(ok, f"KnownTruthEnv.{name}", what, value)

        check(_is_int(n_tasks) and n_tasks >= 1, "n_tasks", "an integer >= 1", n_tasks)
        check(_is_int(n_actions) and n_actions >= 2, "n_actions", "an integer >= 2", n_actions)
        check(_is_num(good_share) and 0 < good_share < 1, "good_share", "a number in (0, 1)", good_share)
        check(_is_num(failing_share) and 0 <= failing_share < 1, "failing_share", "a number in [0, 1)", failing_share)
        n_good = max(1, int(round(good_share * n_actions)))
        n_fail = int(round(failing_share * n_actions))
        check(n_good + n_fail <= n_actions, "failing_share",
              f"at most 1 - good_share (here {n_good} good + {n_fail} failing > {n_actions} actions)", failing_share)
        check(_is_num(outcome_noise_std) and outcome_noise_std >= 0, "outcome_noise_std", "a number >= 0", outcome_noise_std)
        check(_is_num(execution_cost_s) and execution_cost_s >= 0, "execution_cost_s", "a number of CPU-seconds >= 0",
              execution_cost_s)
        check(_is_int(table_seed), "table_seed", "an integer", table_seed)
        self.n_tasks, self.n_actions = int(n_tasks), int(n_actions)
        self.outcome_noise_std = float(outcome_noise_std)
        self.execution_cost_s = float(execution_cost_s)
        self.table_seed = int(table_seed)
        rng = np.random.default_rng(self.table_seed)
        mu = np.empty((self.n_tasks, self.n_actions))
        failing = np.zeros((self.n_tasks, self.n_actions), dtype=bool)
        for t in range(self.n_tasks):
            perm = rng.permutation(self.n_actions)
            good, fail, mid = perm[:n_good], perm[n_good:n_good + n_fail], perm[n_good + n_fail:]
            mu[t, good] = rng.uniform(0.75, 0.95, size=good.size)
            mu[t, fail] = 0.0
            failing[t, fail] = True
            mu[t, mid] = rng.uniform(0.2, 0.6, size=mid.size)
        self._mu, self._failing = mu, failing
        self._expected = np.where(failing, 0.0, clipped_normal_mean(mu, self.outcome_noise_std))
        self.observation_space = gym.spaces.Discrete(self.n_tasks)
        self.action_space = gym.spaces.Discrete(self.n_actions)
        self._task = 0
        self.n_steps = 0

    # ------------------------------------------------------------------ the truth
    @property
    def mu(self) -> np.ndarray:
        """Latent quality ``mu``, float64 (n_tasks, n_actions) in [0, 1] (a copy)."""
        return self._mu.copy()

    @property
    def failing(self) -> np.ndarray:
        """Which actions fail (score exactly 0), bool (n_tasks, n_actions) (a copy)."""
        return self._failing.copy()

    @property
    def expected_table(self) -> np.ndarray:
        """Exact expected real score ``E[task, action]``, float64 (n_tasks, n_actions) (a copy)."""
        return self._expected.copy()

    def true_score(self, task: int, action: int) -> float:
        """Exact expected real score of ``action`` on ``task`` (float in [0, 1])."""
        return float(self._expected[self._check_task(task), self._check_action(action)])

    def expected_score(self, policy_probs: np.ndarray, tasks: Sequence[int] | None = None) -> float:
        """Exact expected real score of a policy, averaged uniformly over ``tasks``.

        Args:
            policy_probs: action probabilities, float (n_tasks, n_actions) (one row per task) or
                (n_actions,) (the same for every task); rows must sum to 1.
            tasks: the evaluation tasks (default: all).

        Returns:
            ``mean_t Σ_a π(a|t) E[t, a]`` (float): no sampling noise.

        Raises:
            ValueError: wrong shape, negative entries or rows that do not sum to 1.
        """
        p = np.asarray(policy_probs, dtype=np.float64)
        if p.shape == (self.n_actions,):
            p = np.broadcast_to(p, (self.n_tasks, self.n_actions))
        if p.shape != (self.n_tasks, self.n_actions):
            raise ValueError(f"policy_probs must have shape ({self.n_tasks}, {self.n_actions}) or ({self.n_actions},), "
                             f"got {p.shape}")
        if (p < 0).any() or not np.allclose(p.sum(axis=1), 1.0, atol=1e-6):
            raise ValueError("policy_probs must be non-negative with rows summing to 1")
        idx = np.arange(self.n_tasks) if tasks is None else np.asarray([self._check_task(t) for t in tasks])
        return float(np.mean(np.sum(p[idx] * self._expected[idx], axis=1)))

    def sample_outcomes(self, tasks: np.ndarray, actions: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Real scores of many executions at once (what :meth:`step` returns, vectorised).

        Args:
            tasks, actions: int arrays of one shape (task ids, actions).
            rng: the generator of the outcome noise.

        Returns:
            float64 array of that shape: ``clip(mu + ε, 0, 1)``, 0 for failing actions.
        """
        t, a = np.asarray(tasks, dtype=np.int64), np.asarray(actions, dtype=np.int64)
        noise = rng.normal(0.0, self.outcome_noise_std, size=t.shape) if self.outcome_noise_std > 0 else 0.0
        return np.where(self._failing[t, a], 0.0, np.clip(self._mu[t, a] + noise, 0.0, 1.0))

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.int64, dict]:
        super().reset(seed=seed)
        if options and "task" in options:
            self._task = self._check_task(options["task"])
        else:
            self._task = int(self.np_random.integers(self.n_tasks))
        return np.int64(self._task), {}

    def step(self, action: Any) -> tuple[np.int64, float, bool, bool, dict]:
        a = self._check_action(action)
        self.n_steps += 1
        score = float(self.sample_outcomes(np.array([self._task]), np.array([a]), self.np_random)[0])
        info = {"score": score, "failed": bool(self._failing[self._task, a]), "execution_cpu_s": self.execution_cost_s}
        return np.int64(self._task), score, True, False, info

    def _check_task(self, task: Any) -> int:
        return _index(task, self.n_tasks, "task")

    def _check_action(self, action: Any) -> int:
        return _index(action, self.n_actions, "action")


def _index(value: Any, n: int, name: str) -> int:
    """``value`` as an int in ``[0, n)``: an integer-valued scalar (a Python or numpy integer, an
    integer-valued float, or a 0-d array of one); anything else is a ValueError, never truncated
    or read from its first element."""
    x = value
    if isinstance(x, np.ndarray):
        if x.ndim != 0:
            raise ValueError(f"{name} must be an integer in [0, {n}), one per call (a scalar), got an array of "
                             f"shape {x.shape}")
        x = x[()]
    ok = not isinstance(x, (bool, np.bool_)) and (
        isinstance(x, (numbers.Integral, np.integer))
        or (isinstance(x, (numbers.Real, np.floating)) and math.isfinite(float(x)) and float(x).is_integer())
    )
    if ok:
        x = int(x)
    if not ok or not 0 <= x < n:
        raise ValueError(
            f"{name} must be an integer in [0, {n}) (a Python or numpy integer, an integer-valued float or a 0-d "
            f"array of one), got {value!r}"
        )
    return int(x)


# ---------------------------------------------------------------------- the world model's error
def _predict_table(wm: Any, contexts: Sequence[Any], actions: Sequence[Any]) -> list[WorldModelPrediction]:
    """The ``predict`` of the known-truth world models: validate the (task id, action) pairs
    against ``wm.env`` and wrap ``wm.predict_scores`` in :class:`WorldModelPrediction`.

    Raises:
        ValueError: different lengths, or a task id / action that is not an integer in range.
    """
    if len(contexts) != len(actions):
        raise ValueError(f"contexts and actions differ in length: {len(contexts)} vs {len(actions)}")
    t = np.asarray([_index(c, wm.env.n_tasks, "context (task id)") for c in contexts], dtype=np.int64)
    a = np.asarray([_index(x, wm.env.n_actions, "action") for x in actions], dtype=np.int64)
    return [WorldModelPrediction(score=float(s)) for s in wm.predict_scores(t, a)]


@dataclass(frozen=True)
class WorldModelError:
    """How a :class:`KnownTruthWorldModel` errs (validated; every field defaults to no error).

    A prediction of ``(task, action)`` with expected real score ``E`` is
    ``clip(information·g(E) + (1 − information)·0.5 + b[task, action] + η, 0, 1)``, where ``g`` is
    the monotone squash of strength ``squash``, ``b`` a fixed offset per (task, action) drawn
    once from ``N(0, bias_std²)`` and ``η ~ N(0, noise_std²)`` drawn per call; a blind-spot
    action (a share ``blind_spot_share`` of each task's failing actions) is predicted as
    ``blind_spot_score + η`` in place of ``g(E)``.

    Attributes:
        information: weight of the truth in the prediction, in [0, 1] (0 = the prediction does
            not depend on the action: a useless world model).
        squash: strength ``k >= 0`` of the monotone distortion ``g_k(x) = (σ(k(x − ½)) −
            σ(−k/2)) / (σ(k/2) − σ(−k/2))`` (``k = 0``: identity). It keeps the ranking
            (Spearman) and lowers the linear correlation (Pearson); the isotonic debiaser can undo it.
        bias_std: standard deviation (>= 0) of the fixed per-(task, action) offsets: a
            non-monotone error the debiaser cannot undo.
        noise_std: standard deviation (>= 0) of the zero-mean noise drawn per prediction.
        blind_spot_share: share, in [0, 1], of each task's failing actions predicted as good.
        blind_spot_score: the score, in [0, 1], a blind-spot action is predicted to get.
        declared_cpu_s_per_prediction: CPU-seconds (>= 0) charged per prediction (default 0.01:
            a 1 : 100 cost ratio to the default execution of 1 CPU-second).

    Raises:
        ValueError: a field out of range (the message names it).
    """

    information: float = 1.0
    squash: float = 0.0
    bias_std: float = 0.0
    noise_std: float = 0.0
    blind_spot_share: float = 0.0
    blind_spot_score: float = 0.9
    declared_cpu_s_per_prediction: float = 0.01

    def __post_init__(self) -> None:
        ranges = {
            "information": (0.0, 1.0), "squash": (0.0, math.inf), "bias_std": (0.0, math.inf),
            "noise_std": (0.0, math.inf), "blind_spot_share": (0.0, 1.0), "blind_spot_score": (0.0, 1.0),
            "declared_cpu_s_per_prediction": (0.0, math.inf),
        }
        for f in fields(self):
            v = getattr(self, f.name)
            lo, hi = ranges[f.name]
            check_arg(_is_num(v) and lo <= v <= hi, f"WorldModelError.{f.name}",
                      f"a finite number >= {lo}" if hi == math.inf else f"a number in [{lo}, {hi}]", v)

    def squash_map(self, x: np.ndarray) -> np.ndarray:
        """``g_k(x)`` (float64, shape of ``x``): the monotone distortion, identity at ``squash = 0``."""
        x = np.asarray(x, dtype=np.float64)
        k = float(self.squash)
        if k == 0:
            return x.copy()
        sig = lambda z: 1.0 / (1.0 + np.exp(-z))
        lo, hi = sig(-k / 2), sig(k / 2)
        return (sig(k * (x - 0.5)) - lo) / (hi - lo)


WORLD_MODEL_ERRORS: dict[str, WorldModelError] = {
    "perfect": WorldModelError(),
    "monotone": WorldModelError(squash=12.0),
    "mild_noise": WorldModelError(noise_std=0.1),
    "heavy_noise": WorldModelError(noise_std=0.3),
    "bias": WorldModelError(bias_std=0.25),
    "blind_spots": WorldModelError(blind_spot_share=0.9),
    "useless": WorldModelError(information=0.0, noise_std=0.25),
}
"""The named world-model quality levels of ``wmrl bench sweep``, from best to worst in kind:
no error; a monotone distortion only; mild and heavy zero-mean noise; per-action bias; blind
spots (90% of the failing actions predicted at 0.9); useless (pure noise). The correlation
each one produces is measured, not declared (:func:`measured_correlation`)."""


class KnownTruthWorldModel:
    """A world model of a :class:`KnownTruthEnv` with a configured :class:`WorldModelError`.

    Implements the :class:`~wmrl_envs.world_models.WorldModel` protocol: ``predict(contexts,
    actions)`` takes task ids (the env's observations) and actions and returns one
    :class:`~wmrl_envs.world_models.WorldModelPrediction` per action, vectorised. It predicts
    the *expected* score (it cannot know the outcome noise of one execution).

    Args:
        env: the environment (a ``gym.make`` result is unwrapped).
        error: the error (default: none).
        seed: seed of the fixed per-action offsets, of the blind spots and of the per-call noise.

    Attributes:
        declared_cpu_s_per_prediction: the error's declared cost per prediction (CPU-seconds).
        n_predictions: predictions made so far.
        blind_spots: bool (n_tasks, n_actions), the failing actions predicted as good.
        offsets: float64 (n_tasks, n_actions), the fixed per-action offsets ``b``.

    Raises:
        TypeError: ``env`` is not a :class:`KnownTruthEnv`.
        ValueError: ``predict`` with contexts and actions of different lengths, or ids out of range.
    """

    def __init__(self, env: Any, error: WorldModelError | None = None, seed: int = 0) -> None:
        base = getattr(env, "unwrapped", env)
        if not isinstance(base, KnownTruthEnv):
            raise TypeError(f"KnownTruthWorldModel needs a KnownTruthEnv, got {type(base).__name__}")
        if error is not None and not isinstance(error, WorldModelError):
            raise TypeError(f"error must be a WorldModelError, got {type(error).__name__}")
        self.env = base
        self.error = error or WorldModelError()
        rng = np.random.default_rng([int(seed), 7919])
        shape = (base.n_tasks, base.n_actions)
        self.offsets = rng.normal(0.0, self.error.bias_std, size=shape) if self.error.bias_std > 0 else np.zeros(shape)
        blind = np.zeros(shape, dtype=bool)
        failing = base.failing
        for t in range(base.n_tasks):
            fail = np.flatnonzero(failing[t])
            k = int(round(self.error.blind_spot_share * fail.size))
            if k:
                blind[t, rng.choice(fail, size=k, replace=False)] = True
        self.blind_spots = blind
        e = self.error
        self._mean = (e.information * np.where(blind, e.blind_spot_score, e.squash_map(base.expected_table))
                      + (1.0 - e.information) * 0.5 + self.offsets)
        self._rng = np.random.default_rng([int(seed), 104729])
        self.n_predictions = 0

    @property
    def declared_cpu_s_per_prediction(self) -> float:
        """CPU-seconds declared per prediction (the error's)."""
        return float(self.error.declared_cpu_s_per_prediction)

    @property
    def mean_prediction(self) -> np.ndarray:
        """The prediction before noise and clipping, float64 (n_tasks, n_actions) (a copy)."""
        return self._mean.copy()

    def predict_scores(self, tasks: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """Predicted scores, vectorised: float64 array of the shape of ``tasks`` (= that of ``actions``).

        Raises:
            ValueError: shapes differ, or a task or action is out of range.
        """
        t, a = np.asarray(tasks, dtype=np.int64), np.asarray(actions, dtype=np.int64)
        if t.shape != a.shape:
            raise ValueError(f"tasks and actions differ in shape: {t.shape} vs {a.shape}")
        if t.size and (t.min() < 0 or t.max() >= self.env.n_tasks or a.min() < 0 or a.max() >= self.env.n_actions):
            raise ValueError(f"task ids must be in [0, {self.env.n_tasks}) and actions in [0, {self.env.n_actions})")
        noise = self._rng.normal(0.0, self.error.noise_std, size=t.shape) if self.error.noise_std > 0 else 0.0
        self.n_predictions += int(t.size)
        return np.clip(self._mean[t, a] + noise, 0.0, 1.0)

    def predict(self, contexts: Sequence[Any], actions: Sequence[Any]) -> list[WorldModelPrediction]:
        """One prediction per (task id, action); see the class docstring."""
        return _predict_table(self, contexts, actions)

    def state_dict(self) -> dict[str, Any]:
        """Noise generator state and prediction count."""
        return {"rng": self._rng.bit_generator.state, "n_predictions": self.n_predictions}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        self._rng.bit_generator.state = state["rng"]
        self.n_predictions = int(state["n_predictions"])


class BreakingWorldModel:
    """A world model that breaks mid-run: ``before`` for the first ``break_after`` predictions, ``after`` from then on.

    The switch is exact to the prediction: in a batch that straddles it, the rows before the
    ``break_after``-th prediction use ``before``. Both sides are :class:`KnownTruthWorldModel`
    of the same env (seeds ``seed`` and ``seed + 1``).

    Args:
        env: the :class:`KnownTruthEnv`.
        before, after: the errors before and after the break (their declared costs must agree:
            the cost of a prediction does not change when the model breaks).
        break_after: predictions before the break (an integer >= 0).
        seed: seed of the ``before`` model (``after`` uses ``seed + 1``).

    Attributes:
        n_predictions: predictions made so far; :attr:`broken` once it reached ``break_after``.

    Raises:
        ValueError: ``break_after`` is not an integer >= 0, or the declared costs differ.
    """

    def __init__(self, env: Any, before: WorldModelError, after: WorldModelError, break_after: int, seed: int = 0) -> None:
        if not _is_int(break_after) or break_after < 0:
            raise ValueError(f"BreakingWorldModel.break_after must be an integer >= 0, got {break_after!r}")
        if before.declared_cpu_s_per_prediction != after.declared_cpu_s_per_prediction:
            raise ValueError(
                "BreakingWorldModel: before and after declare different declared_cpu_s_per_prediction "
                f"({before.declared_cpu_s_per_prediction} vs {after.declared_cpu_s_per_prediction}); give them the same cost"
            )
        self.before = KnownTruthWorldModel(env, before, seed=seed)
        self.after = KnownTruthWorldModel(env, after, seed=seed + 1)
        self.env = self.before.env
        self.break_after = int(break_after)
        self.n_predictions = 0

    @property
    def declared_cpu_s_per_prediction(self) -> float:
        """CPU-seconds declared per prediction (the same before and after the break)."""
        return self.before.declared_cpu_s_per_prediction

    @property
    def broken(self) -> bool:
        """Whether the next prediction uses ``after``."""
        return self.n_predictions >= self.break_after

    def predict_scores(self, tasks: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """Predicted scores (vectorised, see :meth:`KnownTruthWorldModel.predict_scores`)."""
        t, a = np.asarray(tasks, dtype=np.int64).reshape(-1), np.asarray(actions, dtype=np.int64).reshape(-1)
        k = int(np.clip(self.break_after - self.n_predictions, 0, t.size))
        out = np.empty(t.size)
        if k:
            out[:k] = self.before.predict_scores(t[:k], a[:k])
        if k < t.size:
            out[k:] = self.after.predict_scores(t[k:], a[k:])
        self.n_predictions += int(t.size)
        return out.reshape(np.shape(tasks))

    def predict(self, contexts: Sequence[Any], actions: Sequence[Any]) -> list[WorldModelPrediction]:
        """One prediction per (task id, action), ``before`` or ``after`` by the prediction count."""
        return _predict_table(self, contexts, actions)

    def state_dict(self) -> dict[str, Any]:
        """The prediction count (where the break lies) and both models' noise generator states
        (JSON-serialisable; saved with a run's correction state so that a resume repeats it)."""
        return {"n_predictions": self.n_predictions, "before": self.before.state_dict(), "after": self.after.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output.

        Raises:
            KeyError: a key is missing.
        """
        self.before.load_state_dict(state["before"])
        self.after.load_state_dict(state["after"])
        self.n_predictions = int(state["n_predictions"])


# ---------------------------------------------------------------------- correlation
@dataclass(frozen=True)
class CorrelationEstimate:
    """Within-group correlation of world-model vs real score.

    Attributes:
        pearson: mean over the used groups of the per-group Pearson correlation (NaN if none).
        spearman: the same with Spearman's rank correlation (NaN if none).
        n_groups: groups measured.
        n_used: groups in the means (both score vectors non-constant).
    """

    pearson: float
    spearman: float
    n_groups: int
    n_used: int


def within_group_correlation(predicted: np.ndarray, real: np.ndarray) -> CorrelationEstimate:
    """Within-group Pearson and Spearman correlation (scipy.stats), averaged over groups.

    Definition (the one used everywhere in the sweep): per group, the correlation between its
    G world-model scores and its G real scores; then the mean over the groups in which neither
    vector is constant (a constant vector has no defined correlation; GRPO gets no signal from
    such a group either).

    Args:
        predicted, real: float arrays (n_groups, G), G >= 2.

    Returns:
        A :class:`CorrelationEstimate`.

    Raises:
        ValueError: shapes differ or are not (n_groups, G >= 2).
    """
    p, r = np.asarray(predicted, dtype=np.float64), np.asarray(real, dtype=np.float64)
    if p.shape != r.shape or p.ndim != 2 or p.shape[1] < 2:
        raise ValueError(f"predicted and real must both have shape (n_groups, G >= 2), got {p.shape} and {r.shape}")
    ok = (np.ptp(p, axis=1) > 1e-12) & (np.ptp(r, axis=1) > 1e-12)
    nan = float("nan")
    if not ok.any():
        return CorrelationEstimate(nan, nan, int(p.shape[0]), 0)
    p, r = p[ok], r[ok]
    # row-wise Pearson (what scipy.stats.pearsonr gives per group), and Spearman = Pearson of
    # the average ranks (scipy.stats.rankdata, ties averaged: scipy.stats.spearmanr's definition)
    pear = _rowwise_pearson(p, r)
    spear = _rowwise_pearson(stats.rankdata(p, axis=1), stats.rankdata(r, axis=1))
    return CorrelationEstimate(float(np.mean(pear)), float(np.mean(spear)), int(ok.size), int(ok.sum()))


def _rowwise_pearson(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    xc, yc = x - x.mean(axis=1, keepdims=True), y - y.mean(axis=1, keepdims=True)
    return np.clip((xc * yc).sum(axis=1) / np.sqrt((xc * xc).sum(axis=1) * (yc * yc).sum(axis=1)), -1.0, 1.0)


def measured_correlation(
    env: Any,
    wm_error: WorldModelError,
    policy_probs: np.ndarray | None = None,
    n_groups: int = 256,
    group_size: int = 8,
    seed: int = 0,
) -> CorrelationEstimate:
    """Measure the within-group correlation a world-model error produces on an env.

    Draws ``n_groups`` groups (task uniform, ``group_size`` actions from ``policy_probs``),
    executes each action with the env's outcome model (:meth:`KnownTruthEnv.sample_outcomes`,
    the real score of :meth:`KnownTruthEnv.step`), predicts it with a fresh
    :class:`KnownTruthWorldModel` (``wm_error``, ``seed``) and returns
    :func:`within_group_correlation`.

    Args:
        env: a :class:`KnownTruthEnv` (or a ``gym.make`` of it).
        wm_error: the world model's error.
        policy_probs: float (n_tasks, n_actions) or (n_actions,) action probabilities
            (default: uniform, the untrained policy).
        n_groups: groups to draw (>= 1).
        group_size: G, actions per group (>= 2).
        seed: seed of the draws and of the world model.

    Returns:
        A :class:`CorrelationEstimate`.

    Raises:
        ValueError: ``n_groups < 1``, ``group_size < 2`` or bad ``policy_probs``.
    """
    base = getattr(env, "unwrapped", env)
    if not _is_int(n_groups) or n_groups < 1:
        raise ValueError(f"n_groups must be an integer >= 1, got {n_groups!r}")
    if not _is_int(group_size) or group_size < 2:
        raise ValueError(f"group_size must be an integer >= 2 (a correlation needs two rollouts), got {group_size!r}")
    probs = np.full((base.n_tasks, base.n_actions), 1.0 / base.n_actions) if policy_probs is None else np.asarray(policy_probs, dtype=np.float64)
    if probs.shape == (base.n_actions,):
        probs = np.broadcast_to(probs, (base.n_tasks, base.n_actions))
    if probs.shape != (base.n_tasks, base.n_actions) or (probs < 0).any() or not np.allclose(probs.sum(axis=1), 1.0, atol=1e-6):
        raise ValueError(f"policy_probs must be non-negative of shape ({base.n_tasks}, {base.n_actions}) or "
                         f"({base.n_actions},) with rows summing to 1")
    rng = np.random.default_rng([int(seed), 31337])
    tasks = rng.integers(base.n_tasks, size=n_groups)
    cdf = np.cumsum(probs[tasks], axis=1)
    u = rng.random((n_groups, group_size))
    actions = np.minimum((u[:, :, None] > cdf[:, None, :]).sum(axis=2), base.n_actions - 1)
    task_grid = np.repeat(tasks[:, None], group_size, axis=1)
    real = base.sample_outcomes(task_grid, actions, rng)
    predicted = KnownTruthWorldModel(base, wm_error, seed=seed).predict_scores(task_grid, actions)
    return within_group_correlation(predicted, real)
