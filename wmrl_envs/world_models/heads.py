"""The heads a :class:`~wmrl_envs.world_models.learned.LearnedWorldModel` chooses among, and the
out-of-fold choice (``head="auto"``, the default).

A score that peaks inside the action space (a classifier's accuracy against its
hyper-parameters) is not linear in the features a user would give (the hyper-parameters
themselves), so a ridge head alone learns little of it. :func:`candidate_heads` gives a small
set of scikit-learn regressors, cheapest first, that between them represent linear, local and
smooth peaked landscapes; :func:`select_out_of_fold` scores each by its *out-of-fold* pooled
within-group correlation (the correlation GRPO's advantages see) and picks the best.

Candidates by feature width D (all deterministic: a refit on the same rows predicts the same):

* ``"ridge"``: ``RidgeCV`` (penalty 1e-3 … 1e3 by leave-one-out) — any D; O(N·D²);
* ``"knn"``: :class:`ScaledKNeighbors` (standardised features, the mean of the 16 nearest
  rollouts) — any D; a fit stores the rows, a prediction is O(N·D);
* ``"gp"``: a Gaussian process (standardised features, constant × anisotropic RBF + white
  noise, ``normalize_y``, its hyper-parameters by marginal likelihood) on the most recent
  :data:`GP_MAX_ROWS` rows (:class:`RecentRows`) — D <= :data:`GP_MAX_DIM`; O(M³) per likelihood
  evaluation with M <= 200;
* ``"hgb"``: ``HistGradientBoostingRegressor`` (30 trees of <= 8 leaves of >= 10 rows,
  learning rate 0.2, no early stopping) on the most recent :data:`HGB_MAX_ROWS` rows — D <=
  :data:`HGB_MAX_DIM`; O(M·D) per tree.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

__all__ = ["candidate_heads", "ScaledKNeighbors", "RecentRows", "within_group_r", "select_out_of_fold",
           "Selection", "GP_MAX_ROWS", "GP_MAX_DIM", "HGB_MAX_DIM", "HGB_MAX_ROWS",
           "kernel_theta", "with_frozen_kernel"]

GP_MAX_ROWS = 200
"""Rows a Gaussian-process head is fitted on (the most recent): bounds its O(M³) fit."""
GP_MAX_DIM = 16
"""Widest feature vector for which the Gaussian process is a candidate (one length scale per feature)."""
HGB_MAX_DIM = 64
"""Widest feature vector for which gradient boosting is a candidate."""
HGB_MAX_ROWS = 200
"""Rows gradient boosting is fitted on (the most recent)."""

from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel
from sklearn.linear_model import RidgeCV
from sklearn.model_selection import GroupKFold
from sklearn.neighbors import KNeighborsRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler


class ScaledKNeighbors(RegressorMixin, BaseEstimator):
    """k-nearest-neighbours regression on standardised features: the mean real score of the
    ``n_neighbors`` nearest stored rollouts (fewer when fewer are held).

    Args:
        n_neighbors: k (>= 1), capped at the rows held at fit time.

    ``fit(x (N, D), y (N,))``; ``predict(x (B, D)) -> (B,)``.
    """

    def __init__(self, n_neighbors: int = 16) -> None:
        self.n_neighbors = n_neighbors

    def fit(self, x: np.ndarray, y: np.ndarray) -> "ScaledKNeighbors":
        x = np.asarray(x, dtype=np.float64)
        self.scaler_ = StandardScaler().fit(x)
        k = int(max(1, min(int(self.n_neighbors), len(x))))
        self.knn_ = KNeighborsRegressor(n_neighbors=k).fit(self.scaler_.transform(x), np.asarray(y, np.float64))
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        return self.knn_.predict(self.scaler_.transform(np.asarray(x, dtype=np.float64)))


class RecentRows(RegressorMixin, BaseEstimator):
    """Fit ``estimator`` (cloned) on the last ``max_rows`` rows it is given only (the learned
    world model stores rows oldest first, so these are the most recent rollouts): bounds the
    cost of a head whose fit grows faster than N, and follows a moving policy.

    Args:
        estimator: a scikit-learn regressor.
        max_rows: rows kept (>= 1).
    """

    def __init__(self, estimator: Any = None, max_rows: int = GP_MAX_ROWS) -> None:
        self.estimator = estimator
        self.max_rows = max_rows

    def fit(self, x: np.ndarray, y: np.ndarray) -> "RecentRows":
        m = int(self.max_rows)
        self.estimator_ = clone(self.estimator).fit(np.asarray(x)[-m:], np.asarray(y)[-m:])
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        return self.estimator_.predict(x)


def _gaussian_process(dim: int) -> Any:
    kernel = (ConstantKernel(1.0, (1e-3, 1e3)) * RBF(np.ones(dim), (1e-2, 1e2))
              + WhiteKernel(0.5, (1e-4, 1e1)))
    gp = GaussianProcessRegressor(kernel, normalize_y=True, n_restarts_optimizer=0, random_state=0)
    return RecentRows(make_pipeline(StandardScaler(), gp), GP_MAX_ROWS)


def candidate_heads(dim: int) -> dict[str, Any]:
    """The heads ``head="auto"`` chooses among for D = ``dim`` features, cheapest first
    (``{name: unfitted regressor}``; see the module docstring).

    Raises:
        ValueError: ``dim`` < 1.
    """
    if int(dim) < 1:
        raise ValueError(f"dim must be >= 1 (the featurizer's width), got {dim}")
    heads: dict[str, Any] = {"ridge": RidgeCV(alphas=np.logspace(-3, 3, 13)), "knn": ScaledKNeighbors(16)}
    if dim <= GP_MAX_DIM:
        heads["gp"] = _gaussian_process(int(dim))
    if dim <= HGB_MAX_DIM:
        heads["hgb"] = RecentRows(HistGradientBoostingRegressor(
            max_iter=30, learning_rate=0.2, max_leaf_nodes=8, min_samples_leaf=10, early_stopping=False,
            random_state=0), HGB_MAX_ROWS)
    return heads


def within_group_r(scores: np.ndarray, real: np.ndarray, group_ids: np.ndarray) -> float:
    """Pooled within-group correlation of ``scores`` and ``real`` (float (N,) each; groups by
    ``group_ids`` int (N,)): both centred on their group means, then one correlation over all
    rows (as :func:`wmrl_envs.core.advisor.pooled_within_group_correlation`). 0.0 where either
    side has no within-group spread (a constant predicts nothing)."""
    _, inv = np.unique(group_ids, return_inverse=True)
    cnt = np.bincount(inv)
    s = np.asarray(scores, np.float64)
    r = np.asarray(real, np.float64)
    ds = s - (np.bincount(inv, s) / cnt)[inv]
    dr = r - (np.bincount(inv, r) / cnt)[inv]
    sxx, syy = float(ds @ ds), float(dr @ dr)
    if sxx <= 1e-24 or syy <= 1e-24:
        return 0.0
    return float(ds @ dr) / float(np.sqrt(sxx * syy))


@dataclass
class Selection:
    """What :func:`select_out_of_fold` found.

    Attributes:
        chosen: the name of the head with the best out-of-fold r over all rows.
        r: ``{name: out-of-fold pooled within-group r}`` of every candidate evaluated.
        scores: float64 (N,): each row's out-of-fold score, from the head that was best on the
            *other* folds' rows (its own fold's errors took no part in choosing it).
        cpu_s: ``{name: CPU-seconds of its out-of-fold fits and predictions}``.
    """

    chosen: str
    r: dict[str, float]
    scores: np.ndarray
    cpu_s: dict[str, float]


def select_out_of_fold(heads: Mapping[str, Any], x: np.ndarray, y: np.ndarray, group_ids: np.ndarray,
                       folds: int, fit_predict: Any) -> Selection:
    """Score each head out of fold and choose one.

    The groups are split into ``min(folds, groups)`` folds (``GroupKFold``: whole groups per
    fold); for each head, each fold is scored by the head fitted on the other folds
    (``fit_predict(head, train_idx, test_idx) -> (scores of the test rows)``, which clips as
    the learned model does). The head chosen for use is the one with the best pooled
    within-group r over all rows (ties: the cheaper, earlier one). The rows of fold k get the
    scores of the head with the best r on the rows *outside* fold k: the head that scores them
    was fitted without their outcomes, and their own errors took no part in choosing it (their
    outcomes did help fit the heads that scored the other folds).

    Args:
        heads: ``{name: regressor}``, cheapest first (>= 1).
        x: float (N, D); y: float (N,); group_ids: int (N,), >= 2 distinct.
        folds: K (>= 2).
        fit_predict: see above.

    Returns:
        A :class:`Selection`.

    Raises:
        ValueError: no head, or fewer than 2 groups.
    """
    names = list(heads)
    gid = np.asarray(group_ids)
    n_groups = np.unique(gid).size
    if not names or n_groups < 2:
        raise ValueError(f"select_out_of_fold needs >= 1 head and >= 2 groups, got {len(names)} and {n_groups}")
    splits = list(GroupKFold(n_splits=int(min(folds, n_groups))).split(x, groups=gid))
    oof = np.zeros((len(names), len(y)))
    cpu: dict[str, float] = {}
    for j, name in enumerate(names):
        t0 = time.process_time()
        for train, test in splits:
            oof[j, test] = fit_predict(heads[name], train, test)
        cpu[name] = time.process_time() - t0
    r_all = {name: within_group_r(oof[j], y, gid) for j, name in enumerate(names)}
    chosen = max(names, key=lambda n: (r_all[n], -names.index(n)))
    scores = np.empty(len(y))
    for _, test in splits:
        rest = np.ones(len(y), bool)
        rest[test] = False
        best = max(range(len(names)), key=lambda j: (within_group_r(oof[j, rest], y[rest], gid[rest]), -j))
        scores[test] = oof[best, test]
    return Selection(chosen, r_all, scores, cpu)


def _gp_of(head: Any) -> Any:
    """The ``GaussianProcessRegressor`` inside a (fitted or not) :func:`candidate_heads` GP head, else ``None``."""
    inner = getattr(head, "estimator_", None) or getattr(head, "estimator", None)
    steps = getattr(inner, "steps", None)
    if isinstance(head, RecentRows) and steps and isinstance(steps[-1][1], GaussianProcessRegressor):
        return steps[-1][1]
    return None


def kernel_theta(fitted: Any) -> list[float] | None:
    """The fitted kernel hyper-parameters (log scale, ``kernel_.theta``) of a fitted GP head, else ``None``."""
    gp = _gp_of(fitted)
    if gp is None or not hasattr(gp, "kernel_"):
        return None
    return [float(v) for v in gp.kernel_.theta]


def with_frozen_kernel(head: Any, theta: Any, optimize: bool = False) -> Any:
    """An unfitted copy of a GP head whose kernel hyper-parameters are ``theta`` and stay
    fixed (``optimizer=None``: a fit is one Cholesky factorisation), or with ``optimize``
    start from ``theta`` (the marginal likelihood's optimiser, warm-started); other heads and
    ``theta=None``: ``head``.

    Raises:
        ValueError: ``theta`` does not fit the kernel.
    """
    if _gp_of(head) is None or theta is None:
        return head
    out = clone(head)
    gp = out.estimator.steps[-1][1]
    theta = np.asarray(theta, dtype=np.float64)
    if theta.shape != gp.kernel.theta.shape:
        raise ValueError(f"{theta.size} kernel hyper-parameters for a kernel of {gp.kernel.theta.size}")
    gp.set_params(kernel=gp.kernel.clone_with_theta(theta))
    if not optimize:
        gp.set_params(optimizer=None)
    return out
