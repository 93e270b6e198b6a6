"""Outcomes that are certain without executing a solution: a world model's static pre-check.

A world model that learns from anchors (:class:`~wmrl_envs.world_models.learned.LearnedWorldModel`)
knows only what its anchor groups showed it. A policy trained on its scores finds the lines it has
never seen fail and the head scores like valid ones: in the main job's seed 1 (issue 36) the
policy moved to ``model = None``, ``model = CreateClassifier()`` and ``model = lambda x: ...``,
which the learned head scored as well as real estimators, and its held-out score fell to the
failure level. Every one of these fails for a reason that is decided before the script runs.

:func:`certain_failure` decides such a solution on the host, without executing anything of the
agent's, and says which status real execution would give (:data:`~.grading.STATUSES`); anything it
cannot decide with certainty returns ``None`` and goes to the world model. It is conservative by
construction: it checks only a line-mode solution (the task's starter script with one
``model = <expr>`` line swapped in, as ``wmrl train``'s policy writes it), where the code around the
line is the starter's and known, and it rejects the line only for

* the host pre-check of the grader (:func:`~.grading.check_source`: empty, NUL bytes, syntax error),
* a name the line evaluates eagerly that the starter does not bind and Python does not provide
  (``NameError``; ``model`` itself is not bound yet on its own line),
* a value that cannot have ``fit``: a literal, ``lambda``, a container, a comprehension, an f-string
  or a comparison (``AttributeError`` at ``model.fit``),
* a call of a scikit-learn class or function the starter imports with arguments its signature does
  not take (``TypeError``: an unknown keyword, a positional argument to a keyword-only estimator),
* a literal hyper-parameter value scikit-learn's own parameter validation refuses at ``fit``
  (``n_estimators=None``, ``max_depth="2"``: its declared constraints, checked on an empty estimator),
* a ``make_pipeline`` whose intermediate step is an estimator class without ``transform``, or whose
  last step has no ``fit`` (scikit-learn raises at ``fit``),
* a model that ends in a class without ``predict`` (``StandardScaler()``: every starter predicts,
  or asks for ``predict_proba`` / ``decision_function``, which such a class lacks too).

Values scikit-learn checks only against the data (``n_neighbors`` above the training rows), other
data-dependent errors and anything after the model line are left to the world model. The signatures are read from the installed scikit-learn on the
host (trusted library code; the agent's line is only parsed). :func:`static_check_score` is the
pre-check in the form world models take (``(context, action) -> score or None``). Its accuracy on
lines the untrained and trained policies sample, against their real statuses, is measured by
``benchmarks/static_check.py``.
"""

from __future__ import annotations

import ast
import builtins
import functools
import importlib
import inspect
from typing import Any

from .grading import check_source, score_from_status

__all__ = ["certain_failure", "static_check_score"]

# the value of ``model = <expr>`` cannot have ``fit`` if <expr> is one of these
_NOT_AN_ESTIMATOR = (ast.Constant, ast.Lambda, ast.List, ast.Tuple, ast.Set, ast.Dict, ast.ListComp, ast.SetComp,
                     ast.DictComp, ast.GeneratorExp, ast.JoinedStr, ast.Compare)
# a sub-expression of these kinds evaluates its own names lazily or binds names: not checked
_LAZY = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.NamedExpr)
_BUILTINS = frozenset(dir(builtins))


@functools.lru_cache(maxsize=64)
def _starter_names(starter_code: str) -> tuple[frozenset[str], dict[str, tuple[str, str]]]:
    """Names the starter binds before its model line, and ``{name: (module, attribute)}`` for those
    bound by ``from sklearn... import``."""
    tree = ast.parse(starter_code)
    bound: set[str] = set()
    sklearn: dict[str, tuple[str, str]] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "model" for t in stmt.targets):
            break  # the model line: what follows runs after it
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                bound.add(node.id)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    name = alias.asname or alias.name.split(".")[0]
                    bound.add(name)
                    if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("sklearn"):
                        sklearn[name] = (node.module, alias.name)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(node.name)
    return frozenset(bound), sklearn


@functools.lru_cache(maxsize=256)
def _resolve(module: str, attr: str) -> Any:
    """The scikit-learn object ``module.attr`` on the host, or ``None`` if it cannot be imported."""
    try:
        return getattr(importlib.import_module(module), attr)
    except Exception:  # noqa: BLE001 - an object we cannot inspect is simply not checked
        return None


@functools.lru_cache(maxsize=256)
def _signature(obj: Any) -> inspect.Signature | None:
    try:
        return inspect.signature(obj)
    except (TypeError, ValueError):
        return None


def _eager_nodes(node: ast.AST):
    """The sub-expressions of ``node`` evaluated when the line runs (not inside a lambda or a
    comprehension)."""
    yield node
    if isinstance(node, _LAZY):
        return
    for child in ast.iter_child_nodes(node):
        yield from _eager_nodes(child)


def _value_error(cls: type, call: ast.Call) -> str | None:
    """Why scikit-learn's own parameter validation (run at ``fit``) certainly rejects the call's
    literal keyword values (``n_estimators=None``, ``max_depth="2"``), or ``None``. Only literals
    are checked (:func:`ast.literal_eval`: nothing of the agent's is evaluated); the estimator is
    built empty on the host and given them with ``set_params``."""
    literals = {}
    for k in call.keywords:
        try:
            literals[k.arg] = ast.literal_eval(k.value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue  # not a literal: left to execution
    if not literals or not hasattr(cls, "_validate_params"):
        return None
    try:
        from sklearn.utils._param_validation import InvalidParameterError
    except ImportError:  # a scikit-learn without declared constraints: nothing is certain
        return None
    try:
        est = cls()
        est.set_params(**literals)
        est._validate_params()
    except InvalidParameterError as e:
        return str(e).split("\n")[0]
    except Exception:  # noqa: BLE001 - anything else is not a certain outcome
        return None
    return None


def _call_error(call: ast.Call, sklearn: dict[str, tuple[str, str]]) -> str | None:
    """Why a call of a starter-imported scikit-learn object certainly raises, or ``None``."""
    if not isinstance(call.func, ast.Name) or call.func.id not in sklearn:
        return None
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return None  # *args / **kwargs: the arguments are not known statically
    obj = _resolve(*sklearn[call.func.id])
    sig = _signature(obj) if obj is not None else None
    if sig is None:
        return None
    try:
        sig.bind(*call.args, **{k.arg: k.value for k in call.keywords})
    except TypeError as e:
        return f"{call.func.id}(...): {e}"
    if inspect.isclass(obj):
        why = _value_error(obj, call)
        if why is not None:
            return f"{call.func.id}(...): {why}"
    if getattr(obj, "__name__", "") == "make_pipeline" and call.args:
        steps = [_resolve(*sklearn[a.func.id]) if isinstance(a, ast.Call) and isinstance(a.func, ast.Name)
                 and a.func.id in sklearn else None for a in call.args]
        for i, (arg, step) in enumerate(zip(call.args, steps)):
            if not inspect.isclass(step):
                continue
            last = i == len(steps) - 1
            if last and not hasattr(step, "fit"):
                return f"make_pipeline(...): its last step {arg.func.id} has no fit"
            if not last and not (hasattr(step, "transform") or hasattr(step, "fit_transform")):
                return f"make_pipeline(...): its step {arg.func.id} is not a transformer (no transform)"
    return None


def _final_estimator(expr: ast.expr, sklearn: dict[str, tuple[str, str]]) -> tuple[str, Any] | None:
    """``(name, class)`` of the estimator ``model`` ends in (the call itself, or ``make_pipeline``'s
    last step) when it is a starter-imported scikit-learn class, else ``None``."""
    if not (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in sklearn):
        return None
    if expr.func.id == "make_pipeline" or sklearn[expr.func.id][1] == "make_pipeline":
        return _final_estimator(expr.args[-1], sklearn) if expr.args else None
    obj = _resolve(*sklearn[expr.func.id])
    return (expr.func.id, obj) if inspect.isclass(obj) else None


def _line_error(expr: ast.expr, bound: frozenset[str], sklearn: dict[str, tuple[str, str]]) -> str | None:
    """Why ``model = <expr>`` in the starter certainly fails at run time, or ``None``."""
    if isinstance(expr, _NOT_AN_ESTIMATOR):
        return f"model is a {type(expr).__name__.lower()}, which has no fit"
    for node in _eager_nodes(expr):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in bound \
                and node.id not in _BUILTINS:
            return f"NameError: name {node.id!r} is not defined"
    for node in _eager_nodes(expr):
        if isinstance(node, ast.Call):
            why = _call_error(node, sklearn)
            if why is not None:
                return f"TypeError/ValueError: {why}"
    final = _final_estimator(expr, sklearn)
    if final is not None and not hasattr(final[1], "predict"):  # every starter predicts after fit
        return f"AttributeError: {final[0]} has no predict (a transformer, not an estimator of the target)"
    return None


def certain_failure(task: Any, source: Any) -> tuple[str, str] | None:
    """The status real execution certainly gives ``source`` on ``task``, when it is a failure
    decided without executing anything (see the module docstring), else ``None``.

    Args:
        task: a :class:`~wmrl_envs.envs.autoresearch.tasks.TaskSpec` or a task id.
        source: the solution's Python source (any object: a non-str is ``"malformed"``).

    Returns:
        ``(status, reason)`` with status ``"malformed"``, ``"syntax_err"`` or ``"runtime_err"``; or
        ``None`` (not certain: a solution that is not the task's starter with one model line
        swapped in, or a line that may run).

    Raises:
        KeyError: an unknown task id.
    """
    decided = check_source(source)
    if decided is not None:
        return decided[0], decided[1]
    from .tasks import get_task, model_line_of

    spec = get_task(task) if isinstance(task, str) else task
    try:
        line = model_line_of(source)
        if spec.starter_code_with(line) != source:
            return None  # not a line-mode solution: the code around the line is not known
        stmt = ast.parse(line).body[0]
    except (ValueError, SyntaxError, IndexError):
        return None
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
        return None
    bound, sklearn = _starter_names(spec.starter_code)
    why = _line_error(stmt.value, bound, sklearn)
    return None if why is None else ("runtime_err", why)


def static_check_score(context: Any, action: Any) -> float | None:
    """:func:`certain_failure` as a world model's pre-check: the score of the certain status on the
    benchmark's reward scale (:func:`~.grading.score_from_status`: 0.0 malformed or syntax error,
    0.1 runtime error; ``wmrl train --reward relative`` keeps these scores for failures), or ``None``.

    Args:
        context: an observation dict with ``"task_id"``, a ``TaskSpec`` or a task id.
        action: the solution's Python source.
    """
    from .embedding_world_model import task_id_of

    decided = certain_failure(task_id_of(context), action)
    return None if decided is None else score_from_status(decided[0])
