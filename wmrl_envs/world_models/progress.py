"""``ProgressWorldModel``: a learned, frozen success/progress predictor for reward-mode WMRL.

The stand-in for Robometer (``docs/method.md``, "Reward mode";
:mod:`wmrl_envs.envs.libero.robometer`) in state-based robot tasks that run on a CPU. It
reads the *states* of ``n_frames`` (default 8) uniformly sampled frames of a
:class:`~wmrl_envs.world_models.Trajectory` — observations ``o_0 … o_T`` at indices
``round(linspace(0, T, n_frames))``, so the first and the last observation are always
included — each with its time fraction ``t / T``, and predicts with one small MLP:

* the probability that the episode succeeded (a sigmoid head, trained with binary
  cross-entropy on real success labels), and
* the progress at each sampled frame (``n_frames`` sigmoid heads, trained with a soft binary
  cross-entropy on progress labels in [0, 1], optional).

It is fitted *before* reinforcement learning on offline rollouts (e.g. a scripted controller
with noise and a behaviour-cloned policy) and frozen afterwards: :meth:`predict` never
trains. Its score (the raw world-model score ``r̂`` the wrapper calibrates) is chosen by
``score``:

* ``"success"`` (default): the predicted success probability, in [0, 1];
* ``"progress_delta"``: Robometer's reference reward, the mean of the last 3 predicted
  progress values minus the mean of the first 3, in [-1, 1];
* ``"progress_last"``: the predicted progress of the last frame, in [0, 1].

Every prediction carries ``extras = {"success_prob": float, "progress": [n_frames floats]}``.

Example:
    >>> import numpy as np
    >>> from wmrl_envs.world_models import Trajectory
    >>> from wmrl_envs.world_models.progress import ProgressWorldModel
    >>> rng = np.random.default_rng(0)
    >>> trajs, succ = [], []
    >>> for _ in range(64):  # 1-D toy: success when the state ends above 0.5
    ...     xs = np.cumsum(rng.normal(0.05, 0.1, 11)).reshape(-1, 1)
    ...     trajs.append(Trajectory(list(xs), [0.0] * 10, True)); succ.append(float(xs[-1, 0] > 0.5))
    >>> wm = ProgressWorldModel(obs_dim=1, seed=0).fit(trajs, succ, epochs=50)
    >>> len(wm.predict([None] * 2, trajs[:2]))
    2
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Literal, Sequence

import numpy as np

from wmrl_envs.causes import UNSCORABLE
from wmrl_envs.world_models.base import Trajectory, WorldModelPrediction

__all__ = ["ProgressWorldModel", "frame_indices"]

ScoreKind = Literal["success", "progress_delta", "progress_last"]
_SCORES = ("success", "progress_delta", "progress_last")


def frame_indices(n_steps: int, n_frames: int = 8) -> np.ndarray:
    """Indices of ``n_frames`` uniformly sampled observations of an episode of ``n_steps`` steps.

    Args:
        n_steps: T, the number of actions taken (the episode has T + 1 observations), >= 0.
        n_frames: frames to sample, >= 1.

    Returns:
        int64 array of shape (n_frames,), non-decreasing, from 0 to T (both included; indices
        repeat when T + 1 < n_frames).

    Raises:
        ValueError: negative ``n_steps`` or ``n_frames < 1``.

    Example:
        >>> frame_indices(50).tolist()
        [0, 7, 14, 21, 29, 36, 43, 50]
    """
    if n_steps < 0 or n_frames < 1:
        raise ValueError(f"need n_steps >= 0 and n_frames >= 1, got {n_steps}, {n_frames}")
    return np.rint(np.linspace(0, n_steps, n_frames)).astype(np.int64)


class ProgressWorldModel:
    """MLP on the states of ``n_frames`` uniformly sampled frames → success probability and progress.

    Implements the :class:`~wmrl_envs.world_models.WorldModel` protocol for reward mode
    (``predict(contexts, actions)`` with :class:`~wmrl_envs.world_models.Trajectory` actions).

    Args:
        obs_dim: length of one frame's state vector (Reacher-v5: 10).
        n_frames: frames sampled per trajectory (Robometer reference: 8).
        hidden: widths of the hidden layers.
        score: the raw score returned by :meth:`predict` (see the module docstring).
        state_fn: maps one observation to a 1-D float state of length ``obs_dim`` (default:
            ``np.asarray(obs, float32).ravel()``; give one for dict observations).
        seed: seed of the weight initialisation and of the fitting's mini-batches.

    Attributes:
        fitted: ``True`` after :meth:`fit` or :meth:`load`.
        history: per-epoch training losses of the last :meth:`fit` (list of float).

    Raises:
        ValueError: invalid sizes or ``score``.
    """

    def __init__(
        self,
        obs_dim: int,
        n_frames: int = 8,
        hidden: Sequence[int] = (128, 128),
        *,
        score: ScoreKind = "success",
        state_fn: Callable[[Any], np.ndarray] | None = None,
        seed: int = 0,
    ) -> None:
        import torch
        from torch import nn

        if obs_dim < 1 or n_frames < 1 or any(int(h) < 1 for h in hidden):
            raise ValueError(f"need obs_dim, n_frames and hidden widths >= 1, got {obs_dim}, {n_frames}, {hidden}")
        if score not in _SCORES:
            raise ValueError(f"score must be one of {_SCORES}, got {score!r}")
        if score == "progress_delta" and n_frames < 6:
            raise ValueError("score='progress_delta' needs n_frames >= 6 (mean of the last 3 minus the first 3)")
        self.obs_dim = int(obs_dim)
        self.n_frames = int(n_frames)
        self.hidden = tuple(int(h) for h in hidden)
        self.score = score
        self.state_fn = state_fn
        self.seed = int(seed)
        self.in_dim = self.n_frames * (self.obs_dim + 1)
        gen = torch.Generator().manual_seed(self.seed)
        layers: list[nn.Module] = []
        d = self.in_dim
        for h in self.hidden:
            lin = nn.Linear(d, h)
            _init_linear(lin, gen)
            layers += [lin, nn.Tanh()]
            d = h
        out = nn.Linear(d, 1 + self.n_frames)
        _init_linear(out, gen)
        layers.append(out)
        self.net = nn.Sequential(*layers)
        self.feat_mean = np.zeros(self.in_dim, dtype=np.float32)
        self.feat_std = np.ones(self.in_dim, dtype=np.float32)
        self.fitted = False
        self.history: list[float] = []

    # ------------------------------------------------------------------ features
    def _state(self, obs: Any) -> np.ndarray:
        x = self.state_fn(obs) if self.state_fn is not None else obs
        x = np.asarray(x, dtype=np.float32).ravel()
        if x.shape[0] != self.obs_dim:
            raise ValueError(f"a frame's state has {x.shape[0]} values, expected obs_dim={self.obs_dim}")
        return x

    def features(self, trajectory: Trajectory) -> np.ndarray:
        """The model's input for one trajectory (before standardisation).

        Args:
            trajectory: a :class:`Trajectory` with at least one observation.

        Returns:
            float32 array of shape (n_frames * (obs_dim + 1),): per sampled frame its state
            followed by its time fraction t / T (0 when T = 0).

        Raises:
            ValueError: no observations, or a frame of the wrong size.
        """
        obs = trajectory.observations
        if len(obs) == 0:
            raise ValueError("the trajectory has no observations")
        t_max = len(obs) - 1
        idx = frame_indices(t_max, self.n_frames)
        rows = []
        for i in idx:
            frac = float(i) / t_max if t_max > 0 else 0.0
            rows.append(np.concatenate([self._state(obs[int(i)]), np.array([frac], np.float32)]))
        return np.concatenate(rows).astype(np.float32)

    # ------------------------------------------------------------------ fitting
    def fit(
        self,
        trajectories: Sequence[Trajectory],
        successes: Sequence[float],
        progress: Sequence[Sequence[float]] | None = None,
        *,
        epochs: int = 200,
        lr: float = 1e-3,
        batch_size: int = 128,
        weight_decay: float = 1e-4,
        progress_weight: float = 1.0,
    ) -> "ProgressWorldModel":
        """Fit on offline episodes with real outcomes (before RL); the model is frozen afterwards.

        Args:
            trajectories: N finished :class:`Trajectory` objects.
            successes: N real success labels in [0, 1] (e.g. the simulator's 0/1 success).
            progress: optional per-trajectory progress labels in [0, 1], one per observation
                (length T_i + 1); the labels of the sampled frames are used. ``None`` trains
                the success head only (the progress heads stay untrained).
            epochs: passes over the data (Adam).
            lr: Adam learning rate.
            batch_size: mini-batch size.
            weight_decay: Adam weight decay.
            progress_weight: weight of the progress loss relative to the success loss.

        Returns:
            ``self`` (fitted, frozen).

        Raises:
            ValueError: empty data, mismatched lengths, labels outside [0, 1].
        """
        import torch
        import torch.nn.functional as F

        n = len(trajectories)
        if n == 0:
            raise ValueError("fit() needs at least one trajectory")
        if len(successes) != n or (progress is not None and len(progress) != n):
            raise ValueError(
                f"got {n} trajectories, {len(successes)} success labels and "
                f"{'no' if progress is None else len(progress)} progress label lists; pass one per trajectory"
            )
        y = np.asarray(successes, dtype=np.float32)
        if not np.all((y >= 0) & (y <= 1)):
            raise ValueError("success labels must lie in [0, 1]")
        x = np.stack([self.features(t) for t in trajectories])
        p = np.zeros((n, self.n_frames), dtype=np.float32)
        if progress is not None:
            for k, (traj, lab) in enumerate(zip(trajectories, progress)):
                lab = np.asarray(lab, dtype=np.float32)
                if lab.shape[0] != len(traj.observations):
                    raise ValueError(
                        f"trajectory {k} has {len(traj.observations)} observations but {lab.shape[0]} progress labels"
                    )
                p[k] = lab[frame_indices(len(traj.observations) - 1, self.n_frames)]
            if not np.all((p >= 0) & (p <= 1)):
                raise ValueError("progress labels must lie in [0, 1]")
        self.feat_mean = x.mean(axis=0).astype(np.float32)
        self.feat_std = (x.std(axis=0) + 1e-6).astype(np.float32)
        xt = torch.from_numpy((x - self.feat_mean) / self.feat_std)
        yt, pt = torch.from_numpy(y), torch.from_numpy(p)
        self.net.train()
        self.net.requires_grad_(True)
        opt = torch.optim.Adam(self.net.parameters(), lr=lr, weight_decay=weight_decay)
        gen = torch.Generator().manual_seed(self.seed)
        self.history = []
        for _ in range(int(epochs)):
            perm = torch.randperm(n, generator=gen)
            total = 0.0
            for s in range(0, n, batch_size):
                b = perm[s : s + batch_size]
                out = self.net(xt[b])
                loss = F.binary_cross_entropy_with_logits(out[:, 0], yt[b])
                if progress is not None:
                    loss = loss + progress_weight * F.binary_cross_entropy_with_logits(out[:, 1:], pt[b])
                opt.zero_grad()
                loss.backward()
                opt.step()
                total += float(loss.detach()) * len(b)
            self.history.append(total / n)
        self._freeze()
        return self

    def _freeze(self) -> None:
        self.net.eval()
        self.net.requires_grad_(False)
        self.fitted = True

    # ------------------------------------------------------------------ inference
    def predict_proba(self, trajectories: Sequence[Trajectory]) -> tuple[np.ndarray, np.ndarray]:
        """Success probabilities and per-frame progress of a batch (no grad, one forward pass).

        Args:
            trajectories: B trajectories.

        Returns:
            ``(success_prob, progress)``: float64 arrays of shapes (B,) and (B, n_frames), in [0, 1].

        Raises:
            RuntimeError: not fitted.
            ValueError: a trajectory without observations or with a wrong-sized frame.
        """
        import torch

        if not self.fitted:
            raise RuntimeError("ProgressWorldModel is not fitted; call fit() or load() first")
        if len(trajectories) == 0:
            return np.zeros(0), np.zeros((0, self.n_frames))
        x = np.stack([self.features(t) for t in trajectories])
        with torch.no_grad():
            out = torch.sigmoid(self.net(torch.from_numpy((x - self.feat_mean) / self.feat_std))).double().numpy()
        return out[:, 0], out[:, 1:]

    def _score(self, succ: float, prog: np.ndarray) -> float:
        if self.score == "success":
            return float(succ)
        if self.score == "progress_last":
            return float(prog[-1])
        return float(prog[-3:].mean() - prog[:3].mean())

    def predict(self, contexts: Sequence[Any], actions: Sequence[Any]) -> list[WorldModelPrediction]:
        """Score B finished episodes (the reward-mode world-model protocol).

        Args:
            contexts: B reset observations (unused: the first frame of each trajectory is
                the reset observation).
            actions: B :class:`Trajectory` objects.

        Returns:
            B :class:`WorldModelPrediction`: ``score`` per ``self.score``; ``extras`` with
            ``success_prob`` and ``progress`` (n_frames floats). Anything that is not a
            trajectory with well-formed frames gets ``score=None`` (ungraded, ``ungraded_cause``
            ``"unscorable_input"``), never an error. A failure of the model itself raises;
            the wrappers then leave the batch ungraded (``"world_model_error"``, warned about).

        Raises:
            RuntimeError: not fitted.
            ValueError: ``contexts`` and ``actions`` differ in length.
        """
        if len(contexts) != len(actions):
            raise ValueError(f"got {len(contexts)} contexts and {len(actions)} actions; pass one context per action")
        if not self.fitted:
            raise RuntimeError("ProgressWorldModel is not fitted; call fit() or load() first")
        ok: list[int] = []
        for i, a in enumerate(actions):
            if isinstance(a, Trajectory) and len(a.observations) > 0:
                try:
                    self.features(a)
                except (ValueError, TypeError):
                    continue
                ok.append(i)
        preds = [  # an input that cannot be scored: counted by the wrappers, not a failure of the model
            WorldModelPrediction(score=None, status="malformed", model_called=False,
                                 feedback="not a trajectory with valid frames", ungraded_cause=UNSCORABLE)
            for _ in actions
        ]
        if ok:
            succ, prog = self.predict_proba([actions[i] for i in ok])
            for j, i in enumerate(ok):
                preds[i] = WorldModelPrediction(
                    score=self._score(succ[j], prog[j]),
                    extras={"success_prob": float(succ[j]), "progress": prog[j].tolist()},
                )
        return preds

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path) -> None:
        """Write the fitted model (weights, standardisation, settings) with ``torch.save``.

        ``state_fn`` is not saved: pass it again to :meth:`load`.

        Raises:
            RuntimeError: not fitted.
        """
        import torch

        if not self.fitted:
            raise RuntimeError("nothing to save: the model is not fitted")
        torch.save(
            {
                "config": {
                    "obs_dim": self.obs_dim,
                    "n_frames": self.n_frames,
                    "hidden": list(self.hidden),
                    "score": self.score,
                    "seed": self.seed,
                },
                "state_dict": self.net.state_dict(),
                "feat_mean": torch.from_numpy(self.feat_mean),
                "feat_std": torch.from_numpy(self.feat_std),
            },
            Path(path),
        )

    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        score: ScoreKind | None = None,
        state_fn: Callable[[Any], np.ndarray] | None = None,
    ) -> "ProgressWorldModel":
        """Load a model written by :meth:`save` (frozen, ready to predict).

        Args:
            path: the file.
            score: override the saved score kind.
            state_fn: the observation → state function, if one was used.

        Raises:
            FileNotFoundError: no such file.
        """
        import torch

        blob = torch.load(Path(path), map_location="cpu", weights_only=True)
        cfg = dict(blob["config"])
        if score is not None:
            cfg["score"] = score
        wm = cls(cfg["obs_dim"], cfg["n_frames"], tuple(cfg["hidden"]), score=cfg["score"], state_fn=state_fn, seed=cfg["seed"])
        wm.net.load_state_dict(blob["state_dict"])
        wm.feat_mean = blob["feat_mean"].numpy().astype(np.float32)
        wm.feat_std = blob["feat_std"].numpy().astype(np.float32)
        wm._freeze()
        return wm


def _init_linear(lin: Any, gen: Any) -> None:
    import math

    import torch

    bound = 1.0 / math.sqrt(lin.in_features)
    with torch.no_grad():
        lin.weight.uniform_(-bound, bound, generator=gen)
        lin.bias.zero_()
