"""The AutoResearch task registry: realistic, self-contained ML tasks built from bundled data.

Every task is a Kaggle-style supervised-learning problem whose data are generated on the fly
from data that ship with scikit-learn (the bundled ``digits`` images and seeded generators
such as :func:`~sklearn.datasets.make_classification` and
:func:`~sklearn.datasets.make_friedman1`), so nothing is downloaded. Tasks are small (6000
rows for the tabular tasks, 1797 images for the image tasks, split 3:1 into train and test) so
that executing a solution costs one to a few CPU-seconds, most of it the start-up of Python and
scikit-learn (about 1.3 CPU-seconds before any fit); execution is the cost the WMRL method
exists to cut, and it stays the dominant cost of real-execution GRPO. Measured figures:
``benchmarks/bench_design.py`` (``docs/autoresearch.md``, "Benchmark design: room to
learn").

There are 7 training and 8 held-out tasks, every category in both splits. They are hard in
ways an ML engineer meets (so that an untrained agent leaves room to learn): features on very
different scales (``friedman-plant``, ``insurance-claims``: distance-based models need
scaling), skewed targets and heavy-tailed noise scored by MAE (``insurance-claims``,
``sparse-linear``), class imbalance scored by macro-F1 or ROC AUC (``card-fraud`` 4% positive,
``customer-churn``, ``land-cover``), high-cardinality categoricals (``card-fraud``: 40 merchant
categories), missing values, and hyper-parameters that matter (the leaderboards' top entries are
tuned gradient boosting models, :mod:`~wmrl_envs.envs.autoresearch.leaderboards`).

Contents:
    * :class:`TaskSpec` — one task: id, category, split, metric and direction, overview text,
      deterministic data generator, and a working starter script.
    * :data:`CATEGORIES`, :data:`SPLITS`, :data:`METRICS` — the allowed values.
    * :func:`list_tasks` — task ids, optionally of one split (``"train"`` / ``"heldout"``).
    * :func:`get_task` — the :class:`TaskSpec` of one id (``ValueError`` lists valid ids).
    * :func:`render_starter_code` — builds a starter script around one ``model = ...`` line.

What an agent must not know is drawn from a per-installation secret that never enters the
sandbox (:mod:`~wmrl_envs.envs.autoresearch.secret`): the seed of every task's data is derived
from it, so the rows, the train/test split, label noise and the augmentation of the digits
images cannot be rebuilt from this public code. The generators, task descriptions, sizes and
metrics are public; so are the data under the documented reference secret.

The starter script of every task reads ``train.csv`` / ``test.csv`` from its working
directory, preprocesses (one-hot encoding of categorical columns, median imputation), fits the
estimator built on the single line that starts with ``model = `` (marked by the comment
:data:`MODEL_LINE_MARKER` just above it), and writes ``submission.csv`` (``id`` + target
column). :meth:`TaskSpec.starter_code_with` swaps that one line, so an agent (or a reference
leaderboard) can try any scikit-learn estimator without touching the rest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from wmrl_envs.envs.autoresearch.generators import (
    DataTuple,
    gen_churn,
    gen_credit_default,
    gen_digits_rotated,
    gen_digits_shifted,
    gen_digits_upscaled,
    gen_energy_load,
    gen_fraud,
    gen_friedman_plant,
    gen_friedman_sensors,
    gen_hastie_noisy,
    gen_house_prices,
    gen_insurance_claims,
    gen_land_cover,
    gen_sensor_fault,
    gen_sparse_linear,
)

__all__ = [
    "TaskSpec",
    "CATEGORIES",
    "SPLITS",
    "METRICS",
    "MODEL_LINE_MARKER",
    "ID_COLUMN",
    "list_tasks",
    "get_task",
    "render_starter_code",
    "BASELINE_MODELS",
    "model_line_of",
]

CATEGORIES: tuple[str, ...] = (
    "tabular-classification",
    "tabular-regression",
    "image-classification",
)
"""Task categories; every category has tasks in both splits."""

SPLITS: tuple[str, ...] = ("train", "heldout")
"""``train`` tasks are for RL training, ``heldout`` tasks for evaluation only."""

METRICS: dict[str, bool] = {
    "accuracy": True,
    "macro_f1": True,
    "roc_auc": True,
    "rmse": False,
    "mae": False,
    "r2": True,
}
"""Supported metrics mapped to ``higher_is_better``."""

LABEL_METRICS: frozenset[str] = frozenset({"accuracy", "macro_f1"})
"""Metrics whose submission column holds class labels (``roc_auc`` takes scores)."""

MODEL_LINE_MARKER = "# MODEL: the next line builds the estimator; replace it to try another one."
"""Comment that precedes the single ``model = ...`` line of every starter script."""

ID_COLUMN = "id"
"""Name of the row-id column of ``test.csv`` and ``submission.csv``."""




# ----------------------------------------------------------------------------------------------
# TaskSpec
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskSpec:
    """One AutoResearch task.

    Attributes:
        task_id: unique id (str, kebab-case).
        category: one of :data:`CATEGORIES`.
        split: ``"train"`` or ``"heldout"``.
        metric: one of :data:`METRICS` (``accuracy``, ``macro_f1``, ``roc_auc``, ``rmse``,
            ``mae``, ``r2``).
        higher_is_better: direction of ``metric``.
        problem_type: ``"classification"`` or ``"regression"``.
        target: name of the target column in ``train.csv`` / ``submission.csv``.
        overview: task description for the agent (plain ASCII text).
        data_seed: the task's public number. It is **not** the generator's seed: the data
            come from :func:`~wmrl_envs.envs.autoresearch.secret.derive_seed` of the task id,
            this number and the installation's task secret (:meth:`make_data`), so the
            public number alone does not rebuild the data.
        categorical_columns: columns holding string categories (need encoding).
        has_missing: whether some feature values are missing (NaN, empty in the CSV).
        starter_code: complete, working baseline script (see the module docstring).
        generator: ``generator(seed) -> (X_train, y_train, X_test, y_test)`` for a
            non-negative int ``seed`` of any size; call :meth:`make_data` instead.
    """

    task_id: str
    category: str
    split: str
    metric: str
    higher_is_better: bool
    problem_type: str
    target: str
    overview: str
    data_seed: int
    categorical_columns: tuple[str, ...] = ()
    has_missing: bool = False
    starter_code: str = ""
    generator: Callable[[int], DataTuple] | None = field(default=None, repr=False, compare=False)

    def make_data(self, seed: int | None = None) -> DataTuple:
        """Generate the task's data (deterministic for a given seed).

        Args:
            seed: generator seed, a non-negative int of any size; ``None`` (the default)
                gives the task's canonical dataset under the active task secret (seed
                :func:`~wmrl_envs.envs.autoresearch.secret.derive_seed`), the one the
                environment grades against. Under the reference secret
                (``WMRL_TASK_SECRET=wmrl-reference``) it is the data of the shipped leaderboard.

        Returns:
            ``(X_train, y_train, X_test, y_test)``: feature DataFrames of shape
            ``(n_train, n_features)`` / ``(n_test, n_features)`` (float64/int64 numeric
            columns, string (``object`` / ``str``) columns for :attr:`categorical_columns`, NaN where
            missing) and target Series of length ``n_train`` / ``n_test`` (int64 or str
            labels for classification, float64 for regression), named :attr:`target`.
            Indexes are ``RangeIndex``; the rows are in random order.

        Raises:
            RuntimeError: the task has no generator.
            ValueError: ``seed`` is negative or not an int; the task secret is misconfigured
                (see :func:`~wmrl_envs.envs.autoresearch.secret.task_secret`).
        """
        if self.generator is None:
            raise RuntimeError(f"task {self.task_id!r} has no data generator")
        if seed is None:
            from wmrl_envs.envs.autoresearch.secret import derive_seed

            seed = derive_seed(self.task_id, self.data_seed)
        elif isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be a non-negative int or None, got {seed!r}")
        X_tr, y_tr, X_te, y_te = self.generator(int(seed))
        y_tr = pd.Series(np.asarray(y_tr), name=self.target)
        y_te = pd.Series(np.asarray(y_te), name=self.target)
        return X_tr.reset_index(drop=True), y_tr, X_te.reset_index(drop=True), y_te

    def starter_code_with(self, model_line: str) -> str:
        """Return the starter script with its ``model = ...`` line replaced.

        Args:
            model_line: one line of Python; either a full assignment ``"model = <expr>"`` or
                just the estimator expression ``"<expr>"`` (``"model = "`` is prepended).
                The names imported by the starter (see :attr:`starter_code`) are available.

        Returns:
            The new script (str).

        Raises:
            ValueError: ``model_line`` is empty or spans several lines.
        """
        return _swap_model_line(self.starter_code, model_line)

    @property
    def starter_model_line(self) -> str:
        """The starter's own ``model = ...`` line (str)."""
        return _find_model_line(self.starter_code)[1]

    def baseline_model_line(self, baseline: str = "starter") -> str:
        """A ``model = ...`` line to start an agent from (its script's current model).

        Args:
            baseline: one of :data:`BASELINE_MODELS`: ``"starter"`` is :attr:`starter_model_line`
                (a scaled linear model: fits in well under 0.1 CPU-s, so an execution is mostly
                the interpreter's imports, ~1.8 CPU-s); ``"boosting"`` is histogram gradient
                boosting (200 iterations), the usual strong tabular baseline, whose fit takes
                seconds as real ML work does (~2–6 CPU-s here, more with more classes).

        Returns:
            The line (str); both use only names the starter imports, so
            :meth:`starter_code_with` accepts it.

        Raises:
            ValueError: an unknown ``baseline``.
        """
        if baseline == "starter":
            return self.starter_model_line
        lines = BASELINE_MODELS.get(baseline)
        if lines is None:
            raise ValueError(f"unknown baseline {baseline!r}; expected 'starter' or one of {sorted(BASELINE_MODELS)}")
        return lines[self.problem_type]


def model_line_of(source: str) -> str:
    """The first line of ``source`` that starts with ``"model = "`` (the line a line-mode agent writes).

    Raises:
        ValueError: ``source`` has no such line.
    """
    return _find_model_line(source)[1]


def _find_model_line(source: str) -> tuple[int, str]:
    lines = source.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("model = "):
            return i, line
    raise ValueError("source has no line starting with 'model = '")


def _swap_model_line(source: str, model_line: str) -> str:
    line = model_line.strip()
    if not line:
        raise ValueError("model_line is empty")
    if "\n" in line or "\r" in line:
        raise ValueError(f"model_line must be a single line, got {model_line!r}")
    if not (line.startswith("model =") or line.startswith("model=")):
        line = "model = " + line
    idx, _ = _find_model_line(source)
    lines = source.split("\n")
    lines[idx] = line
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# Starter scripts
# ----------------------------------------------------------------------------------------------

_CLF_IMPORTS = """\
from sklearn.dummy import DummyClassifier
from sklearn.ensemble import ExtraTreesClassifier, HistGradientBoostingClassifier, RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.naive_bayes import GaussianNB
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.tree import DecisionTreeClassifier"""

_REG_IMPORTS = """\
from sklearn.dummy import DummyRegressor
from sklearn.ensemble import ExtraTreesRegressor, HistGradientBoostingRegressor, RandomForestRegressor
from sklearn.linear_model import Lasso, Ridge
from sklearn.neighbors import KNeighborsRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.tree import DecisionTreeRegressor"""

_DEFAULT_MODEL_LINES: dict[str, str] = {
    "classification": "model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=300))",
    "regression": "model = make_pipeline(StandardScaler(), Ridge(alpha=1.0))",
}


BASELINE_MODELS: dict[str, dict[str, str]] = {
    "boosting": {
        "classification": "model = HistGradientBoostingClassifier(max_iter=200, learning_rate=0.1)",
        "regression": "model = HistGradientBoostingRegressor(max_iter=200, learning_rate=0.1)",
    },
}
"""The baselines besides the starter's own model (:meth:`TaskSpec.baseline_model_line`), per
``problem_type``: a line-mode agent is shown one as its script's current model."""


def render_starter_code(
    *,
    task_id: str,
    metric: str,
    higher_is_better: bool,
    problem_type: str,
    target: str,
    categorical_columns: tuple[str, ...] = (),
    has_missing: bool = False,
    model_line: str | None = None,
) -> str:
    """Build a complete, working baseline script for a task.

    The script reads ``train.csv`` and ``test.csv`` from its working directory, encodes
    categorical columns (one-hot), fills missing values with training medians, fits the
    estimator of its ``model = ...`` line and writes ``submission.csv`` with columns
    ``id`` and ``target`` (class labels; positive-class scores for ``roc_auc``; numbers for
    regression).

    Args:
        task_id: the task id (used in the script's docstring).
        metric: one of :data:`METRICS`.
        higher_is_better: metric direction (for the docstring).
        problem_type: ``"classification"`` or ``"regression"``.
        target: target column name.
        categorical_columns: string columns to one-hot encode.
        has_missing: whether to add median imputation.
        model_line: the ``model = ...`` line; ``None`` uses a scaled logistic regression
            (classification) or ridge regression (regression).

    Returns:
        Python source (str) with exactly one line starting with ``model = ``.

    Raises:
        ValueError: unknown ``problem_type`` or ``metric``.
    """
    if problem_type not in _DEFAULT_MODEL_LINES:
        raise ValueError(f"unknown problem_type {problem_type!r}; expected one of {sorted(_DEFAULT_MODEL_LINES)}")
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {sorted(METRICS)}")
    direction = "higher is better" if higher_is_better else "lower is better"
    imports = _CLF_IMPORTS if problem_type == "classification" else _REG_IMPORTS
    parts = [
        f'"""Starter solution for task {task_id!r}: metric {metric} ({direction}).',
        "",
        "Reads train.csv and test.csv from the working directory, fits `model`, and writes",
        "submission.csv (id + target column). Change the `model = ...` line to try another estimator.",
        '"""',
        "import numpy as np",
        "import pandas as pd",
        imports,
        "",
        f'TARGET = "{target}"',
        "",
        'train = pd.read_csv("train.csv")',
        'test = pd.read_csv("test.csv")',
        "y = train.pop(TARGET)",
        f'ids = test.pop("{ID_COLUMN}")',
    ]
    if categorical_columns:
        parts += [
            "",
            "# One-hot encode the categorical columns (jointly, so train and test get the same columns).",
            f"CATEGORICAL = {list(categorical_columns)!r}",
            "both = pd.get_dummies(pd.concat([train, test], keys=['train', 'test']), columns=CATEGORICAL, dtype=float)",
            "X, X_test = both.loc['train'], both.loc['test']",
        ]
    else:
        parts += ["X, X_test = train, test"]
    if has_missing:
        parts += [
            "",
            "# Fill missing values with the training medians.",
            "medians = X.median()",
            "X, X_test = X.fillna(medians), X_test.fillna(medians)",
        ]
    parts += [
        "",
        MODEL_LINE_MARKER,
        model_line or _DEFAULT_MODEL_LINES[problem_type],
        "model.fit(X, y)",
        "",
    ]
    if metric == "roc_auc":
        parts += [
            "# roc_auc is computed from a score for the positive class (1): probabilities or margins.",
            'if hasattr(model, "predict_proba"):',
            "    pred = model.predict_proba(X_test)[:, list(model.classes_).index(1)]",
            "else:",
            "    pred = model.decision_function(X_test)",
        ]
    else:
        parts += ["pred = model.predict(X_test)"]
    parts += [
        "",
        'pd.DataFrame({"id": ids, TARGET: pred}).to_csv("submission.csv", index=False)',
        'print(f"fitted {type(model).__name__} on {X.shape[0]} rows x {X.shape[1]} features; "',
        '      f"wrote submission.csv with {len(pred)} rows")',
        "",
    ]
    return "\n".join(parts)


# ----------------------------------------------------------------------------------------------
# Registry
# ----------------------------------------------------------------------------------------------

_SUBMISSION_NOTE = {
    "accuracy": "one predicted class label per test row",
    "macro_f1": "one predicted class label per test row",
    "roc_auc": "one score per test row for the positive class 1 (a probability or any monotone score)",
    "rmse": "one predicted number per test row",
    "mae": "one predicted number per test row",
    "r2": "one predicted number per test row",
}


def _make(
    task_id: str,
    category: str,
    split: str,
    metric: str,
    target: str,
    description: str,
    generator: Callable[[int], DataTuple],
    data_seed: int,
    categorical_columns: tuple[str, ...] = (),
    has_missing: bool = False,
) -> TaskSpec:
    problem_type = "regression" if metric in ("rmse", "mae", "r2") else "classification"
    hib = METRICS[metric]
    overview = (
        f"{description.strip()}\n\n"
        f"Evaluation: {metric} on the hidden test labels ({'higher' if hib else 'lower'} is better).\n"
        f"Submission: a CSV file submission.csv with columns '{ID_COLUMN}' and '{target}', "
        f"{_SUBMISSION_NOTE[metric]}, covering every id of test.csv."
    )
    starter = render_starter_code(
        task_id=task_id, metric=metric, higher_is_better=hib, problem_type=problem_type,
        target=target, categorical_columns=categorical_columns, has_missing=has_missing,
    )
    return TaskSpec(
        task_id=task_id, category=category, split=split, metric=metric, higher_is_better=hib,
        problem_type=problem_type, target=target, overview=overview, data_seed=data_seed,
        categorical_columns=categorical_columns, has_missing=has_missing, starter_code=starter,
        generator=generator,
    )


_TASKS: dict[str, TaskSpec] = {
    t.task_id: t
    for t in [
        # ------------------------------------------------------------------ train split
        _make(
            "credit-default", "tabular-classification", "train", "roc_auc", "default",
            "Predict whether a loan applicant defaults (1) or repays (0). The applicant table mixes "
            "demographics, a skewed income, a credit utilisation ratio, categorical credit grade, "
            "region and home ownership, and 31 anonymised bureau features f00..f30. About 12% of "
            "loans default; some values are missing.",
            gen_credit_default, 1101, ("grade", "region", "home_ownership"), True,
        ),
        _make(
            "land-cover", "tabular-classification", "train", "macro_f1", "cover_type",
            "Classify the land cover of satellite pixels into six classes (forest, grassland, "
            "cropland, urban, water, wetland) from 32 spectral reflectance bands, elevation and "
            "slope. Classes are imbalanced (wetland is rare), so the metric averages F1 over classes.",
            gen_land_cover, 1102,
        ),
        _make(
            "hastie-noisy", "tabular-classification", "train", "accuracy", "label",
            "Binary classification where the label depends nonlinearly on a hidden subset of the "
            "features (a radial decision boundary). The 36 columns x00..x35 mix relevant features, "
            "pure noise and noisy linear mixtures of the relevant ones.",
            gen_hastie_noisy, 1103,
        ),
        _make(
            "friedman-sensors", "tabular-regression", "train", "rmse", "output",
            "Predict a plant's output from 40 sensor readings sensor_00..sensor_39 in [0, 1]. Only "
            "a few sensors matter, through interactions and smooth nonlinearities; the rest are "
            "noise. The target is measured with Gaussian noise.",
            gen_friedman_sensors, 1104,
        ),
        _make(
            "sparse-linear", "tabular-regression", "train", "mae", "y",
            "Regression on 50 correlated, standardised features x00..x49 of which about a dozen "
            "carry signal, mostly linearly with a few mild nonlinear effects. The target has "
            "heavy-tailed noise (occasional large outliers), hence the MAE metric.",
            gen_sparse_linear, 1105,
        ),
        _make(
            "house-prices", "tabular-regression", "train", "r2", "price",
            "Predict the sale price of houses from size, rooms, year built, lot size, location "
            "(latitude/longitude, neighborhood), condition, garage, school rating, crime index and "
            "ten listing attributes of little value. Prices are right-skewed; some values are missing.",
            gen_house_prices, 1106, ("neighborhood", "condition"), True,
        ),
        _make(
            "digits-shifted", "image-classification", "train", "accuracy", "digit",
            "Recognise handwritten digits 0-9 in 8x8 grey-scale images (pixel intensities 0-16, "
            "64 columns px_<row>_<col>). Images are shifted by up to one pixel and noisy; test "
            "digits come from writers' samples never seen in training.",
            gen_digits_shifted, 1107,
        ),
        # ---------------------------------------------------------------- heldout split
        _make(
            "customer-churn", "tabular-classification", "heldout", "roc_auc", "churned",
            "Predict which telecom customers churn (1) next month. Features: tenure, monthly "
            "charge, support calls, plan, contract and payment method (categorical), and 25 "
            "anonymised usage statistics. Only about 8% churn; some values are missing.",
            gen_churn, 2101, ("plan", "contract", "payment_method"), True,
        ),
        _make(
            "sensor-fault", "tabular-classification", "heldout", "accuracy", "fault",
            "Diagnose the fault of a rotating machine (healthy, bearing_wear, misalignment, imbalance) "
            "from 36 vibration features vib_00..vib_35 (several with strongly skewed, nonlinear "
            "responses), shaft speed and temperature.",
            gen_sensor_fault, 2102,
        ),
        _make(
            "energy-load", "tabular-regression", "heldout", "mae", "load_kw",
            "Forecast a building's electric load (kW) from the hour, weekday and month, weather "
            "(temperature, humidity, wind, solar radiation), occupancy, and 22 auxiliary meter "
            "readings, some of which echo the weather.",
            gen_energy_load, 2103,
        ),
        _make(
            "digits-upscaled", "image-classification", "heldout", "macro_f1", "digit",
            "Recognise handwritten digits 0-9 in 12x12 grey-scale scans (intensities 0-255, 144 "
            "columns px_<row>_<col>) that are shifted by up to two pixels, vary in contrast and "
            "carry strong sensor noise. Test digits come from samples never seen in training.",
            gen_digits_upscaled, 2104,
        ),
        _make(
            "card-fraud", "tabular-classification", "heldout", "macro_f1", "is_fraud",
            "Flag fraudulent card transactions (1). Features: the amount (right-skewed), the account "
            "age in days, the hour, the merchant category (40 levels) and 20 anonymised features "
            "v00..v19. Only about 4% of transactions are fraud, so the metric averages F1 over the "
            "two classes.",
            gen_fraud, 2105, ("merchant_category",),
        ),
        _make(
            "insurance-claims", "tabular-regression", "heldout", "mae", "claim_cost",
            "Predict the cost of an insurance claim from the driver's age, vehicle value, annual "
            "kilometres, past claims, bonus-malus factor, region (categorical) and 14 policy "
            "attributes on very different scales. Costs are right-skewed.",
            gen_insurance_claims, 2106, ("region",),
        ),
        _make(
            "friedman-plant", "tabular-regression", "heldout", "rmse", "impedance",
            "Predict a circuit's impedance from its resistance, angular frequency, inductance and "
            "capacitance (on very different scales) and 16 auxiliary readings aux_00..aux_15 of "
            "no value. The target is measured with Gaussian noise.",
            gen_friedman_plant, 2107,
        ),
        _make(
            "digits-rotated", "image-classification", "heldout", "accuracy", "digit",
            "Recognise handwritten digits 0-9 in 8x8 grey-scale images (pixel intensities 0-16, "
            "64 columns px_<row>_<col>) rotated by up to 20 degrees and noisy. Test digits come "
            "from samples never seen in training.",
            gen_digits_rotated, 2108,
        ),
    ]
}


def list_tasks(split: str | None = None) -> list[str]:
    """Ids of the registered tasks, in registry order.

    Args:
        split: ``"train"``, ``"heldout"``, or ``None``/``"all"`` for every task.

    Returns:
        List of task ids (str).

    Raises:
        ValueError: unknown split.
    """
    if split is None or split == "all":
        return list(_TASKS)
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS} or None/'all'")
    return [tid for tid, t in _TASKS.items() if t.split == split]


def get_task(task_id: str) -> TaskSpec:
    """The :class:`TaskSpec` registered under ``task_id``.

    Raises:
        ValueError: unknown id (the message lists the valid ids).
    """
    try:
        return _TASKS[task_id]
    except (KeyError, TypeError):
        raise ValueError(f"unknown task id {task_id!r}; valid ids: {', '.join(_TASKS)}") from None
