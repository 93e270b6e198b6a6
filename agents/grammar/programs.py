"""The grammar of :class:`agents.grammar.policy.GrammarPolicy`: what its programs can choose, and their code.

This module is the policy's action space, apart from the distribution over it: the options,
slots and families of each problem type (:data:`GRAMMARS`), the coarse task features a program
is conditioned on (:class:`TaskContext`), and :class:`Program` with the emission of its complete
Python source (:func:`build_program`, :func:`emit_program`).

Grammar (one per problem type, :data:`GRAMMARS`): a *program* is a sequence of categorical
choices (the "tokens" of the policy):

1. ``preprocess`` — none, standard / min-max scaling, quantile transform, PCA;
2. ``family`` — the estimator family (logistic/ridge/lasso, kNN, naive Bayes, decision tree,
   random forest, extra trees, histogram gradient boosting, gradient boosting);
3. one choice per hyper-parameter slot of the chosen family (``<family>.<slot>``), e.g.
   ``random_forest.n_estimators``, ``hist_gb.learning_rate``, and an ``extra`` slot.

Some options are realistic *mistakes* an agent makes (:attr:`Option.fails`): an argument the
family does not accept (``HistGradientBoostingClassifier(n_estimators=...)``), an API removed
from scikit-learn (``max_features='auto'``, ``loss='deviance'``, ``multi_class=...``), an
incompatible combination (``penalty='l1'`` with the default lbfgs solver, ``oob_score`` without
bootstrap), an absurd value (``n_neighbors=0``), or a choice that fails only on some data
(``MultinomialNB`` on negative features, a Poisson loss on negative targets, ``PCA(100)`` on
fewer than 100 features, liblinear on more than two classes). They raise at run time, so GRPO
has a signal at the bottom of the reward scale too. Every estimator that takes a
``random_state`` gets one drawn per rollout, so executions carry real run-to-run noise.

Hyper-parameters matter, as they do in practice: the options span over-regularised
(``C=0.001``, ``alpha=1000``), under-fitted (10 boosting stages, 50 iterations, depth-2 trees)
and over-fitted (``n_neighbors=1``, unlimited depth, ``learning_rate=0.3``) settings, and what
a task needs (scaling before a distance-based model, ``class_weight='balanced'`` for an
imbalanced task scored by macro-F1, an absolute-error loss for a heavy-tailed target) is one
choice among several. Heavy options are capped so that no execution takes tens of seconds: at
most 200 histogram-boosting iterations, 50 gradient-boosting stages and 100 trees per forest
(200 before), on tasks of 6000 rows or fewer. An execution's cost is then mostly the start-up
of Python and scikit-learn (about 1.3 CPU-seconds); the measured distribution is printed by
``benchmarks/bench_design.py`` (``docs/autoresearch.md``, "Benchmark design: room to
learn").
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

import numpy as np

__all__ = [
    "Option",
    "Slot",
    "Family",
    "Grammar",
    "GRAMMARS",
    "PREPROCESS",
    "ESTIMATOR_MODULES",
    "CONTEXT_FEATURES",
    "TaskContext",
    "task_context",
    "Program",
    "build_program",
    "emit_program",
]


# ----------------------------------------------------------------------------------------------
# Grammar
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    """One option of a grammar slot.

    Attributes:
        label: short id, unique within its slot (str), e.g. ``"n50"``, ``"none"``.
        code: the code the option contributes: for a hyper-parameter slot, keyword-argument
            text (``"n_estimators=50"``; ``""`` keeps the estimator's default); for the
            ``preprocess`` slot, a transformer expression (``"StandardScaler()"``; ``""`` = no
            preprocessing). ``{rs}`` is replaced by the rollout's random state.
        prior: relative weight of the option in the ``init="prior"`` policy (> 0).
        fails: ``None`` for a working option; ``"always"`` if a program with this option
            raises at run time on every task; ``"data"`` if it raises on some tasks / in some
            combinations only (e.g. ``MultinomialNB`` on negative features).
        estimator: replaces the family's estimator class (e.g. naive Bayes variants), or
            ``None``.
    """

    label: str
    code: str = ""
    prior: float = 1.0
    fails: str | None = None
    estimator: str | None = None

    def __post_init__(self) -> None:
        if self.fails not in (None, "always", "data"):
            raise ValueError(f"Option.fails must be None, 'always' or 'data', got {self.fails!r}")
        if not self.prior > 0:
            raise ValueError(f"Option.prior must be > 0, got {self.prior}")


@dataclass(frozen=True)
class Slot:
    """A categorical choice: a name and its options (at least one)."""

    name: str
    options: tuple[Option, ...]

    def __post_init__(self) -> None:
        labels = [o.label for o in self.options]
        if not labels or len(set(labels)) != len(labels):
            raise ValueError(f"slot {self.name!r} needs >= 1 option with unique labels, got {labels}")


@dataclass(frozen=True)
class Family:
    """An estimator family.

    Attributes:
        name: id (str), e.g. ``"random_forest"``.
        estimator: scikit-learn class name (must be in :data:`ESTIMATOR_MODULES`).
        slots: its hyper-parameter slots.
        random_state: pass ``random_state=<drawn per rollout>`` to the estimator.
        prior: relative weight of the family in the ``init="prior"`` policy.
    """

    name: str
    estimator: str
    slots: tuple[Slot, ...]
    random_state: bool = True
    prior: float = 1.0


@dataclass(frozen=True)
class Grammar:
    """The grammar of one problem type: a preprocessing slot, a family slot, family slots.

    Derived layout (used by the policy's parameter tables): slot 0 is ``"preprocess"``, slot 1
    is ``"family"`` (one option per family, labelled by its name), then the slots of each family
    in order, keyed ``"<family>.<slot>"``.

    Attributes:
        problem_type: ``"classification"`` or ``"regression"``.
        preprocess: the preprocessing slot.
        families: the estimator families.
    """

    problem_type: str
    preprocess: Slot
    families: tuple[Family, ...]

    def __post_init__(self) -> None:
        keys: list[str] = ["preprocess", "family"]
        options: list[tuple[Option, ...]] = [
            self.preprocess.options,
            tuple(Option(f.name, prior=f.prior) for f in self.families),
        ]
        fam_ids: dict[str, tuple[int, ...]] = {}
        for f in self.families:
            if f.estimator not in ESTIMATOR_MODULES:
                raise ValueError(f"family {f.name!r}: estimator {f.estimator!r} is not in ESTIMATOR_MODULES")
            ids = []
            for s in f.slots:
                ids.append(len(keys))
                keys.append(f"{f.name}.{s.name}")
                options.append(s.options)
            fam_ids[f.name] = tuple(ids)
        if len({f.name for f in self.families}) != len(self.families):
            raise ValueError("family names must be unique")
        object.__setattr__(self, "_keys", tuple(keys))
        object.__setattr__(self, "_options", tuple(options))
        object.__setattr__(self, "_family_slot_ids", fam_ids)
        object.__setattr__(self, "_key_index", {k: i for i, k in enumerate(keys)})

    @property
    def slot_keys(self) -> tuple[str, ...]:
        """All slot keys in layout order (``S`` of them)."""
        return self._keys  # type: ignore[attr-defined]

    @property
    def slot_options(self) -> tuple[tuple[Option, ...], ...]:
        """The options of every slot, in layout order."""
        return self._options  # type: ignore[attr-defined]

    @property
    def n_slots(self) -> int:
        """``S``, the number of slots (int)."""
        return len(self.slot_keys)

    @property
    def max_options(self) -> int:
        """``K``, the largest number of options of a slot (int)."""
        return max(len(o) for o in self.slot_options)

    def slot_index(self, key: str) -> int:
        """Layout index of a slot key. Raises ``KeyError`` for an unknown key."""
        try:
            return self._key_index[key]  # type: ignore[attr-defined]
        except KeyError:
            raise KeyError(f"unknown slot {key!r}; slots: {', '.join(self.slot_keys)}") from None

    def family(self, name: str) -> Family:
        """The :class:`Family` called ``name``. Raises ``KeyError`` if there is none."""
        for f in self.families:
            if f.name == name:
                return f
        raise KeyError(f"unknown family {name!r}; families: {', '.join(f.name for f in self.families)}")

    def family_slot_ids(self, name: str) -> tuple[int, ...]:
        """Layout indices of the slots of family ``name``."""
        return self._family_slot_ids[name]  # type: ignore[attr-defined]

    def active_slots(self, family_index: int) -> tuple[int, ...]:
        """Layout indices of the slots a program with family ``family_index`` chooses, in order."""
        return (0, 1) + self.family_slot_ids(self.families[family_index].name)

    def valid_mask(self) -> np.ndarray:
        """Bool array (S, K): ``True`` where slot s has an option k."""
        m = np.zeros((self.n_slots, self.max_options), dtype=bool)
        for s, opts in enumerate(self.slot_options):
            m[s, : len(opts)] = True
        return m

    def prior_logits(self) -> np.ndarray:
        """float32 (S, K): log of the normalised :attr:`Option.prior` weights, 0 at padding."""
        out = np.zeros((self.n_slots, self.max_options), dtype=np.float32)
        for s, opts in enumerate(self.slot_options):
            w = np.array([o.prior for o in opts], dtype=np.float64)
            out[s, : len(opts)] = np.log(w / w.sum())
        return out

    def combinations(self) -> Iterator[dict[str, str]]:
        """Every program of the grammar as ``{slot key: option label}`` (active slots only)."""
        for pre in self.preprocess.options:
            for fi, f in enumerate(self.families):
                ids = self.family_slot_ids(f.name)
                for combo in itertools.product(*(self.slot_options[i] for i in ids)):
                    ch = {"preprocess": pre.label, "family": f.name}
                    ch.update({self.slot_keys[i]: o.label for i, o in zip(ids, combo)})
                    yield ch

    def n_programs(self) -> int:
        """Number of distinct programs (random state aside)."""
        per_family = sum(math.prod(len(self.slot_options[i]) for i in self.family_slot_ids(f.name)) for f in self.families)
        return len(self.preprocess.options) * per_family


def _o(label: str, code: str = "", prior: float = 1.0, fails: str | None = None, estimator: str | None = None) -> Option:
    return Option(label, code, prior, fails, estimator)


_MISTAKE = 0.3  # prior weight of a mistake option (a working default option weighs 2.0)

ESTIMATOR_MODULES: dict[str, str] = {
    "StandardScaler": "sklearn.preprocessing",
    "MinMaxScaler": "sklearn.preprocessing",
    "QuantileTransformer": "sklearn.preprocessing",
    "PCA": "sklearn.decomposition",
    "LogisticRegression": "sklearn.linear_model",
    "Ridge": "sklearn.linear_model",
    "Lasso": "sklearn.linear_model",
    "KNeighborsClassifier": "sklearn.neighbors",
    "KNeighborsRegressor": "sklearn.neighbors",
    "GaussianNB": "sklearn.naive_bayes",
    "BernoulliNB": "sklearn.naive_bayes",
    "MultinomialNB": "sklearn.naive_bayes",
    "DecisionTreeClassifier": "sklearn.tree",
    "DecisionTreeRegressor": "sklearn.tree",
    "RandomForestClassifier": "sklearn.ensemble",
    "RandomForestRegressor": "sklearn.ensemble",
    "ExtraTreesClassifier": "sklearn.ensemble",
    "ExtraTreesRegressor": "sklearn.ensemble",
    "HistGradientBoostingClassifier": "sklearn.ensemble",
    "HistGradientBoostingRegressor": "sklearn.ensemble",
    "GradientBoostingClassifier": "sklearn.ensemble",
    "GradientBoostingRegressor": "sklearn.ensemble",
}
"""Module of every class the grammar emits (for the import lines of emitted code)."""

PREPROCESS = Slot("preprocess", (
    _o("none", "", 1.0),
    _o("standard", "StandardScaler()", 1.5),
    _o("minmax", "MinMaxScaler()", 0.6),
    _o("quantile", "QuantileTransformer(output_distribution='normal', random_state={rs})", 0.6),
    _o("pca16", "PCA(n_components=16, random_state={rs})", 0.4),
    _o("pca100", "PCA(n_components=100, random_state={rs})", 0.2, "data"),  # > n_features on most tasks
))
"""The preprocessing slot (shared by both problem types); a non-empty option makes the model a
``make_pipeline(<transformer>, <estimator>)``."""


def _knn(estimator: str) -> Family:
    return Family("knn", estimator, (
        Slot("n_neighbors", (_o("k1", "n_neighbors=1"), _o("k5", ""), _o("k15", "n_neighbors=15"),
                             _o("k50", "n_neighbors=50"), _o("k0", "n_neighbors=0", _MISTAKE, "always"))),
        Slot("weights", (_o("uniform", ""), _o("distance", "weights='distance'"))),
        Slot("extra", (_o("none", "", 2.0), _o("manhattan", "p=1"),
                       _o("kdtree_cosine", "algorithm='kd_tree', metric='cosine'", _MISTAKE, "always"))),
    ), random_state=False)


def _tree(estimator: str, extra: tuple[Option, ...]) -> Family:
    return Family("decision_tree", estimator, (
        Slot("max_depth", (_o("none", ""), _o("d4", "max_depth=4"), _o("d8", "max_depth=8"), _o("d16", "max_depth=16"))),
        Slot("min_samples_leaf", (_o("l1", ""), _o("l5", "min_samples_leaf=5"), _o("l20", "min_samples_leaf=20"),
                                  _o("l50", "min_samples_leaf=50"))),
        Slot("extra", extra),
    ))


def _hgb(estimator: str, extra: tuple[Option, ...]) -> Family:
    """Histogram gradient boosting; ``extra`` follows the options every estimator shares (the
    default, no early stopping, L2)."""
    shared = (_o("none", "", 2.0), _o("no_early_stop", "early_stopping=False"), _o("l2", "l2_regularization=1.0"))
    return Family("hist_gb", estimator, (
        Slot("learning_rate", (_o("lr0.05", "learning_rate=0.05"), _o("lr0.1", ""), _o("lr0.3", "learning_rate=0.3"))),
        Slot("max_iter", (_o("it50", "max_iter=50"), _o("it100", ""), _o("it200", "max_iter=200"))),
        Slot("max_leaf_nodes", (_o("m15", "max_leaf_nodes=15"), _o("m31", ""), _o("m63", "max_leaf_nodes=63"))),
        Slot("extra", (*shared, *extra)),
    ))


def _gb(estimator: str, extra: tuple[Option, ...]) -> Family:
    return Family("gradient_boosting", estimator, (
        Slot("n_estimators", (_o("n10", "n_estimators=10"), _o("n20", "n_estimators=20"), _o("n50", "n_estimators=50"))),
        Slot("learning_rate", (_o("lr0.05", "learning_rate=0.05"), _o("lr0.1", ""), _o("lr0.3", "learning_rate=0.3"))),
        Slot("max_depth", (_o("d2", "max_depth=2"), _o("d3", ""))),
        Slot("extra", extra),
    ), prior=0.7)


def _forest(estimator: str, max_features: tuple[Option, ...], extra: tuple[Option, ...]) -> Family:
    """A random forest: ``max_features`` and ``extra`` get the mistakes every estimator shares
    (``max_features='auto'``; ``max_samples`` without bootstrap) appended."""
    return Family("random_forest", estimator, (
        Slot("n_estimators", (_o("n20", "n_estimators=20"), _o("n50", "n_estimators=50"), _o("n100", ""))),
        Slot("max_depth", (_o("none", ""), _o("d10", "max_depth=10"), _o("d20", "max_depth=20"))),
        Slot("max_features", (*max_features, _o("auto", "max_features='auto'", _MISTAKE, "always"))),
        Slot("extra", (*extra, _o("nobootstrap_half", "bootstrap=False, max_samples=0.5", _MISTAKE, "always"))),
    ))


def _et(estimator: str, extra: Option, default_sqrt: bool) -> Family:
    """Extra trees; ``extra`` is the one estimator-specific option of the extra slot, between
    the shared ones (the default, bootstrap; the ``oob_score`` mistake)."""
    sqrt = _o("sqrt", "" if default_sqrt else "max_features='sqrt'")
    return Family("extra_trees", estimator, (
        Slot("n_estimators", (_o("n25", "n_estimators=25"), _o("n50", "n_estimators=50"), _o("n100", ""))),
        Slot("max_features", (sqrt, _o("f0.3", "max_features=0.3"), _o("f0.6", "max_features=0.6"))),
        Slot("min_samples_leaf", (_o("l1", ""), _o("l3", "min_samples_leaf=3"), _o("l10", "min_samples_leaf=10"))),
        Slot("extra", (_o("none", "", 2.0), _o("bootstrap", "bootstrap=True"), extra,
                       _o("oob", "oob_score=True", _MISTAKE, "always"))),
    ), prior=0.8)


_CLASSIFICATION = Grammar("classification", PREPROCESS, (
    Family("logistic", "LogisticRegression", (
        Slot("C", (_o("C0.001", "C=0.001"), _o("C0.01", "C=0.01"), _o("C0.1", "C=0.1"), _o("C1", ""), _o("C10", "C=10.0"))),
        Slot("max_iter", (_o("it100", ""), _o("it300", "max_iter=300"), _o("it1000", "max_iter=1000"))),
        Slot("solver", (_o("lbfgs", "", 2.0), _o("liblinear", "solver='liblinear'", 0.6, "data"),  # binary only
                        _o("saga", "solver='saga'", 0.6), _o("newton_cholesky", "solver='newton-cholesky'", 0.6),
                        _o("l1_lbfgs", "penalty='l1'", _MISTAKE, "always"),
                        _o("multi_class", "multi_class='multinomial'", _MISTAKE, "always"))),
        Slot("class_weight", (_o("none", ""), _o("balanced", "class_weight='balanced'"))),
    )),
    _knn("KNeighborsClassifier"),
    Family("naive_bayes", "GaussianNB", (
        Slot("variant", (_o("gaussian", "", 2.0), _o("smooth1e-3", "var_smoothing=1e-3"),
                         _o("smooth0.1", "var_smoothing=0.1"), _o("bernoulli", "", 0.6, estimator="BernoulliNB"),
                         _o("multinomial", "", 0.6, "data", estimator="MultinomialNB"))),  # negative features
    ), random_state=False, prior=0.7),
    _tree("DecisionTreeClassifier", (
        _o("none", "", 2.0), _o("entropy", "criterion='entropy'"), _o("sqrt", "max_features='sqrt'"),
        _o("mf_auto", "max_features='auto'", _MISTAKE, "always"),
        _o("mss1", "min_samples_split=1", _MISTAKE, "always"),
    )),
    _forest("RandomForestClassifier", (_o("sqrt", ""), _o("f0.3", "max_features=0.3")), (
        _o("none", "", 2.0), _o("leaf2", "min_samples_leaf=2"), _o("balanced", "class_weight='balanced'"),
        _o("half", "max_samples=0.5"),
    )),
    _et("ExtraTreesClassifier", _o("balanced", "class_weight='balanced'"), default_sqrt=True),
    _hgb("HistGradientBoostingClassifier", (
        _o("balanced", "class_weight='balanced'"),
        _o("n_estimators", "n_estimators=200", _MISTAKE, "always"),
        _o("squared_loss", "loss='squared_error'", _MISTAKE, "always"),
    )),
    _gb("GradientBoostingClassifier", (
        _o("none", "", 2.0), _o("subsample", "subsample=0.5"), _o("sqrt", "max_features='sqrt'"),
        _o("deviance", "loss='deviance'", _MISTAKE, "always"),
        _o("exponential", "loss='exponential'", _MISTAKE, "data"),  # binary only
    )),
))

_REGRESSION = Grammar("regression", PREPROCESS, (
    Family("ridge", "Ridge", (
        Slot("alpha", (_o("a0.1", "alpha=0.1"), _o("a1", ""), _o("a10", "alpha=10.0"), _o("a100", "alpha=100.0"),
                       _o("a1000", "alpha=1000.0"))),
        Slot("extra", (_o("none", "", 2.0), _o("no_intercept", "fit_intercept=False"), _o("svd", "solver='svd'"),
                       _o("lbfgs", "solver='lbfgs'", _MISTAKE, "always"),  # needs positive=True
                       _o("normalize", "normalize=True", _MISTAKE, "always"))),
    ), random_state=False),
    Family("lasso", "Lasso", (
        Slot("alpha", (_o("a0.001", "alpha=0.001"), _o("a0.01", "alpha=0.01"), _o("a0.1", "alpha=0.1"), _o("a1", ""))),
        Slot("max_iter", (_o("it1000", ""), _o("it5000", "max_iter=5000"))),
        Slot("extra", (_o("none", "", 2.0), _o("random", "selection='random'"), _o("positive", "positive=True"),
                       _o("normalize", "normalize=True", _MISTAKE, "always"),
                       _o("precompute_auto", "precompute='auto'", _MISTAKE, "always"))),
    ), prior=0.7),
    _knn("KNeighborsRegressor"),
    _tree("DecisionTreeRegressor", (
        _o("none", "", 2.0), _o("friedman", "criterion='friedman_mse'"), _o("sqrt", "max_features='sqrt'"),
        _o("mse", "criterion='mse'", _MISTAKE, "always"),
        _o("mf_auto", "max_features='auto'", _MISTAKE, "always"),
    )),
    _forest("RandomForestRegressor", (
        _o("sqrt", "max_features='sqrt'"), _o("f0.3", "max_features=0.3"),
        _o("all", "", 0.6),  # the default (all features): slow
    ), (
        _o("none", "", 2.0), _o("leaf2", "min_samples_leaf=2"), _o("half", "max_samples=0.5"),
        _o("mse", "criterion='mse'", _MISTAKE, "always"),
    )),
    _et("ExtraTreesRegressor", _o("depth12", "max_depth=12"), default_sqrt=False),
    _hgb("HistGradientBoostingRegressor", (
        _o("absolute", "loss='absolute_error'"),
        _o("poisson", "loss='poisson'", _MISTAKE, "data"),  # needs y >= 0
        _o("n_estimators", "n_estimators=200", _MISTAKE, "always"),
    )),
    _gb("GradientBoostingRegressor", (
        _o("none", "", 2.0), _o("subsample", "subsample=0.5"), _o("huber", "loss='huber'"),
        _o("sqrt", "max_features='sqrt'"), _o("ls", "loss='ls'", _MISTAKE, "always"),
    )),
))

GRAMMARS: dict[str, Grammar] = {"classification": _CLASSIFICATION, "regression": _REGRESSION}
"""The default grammar of each problem type."""


# ----------------------------------------------------------------------------------------------
# Task context
# ----------------------------------------------------------------------------------------------

CONTEXT_FEATURES: tuple[str, ...] = (
    "multiclass",
    "rows<10k", "rows10-20k", "rows>=20k",
    "features<32", "features32-63", "features>=64",
    "has_categoricals",
    "has_missing",
)
"""Names of the entries of :attr:`TaskContext.features` (``D = 9``). Rows and features are
counted in ``train.csv`` (features before one-hot encoding)."""


@dataclass(frozen=True)
class TaskContext:
    """What the policy conditions on: a task's problem type and coarse data features.

    Attributes:
        task_id: the task.
        problem_type: ``"classification"`` or ``"regression"``.
        n_rows: training rows (int).
        n_features: feature columns of ``train.csv`` (int).
        n_classes: distinct training labels (0 for regression).
        has_categoricals: the task has string columns.
        has_missing: some feature values are missing.
    """

    task_id: str
    problem_type: str
    n_rows: int
    n_features: int
    n_classes: int
    has_categoricals: bool
    has_missing: bool

    @property
    def features(self) -> np.ndarray:
        """float32 array (D,) of 0/1 features named by :data:`CONTEXT_FEATURES`."""
        r, f = self.n_rows, self.n_features
        return np.array([
            self.n_classes > 2,
            r < 10_000, 10_000 <= r < 20_000, r >= 20_000,
            f < 32, 32 <= f < 64, f >= 64,
            self.has_categoricals, self.has_missing,
        ], dtype=np.float32)


@functools.lru_cache(maxsize=None)
def _task_context_cached(task_id: str) -> TaskContext:
    from wmrl_envs.envs.autoresearch.taskdata import task_data
    from wmrl_envs.envs.autoresearch.tasks import get_task

    spec = get_task(task_id)
    data = task_data(task_id)
    n_classes = int(data.y_train.nunique()) if spec.problem_type == "classification" else 0
    return TaskContext(
        task_id=task_id, problem_type=spec.problem_type, n_rows=int(data.X_train.shape[0]),
        n_features=int(data.X_train.shape[1]), n_classes=n_classes,
        has_categoricals=bool(spec.categorical_columns), has_missing=bool(spec.has_missing),
    )


def task_context(task: Any) -> TaskContext:
    """The :class:`TaskContext` of a task (derived from its data once, then cached).

    Args:
        task: a task id (str), a ``TaskSpec`` (anything with ``task_id``), an observation
            dict with ``"task_id"``, or a :class:`TaskContext` (returned as is).

    Returns:
        The :class:`TaskContext`.

    Raises:
        ValueError: unknown task id.
        TypeError: ``task`` is none of the above.
    """
    from wmrl_envs.envs.autoresearch.embedding_world_model import task_id_of

    if isinstance(task, TaskContext):
        return task
    return _task_context_cached(task_id_of(task))


# ----------------------------------------------------------------------------------------------
# Programs and code emission
# ----------------------------------------------------------------------------------------------


@dataclass
class Program:
    """One sampled solution: the grammar choices and the emitted source.

    Attributes:
        task_id: the task it was written for.
        problem_type: selects the grammar (:data:`GRAMMARS`).
        choices: ``{slot key: option label}`` of its active slots in order (``preprocess``,
            ``family``, then ``<family>.<slot>``).
        slot_ids: layout indices (:class:`Grammar`) of the active slots, length L (3..6).
        option_ids: the chosen option index in each active slot, length L.
        random_state: the rollout's random state (int, drawn per rollout; not a policy choice,
            so not part of :meth:`agents.grammar.policy.GrammarPolicy.log_probs`).
        model_line: the emitted ``model = ...`` line (str).
        imports: import lines added above the model line (those the starter lacks).
        code: the complete Python source (the AutoResearch action).
        fails: ``"always"`` if a chosen option always raises, else ``"data"`` if one may raise
            depending on the task's data, else ``None`` (see :attr:`Option.fails`).
        old_logprobs: per-choice log-probabilities (L,) under the policy that sampled it
            (for the PPO ratio), or ``None`` for a hand-built program.
    """

    task_id: str
    problem_type: str
    choices: dict[str, str]
    slot_ids: tuple[int, ...]
    option_ids: tuple[int, ...]
    random_state: int
    model_line: str
    imports: tuple[str, ...]
    code: str
    fails: str | None = None
    old_logprobs: tuple[float, ...] | None = field(default=None, repr=False)

    @property
    def family(self) -> str:
        """The estimator family (str)."""
        return self.choices["family"]

    def to_record(self) -> dict[str, Any]:
        """JSON-serialisable description (task, choices, random state, model line, code)."""
        return {
            "task_id": self.task_id, "problem_type": self.problem_type, "family": self.family,
            "choices": dict(self.choices), "random_state": int(self.random_state),
            "fails": self.fails, "model_line": self.model_line, "code": self.code,
        }


_CLASS_NAME = re.compile(r"\b([A-Z][A-Za-z0-9]*)\(")
_IMPORT_LINE = re.compile(r"^\s*from\s+\S+\s+import\s+(.+)$")


@functools.lru_cache(maxsize=None)
def _starter_parts(task_id: str) -> tuple[Any, frozenset[str]]:
    """The task's spec and the names its starter script imports."""
    from wmrl_envs.envs.autoresearch.tasks import get_task

    spec = get_task(task_id)
    names: set[str] = set()
    for line in spec.starter_code.splitlines():
        m = _IMPORT_LINE.match(line)
        if m:
            names.update(n.strip() for n in m.group(1).split(","))
    return spec, frozenset(names)


def build_program(
    task: Any,
    choices: Mapping[str, str],
    random_state: int = 0,
    *,
    grammar: Grammar | None = None,
) -> Program:
    """Emit the program for given choices (deterministic; no policy involved).

    Args:
        task: task id, ``TaskSpec``, observation dict or :class:`TaskContext`.
        choices: ``{slot key: option label}``; must name ``preprocess``, ``family`` and every
            slot of that family (``"<family>.<slot>"``); other keys are not allowed.
        random_state: the random state written into the code (int >= 0).
        grammar: defaults to ``GRAMMARS[problem_type of the task]``.

    Returns:
        The :class:`Program` (``old_logprobs`` is ``None``).

    Raises:
        KeyError: a missing slot, an unknown slot / family / option label.
        ValueError: the grammar's problem type differs from the task's.
    """
    ctx = task_context(task)
    g = grammar or GRAMMARS[ctx.problem_type]
    if g.problem_type != ctx.problem_type:
        raise ValueError(f"grammar is for {g.problem_type}, task {ctx.task_id!r} is {ctx.problem_type}")
    fam_idx = next((i for i, f in enumerate(g.families) if f.name == choices.get("family")), None)
    if fam_idx is None:
        raise KeyError(f"choices need a known 'family'; got {choices.get('family')!r}")
    active = g.active_slots(fam_idx)
    extra_keys = set(choices) - {g.slot_keys[i] for i in active}
    if extra_keys:
        raise KeyError(f"choices name slots that family {choices['family']!r} does not have: {sorted(extra_keys)}")
    option_ids: list[int] = []
    for s in active:
        key = g.slot_keys[s]
        if key not in choices:
            raise KeyError(f"choices lack slot {key!r}")
        labels = [o.label for o in g.slot_options[s]]
        try:
            k = labels.index(choices[key])
        except ValueError:
            raise KeyError(f"slot {key!r} has no option {choices[key]!r}; options: {labels}") from None
        option_ids.append(k)
    return emit_program(ctx.task_id, g, tuple(active), tuple(option_ids), int(random_state))


def emit_program(task_id: str, g: Grammar, slot_ids: tuple[int, ...], option_ids: tuple[int, ...], rs: int) -> Program:
    """The :class:`Program` of resolved choices: its model line, import lines and full source.

    Args:
        task_id: the AutoResearch task (its starter script is the template).
        g: the task's problem-type grammar.
        slot_ids: the chosen program's slots (``preprocess``, ``family``, then the family's).
        option_ids: the option index chosen in each of those slots.
        rs: the rollout's random state.

    Returns:
        The :class:`Program` (``old_logprobs`` is ``None``; the sampler sets it).
    """
    from wmrl_envs.envs.autoresearch.tasks import MODEL_LINE_MARKER

    opts = [g.slot_options[s][k] for s, k in zip(slot_ids, option_ids)]
    pre, fam_opt, hyper = opts[0], opts[1], opts[2:]
    fam = g.family(fam_opt.label)
    estimator = fam.estimator
    kwargs: list[str] = []
    for o in hyper:
        if o.estimator:
            estimator = o.estimator
        if o.code:
            kwargs.append(o.code)
    if fam.random_state:
        kwargs.append(f"random_state={rs}")
    est = f"{estimator}({', '.join(kwargs)})"
    pre_code = pre.code.replace("{rs}", str(rs))
    model_line = f"model = make_pipeline({pre_code}, {est})" if pre_code else f"model = {est}"
    spec, have = _starter_parts(task_id)
    needed: dict[str, list[str]] = {}
    for name in dict.fromkeys(_CLASS_NAME.findall(model_line)):
        if name in have or name == "make_pipeline":
            continue
        needed.setdefault(ESTIMATOR_MODULES[name], []).append(name)
    imports = tuple(f"from {mod} import {', '.join(sorted(names))}" for mod, names in sorted(needed.items()))
    code = spec.starter_code_with(model_line)
    if imports:  # imported just above the model line (the marker comment), so the line stays one line
        code = code.replace(MODEL_LINE_MARKER, "\n".join(imports) + "\n" + MODEL_LINE_MARKER, 1)
    fails = "always" if any(o.fails == "always" for o in opts) else ("data" if any(o.fails == "data" for o in opts) else None)
    choices = {g.slot_keys[s]: o.label for s, o in zip(slot_ids, opts)}
    return Program(task_id, g.problem_type, choices, slot_ids, option_ids, rs, model_line, imports, code, fails)
