"""Online debiasing: isotonic recalibration of world-model scores from anchor pairs.

Every anchor rollout yields an *anchor pair* ``(r̂, r)``: the world model's raw score and the
real score. The debiaser keeps the most recent pairs in a FIFO buffer and fits a monotone
non-decreasing map ``f̂: r̂ -> E[r | r̂]`` with scikit-learn's
:class:`~sklearn.isotonic.IsotonicRegression` (clipped outside the fitted range). Until
``min_pairs`` pairs exist the map is the identity; afterwards it is refitted every
``refit_every`` new pairs. See ``docs/method.md`` ("Online debiasing"), after Yang et al.,
arXiv 2608.12564.

Beyond the paper, ``map_kind="auto"`` chooses the map at every fit among the identity, a linear
map and the isotonic one by their out-of-fold squared error on the buffered pairs, keeping the
identity unless a fitted map beats it by more than one standard error: on a few noisy pairs over
a world model already on the real scale, an isotonic map fits the noise and calibrates worse than
the raw score (issue 36, item 3).
"""

from __future__ import annotations

from collections import deque
from typing import Any, Iterable, Sequence

import numpy as np
from sklearn.isotonic import IsotonicRegression

__all__ = ["IsotonicDebiaser", "MAP_KINDS"]

MAP_KINDS = ("isotonic", "linear", "identity", "auto")
"""The debiaser's maps: the paper's isotonic map, a linear map (least squares, a negative slope is
pooled to the mean as the increasing isotonic fit pools it), the identity, or ``"auto"``: at each
fit the identity unless a fitted map's out-of-fold squared error is lower by more than one standard
error of the difference (the one-standard-error rule), else the fitted map with the lower error."""


class IsotonicDebiaser:
    """FIFO buffer of anchor pairs and the isotonic map fitted on it.

    Args:
        buffer_size: most pairs kept (oldest dropped first). Reference: 5000.
        min_pairs: pairs needed before the first fit; the map is the identity before.
            Reference: 200.
        refit_every: refit after this many new pairs since the last fit. Reference: 64.
        map_kind: one of :data:`MAP_KINDS` (reference: ``"isotonic"``).
        folds: folds of ``"auto"``'s out-of-fold comparison (contiguous blocks of the buffer, oldest
            first, so that neighbouring pairs of one group fall in the same fold).

    Attributes:
        training: when ``False``, :meth:`add_pairs` is ignored unless its ``training`` argument
            says otherwise (evaluation freezes the map).
        n_fits: number of fits so far.
        n_seen: pairs ever added (including those the FIFO dropped).
        chosen: the map in use (``"identity"`` before the first fit; with ``"auto"`` the choice of the
            last fit).
        oof_mse: ``{kind: out-of-fold mean squared error}`` of the candidates at the last ``"auto"``
            fit (empty otherwise).

    Raises:
        ValueError: non-positive sizes, an unknown ``map_kind`` or ``folds < 2``.

    Example:
        >>> deb = IsotonicDebiaser(min_pairs=4, refit_every=4)
        >>> deb.add_pairs([0.1, 0.2, 0.3, 0.4], [0.0, 0.0, 1.0, 1.0])
        4
        >>> deb.transform([0.05, 0.35]).tolist()
        [0.0, 1.0]
    """

    def __init__(self, buffer_size: int = 5000, min_pairs: int = 200, refit_every: int = 64, *,
                 map_kind: str = "isotonic", folds: int = 5) -> None:
        if buffer_size < 1 or min_pairs < 1 or refit_every < 1:
            raise ValueError(
                f"buffer_size, min_pairs and refit_every must be >= 1, got "
                f"{buffer_size}, {min_pairs}, {refit_every}"
            )
        if map_kind not in MAP_KINDS:
            raise ValueError(f"map_kind must be one of {MAP_KINDS}, got {map_kind!r}")
        if int(folds) < 2:
            raise ValueError(f"folds must be >= 2 (an out-of-fold comparison), got {folds!r}")
        self.map_kind = str(map_kind)
        self.folds = int(folds)
        self.chosen = "identity"
        self.oof_mse: dict[str, float] = {}
        self._lin: tuple[float, float] | None = None  # (slope, intercept) of the linear map in use
        self.buffer_size = int(buffer_size)
        self.min_pairs = int(min_pairs)
        self.refit_every = int(refit_every)
        self.training = True
        self._raw: deque[float] = deque(maxlen=self.buffer_size)
        self._real: deque[float] = deque(maxlen=self.buffer_size)
        self._since_fit = 0
        self.n_fits = 0
        self.n_seen = 0
        self._iso: IsotonicRegression | None = None
        self._fitted = False

    # ------------------------------------------------------------------ updating
    def add_pairs(self, raw: Iterable[float | None], real: Iterable[float | None], *, training: bool | None = None) -> int:
        """Add anchor pairs; refit when due. Pairs with a ``None``/NaN member are skipped.

        Args:
            raw: world-model raw scores r̂ (floats, reward scale).
            real: real scores r of the same rollouts.
            training: whether these pairs may be added; ``None``: :attr:`training` now. The flag
                itself is never changed (readers on other threads see it as it is).

        Returns:
            Number of pairs actually added (0 when they may not be).

        Raises:
            ValueError: ``raw`` and ``real`` differ in length.
        """
        raw, real = list(raw), list(real)
        if len(raw) != len(real):
            raise ValueError(f"raw and real differ in length: {len(raw)} vs {len(real)}")
        if not (self.training if training is None else training):
            return 0
        added = 0
        for a, b in zip(raw, real):
            if a is None or b is None or not np.isfinite(a) or not np.isfinite(b):
                continue
            self._raw.append(float(a))
            self._real.append(float(b))
            added += 1
        self._since_fit += added
        self.n_seen += added
        if len(self._raw) >= self.min_pairs and (not self._fitted or self._since_fit >= self.refit_every):
            self.fit()
        return added

    def fit(self) -> None:
        """Fit the isotonic map on the current buffer now (normally called by :meth:`add_pairs`).

        Raises:
            RuntimeError: the buffer is empty.
        """
        if not self._raw:
            raise RuntimeError("cannot fit the debiaser: no anchor pairs in the buffer")
        self._fit_on(np.asarray(self._raw), np.asarray(self._real))
        self._since_fit = 0
        self.n_fits += 1

    @staticmethod
    def _linear(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
        """Least-squares (slope, intercept); a negative slope is pooled to the mean (slope 0)."""
        vx = float(np.var(x))
        slope = float(np.cov(x, y, bias=True)[0, 1] / vx) if vx > 0 else 0.0
        slope = max(slope, 0.0)
        return slope, float(np.mean(y) - slope * np.mean(x))

    def _choose(self, x: np.ndarray, y: np.ndarray) -> str:
        """The map by out-of-fold squared error, with the one-standard-error rule toward the identity:
        a fitted map (linear, isotonic) replaces the identity only when its out-of-fold error is lower
        by more than the standard error of that difference over the pairs; among those that pass, the
        lowest error (ties: linear before isotonic)."""
        n = x.size
        k = min(self.folds, n)
        if k < 2:
            return "identity"
        bounds = np.linspace(0, n, k + 1).astype(int)
        err = {m: np.zeros(n) for m in ("identity", "linear", "isotonic")}
        for a, b in zip(bounds[:-1], bounds[1:]):
            test = np.zeros(n, bool)
            test[a:b] = True
            if test.all() or not test.any():
                continue
            xt, yt, xs, ys = x[~test], y[~test], x[test], y[test]
            err["identity"][test] = (xs - ys) ** 2
            sl, ic = self._linear(xt, yt)
            err["linear"][test] = (sl * xs + ic - ys) ** 2
            iso = IsotonicRegression(increasing=True, out_of_bounds="clip").fit(xt, yt)
            err["isotonic"][test] = (iso.predict(xs) - ys) ** 2
        self.oof_mse = {m: float(e.mean()) for m, e in err.items()}
        passing = []
        for m in ("linear", "isotonic"):
            d = err["identity"] - err[m]
            if d.mean() > d.std(ddof=1) / np.sqrt(n):
                passing.append(m)
        return min(passing, key=lambda m: self.oof_mse[m]) if passing else "identity"

    def _fit_on(self, x: np.ndarray, y: np.ndarray, kind: str | None = None) -> None:
        kind = kind or (self._choose(x, y) if self.map_kind == "auto" else self.map_kind)
        self._iso, self._lin = None, None
        if kind == "isotonic":
            iso = IsotonicRegression(increasing=True, out_of_bounds="clip")
            iso.fit(x, y)
            self._iso = iso
        elif kind == "linear":
            self._lin = self._linear(x, y)
        self.chosen = kind
        self._fitted = True

    # ------------------------------------------------------------------ using
    @property
    def fitted(self) -> bool:
        """``True`` once a map has been fitted (before that :meth:`transform` is the identity; a
        fitted map may be the identity too, when ``"auto"`` chose it)."""
        return self._fitted

    @property
    def flat(self) -> bool:
        """``True`` when a fitted map is constant: every raw score calibrates to one value, so a
        group scored with it has no within-group spread (zero GRPO advantage). It happens when
        the buffered real scores are all equal, or do not increase with the raw ones (the
        increasing fit then pools them all)."""
        if self._lin is not None:
            return self._lin[0] == 0.0
        return self._iso is not None and float(np.ptp(self._iso.y_thresholds_)) == 0.0

    @property
    def n_pairs(self) -> int:
        """Pairs currently in the buffer."""
        return len(self._raw)

    def transform(self, raw: Sequence[float | None] | np.ndarray) -> np.ndarray:
        """Calibrated scores ``r̃ = f̂(r̂)``.

        Args:
            raw: raw scores, shape (B,); ``None`` entries stay NaN.

        Returns:
            float64 array of shape (B,); NaN where the input was ``None``/NaN.
        """
        x = np.array([np.nan if v is None else v for v in raw], dtype=np.float64)
        out = x.copy()
        ok = np.isfinite(x)
        if self._iso is not None and ok.any():
            out[ok] = self._iso.predict(x[ok])
        elif self._lin is not None and ok.any():
            out[ok] = self._lin[0] * x[ok] + self._lin[1]
        return out

    def pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """The buffered anchor pairs as two float64 arrays ``(raw, real)`` of shape (n_pairs,)."""
        return np.asarray(self._raw, dtype=np.float64), np.asarray(self._real, dtype=np.float64)

    def curve(self, n: int = 101) -> tuple[np.ndarray, np.ndarray]:
        """The current map sampled on ``n`` points over [min r̂, max r̂] of the buffer (for plots)."""
        raw, _ = self.pairs()
        lo, hi = (float(raw.min()), float(raw.max())) if raw.size else (0.0, 1.0)
        xs = np.linspace(lo, hi, n)
        return xs, self.transform(xs)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Buffer, counters and the fitted map's thresholds (JSON-serialisable lists)."""
        state: dict[str, Any] = {
            "buffer_size": self.buffer_size,
            "min_pairs": self.min_pairs,
            "refit_every": self.refit_every,
            "raw": list(self._raw),
            "real": list(self._real),
            "since_fit": self._since_fit,
            "n_fits": self.n_fits,
            "n_seen": self.n_seen,
            "map_x": None,
            "map_y": None,
            "map_kind": self.map_kind,
            "folds": self.folds,
            "chosen": self.chosen,
            "fitted": self._fitted,
            "linear": None if self._lin is None else list(self._lin),
            "oof_mse": dict(self.oof_mse),
        }
        if self._iso is not None:
            state["map_x"] = self._iso.X_thresholds_.tolist()
            state["map_y"] = self._iso.y_thresholds_.tolist()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output; the restored map predicts exactly as the saved one.

        The map is restored by refitting the isotonic regression on its own thresholds, which
        are already monotone, so the fit reproduces them (and hence ``predict``) exactly.
        """
        self.buffer_size = int(state["buffer_size"])
        self.min_pairs = int(state["min_pairs"])
        self.refit_every = int(state["refit_every"])
        self._raw = deque(state["raw"], maxlen=self.buffer_size)
        self._real = deque(state["real"], maxlen=self.buffer_size)
        self._since_fit = int(state["since_fit"])
        self.n_fits = int(state["n_fits"])
        self.n_seen = int(state["n_seen"])
        self.map_kind = str(state.get("map_kind", "isotonic"))
        self.folds = int(state.get("folds", 5))
        self.oof_mse = dict(state.get("oof_mse", {}))
        self._iso, self._lin, self._fitted, self.chosen = None, None, False, "identity"
        if state.get("map_x") is not None:  # the isotonic map, refitted on its own thresholds
            self._fit_on(np.asarray(state["map_x"], dtype=np.float64), np.asarray(state["map_y"], dtype=np.float64),
                         kind="isotonic")
        elif state.get("linear") is not None:
            self._lin, self.chosen, self._fitted = (float(state["linear"][0]), float(state["linear"][1])), "linear", True
        elif state.get("fitted"):
            self.chosen, self._fitted = str(state.get("chosen", "identity")), True

    # ------------------------------------------------------------------ rescoring
    def replace_pairs(self, raw: Iterable[float | None], real: Iterable[float | None], *,
                      training: bool | None = None) -> int:
        """Replace the buffer with these pairs (oldest first; the last ``buffer_size`` kept) and
        refit the map now (the identity again when fewer than ``min_pairs`` remain).

        For a world model that learns from the anchors (:class:`~wmrl_envs.world_models.learned.LearnedWorldModel`):
        after a refit the buffered raw scores came from older models, and the loop replaces
        them with the current model's out-of-fold scores of the same rollouts. ``n_seen`` is
        not changed (no new pair was seen).

        Args:
            raw: the current model's raw scores of the stored rollouts.
            real: their real scores.
            training: whether the buffer may be replaced; ``None``: :attr:`training` now. The flag
                itself is never changed (as :meth:`add_pairs`).

        Returns:
            Pairs now in the buffer (pairs with a ``None``/NaN member are skipped).

        Raises:
            ValueError: ``raw`` and ``real`` differ in length.
        """
        raw, real = list(raw), list(real)
        if len(raw) != len(real):
            raise ValueError(f"raw and real differ in length: {len(raw)} vs {len(real)}")
        if not (self.training if training is None else training):
            return len(self._raw)
        ok = [(float(a), float(b)) for a, b in zip(raw, real)
              if a is not None and b is not None and np.isfinite(a) and np.isfinite(b)]
        self._raw = deque((a for a, _ in ok), maxlen=self.buffer_size)
        self._real = deque((b for _, b in ok), maxlen=self.buffer_size)
        self._iso, self._lin, self._fitted, self.chosen = None, None, False, "identity"
        self._since_fit = len(self._raw)
        if len(self._raw) >= self.min_pairs:
            self.fit()
        return len(self._raw)
