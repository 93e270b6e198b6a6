"""The host's static check of a line-mode solution (``wmrl_envs.envs.autoresearch.static_check``):
it rejects only what real execution certainly fails, with the status execution gives, and never
a line of any task's leaderboard."""

from __future__ import annotations

import pytest

from test_autoresearch_env import LIMITS, LocalSubprocessSandbox
from wmrl_envs.envs.autoresearch.env import evaluate
from wmrl_envs.envs.autoresearch.grading import score_from_status
from wmrl_envs.envs.autoresearch.static_check import certain_failure, static_check_score
from wmrl_envs.envs.autoresearch.tasks import BASELINE_MODELS, get_task, list_tasks

CLF = "credit-default"  # a classification task (a regression task: _regression_task)


def _regression_task() -> str:
    return next(t for t in list_tasks() if get_task(t).problem_type == "regression")


# lines the main job's policy wrote on its seed 1 (issue 36), each failing at run time
FAILING = [
    "None",  # no fit
    "CreateClassifier()",  # not imported
    "create_random_sample(model, 2, 25)",  # model is not bound on its own line
    "lambda x: StandardScaler().fit_transform(x).T.toarray()",  # a lambda has no fit
    "RandomForestClassifier(random_state=0, fact_scale_factor=1, max_depth=20)",  # unknown keyword
    "make_pipeline(StandardScaler(), KNeighborsClassifier(), LogisticRegression())",  # a step without transform
    "[LogisticRegression(), GaussianNB()]",  # a list
    "LogisticRegression(max_iter=300) == 1",  # a comparison
    "make_pipeline(StandardScaler(), LogisticRegression(), verbos=True)",  # make_pipeline's own keyword
    "KNeighborsClassifier(n_neighbors=0)",  # a value scikit-learn's declared constraints refuse
    'ExtraTreesClassifier(n_estimators=None, max_depth="2")',
    "StandardScaler()",  # no predict
    "make_pipeline(GaussianNB(), StandardScaler())",  # ends in a transformer
]

# lines that run (or may: the check cannot know the data), none may be rejected
RUNNING = [
    "make_pipeline(StandardScaler(), LogisticRegression(max_iter=300))",
    "RandomForestClassifier(5)",  # n_estimators is positional
    "KNeighborsClassifier(n_neighbors=10**9)",  # fails at fit against the data's rows: not certain here
    "LogisticRegression(C=np.float64(2.0))",  # not a literal: not validated
    "LogisticRegression(**{'C': 2.0})",  # unknown statically
    "np.random.choice([GaussianNB(), DecisionTreeClassifier()])",  # a call the check does not resolve
    "make_pipeline(StandardScaler(), 'passthrough', GaussianNB())",
    "(lambda: GaussianNB())()",
    "[GaussianNB()][0]",
]


@pytest.mark.parametrize("line", FAILING)
def test_lines_that_certainly_fail_are_rejected_as_runtime_errors(line):
    task = get_task(CLF)
    status, why = certain_failure(task, task.starter_code_with(line))
    assert status == "runtime_err" and why
    assert static_check_score({"task_id": CLF}, task.starter_code_with(line)) == score_from_status("runtime_err") == 0.1


@pytest.mark.parametrize("line", RUNNING)
def test_lines_that_may_run_are_left_to_the_world_model(line):
    task = get_task(CLF)
    assert certain_failure(task, task.starter_code_with(line)) is None


def test_a_regressor_is_not_imported_by_a_classification_starter_and_vice_versa():
    reg = _regression_task()
    assert certain_failure(CLF, get_task(CLF).starter_code_with("Ridge(alpha=1.0)"))[0] == "runtime_err"
    assert certain_failure(reg, get_task(reg).starter_code_with("Ridge(alpha=1.0)")) is None
    assert certain_failure(reg, get_task(reg).starter_code_with("LogisticRegression()"))[0] == "runtime_err"


def test_syntax_errors_and_empty_sources_keep_the_graders_statuses():
    task = get_task(CLF)
    assert certain_failure(task, task.starter_code_with('"""'))[0] == "syntax_err"
    assert certain_failure(task, "")[0] == "malformed"
    assert static_check_score(CLF, "   ") == 0.0


def test_a_script_that_is_not_the_starter_with_one_line_is_never_decided_past_the_precheck():
    task = get_task(CLF)
    script = task.starter_code_with("None").replace("import numpy as np", "import numpy as np\nNone_ = 1")
    assert certain_failure(task, script) is None  # the code around the line is not the starter's
    assert certain_failure(task, "model = None\n") is None


def test_no_leaderboard_or_baseline_line_of_any_task_is_rejected():
    from wmrl_envs.envs.autoresearch.leaderboards import REFERENCE_SOLUTIONS

    checked = 0
    for t in list_tasks():
        task = get_task(t)
        lines = [line for _, line in REFERENCE_SOLUTIONS[task.problem_type]]
        lines += [task.starter_model_line] + [m[task.problem_type] for m in BASELINE_MODELS.values()]
        for line in lines:
            assert certain_failure(task, task.starter_code_with(line)) is None, (t, line)
            checked += 1
    assert checked >= 10 * len(list_tasks())


def test_every_rejected_line_fails_when_really_executed(tmp_path_factory):
    """The check's status is the grader's on a real execution (a plain subprocess sandbox)."""
    sandbox = LocalSubprocessSandbox(LIMITS)
    cache = tmp_path_factory.mktemp("public-cache")
    task = get_task(CLF)
    for line in FAILING:
        source = task.starter_code_with(line)
        grade, _ = evaluate(CLF, source, sandbox, workdir_root=tmp_path_factory.mktemp("job"), limits=LIMITS,
                            cache_dir=cache)
        assert grade.status == certain_failure(task, source)[0] == "runtime_err", (line, grade.message)
    grade, _ = evaluate(CLF, task.starter_code_with(RUNNING[0]), sandbox,
                        workdir_root=tmp_path_factory.mktemp("job"), limits=LIMITS, cache_dir=cache)
    assert grade.status == "valid"
