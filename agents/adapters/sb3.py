"""WMRL under Stable-Baselines3: anchored vector envs, ρ on PPO advantages, saved corrections.

Each sub-env of the vector env is an :class:`~wmrl_envs.AnchoredWorldModelWrapper`; it groups
``group_size`` consecutive episodes of that sub-env, routes each group to real execution
(anchor) or to the world model, pays world-model episodes the calibrated score ``f̂(r̂)`` and
feeds the anchor pairs to the shared corrections (Yang et al., arXiv 2608.12564;
``docs/method.md``). Nothing of the method is re-implemented here:

* :func:`make_anchored_vec_env` builds a ``DummyVecEnv`` of such wrappers that share ONE
  :class:`~wmrl_envs.core.WMRLCorrector` (so every sub-env's anchors calibrate the same map)
  and one :class:`~wmrl_envs.core.CostLedger`; each sub-env has its own seeded router.
* :class:`AnchoredVecEnv` is the ``VecEnvWrapper`` that holds the method's state the way
  ``VecNormalize`` holds running statistics: a ``training`` flag (``False`` freezes the
  corrections and routes every episode to ``eval_route``, by default real execution),
  ``save(path)`` / ``AnchoredVecEnv.load(path, venv)`` of the routing and correction state
  (router generators, route queues, anchor pairs, isotonic-map settings, disagreement EMA and
  ρ scale, ledger) as JSON beside the model's ``.zip`` — the envs themselves are never saved.
* :class:`AnchorWeightCallback` applies ρ.

Why ρ multiplies PPO's GAE advantages (not the rewards) and why the whole map f̂ matters under
PPO: ``docs/method.md``, "Third-party RL loops".

Contents:
    * :func:`make_anchored_vec_env` — the vector env factory.
    * :class:`AnchoredVecEnv` — ``training``, ``save``/``load``, ``state_dicts``, ``stats``.
    * :class:`AnchorWeightCallback` — ρ on the rollout buffer's advantages (PPO, A2C).
    * :data:`STATE_FORMAT` — the ``"format"`` tag of saved state files.

Example:
    >>> from stable_baselines3 import PPO
    >>> from wmrl_envs.core import CorrectionConfig
    >>> from wmrl_envs.envs.guess import GuessEnv, guess_score
    >>> from wmrl_envs.world_models.synthetic import SyntheticWorldModel
    >>> venv = make_anchored_vec_env(GuessEnv, SyntheticWorldModel(guess_score), n_envs=2,
    ...                              group_size=4, correction=CorrectionConfig(anchor_fraction=0.25))
    >>> model = PPO("MlpPolicy", venv, n_steps=32, batch_size=64, n_epochs=1, seed=0)
    >>> _ = model.learn(64, callback=AnchorWeightCallback())
    >>> venv.stats()["groups_routed"] > 0
    True
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecEnvWrapper
from stable_baselines3.common.vec_env.base_vec_env import VecEnvObs, VecEnvStepReturn

from wmrl_envs.core import EXECUTION, CorrectionConfig, CostLedger, WMRLCorrector
from wmrl_envs.core.loop import CorrectionLoop, default_groups_per_step
from wmrl_envs.utils import write_json_atomic
from wmrl_envs.world_models.base import WorldModel
from wmrl_envs.wrappers import AnchoredWorldModelWrapper
from wmrl_envs.wrappers.common import REMOVED_CORRECTION_KWARGS, reject_removed_kwargs

__all__ = ["STATE_FORMAT", "AnchoredVecEnv", "AnchorWeightCallback", "make_anchored_vec_env"]

STATE_FORMAT = "wmrl-anchored-vec-env/1"
"""``"format"`` tag written by :meth:`AnchoredVecEnv.save` and checked by :meth:`AnchoredVecEnv.load`."""


class AnchoredVecEnv(VecEnvWrapper):
    """A ``VecEnvWrapper`` over sub-envs that are (or contain) ``AnchoredWorldModelWrapper``.

    Observations, rewards, dones and infos pass through unchanged (the sub-env wrappers do
    the routing and pay the rewards). This class adds what ``VecNormalize`` adds for its
    statistics: the ``training`` flag and ``save``/``load`` of the method's state.

    Args:
        venv: a vector env whose every sub-env has an ``AnchoredWorldModelWrapper`` in its
            wrapper stack (e.g. built by :func:`make_anchored_vec_env`, possibly under
            ``Monitor``). ``DummyVecEnv`` or ``SubprocVecEnv`` (then each worker has its own
            copy of the corrections).

    Raises:
        ValueError: a sub-env has no ``AnchoredWorldModelWrapper``.
    """

    def __init__(self, venv: VecEnv) -> None:
        wrapped = venv.env_is_wrapped(AnchoredWorldModelWrapper)
        if not all(wrapped):
            missing = [i for i, ok in enumerate(wrapped) if not ok]
            raise ValueError(
                f"sub-envs {missing} have no AnchoredWorldModelWrapper; build the vector env with "
                "make_anchored_vec_env(...) or wrap each env in AnchoredWorldModelWrapper"
            )
        super().__init__(venv)

    def reset(self) -> VecEnvObs:
        """Reset every sub-env (see ``AnchoredWorldModelWrapper.reset`` for group semantics)."""
        return self.venv.reset()

    def step_wait(self) -> VecEnvStepReturn:
        """Step every sub-env; ``infos[i]["wmrl"]`` carries route, scores and ρ."""
        return self.venv.step_wait()

    # ------------------------------------------------------------------ training flag
    @property
    def training(self) -> bool:
        """``True`` while every sub-env's corrections learn; ``False`` = evaluation (frozen)."""
        return all(self.venv.get_attr("training"))

    @training.setter
    def training(self, value: bool) -> None:
        self.venv.env_method("set_wrapper_attr", "training", bool(value))

    # ------------------------------------------------------------------ state
    def state_dicts(self) -> list[dict[str, Any]]:
        """``AnchoredWorldModelWrapper.state_dict()`` of every sub-env (JSON-serialisable)."""
        return list(self.venv.env_method("state_dict"))

    def load_state_dicts(self, states: Sequence[dict[str, Any]]) -> None:
        """Load one :meth:`state_dicts` entry into each sub-env (the ``training`` flag is kept).

        Raises:
            ValueError: ``len(states) != num_envs``.
        """
        if len(states) != self.num_envs:
            raise ValueError(f"got {len(states)} saved sub-env states for {self.num_envs} sub-envs")
        for i, state in enumerate(states):
            self.venv.env_method("load_state_dict", state, indices=[i])

    def save(self, save_path: str | Path) -> None:
        """Write the routing and correction state of every sub-env to a JSON file, atomically.

        Save it beside the model (``model.save("ppo.zip"); venv.save("wmrl_state.json")``), as
        with ``VecNormalize``. Save between rollouts: a sub-env's unfinished group is not part
        of its state (its episodes are dropped, see ``AnchoredWorldModelWrapper.state_dict``).
        """
        write_json_atomic(save_path, {"format": STATE_FORMAT, "num_envs": self.num_envs, "envs": self.state_dicts()})

    @staticmethod
    def load(load_path: str | Path, venv: VecEnv) -> AnchoredVecEnv:
        """Load a file written by :meth:`save` into ``venv`` (built like the saved one).

        Args:
            load_path: the JSON file.
            venv: an :class:`AnchoredVecEnv` (loaded in place) or the vector env to wrap.

        Returns:
            The :class:`AnchoredVecEnv` holding the loaded state.

        Raises:
            FileNotFoundError: no such file.
            ValueError: not a saved state, or a different number of sub-envs.
        """
        data = json.loads(Path(load_path).read_text())
        if not isinstance(data, dict) or data.get("format") != STATE_FORMAT:
            raise ValueError(f"{load_path} is not a state file written by AnchoredVecEnv.save")
        out = venv if isinstance(venv, AnchoredVecEnv) else AnchoredVecEnv(venv)
        if int(data["num_envs"]) != out.num_envs:
            raise ValueError(f"{load_path} holds {data['num_envs']} sub-envs, the vector env has {out.num_envs}")
        out.load_state_dicts(data["envs"])
        return out

    # ------------------------------------------------------------------ reporting
    def stats(self) -> dict[str, Any]:
        """Routing counts summed over sub-envs, the corrector's stats, the costs.

        Returns:
            ``groups_routed``, ``anchor_groups``, ``realised_anchor_fraction``, ``episodes``,
            ``real_steps`` (real executions in the distinct ledgers), ``n_correctors`` (distinct corrector objects;
            1 when shared), the first corrector's :meth:`~wmrl_envs.core.WMRLCorrector.stats`
            (``rho``, ``anchor_pairs``, calibration errors, ...), ``ledger``
            (``{source: {"count", "seconds", "cpu_seconds", "cpu_unmeasured"}}`` summed over
            distinct ledgers; ungraded scores under ``"ungraded:<cause>"``), ``ungraded_rollouts`` and ``ungraded_by_cause``
            (summed over sub-envs; each sub-env applies the stop rule to its own groups).
        """
        loops = self.venv.get_attr("loop")  # each sub-env's CorrectionLoop (DummyVecEnv: the objects themselves)
        routers = [lp.router for lp in loops]
        correctors = {id(lp.corrector): lp.corrector for lp in loops}
        ledgers = {id(lp.ledger): lp.ledger for lp in loops}
        ledger = CostLedger()
        for lg in ledgers.values():
            ledger.merge(lg)
        n = sum(r.n_groups_routed for r in routers)
        k = sum(r.n_anchor_groups for r in routers)
        return {
            "groups_routed": n,
            "anchor_groups": k,
            "realised_anchor_fraction": k / n if n else 0.0,
            "episodes": int(sum(lp.n_episodes for lp in loops)),
            "real_steps": ledger.count(EXECUTION),
            "n_correctors": len(correctors),
            **next(iter(correctors.values())).stats(),
            "ledger": ledger.to_dict(),
            **_ungraded_totals([lp.ungraded for lp in loops]),
        }


def _ungraded_totals(monitors: Sequence[Any]) -> dict[str, Any]:
    causes: dict[str, int] = {}
    for m in monitors:
        for c, k in m.causes.items():
            causes[c] = causes.get(c, 0) + int(k)
    return {"ungraded_rollouts": int(sum(m.n_ungraded for m in monitors)), "ungraded_by_cause": causes}


def make_anchored_vec_env(
    env_fn: Callable[[], gym.Env],
    world_model: WorldModel | None,
    n_envs: int = 1,
    *,
    seed: int = 0,
    correction: CorrectionConfig | None = None,
    corrector: WMRLCorrector | None = None,
    ledger: CostLedger | None = None,
    monitor: bool = True,
    vec_env_cls: type[VecEnv] = DummyVecEnv,
    vec_env_kwargs: dict[str, Any] | None = None,
    **wrapper_kwargs: Any,
) -> AnchoredVecEnv:
    """Build ``n_envs`` anchored sub-envs sharing one corrector and ledger, as an :class:`AnchoredVecEnv`.

    Sub-env ``i`` is ``Monitor(AnchoredWorldModelWrapper(env_fn(), loop=CorrectionLoop(correction,
    world_model=world_model, seed=seed + i, corrector=<shared>, ledger=<shared>, ...), **wrapper_kwargs))``
    (``Monitor`` logs the training reward: real on anchor episodes, ``f̂(r̂)`` on world-model
    episodes): each sub-env routes with its own seeded router and shares the corrections and costs.

    Args:
        env_fn: builds one expensive env (e.g. ``GuessEnv`` or ``lambda: gym.make(...)``).
        world_model: shared by all sub-envs (any object with ``predict(contexts, actions)``).
        n_envs: number of sub-envs (>= 1).
        seed: sub-env ``i``'s router gets ``seed + i``.
        correction: the correction settings, a :class:`~wmrl_envs.core.CorrectionConfig` (default
            ``CorrectionConfig()``): every sub-env's router follows its anchor schedule, and the
            shared corrector is built from it. The former ``debiaser_kwargs``/``denoiser_kwargs``
            and ``anchor_fraction``/``min_anchor_groups`` keyword arguments raise a ``TypeError``
            that says how to write them.
        corrector: a custom shared corrector instead of ``correction.build_corrector()``.
        ledger: the shared cost ledger (default: a new one).
        monitor: wrap each sub-env in SB3's ``Monitor`` (default ``True``).
        vec_env_cls: ``DummyVecEnv`` (default; corrector and ledger truly shared) or
            ``SubprocVecEnv`` (each worker process gets its own copy).
        vec_env_kwargs: keyword arguments of ``vec_env_cls``.
        **wrapper_kwargs: ``AnchoredWorldModelWrapper`` arguments (``group_size``, ``mode``,
            ``episode_steps``, ...) and the loop's (``groups_per_step``, ``eval_route``,
            ``world_model_timeout_s``, ``max_ungraded_share``).

    Returns:
        The :class:`AnchoredVecEnv`.

    Raises:
        ValueError: ``n_envs < 1``; any error of ``AnchoredWorldModelWrapper``'s or
            ``CorrectionLoop``'s constructor.
        TypeError: a removed correction keyword argument (the message gives its new spelling).
    """
    if n_envs < 1:
        raise ValueError(f"n_envs must be >= 1, got {n_envs}")
    reject_removed_kwargs("make_anchored_vec_env", {
        k: wrapper_kwargs.pop(k) for k in list(wrapper_kwargs) if k in REMOVED_CORRECTION_KWARGS})
    correction = correction if correction is not None else CorrectionConfig()
    corrector = corrector if corrector is not None else correction.build_corrector()
    shared_ledger = ledger if ledger is not None else CostLedger()
    loop_kwargs = {k: wrapper_kwargs.pop(k) for k in ("groups_per_step", "eval_route", "world_model_timeout_s",
                                                       "max_ungraded_share") if k in wrapper_kwargs}
    if loop_kwargs.get("groups_per_step") is None:
        loop_kwargs["groups_per_step"] = default_groups_per_step(
            correction.auto_start_fraction if correction.adaptive else correction.anchor_fraction)
    if world_model is None and correction.anchor_fraction != 1.0:
        raise ValueError("world_model=None is only valid with correction=CorrectionConfig(anchor_fraction=1.0) "
                         f"(every group executed for real); got anchor_fraction={correction.anchor_fraction}")

    def thunk(i: int) -> Callable[[], gym.Env]:
        def make() -> gym.Env:
            loop = CorrectionLoop(correction, world_model=world_model, seed=seed + i, corrector=corrector,
                                  ledger=shared_ledger, **loop_kwargs)
            env: gym.Env = AnchoredWorldModelWrapper(env_fn(), None, loop=loop, **wrapper_kwargs)
            return Monitor(env) if monitor else env

        return make

    return AnchoredVecEnv(vec_env_cls([thunk(i) for i in range(n_envs)], **(vec_env_kwargs or {})))


class AnchorWeightCallback(BaseCallback):
    """Multiply the GAE advantages of anchor-episode steps by ρ (on-policy algorithms: PPO, A2C).

    See the module docstring ("How ρ reaches PPO"). Per rollout it fills a weight array of
    the rollout buffer's shape ``(n_steps, n_envs)`` (float32) from
    ``infos[i]["wmrl"]["advantage_weight"]`` (1.0 where a step has no ``"wmrl"`` info) and, in
    ``on_rollout_end``, sets ``rollout_buffer.advantages *= weights``; ``returns`` are left
    unweighted.

    Ungraded rollouts (``info["wmrl"]["graded"] is False``: the machinery failed, see
    ``docs/method.md``, "Ungraded rollouts") get weight 0 at the step that ends them, so
    their placeholder reward of 0.0 does not push the policy (PPO has no group to drop the row
    from; earlier steps of a multi-step ungraded episode keep their weight).

    Attributes:
        last_weights: the weights of the latest rollout (``np.ndarray`` float32,
            ``(n_steps, n_envs)``), ``None`` before the first.
        n_weighted_steps: steps with a weight other than 1 (ρ) so far (int).
        n_ungraded_steps: steps given weight 0 because their episode is ungraded (int).

    Raises:
        TypeError: (when learning starts) the algorithm has no ``RolloutBuffer`` (e.g. SAC,
            DQN: off-policy algorithms have no per-rollout advantages to weight).

    Example:
        >>> model.learn(10_000, callback=AnchorWeightCallback())  # doctest: +SKIP
    """

    def __init__(self, verbose: int = 0) -> None:
        super().__init__(verbose)
        self._weights: np.ndarray | None = None
        self.last_weights: np.ndarray | None = None
        self.n_weighted_steps = 0
        self.n_ungraded_steps = 0

    def _init_callback(self) -> None:
        if not isinstance(getattr(self.model, "rollout_buffer", None), RolloutBuffer):
            raise TypeError(
                f"AnchorWeightCallback weights the advantages of an on-policy RolloutBuffer (PPO, A2C); "
                f"{type(self.model).__name__} has none"
            )

    def _on_rollout_start(self) -> None:
        buf = self.model.rollout_buffer
        self._weights = np.ones((buf.buffer_size, buf.n_envs), dtype=np.float32)

    def _on_step(self) -> bool:
        assert self._weights is not None
        pos = self.model.rollout_buffer.pos  # the row this step is about to be stored in
        for i, info in enumerate(self.locals["infos"]):
            wm = info.get("wmrl")
            if wm is not None and wm.get("advantage_weight") is not None:
                self._weights[pos, i] = float(wm["advantage_weight"])
            if wm is not None and wm.get("graded") is False:  # ungraded: not a real 0, no push
                self._weights[pos, i] = 0.0
                self.n_ungraded_steps += 1
        return True

    def _on_rollout_end(self) -> None:
        assert self._weights is not None
        buf = self.model.rollout_buffer
        buf.advantages *= self._weights
        self.last_weights = self._weights.copy()
        weighted = (self._weights != 1.0) & (self._weights != 0.0)
        self.n_weighted_steps += int(weighted.sum())
        self.logger.record("wmrl/weighted_step_share", float(weighted.mean()))
        if weighted.any():
            self.logger.record("wmrl/anchor_weight", float(self._weights[weighted].mean()))
