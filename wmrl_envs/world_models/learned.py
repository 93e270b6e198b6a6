"""A world model that learns online from the anchor groups (:class:`LearnedWorldModel`).

WMRL's anchor groups produce exactly the data a world model needs: real outcomes of the
current policy's actions, a few groups per step. :class:`LearnedWorldModel` turns them into a
predictor: a frozen *featurizer* maps each (context, action) to a vector and a regression
*head* (scikit-learn) is refitted on the anchor rollouts seen so far. With no data it predicts
one constant (uninformative: within-group r = 0) until ``min_groups`` (2) anchor groups have
been observed, so ``anchor_fraction="auto"`` routes more groups to real execution until the
learned model earns its share. See ``docs/method.md``, "A world model that learns from its
anchors".

The head (``head="auto"``, the default; :mod:`~wmrl_envs.world_models.heads`):

* *chosen out of fold* among a few scikit-learn regressors that between them represent linear,
  local and smooth peaked landscapes — ridge, k-NN, and for narrow features (D <= 16, D <= 64)
  a Gaussian process and gradient boosting, each on the last 200 rollouts — by their out-of-fold
  pooled within-group r (the correlation GRPO's advantages see). A *selection refit* fits every
  candidate on K-1 folds of whole groups and scores the K-th; the best over all rows is fitted
  on all of them and used. Selections recur each time the rollouts held double
  (``select_growth``); the refits between refit the chosen head only. A Gaussian process's
  kernel hyper-parameters are fitted by marginal likelihood on all rows at each selection
  (warm-started from the last ones); its fold fits and the refits between keep them (a fit is
  then one Cholesky factorisation);
* *refitted under a CPU budget*: with an execution cost bound (``execution_cost=``,
  :meth:`LearnedWorldModel.bind_execution_cost`, e.g. the loop's ledger), a due refit is made
  only if the world model's CPU-seconds so far (predictions, learning, rescoring) plus the
  refit's estimated cost stay within ``cpu_share`` (10%) of the execution CPU-seconds so far;
  otherwise it waits. The first fit is made whatever the budget.
  :meth:`LearnedWorldModel.cpu_share_used` and :meth:`LearnedWorldModel.summary` show the share.

Out of sample, by construction:

* a group is *predicted* when it is routed (:meth:`LearnedWorldModel.predict`) and *observed*
  when it closes (:meth:`LearnedWorldModel.observe`, called by
  :meth:`~wmrl_envs.core.CorrectionLoop.close_group` after the group has been corrected), so
  its own outcome never enters its own prediction;
* the debiaser's buffered anchor pairs and the advisor's groups were scored by older models;
  after each refit :meth:`LearnedWorldModel.crossfit_scores` rescores every stored anchor
  rollout *out of fold* (K folds by group: a rollout is scored by a head fitted on the other
  folds' groups; after a selection, by the candidate that was best on the other folds, so its
  own errors took no part in choosing it), and the loop replaces the pairs and the advisor's
  scores with them, so the calibration map and the advisor's r describe the current model and
  stay honest. One exception: after the first selection, a Gaussian process's fold fits (in
  selections and between them) keep the kernel hyper-parameters (length scales, signal and
  noise level) of its last fit on all the rows then held; its weights are fitted without the
  fold.

Featurizers (``(contexts, actions) -> float32 (B, D)``): :class:`CallableFeaturizer` wraps a
user function (numeric actions, an env's own features); :class:`SentenceEncoderFeaturizer`
embeds text contexts and actions with a frozen sentence encoder (the shipped all-MiniLM-L6-v2);
:class:`PolicyHiddenStateFeaturizer` (:mod:`~wmrl_envs.world_models.policy_features`) mean-pools a
causal LM's last hidden state over prompt + completion (no generation; a prompt's pass is kept). The AutoResearch featurizer lives beside
its env (:func:`wmrl_envs.envs.autoresearch.autoresearch_featurizer`).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import math
import pickle
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from wmrl_envs.utils import check_arg
from wmrl_envs.world_models.base import WorldModelPrediction
from wmrl_envs.world_models.policy_features import PolicyHiddenStateFeaturizer

__all__ = ["Featurizer", "CallableFeaturizer", "SentenceEncoderFeaturizer", "PolicyHiddenStateFeaturizer",
           "CrossfitScores", "LearnedWorldModel", "default_head"]


# ---------------------------------------------------------------------------------------------- featurizers


@runtime_checkable
class Featurizer(Protocol):
    """Maps B (context, action) pairs to features: ``featurizer(contexts, actions)`` returns a
    float32 array of shape (B, D), D fixed for the featurizer, finite values. It must be
    deterministic and frozen (the same pair gives the same row every time): the learned head is
    refitted on stored rows, and a drifting featurizer would make them stale.

    A featurizer may also have ``dim`` (int, or ``None`` when unknown): D, known without
    featurizing anything; :meth:`LearnedWorldModel.load_state_dict` checks a saved state's
    feature width against it. The three shipped featurizers have it."""

    def __call__(self, contexts: Sequence[Any], actions: Sequence[Any]) -> np.ndarray: ...


class CallableFeaturizer:
    """A user function as a :class:`Featurizer`, for actions that are not text (numeric vectors,
    discrete ids, an env's own features).

    Args:
        fn: ``fn(context, action) -> 1-D array-like of D numbers`` (one pair at a time; a scalar is
            one feature), or with
            ``batched=True`` ``fn(contexts, actions) -> (B, D) array-like``.
        batched: whether ``fn`` takes whole batches.
        dim: D, the number of features ``fn`` returns per pair (``None``: not declared). With
            it, a row of another width is an error at once, and a saved state of another width
            is refused at load (:meth:`LearnedWorldModel.load_state_dict`).

    Raises:
        TypeError: ``fn`` is not callable. ValueError: ``dim`` is not an integer >= 1; at call,
            a pair's features of more than one dimension (e.g. a (1, D) or (H, W) array: nothing
            is flattened silently, ravel it in ``fn`` if every entry is a feature), a batched
            result other than (B, D), rows of different lengths or of a width other than ``dim``.

    Example:
        >>> f = CallableFeaturizer(lambda c, a: [a, a * a])
        >>> f([None, None], [1.0, 2.0]).tolist()
        [[1.0, 1.0], [2.0, 4.0]]
    """

    def __init__(self, fn: Callable[..., Any], *, batched: bool = False, dim: int | None = None) -> None:
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}: pass a function fn(context, action) "
                            "-> D numbers (or fn(contexts, actions) -> (B, D) numbers with batched=True)")
        check_arg(dim is None or _is_int(dim, 1), "dim", "an integer >= 1 (the number of features fn returns per "
                  "pair) or None", dim)
        self.fn = fn
        self.batched = bool(batched)
        self.dim = None if dim is None else int(dim)

    def __call__(self, contexts: Sequence[Any], actions: Sequence[Any]) -> np.ndarray:
        if self.batched:
            x = np.asarray(self.fn(list(contexts), list(actions)), dtype=np.float32)
            if x.ndim != 2 or x.shape[0] != len(actions):
                raise ValueError(f"the batched feature function returned shape {x.shape} for {len(actions)} pairs; make "
                                 f"it return a ({len(actions)}, D) array, one row of D numbers per (context, action) "
                                 "pair (a pair's features of several axes: ravel them into its row yourself, so that the "
                                 "order is the one you mean)")
            widths = {x.shape[1]} if len(x) else set()
        else:
            rows = [self._row(c, a) for c, a in zip(contexts, actions)]
            widths = {r.size for r in rows}
            if len(widths) > 1:
                raise ValueError(f"the feature function returned rows of different lengths {sorted(widths)}; make it "
                                 "return the same D numbers for every pair (pad or cut the part of varying length)")
            x = np.stack(rows) if rows else np.zeros((0, self.dim or 0), np.float32)
        if self.dim is not None and widths and widths != {self.dim}:
            raise ValueError(f"the feature function returned {widths.pop()} features per pair, but dim={self.dim} "
                             "was declared: make it return dim numbers, or declare the width it returns")
        return x

    def _row(self, context: Any, action: Any) -> np.ndarray:
        row = np.asarray(self.fn(context, action), dtype=np.float32)
        if row.ndim > 1:
            raise ValueError(f"the feature function returned an array of shape {row.shape} for one (context, action) "
                             "pair; it must return a 1-D row of D numbers (a scalar counts as one): flatten it "
                             "yourself, e.g. np.ravel(features), if every entry is a feature, or reduce it (a mean "
                             "over an axis, one row of it) if not")
        return row.reshape(-1)


def _is_int(v: Any, lo: int) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, np.integer)) and v >= lo


def _as_text(x: Any) -> str:
    return x if isinstance(x, str) else ("" if x is None else str(x))


class SentenceEncoderFeaturizer:
    """Text contexts and actions through a frozen sentence encoder: the shipped one is
    all-MiniLM-L6-v2, ``wmrl_envs.envs.autoresearch.SentenceEncoder.shared()`` (embeddings cached
    by text; this package imports no environment, so the encoder is passed in).

    The features are ``[e(action), context_weight · e(context), e(action) ⊙ e(context)]``
    (3 × 384 floats with the shipped encoder; the product is left out with
    ``interaction=False``). A linear head on ``[e(action), e(context)]`` alone can only add a
    per-context offset to a per-action score, which the within-group comparison GRPO makes
    cancels; the element-wise product lets it learn which actions suit which context.

    Args:
        encoder: any object with ``encode(texts) -> float (N, dim)`` and ``dim`` (int), e.g. the
            shipped ``SentenceEncoder``.
        context_text, action_text: turn a context / an action into the text to embed (default:
            the value itself if it is a str, else ``str(value)``).
        context_weight: scale of the context embedding (>= 0; 0 ignores the context).
        interaction: include the element-wise product.

    Raises:
        TypeError: ``encoder`` has no ``encode`` method or no ``dim``.
        ValueError: ``context_weight < 0``; at call, ``encode`` returned an array of a shape
            other than (N, ``encoder.dim``).

    Attributes:
        dim: D, the number of features per pair (``3 × encoder.dim``, ``2 ×`` without the product).
    """

    def __init__(
        self,
        encoder: Any,
        *,
        context_text: Callable[[Any], str] = _as_text,
        action_text: Callable[[Any], str] = _as_text,
        context_weight: float = 1.0,
        interaction: bool = True,
    ) -> None:
        if not callable(getattr(encoder, "encode", None)) or not hasattr(encoder, "dim"):
            raise TypeError(f"encoder must have encode(texts) -> (N, dim) and dim, got {type(encoder).__name__}: pass "
                            "e.g. wmrl_envs.envs.autoresearch.SentenceEncoder.shared(), or wrap your encoder in an "
                            "object with both")
        check_arg(isinstance(context_weight, (int, float)) and context_weight >= 0, "context_weight",
                  "a number >= 0 (0 ignores the context, 1 weighs it as the action)", context_weight)
        self.encoder = encoder
        self.context_text, self.action_text = context_text, action_text
        self.context_weight = float(context_weight)
        self.interaction = bool(interaction)

    @property
    def dim(self) -> int:
        return (3 if self.interaction else 2) * int(self.encoder.dim)

    def __call__(self, contexts: Sequence[Any], actions: Sequence[Any]) -> np.ndarray:
        enc = self.encoder
        n = len(actions)
        if n == 0:
            return np.zeros((0, self.dim), np.float32)
        texts = [self.action_text(a) for a in actions] + [self.context_text(c) for c in contexts]
        emb = np.asarray(enc.encode(texts), dtype=np.float32)
        if emb.shape != (len(texts), int(enc.dim)):
            raise ValueError(f"the encoder returned shape {emb.shape} for {len(texts)} texts, expected "
                             f"({len(texts)}, {int(enc.dim)}) from its dim: give it a dim equal to its embedding width "
                             "and one row per text")
        ea, ec = emb[:n], emb[n:]
        parts = [ea, self.context_weight * ec] + ([ea * ec] if self.interaction else [])
        return np.hstack(parts).astype(np.float32)


# ---------------------------------------------------------------------------------------------- the head


def default_head() -> Any:
    """The default head: scikit-learn's ``RidgeCV`` over the penalties 1e-3 … 1e3 (13 values),
    chosen by efficient leave-one-out on the rows it is fitted on. Linear, closed-form,
    deterministic (a refit on the same rows gives the same predictions, which :meth:`load_state_dict`
    relies on), cheap: O(N·D²) per fit."""
    from sklearn.linear_model import RidgeCV

    return RidgeCV(alphas=np.logspace(-3, 3, 13))


@dataclass
class CrossfitScores:
    """Out-of-fold scores of the stored anchor rollouts (:meth:`LearnedWorldModel.crossfit_scores`).

    Attributes:
        scores: float64 (N,), each rollout's score from a head fitted without its group's fold.
        real: float64 (N,), its real score.
        group_ids: int64 (N,), its group's id.
        members: int64 (N,), its index in the group (0 … G-1).
        group_sizes: ``{group id: G}``.
    """

    scores: np.ndarray
    real: np.ndarray
    group_ids: np.ndarray
    members: np.ndarray
    group_sizes: dict[int, int]

    def by_group(self) -> dict[int, list[float | None]]:
        """``{group id: G scores}``, ``None`` for the members not stored (no real score)."""
        out = {int(g): [None] * n for g, n in self.group_sizes.items()}
        for s, g, m in zip(self.scores.tolist(), self.group_ids.tolist(), self.members.tolist()):
            out[int(g)][int(m)] = float(s)
        return out


def _finite(x: Any) -> bool:
    try:
        return x is not None and not isinstance(x, bool) and math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


SAVING_REFIT_EVERY = 4
"""While a due selection waits for its CPU budget, a plain refit is made only once this many
times ``refit_every`` groups have been observed since the last fit (the rest is saved for it)."""

_CONTROLLER: Any = None


def _one_thread() -> Any:
    """A context in which BLAS and OpenMP run on one thread (threadpoolctl), for the head's fits
    and predictions: on a few hundred rows the thread pools' start-up and spinning cost more
    CPU-seconds than they save. A null context without threadpoolctl."""
    global _CONTROLLER
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # pragma: no cover - installed with scikit-learn
        return contextlib.nullcontext()
    if _CONTROLLER is None:
        import sklearn.ensemble  # noqa: F401 - load scikit-learn's OpenMP runtime before the controller looks
        _CONTROLLER = ThreadpoolController()
    return _CONTROLLER.limit(limits=1)


class LearnedWorldModel:
    """A :class:`~wmrl_envs.world_models.WorldModel` whose head is fitted online on the anchor groups.

    ``predict(contexts, actions)`` featurizes the pairs and applies the head fitted so far (a
    constant before the first fit); ``observe(contexts, actions, real_scores, group_id)`` stores
    one closed anchor group's rollouts (features and real scores) and refits the head when due
    (below). :class:`~wmrl_envs.core.CorrectionLoop` calls ``observe`` itself when its world
    model has it (``close_group(..., contexts=, actions=)``), and after a refit replaces the
    debiaser's pairs and the advisor's scores with :meth:`crossfit_scores`.

    The head (``head="auto"``, the default) is chosen *out of fold* among
    :func:`~wmrl_envs.world_models.heads.candidate_heads` (ridge, k-NN, a Gaussian process and
    gradient boosting for narrow features; ridge and k-NN for wide ones): a *selection* refit
    scores every candidate by its out-of-fold pooled within-group r
    (:func:`~wmrl_envs.world_models.heads.select_out_of_fold`) and keeps the best; the next
    selection comes once the rollouts held have grown by ``select_growth``; the refits between
    refit the chosen head only.

    Refits are scheduled against a CPU budget: once an execution cost is bound
    (``execution_cost``, :meth:`bind_execution_cost`), a refit that is due is made only if the
    world model's CPU-seconds so far plus the refit's estimated cost (the last refit of its kind,
    with the rescoring that followed it, scaled by the rollouts held now over those it fitted,
    at most ×2; a selection refit and a plain one are estimated apart) stay
    within ``cpu_share`` × the execution CPU-seconds so far; otherwise it waits. While a due
    selection waits for its budget, a plain refit is made only every
    :data:`SAVING_REFIT_EVERY` (4) × ``refit_every`` groups, so most of the budget is saved
    for it and the head in use still follows the data. The first fit is
    made whatever the budget, so the model leaves its cold constant after ``min_groups``
    anchor groups.

    Args:
        featurizer: a :class:`Featurizer` (``(contexts, actions) -> float32 (B, D)``).
        head: ``"auto"`` (default: chosen out of fold, above), or a scikit-learn regressor,
            cloned (``sklearn.base.clone``) for every fit (e.g. :func:`default_head`, the
            ``RidgeCV`` that was the default before). A deterministic head (the candidates
            are) makes a reloaded model predict exactly as the saved one.
        refit_every: a refit is due every this many observed groups (>= 1) after the first
            fit (which is due as soon as ``min_groups`` groups are held).
        folds: K of the out-of-fold rescoring and selection (>= 2; fewer groups held: one fold
            per group).
        min_groups: groups needed before the first fit (>= 1; default 2, i.e. 16 rollouts at
            G = 8); before it the prediction is ``prior_score`` (or the mean real score
            observed so far, 0.0 with none).
        max_rollouts: most rollouts kept (the oldest groups are dropped at the next refit), >= 1.
        prior_score: the cold-start prediction (``None``: the mean real score observed so far).
        clip: clip predictions to the range of the real scores the head was fitted on.
        cache_size: feature rows remembered from ``predict`` (keyed by a hash of the pickled
            pair) so that ``observe`` does not featurize the same pairs again (0: none).
        cpu_share: the most CPU-seconds the world model may use (predictions, learning and
            rescoring) per CPU-second of execution, in (0, 10]; default 0.10. Applies once an
            execution cost is bound. With a bound ledger that counts wall-clock
            (``cost_basis="wall"``: executions wait for a remote job, a queue, an API), it is
            wall-clock seconds per wall-clock second of execution, the run's own measure of cost
            (a refit's estimate stays its CPU-seconds, about its wall-clock on one thread); under
            ``"cpu"`` and ``"per_call"`` (where refits have no declared price) CPU-seconds.
        execution_cost: what the budget is measured against: a
            :class:`~wmrl_envs.core.CostLedger` (the loop's, ``loop.ledger``: the world model's
            share is then its ``world_model`` CPU-seconds over its ``execution`` CPU-seconds,
            what the run's summary shows; wall-clock seconds over wall-clock seconds under
            ``cost_basis="wall"``), or a callable ``() -> float``, the execution
            CPU-seconds so far (the world model's CPU is then its own, :attr:`cpu_s`), or
            ``None`` (default: no budget; every due refit is made). Not saved with the state:
            bind it again after loading.
        select_growth: a selection refit is due when the rollouts held reach this multiple of
            those at the last selection (> 1; default 2).
        precheck: ``None`` (default) or a callable ``(context, action) -> score or None``: a
            deterministic check of the environment's own rules (AutoResearch:
            :func:`~wmrl_envs.envs.autoresearch.static_check.static_check_score`, failures
            certain before execution). Where it returns a score, that score is the prediction
            (``model_called=False``, ``extras["precheck"] = True``) and the head is not asked;
            the out-of-fold scores of such stored rollouts are the pre-check's too. Its CPU is
            the world model's. A learned head cannot know that a line it has never seen fails;
            a policy trained on its scores finds such lines (issue 36's seed 1). Not saved with
            the state: pass the same one when building the model that loads it.

    Attributes:
        n_observed_groups: groups observed so far; ``n_refits``: fits so far;
        n_precheck: predictions the pre-check decided;
        n_selections: selection refits so far; ``refits_deferred``: due refits the budget held back;
        head_name: the head in use (``"ridge"``, ``"knn"``, ``"gp"``, ``"hgb"``, ``"head"`` for
            a given regressor; ``None`` before the first fit); ``head_r``: each candidate's
            out-of-fold r at the last selection;
        cpu_s: CPU-seconds (this process, :func:`time.process_time`) spent in this model's
            ``predict``, ``observe`` and ``crossfit_scores`` calls;
        last_fit_cpu_s, fit_cpu_s: CPU-seconds of the last fit (with its rescoring, when the
            loop asks for it) and of all fits (as measured by the loop; see
            :meth:`~wmrl_envs.core.CorrectionLoop.close_group`, charged to the ledger's
            ``world_model`` source).

    Raises:
        ValueError: a setting out of range. TypeError: ``execution_cost`` of another kind.

    Example:
        >>> wm = LearnedWorldModel(CallableFeaturizer(lambda c, a: [a]), min_groups=1)
        >>> wm.predict([0, 0], [1.0, 2.0])[0].score   # cold start: nothing observed yet
        0.0
        >>> wm.observe([0, 0], [1.0, 2.0], [0.1, 0.2], group_id=0)
        True
        >>> round(wm.predict([0], [3.0])[0].score, 3)  # clipped to the observed range
        0.2
    """

    STATE_VERSION = 1

    def __init__(
        self,
        featurizer: Featurizer | Callable[[Sequence[Any], Sequence[Any]], np.ndarray],
        *,
        head: Any = "auto",
        refit_every: int = 1,
        folds: int = 5,
        min_groups: int = 2,
        max_rollouts: int = 5000,
        prior_score: float | None = None,
        clip: bool = True,
        cache_size: int = 4096,
        cpu_share: float = 0.10,
        execution_cost: Any = None,
        select_growth: float = 2.0,
        precheck: Callable[[Any, Any], float | None] | None = None,
    ) -> None:
        if not callable(featurizer):
            raise TypeError(f"featurizer must be callable (contexts, actions) -> (B, D) array, got {type(featurizer).__name__}")
        for name, v, lo in (("refit_every", refit_every, 1), ("folds", folds, 2), ("min_groups", min_groups, 1),
                            ("max_rollouts", max_rollouts, 1), ("cache_size", cache_size, 0)):
            check_arg(_is_int(v, lo), name, f"an integer >= {lo}", v)
        check_arg(prior_score is None or _finite(prior_score), "prior_score", "a finite number or None", prior_score)
        check_arg(_finite(cpu_share) and 0 < float(cpu_share) <= 10, "cpu_share", "a number in (0, 10] (world-model "
                  "CPU-seconds per execution CPU-second; 0.1 = 10%)", cpu_share)
        check_arg(_finite(select_growth) and float(select_growth) > 1, "select_growth", "a number > 1 (e.g. 1.5: "
                  "choose the head again once the rollouts held have grown by half)", select_growth)
        check_arg(isinstance(head, str) and head == "auto" or not isinstance(head, str), "head",
                  "'auto' or a scikit-learn regressor", head)
        if head is not None and not isinstance(head, str) and not callable(getattr(head, "fit", None)):
            raise TypeError(f"head must be 'auto' or a scikit-learn regressor (with fit and predict), got "
                            f"{type(head).__name__}")
        if precheck is not None and not callable(precheck):
            raise TypeError(f"precheck must be None or a callable (context, action) -> score or None, got "
                            f"{type(precheck).__name__}")
        self.featurizer = featurizer
        self.precheck = precheck
        self.n_precheck = 0
        self.head = "auto" if head is None else head
        self.refit_every, self.folds, self.min_groups = int(refit_every), int(folds), int(min_groups)
        self.max_rollouts, self.cache_size = int(max_rollouts), int(cache_size)
        self.prior_score = None if prior_score is None else float(prior_score)
        self.clip = bool(clip)
        self.cpu_share = float(cpu_share)
        self.select_growth = float(select_growth)
        self.execution_cost: Any = None
        self.bind_execution_cost(execution_cost)
        self._lock = threading.RLock()
        self._x: list[np.ndarray] = []  # per row: features (D,) float32
        self._y: list[float] = []
        self._gid: list[int] = []
        self._member: list[int] = []
        self._pre: list[float] = []  # per row: the pre-check's score, NaN where it decided nothing
        self._sizes: dict[int, int] = {}
        self._dim: int | None = None
        self._fitted: Any = None
        self._n_fit_rows = 0  # rows [0, n) are those the head was fitted on
        self._range: tuple[float, float] | None = None
        self._since_fit = 0
        self._next_gid = 0
        self._cache: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._candidates: dict[str, Any] | None = None
        self._crossfit: CrossfitScores | None = None  # out-of-fold scores of the rows held, when known
        self._metering = 0
        self._last_kind = "refit"
        self.refit_cost: dict[str, list[float]] = {}  # kind -> [CPU-s, rollouts held] of its last refit
        self.head_name: str | None = None
        self.head_r: dict[str, float] = {}
        self._theta: list[float] | None = None  # a GP head's kernel hyper-parameters, kept between selections
        self.n_select_rows = 0
        self.n_selections = 0
        self.refits_deferred = 0
        self.cpu_s = 0.0
        self.n_observed_groups = 0
        self.n_refits = 0
        self.last_fit_cpu_s = 0.0
        self.fit_cpu_s = 0.0
        if self.head == "auto":  # import the candidates' modules now, not inside a charged refit
            import wmrl_envs.world_models.heads  # noqa: F401
        _one_thread()

    # ------------------------------------------------------------------ cost
    def bind_execution_cost(self, source: Any) -> None:
        """Set what the CPU budget is measured against (see ``execution_cost`` in the class
        docstring): a :class:`~wmrl_envs.core.CostLedger` (e.g. ``wrapper.loop.ledger``), a
        callable ``() -> float`` (execution CPU-seconds so far) or ``None`` (no budget).

        Raises:
            TypeError: anything else.
        """
        if source is not None and not callable(getattr(source, "cpu_seconds", None)) and not callable(source):
            raise TypeError(f"execution_cost must be a CostLedger (e.g. loop.ledger), a callable returning the "
                            f"execution CPU-seconds so far, or None, got {type(source).__name__}")
        self.execution_cost = source

    @contextlib.contextmanager
    def _meter(self) -> Iterator[None]:
        """Add the block's process CPU-seconds to :attr:`cpu_s` (outermost block only)."""
        self._metering += 1
        t0 = time.process_time() if self._metering == 1 else 0.0
        try:
            yield
        finally:
            self._metering -= 1
            if self._metering == 0:
                self.cpu_s += max(0.0, time.process_time() - t0)

    def cpu_spent(self) -> tuple[float, float] | None:
        """``(world-model CPU-s, execution CPU-s)`` so far as the budget sees them (from the
        bound ledger's ``world_model`` and ``execution`` sources — their wall-clock seconds when
        the ledger counts wall-clock, ``cost_basis="wall"`` — or this model's :attr:`cpu_s` and
        the bound callable), ``None`` with no execution cost bound or a bound ledger that has
        recorded no execution (nothing to measure the budget against: refits are not held back).

        Raises:
            ValueError: the bound callable returned something other than a finite number >= 0.
        """
        src = self.execution_cost
        if src is None:
            return None
        if callable(getattr(src, "cpu_seconds", None)):
            if callable(getattr(src, "count", None)) and src.count("execution") == 0:
                return None  # a ledger that records no executions (a loop fed scores directly): no budget
            if getattr(src, "cost_basis", "cpu") == "wall":  # the run's cost is wall-clock: so is the budget
                return float(src.seconds("world_model")), float(src.seconds("execution"))
            return float(src.cpu_seconds("world_model")), float(src.cpu_seconds("execution"))
        v = src()
        if not _finite(v) or float(v) < 0:
            raise ValueError(f"execution_cost() must return the execution CPU-seconds so far (a finite number >= 0), "
                             f"got {v!r}")
        return self.cpu_s, float(v)

    def cpu_share_used(self) -> float | None:
        """The world model's CPU-seconds per execution CPU-second so far (to compare with
        :attr:`cpu_share`); ``None`` with no execution cost bound or no execution yet."""
        spent = self.cpu_spent()
        if spent is None or spent[1] <= 0:
            return None
        return spent[0] / spent[1]

    def summary(self) -> dict[str, Any]:
        """What a run's summary shows of the learned model: ``{"head": head_name, "head_r":
        {candidate: out-of-fold r}, "n_rollouts", "n_refits", "n_selections",
        "refits_deferred", "cpu_s", "cpu_share": the target, "cpu_share_used": the share so
        far (None: no execution cost bound)}``."""
        with self._lock:
            return {"head": self.head_name, "head_r": dict(self.head_r), "n_rollouts": self.n_rollouts,
                    "n_refits": self.n_refits, "n_selections": self.n_selections,
                    "refits_deferred": self.refits_deferred, "cpu_s": self.cpu_s, "cpu_share": self.cpu_share,
                    "cpu_share_used": self.cpu_share_used()}

    # ------------------------------------------------------------------ features
    def _key(self, context: Any, action: Any) -> bytes | None:
        if not self.cache_size:
            return None
        try:
            return hashlib.sha1(pickle.dumps((context, action), protocol=4)).digest()
        except Exception:  # noqa: BLE001 - an unpicklable pair is simply not cached
            return None

    def features(self, contexts: Sequence[Any], actions: Sequence[Any]) -> np.ndarray:
        """The featurizer's rows for B pairs, checked (float32 (B, D), finite, D constant).

        Raises:
            ValueError: different lengths, a result of the wrong shape, a width that differs
                from the rows stored, or non-finite values.
        """
        contexts, actions = list(contexts), list(actions)
        if len(contexts) != len(actions):
            raise ValueError(f"{len(contexts)} contexts but {len(actions)} actions")
        b = len(actions)
        keys = [self._key(c, a) for c, a in zip(contexts, actions)]
        rows: list[np.ndarray | None] = [self._cache.get(k) if k is not None else None for k in keys]
        todo = [i for i, r in enumerate(rows) if r is None]
        if todo:
            x = np.asarray(self.featurizer([contexts[i] for i in todo], [actions[i] for i in todo]))
            if x.ndim != 2 or x.shape[0] != len(todo):
                raise ValueError(f"the featurizer must return a (B, D) array for B = {len(todo)} pairs, got shape "
                                 f"{x.shape}: make it return one row of D features per (context, action) pair")
            x = x.astype(np.float32, copy=False)
            if not np.isfinite(x).all():
                raise ValueError(f"the featurizer returned non-finite features (NaN or inf) in "
                                 f"{int((~np.isfinite(x)).any(axis=1).sum())} of {len(todo)} rows: make it return "
                                 "finite numbers (e.g. replace a missing value by 0 with an indicator feature)")
            for i, row in zip(todo, x):
                rows[i] = row
                if keys[i] is not None:
                    self._cache[keys[i]] = row
                    if len(self._cache) > self.cache_size:
                        self._cache.popitem(last=False)
        if b == 0:
            return np.zeros((0, self._dim or 0), np.float32)
        out = np.stack(rows)  # type: ignore[arg-type]
        if self._dim is not None and out.shape[1] != self._dim:
            raise ValueError(f"the featurizer returned {out.shape[1]} features, the rows stored have {self._dim}: "
                             "every pair must get the same D features; after load_state_dict, build the model with "
                             "the same featurizer as the run that saved the state, or start fresh")
        return out


    # ------------------------------------------------------------------ prediction
    @property
    def fitted(self) -> bool:
        """Whether a head has been fitted (before that the prediction is the cold-start constant)."""
        return self._fitted is not None

    @property
    def n_rollouts(self) -> int:
        """Anchor rollouts stored (with a real score)."""
        return len(self._y)

    def cold_score(self) -> float:
        """The cold-start prediction: ``prior_score``, else the mean real score observed so far (0.0 with none)."""
        if self.prior_score is not None:
            return self.prior_score
        return float(np.mean(self._y)) if self._y else 0.0

    def _apply(self, head: Any, x: np.ndarray, lo_hi: tuple[float, float] | None) -> np.ndarray:
        with _one_thread():
            s = np.asarray(head.predict(x), dtype=np.float64).reshape(-1)
        if self.clip and lo_hi is not None:
            s = np.clip(s, *lo_hi)
        return s

    def predict_scores(self, contexts: Sequence[Any], actions: Sequence[Any]) -> np.ndarray:
        """The head's scores for B pairs, float64 (B,) (the cold-start constant before the first fit)."""
        with self._lock, self._meter():
            x = self.features(contexts, actions)
            if self._fitted is None:
                return np.full(len(x), self.cold_score())
            return self._apply(self._fitted, x, self._range)

    def predict(self, contexts: Sequence[Any], actions: Sequence[Any]) -> list[WorldModelPrediction]:
        """The :class:`~wmrl_envs.world_models.WorldModel` protocol: one prediction per pair
        (``score`` on the real scores' scale; ``extras``: ``fitted``, ``n_train_rollouts``).

        Raises:
            ValueError: see :meth:`features` (the wrappers turn it into an ungraded batch).
        """
        with self._lock:
            decided = self._prechecked(contexts, actions)
            todo = [i for i, d in enumerate(decided) if d is None]
            s = self.predict_scores([contexts[i] for i in todo], [actions[i] for i in todo]) if todo else []
            extras = {"fitted": self.fitted, "n_train_rollouts": self._n_fit_rows}
            self.n_precheck += len(decided) - len(todo)
        out: list[WorldModelPrediction | None] = [
            None if d is None else WorldModelPrediction(score=float(d), model_called=False,
                                                        extras={**extras, "precheck": True})
            for d in decided]
        for i, v in zip(todo, s):
            out[i] = WorldModelPrediction(score=float(v), extras=dict(extras))
        return out  # type: ignore[return-value]

    def _prechecked(self, contexts: Sequence[Any], actions: Sequence[Any]) -> list[float | None]:
        """The pre-check's score of each pair (``None`` where it decides nothing, or with no
        pre-check); its time is the world model's (metered)."""
        if self.precheck is None:
            return [None] * len(actions)
        if len(contexts) != len(actions):
            raise ValueError(f"got {len(contexts)} contexts but {len(actions)} actions")
        with self._meter():
            out = []
            for c, a in zip(contexts, actions):
                v = self.precheck(c, a)
                if v is not None and not _finite(v):
                    raise ValueError(f"the pre-check returned {v!r}: a finite score or None expected")
                out.append(None if v is None else float(v))
            return out

    # ------------------------------------------------------------------ learning
    def observe(self, contexts: Sequence[Any], actions: Sequence[Any], real_scores: Sequence[float | None],
                group_id: int | None = None) -> bool:
        """Learn from one closed anchor group: store its rollouts with a real score and refit
        when due (every ``refit_every`` groups, once ``min_groups`` are held, within the CPU
        budget when an execution cost is bound: see the class docstring).

        Call it only after the group's own predictions were made (the loop does, at close).

        Args:
            contexts, actions: the G pairs (as given to :meth:`predict`).
            real_scores: the G real scores (``None``/NaN: not stored).
            group_id: the group's id (int, unique; ``None``: a running id). Observing an id
                again adds a new group under a fresh id.

        Returns:
            Whether the head was refitted.

        Raises:
            ValueError: lengths differ, or the featurizer fails its checks (nothing stored then).
        """
        real = list(real_scores)
        if not (len(contexts) == len(actions) == len(real)):
            raise ValueError(f"{len(contexts)} contexts, {len(actions)} actions and {len(real)} real scores: "
                             "one of each per rollout")
        with self._lock, self._meter():
            keep = [i for i, r in enumerate(real) if _finite(r)]
            x = self.features([contexts[i] for i in keep], [actions[i] for i in keep]) if keep else None
            pre = self._prechecked([contexts[i] for i in keep], [actions[i] for i in keep])
            gid = int(group_id) if group_id is not None and int(group_id) not in self._sizes else None
            if gid is None:
                gid = max(self._next_gid, max(self._sizes, default=-1) + 1)
            self._next_gid = max(self._next_gid, gid + 1)
            self._sizes[gid] = len(real)
            if x is not None and len(x):
                if self._dim is None:
                    self._dim = int(x.shape[1])
                for i, row, p in zip(keep, x, pre):
                    self._pre.append(math.nan if p is None else p)
                    self._x.append(row)
                    self._y.append(float(real[i]))
                    self._gid.append(gid)
                    self._member.append(i)
                self._crossfit = None
            self.n_observed_groups += 1
            self._since_fit += 1
            # the first fit once min_groups groups are held, later ones every refit_every groups
            if (self._fitted is not None and self._since_fit < self.refit_every) or len({*self._gid}) < self.min_groups:
                return False
            select = self._selection_due()
            if self._fitted is not None:  # the first fit is made whatever the budget
                budget = self.cpu_spent()
                if budget is not None:
                    spent, execution = budget
                    allowed = self.cpu_share * execution - spent
                    if select and self._estimate("select") > allowed:
                        # a due selection waits for its budget; meanwhile a plain refit every 4th due group only
                        select = False
                        if self._since_fit < SAVING_REFIT_EVERY * self.refit_every:
                            self.refits_deferred += 1
                            return False
                    if not select and self._estimate("refit") > allowed:
                        self.refits_deferred += 1
                        return False
            self.refit(select=select)
            return True

    def _selection_due(self) -> bool:
        return (self.head == "auto" and len({*self._gid}) >= 2
                and (self.n_selections == 0 or len(self._y) >= self.select_growth * self.n_select_rows))

    def _estimate(self, kind: str) -> float:
        """Estimated CPU-seconds of a refit of ``kind`` (``"select"``/``"refit"``) now, with its
        rescoring: the last one's, scaled by the rollouts held now over those it was fitted on,
        at most twice (0 before any). Linear in N where fits are; the cap keeps a cost measured
        on a few rows, mostly fixed overhead, from holding every later refit back; a refit
        that costs more than estimated is paid back by the refits it then holds back."""
        cpu, rows = self.refit_cost.get(kind, (0.0, 1.0))
        return cpu * min(2.0, max(1.0, len(self._y) / max(rows, 1.0)))

    def _trim(self) -> None:
        """Drop the oldest groups until at most ``max_rollouts`` rows are held."""
        extra = len(self._y) - self.max_rollouts
        if extra <= 0:
            return
        cut_gid = self._gid[extra - 1]
        cut = extra
        while cut < len(self._gid) and self._gid[cut] == cut_gid:  # whole groups only
            cut += 1
        for gid in dict.fromkeys(self._gid[:cut]):
            self._sizes.pop(gid, None)
        del self._x[:cut], self._y[:cut], self._gid[:cut], self._member[:cut], self._pre[:cut]
        self._crossfit = None

    def _heads(self) -> dict[str, Any]:
        """``{name: unfitted regressor}`` to choose among (one for a given head)."""
        if self.head != "auto":
            return {"head": self.head}
        if self._candidates is None:
            from wmrl_envs.world_models.heads import candidate_heads

            self._candidates = candidate_heads(int(self._dim or 1))
        return self._candidates

    def _fit(self, head: Any, x: np.ndarray, y: np.ndarray) -> tuple[Any, tuple[float, float]]:
        import warnings

        from sklearn.base import clone

        with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings(), _one_thread():
            # RidgeCV's leave-one-out on a handful of rows; a Gaussian process's bounds on few rows
            warnings.simplefilter("ignore", category=UserWarning)
            try:
                from sklearn.exceptions import ConvergenceWarning

                warnings.simplefilter("ignore", category=ConvergenceWarning)
            except ImportError:  # pragma: no cover
                pass
            fitted = clone(head).fit(x, y)
        return fitted, (float(y.min()), float(y.max()))

    def _head_in_use(self) -> Any:
        """The unfitted head in use: the chosen one, a Gaussian process with its kernel
        hyper-parameters kept from the last selection."""
        from wmrl_envs.world_models.heads import with_frozen_kernel

        heads = self._heads()
        head = heads.get(self.head_name or "", None) or next(iter(heads.values()))
        return with_frozen_kernel(head, self._theta) if self.head == "auto" else head

    def _fit_rows(self, idx: np.ndarray | slice, head: Any = None) -> tuple[Any, tuple[float, float]]:
        x = np.stack(self._x)[idx]
        y = np.asarray(self._y, dtype=np.float64)[idx]
        return self._fit(self._head_in_use() if head is None else head, x, y)

    def refit(self, select: bool | None = None) -> None:
        """Fit the head on the rollouts held now (the oldest groups beyond ``max_rollouts``
        dropped first). A *selection* refit (``head="auto"``, >= 2 groups held) first scores
        every candidate head out of fold and keeps the best (its out-of-fold scores become
        :meth:`crossfit_scores`' answer until the rows change).

        Args:
            select: make it a selection refit (``None``: when one is due, see ``select_growth``).

        Raises:
            RuntimeError: no rollout held.
        """
        with self._lock, self._meter():
            t0 = time.process_time()
            self._trim()
            if not self._y:
                raise RuntimeError("cannot fit the learned world model: no anchor rollout with a real score held")
            if select is None:
                select = self._selection_due()
            select = bool(select) and self.head == "auto" and len({*self._gid}) >= 2
            heads = self._heads()
            # a selection before any Gaussian-process kernel is known optimises it per fold: a cost
            # of its own, not an estimate for the later selections (which keep the kernel in their folds)
            kind = ("select" if self._theta is not None or "gp" not in heads else "first_select") if select else "refit"
            if select:
                from wmrl_envs.world_models.heads import select_out_of_fold, with_frozen_kernel

                x = np.stack(self._x)
                y = np.asarray(self._y, dtype=np.float64)
                gid = np.asarray(self._gid, dtype=np.int64)

                def fit_predict(head: Any, train: np.ndarray, test: np.ndarray) -> np.ndarray:
                    fitted, lo_hi = self._fit(head, x[train], y[train])
                    return self._apply(fitted, x[test], lo_hi)

                # a Gaussian process is scored with the kernel of its last fit on all rows (none: its own per fold)
                scored = {k: with_frozen_kernel(h, self._theta) for k, h in heads.items()}
                sel = select_out_of_fold(scored, x, y, gid, self.folds, fit_predict)
                self.head_name, self.head_r = sel.chosen, sel.r
                self.n_select_rows = len(y)
                self.n_selections += 1
                self._crossfit = CrossfitScores(self._with_precheck(sel.scores), y, gid, np.asarray(self._member, dtype=np.int64),
                                                dict(self._sizes))
            elif self.head_name is None:
                self.head_name = next(iter(heads))
            gp = heads.get("gp") if self.head == "auto" else None
            if gp is not None and (select or self._theta is None):
                # the Gaussian process's hyper-parameters by marginal likelihood on all rows (warm-started)
                from wmrl_envs.world_models.heads import kernel_theta, with_frozen_kernel

                gp_fit = self._fit_rows(slice(None), with_frozen_kernel(gp, self._theta, optimize=True))
                self._theta = kernel_theta(gp_fit[0])
                if self.head_name == "gp":
                    self._fitted, self._range = gp_fit
            if gp is None or self.head_name != "gp" or not (select or self._n_fit_rows == 0):
                self._fitted, self._range = self._fit_rows(slice(None))
            self._n_fit_rows = len(self._y)
            self._since_fit = 0
            self.n_refits += 1
            self._last_kind = kind
            self.refit_cost[self._last_kind] = [time.process_time() - t0, float(len(self._y))]

    def crossfit_scores(self) -> CrossfitScores:
        """Out-of-fold scores of every stored anchor rollout: the groups are split into
        ``min(folds, groups)`` folds (scikit-learn ``GroupKFold``: whole groups per fold) and each
        fold is scored by a head fitted on the other folds only (clipped to their real range),
        so no rollout is scored by a head that saw its own group's outcomes. After a selection
        refit (and until the rows change) these are the selection's scores: each fold's from
        the candidate that was best on the other folds. Otherwise the head in use is refitted
        per fold (its cost is added to the refit's, for the budget's estimate). With one group
        held, its rollouts get :meth:`cold_score`.

        Returns:
            A :class:`CrossfitScores` (rows in storage order, oldest group first).
        """
        from sklearn.model_selection import GroupKFold

        with self._lock, self._meter():
            if self._crossfit is not None and len(self._crossfit.real) == len(self._y):
                c = self._crossfit
                return CrossfitScores(c.scores.copy(), c.real.copy(), c.group_ids.copy(), c.members.copy(),
                                      dict(c.group_sizes))
            t0 = time.process_time()
            n = len(self._y)
            gid = np.asarray(self._gid, dtype=np.int64)
            out = np.full(n, self.cold_score(), dtype=np.float64)
            groups = np.unique(gid)
            if groups.size >= 2:
                x = np.stack(self._x)
                for train, test in GroupKFold(n_splits=int(min(self.folds, groups.size))).split(x, groups=gid):
                    head, lo_hi = self._fit_rows(train)
                    out[test] = self._apply(head, x[test], lo_hi)
            out = self._with_precheck(out)
            self._crossfit = CrossfitScores(out, np.asarray(self._y, dtype=np.float64), gid,
                                            np.asarray(self._member, dtype=np.int64), dict(self._sizes))
            last = self.refit_cost.get(self._last_kind)
            if n and self._fitted is not None and n == self._n_fit_rows and last is not None and last[1] == n:
                last[0] += time.process_time() - t0
            return self._crossfit


    def _with_precheck(self, scores: np.ndarray) -> np.ndarray:
        """Out-of-fold ``scores`` (N,) of the stored rows with the pre-check's score where it decided
        (as :meth:`predict` scores them)."""
        pre = np.asarray(self._pre, dtype=np.float64)
        scores = np.asarray(scores, dtype=np.float64)
        return np.where(np.isfinite(pre), pre, scores) if pre.size == scores.size else scores

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Settings, stored rows and counters (JSON-serialisable). The features are stored as
        base64 of their little-endian float32 bytes (``"features_b64"``, shape ``(N, dim)``); the
        head is not stored: :meth:`load_state_dict` refits it on the rows it was fitted on, so a
        deterministic head (the default) predicts exactly as before. The featurizer and the head
        are not part of the state (build the model with the same ones)."""
        with self._lock:
            x = np.stack(self._x).astype("<f4") if self._x else np.zeros((0, self._dim or 0), "<f4")
            return {
                "version": self.STATE_VERSION,
                "settings": {"refit_every": self.refit_every, "folds": self.folds, "min_groups": self.min_groups,
                             "max_rollouts": self.max_rollouts, "prior_score": self.prior_score, "clip": self.clip,
                             "cpu_share": self.cpu_share, "select_growth": self.select_growth},
                "dim": self._dim,
                "features_b64": base64.b64encode(x.tobytes()).decode("ascii"),
                "real": list(self._y),
                "group_ids": list(self._gid),
                "members": list(self._member),
                "precheck_scores": [None if math.isnan(v) else v for v in self._pre],
                "group_sizes": [[g, n] for g, n in self._sizes.items()],
                "n_fit_rows": self._n_fit_rows if self._fitted is not None else None,
                "since_fit": self._since_fit,
                "next_group_id": self._next_gid,
                "n_observed_groups": self.n_observed_groups,
                "n_refits": self.n_refits,
                "fit_cpu_s": self.fit_cpu_s,
                "last_fit_cpu_s": self.last_fit_cpu_s,
                "head_name": self.head_name,
                "kernel_theta": self._theta,
                "head_r": dict(self.head_r),
                "n_select_rows": self.n_select_rows,
                "n_selections": self.n_selections,
                "refits_deferred": self.refits_deferred,
                "refit_cost": {k: list(v) for k, v in self.refit_cost.items()},
                "cpu_s": self.cpu_s,
                "n_precheck": self.n_precheck,
            }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (the settings are the saved ones) and refit the
        head on the rows it had been fitted on.

        Raises:
            ValueError: another version, malformed rows, or a saved feature width other than the
                featurizer's ``dim`` (where it has one; nothing changed then).
        """
        if not isinstance(state, Mapping) or state.get("version") != self.STATE_VERSION:
            raise ValueError(f"learned world-model state version {state.get('version') if isinstance(state, Mapping) else None!r} "
                             f"is not supported (this code reads {self.STATE_VERSION})")
        dim = state["dim"]
        real = [float(v) for v in state["real"]]
        raw = base64.b64decode(state["features_b64"])
        x = np.frombuffer(raw, dtype="<f4")
        if dim is None:
            if x.size or real:
                raise ValueError("learned world-model state: rows without a feature width")
            rows: list[np.ndarray] = []
        else:
            if x.size != len(real) * int(dim):
                raise ValueError(f"learned world-model state: {x.size} feature values for {len(real)} rows of {dim}")
            rows = [r.astype(np.float32) for r in x.reshape(len(real), int(dim))]
            width = getattr(self.featurizer, "dim", None)
            if isinstance(width, (int, np.integer)) and not isinstance(width, bool) and int(width) != int(dim):
                raise ValueError(f"learned world-model state: the saved rows have {int(dim)} features, but this "
                                 f"model's featurizer ({type(self.featurizer).__name__}) gives {int(width)}: build the "
                                 "model with the same featurizer as the run that saved the state, or start fresh "
                                 "(do not load the saved learned_world_model state)")
        gids, members = [int(g) for g in state["group_ids"]], [int(m) for m in state["members"]]
        if not (len(gids) == len(members) == len(real)):
            raise ValueError("learned world-model state: rows, group ids and members differ in length")
        s = state["settings"]
        fresh = LearnedWorldModel(self.featurizer, head=self.head, refit_every=s["refit_every"], folds=s["folds"],
                                  min_groups=s["min_groups"], max_rollouts=s["max_rollouts"],
                                  prior_score=s["prior_score"], clip=s["clip"], cache_size=self.cache_size,
                                  cpu_share=s.get("cpu_share", self.cpu_share),
                                  select_growth=s.get("select_growth", self.select_growth),
                                  execution_cost=self.execution_cost, precheck=self.precheck)
        name = state.get("head_name")
        if name is not None and not isinstance(name, str):
            raise ValueError(f"learned world-model state: head_name {name!r} is not a string")
        fresh._dim = None if dim is None else int(dim)
        if name is not None and name not in fresh._heads() and (self.head == "auto" or name != "head"):
            raise ValueError(f"learned world-model state: the saved head {name!r} is not among this model's heads "
                             f"{sorted(fresh._heads())}: build the model with the same head (and featurizer) as the "
                             "run that saved the state, or start fresh")
        fresh.head_name = name
        theta = state.get("kernel_theta")
        fresh._theta = None if theta is None else [float(v) for v in theta]
        fresh._x, fresh._y, fresh._gid, fresh._member = rows, real, gids, members
        pre = state.get("precheck_scores")  # a state saved before pre-checks: none decided
        fresh._pre = [math.nan] * len(real) if pre is None else [math.nan if v is None else float(v) for v in pre]
        if len(fresh._pre) != len(real):
            raise ValueError("learned world-model state: precheck_scores and rows differ in length")
        fresh._sizes = {int(g): int(n) for g, n in state["group_sizes"]}
        fresh._dim = None if dim is None else int(dim)
        n_fit = state["n_fit_rows"]
        if n_fit is not None:
            if not 0 < int(n_fit) <= len(real):
                raise ValueError(f"learned world-model state: fitted on {n_fit} rows of {len(real)}")
            if fresh.head_name is None or fresh.head_name not in fresh._heads():  # a state saved before heads had names
                fresh.head_name = next(iter(fresh._heads()))
            fresh._fitted, fresh._range = fresh._fit_rows(slice(0, int(n_fit)))
            fresh._n_fit_rows = int(n_fit)
        fresh._since_fit = int(state["since_fit"])
        fresh._next_gid = int(state["next_group_id"])
        fresh.n_observed_groups = int(state["n_observed_groups"])
        fresh.n_refits = int(state["n_refits"])
        fresh.fit_cpu_s = float(state.get("fit_cpu_s", 0.0))
        fresh.last_fit_cpu_s = float(state.get("last_fit_cpu_s", 0.0))
        fresh.head_r = {str(k): float(v) for k, v in dict(state.get("head_r") or {}).items()}
        fresh.n_select_rows = int(state.get("n_select_rows", 0))
        fresh.n_selections = int(state.get("n_selections", 0))
        fresh.refits_deferred = int(state.get("refits_deferred", 0))
        fresh.refit_cost = {str(k): [float(v[0]), float(v[1])] for k, v in dict(state.get("refit_cost") or {}).items()}
        fresh.cpu_s = float(state.get("cpu_s", 0.0))
        fresh.n_precheck = int(state.get("n_precheck", 0))
        with self._lock:
            for k, v in fresh.__dict__.items():
                if k not in ("_lock", "_cache", "featurizer", "head", "_metering", "precheck"):
                    setattr(self, k, v)
