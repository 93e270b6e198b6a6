"""Tests of the AutoResearch environment: registry, grading, leaderboards, Gymnasium API.

Real executions use a small stand-in sandbox (plain ``subprocess.run`` with the test's
Python, no isolation) and the cheapest task; most checks need no execution at all.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pandas as pd
import pytest
from gymnasium.utils.env_checker import check_env

from wmrl_envs.envs.autoresearch import ENV_ID, register_envs
from wmrl_envs.envs.autoresearch.observation import (
    CHARSET,
    FEEDBACK_MAX_CHARS,
    PROMPT_MAX_CHARS,
    build_prompt,
    format_feedback,
    next_observation,
    sanitize_text,
)
from wmrl_envs.envs.autoresearch.env import AutoResearchEnv, evaluate
from wmrl_envs.envs.autoresearch.grading import check_source, position_score, read_submission, score_from_status
from wmrl_envs.envs.autoresearch.leaderboards import REFERENCE_SOLUTIONS, get_leaderboard, load_leaderboards
from wmrl_envs.envs.autoresearch.taskdata import PUBLIC_FILES, task_data, write_public_files
from wmrl_envs.envs.autoresearch.tasks import CATEGORIES, METRICS, MODEL_LINE_MARKER, get_task, list_tasks
from wmrl_envs.sandbox.base import ExecutionResult, Sandbox, SandboxLimits

TASK = "house-prices"  # the cheapest task to execute (about 1 s for the starter)
LABEL_TASK = "sensor-fault"  # string class labels
LIMITS = SandboxLimits(wall_time_s=60.0, cpu_time_s=60.0)

RAISING = "import sys\nprint('loading data')\nraise RuntimeError('boom')\n"
NO_SUBMISSION = "print('hello, I forgot to write the submission')\n"
WRONG_LENGTH = "open('submission.csv', 'w').write('id,price\\n18000,1.0\\n18001,2.0\\n')\n"
SYNTAX_ERROR = "import pandas as pd\ndef f(:\n    pass\n"


class LocalSubprocessSandbox(Sandbox):
    """Stand-in sandbox: runs the script with this Python in the job folder (no isolation)."""

    name = "test-subprocess"
    isolates = False

    def __init__(self, limits: SandboxLimits | None = None) -> None:
        super().__init__(limits)
        self.calls = 0
        self.closed = False

    def run_python(self, source, workdir, *, limits=None, env=None, filename="solution.py"):
        workdir = Path(workdir)
        if not workdir.is_dir():
            raise FileNotFoundError(workdir)
        self.calls += 1
        (workdir / filename).write_text(source)
        lim = limits or self.limits
        t0 = time.perf_counter()
        try:
            p = subprocess.run(
                [sys.executable, filename], cwd=workdir, capture_output=True, text=True,
                timeout=lim.wall_time_s, env={**os.environ, **(env or {})},
            )
            return ExecutionResult(p.returncode, p.stdout, p.stderr, time.perf_counter() - t0, backend=self.name)
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
            return ExecutionResult(None, out, err, time.perf_counter() - t0, timed_out=True, backend=self.name)

    def close(self) -> None:
        self.closed = True


class ForbiddenSandbox(Sandbox):
    """A sandbox that must not be called (host-side pre-checks decide without executing)."""

    name = "forbidden"

    def run_python(self, source, workdir, *, limits=None, env=None, filename="solution.py"):
        raise AssertionError("the sandbox was called for a source that fails the host pre-check")


@pytest.fixture(scope="module")
def sandbox() -> LocalSubprocessSandbox:
    return LocalSubprocessSandbox(LIMITS)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("public-cache")


def run(task_id, source, sandbox, tmp_path, cache_dir, **kw):
    g, _ = evaluate(task_id, source, sandbox, workdir_root=tmp_path, limits=LIMITS, cache_dir=cache_dir, **kw)
    return g


# ---------------------------------------------------------------------------------- registry


def test_registry_split_is_disjoint_and_covers_categories():
    train, heldout, every = list_tasks("train"), list_tasks("heldout"), list_tasks()
    assert (len(train), len(heldout)) == (7, 8)
    assert not set(train) & set(heldout)
    assert sorted(train + heldout) == sorted(every)
    assert list_tasks("all") == every
    for split in (train, heldout):
        assert {get_task(t).category for t in split} == set(CATEGORIES)
    for tid in every:
        t = get_task(tid)
        assert t.task_id == tid and t.split in ("train", "heldout")
        assert t.higher_is_better == METRICS[t.metric]
        assert t.problem_type == ("regression" if t.metric in ("rmse", "mae", "r2") else "classification")
        assert t.overview and t.metric in t.overview
    with pytest.raises(ValueError, match="valid ids: .*house-prices"):
        get_task("no-such-task")
    with pytest.raises(ValueError, match="unknown split"):
        list_tasks("test")


def test_starter_code_has_one_swappable_model_line():
    t = get_task(TASK)
    lines = t.starter_code.split("\n")
    assert sum(line.startswith("model = ") for line in lines) == 1
    new = t.starter_code_with("model = HistGradientBoostingRegressor(max_iter=50)")
    assert "model = HistGradientBoostingRegressor(max_iter=50)" in new
    assert t.starter_model_line not in new
    assert len(new.split("\n")) == len(lines)
    assert t.starter_code_with("DummyRegressor()") == t.starter_code_with("model = DummyRegressor()")
    with pytest.raises(ValueError):
        t.starter_code_with("model = A()\nmodel = B()")
    with pytest.raises(ValueError):
        t.starter_code_with("   ")
    for tid in list_tasks():
        compile(get_task(tid).starter_code, "solution.py", "exec")


def test_baseline_model_lines_swap_into_every_starter():
    from wmrl_envs.envs.autoresearch.tasks import BASELINE_MODELS

    for tid in list_tasks():
        t = get_task(tid)
        assert t.baseline_model_line() == t.baseline_model_line("starter") == t.starter_model_line
        line = t.baseline_model_line("boosting")
        kind = "Classifier" if t.problem_type == "classification" else "Regressor"
        assert line == f"model = HistGradientBoosting{kind}(max_iter=200, learning_rate=0.1)"
        assert f"HistGradientBoosting{kind}" in t.starter_code.split(MODEL_LINE_MARKER)[0]  # imported by the starter
        assert line in t.starter_code_with(line).split("\n")
    assert set(BASELINE_MODELS) == {"boosting"}
    with pytest.raises(ValueError, match="unknown baseline 'xgboost'; expected 'starter' or one of"):
        get_task(TASK).baseline_model_line("xgboost")


def test_task_data_is_deterministic_and_realistic_in_size():
    for tid in list_tasks():
        t = get_task(tid)
        d = task_data(tid)
        n_rows = len(d.X_train) + len(d.X_test)
        # tabular tasks: 6000 rows; image tasks: every bundled digits image once (1797)
        assert n_rows == (1797 if t.category == "image-classification" else 6000), tid
        assert len(d.X_test) == pytest.approx(n_rows / 4, abs=1), tid
        assert d.X_train.shape[1] >= 20, tid
        assert list(d.X_train.columns) == list(d.X_test.columns)
        assert t.target not in d.X_train.columns and "id" not in d.X_train.columns
        assert len(d.y_train) == len(d.X_train) and len(d.y_test) == len(d.X_test)
        assert set(t.categorical_columns) <= set(d.X_train.columns)
        assert t.has_missing == bool(d.X_train.isna().any().any()), tid
    t = get_task(TASK)
    a, b = t.make_data(), t.make_data()
    pd.testing.assert_frame_equal(a[0], b[0])
    pd.testing.assert_series_equal(a[3], b[3])
    c = t.make_data(seed=7)
    assert not a[3].equals(c[3])


# ------------------------------------------------------------------------ scale and leaderboard


def test_position_score_hand_examples():
    board = [0.5, 0.6, 0.7, 0.8]  # higher is better
    assert position_score(0.9, board, True) == 1.0
    assert position_score(0.8, board, True) == 1.0  # a tie counts as beating
    assert position_score(0.75, board, True) == 0.75
    assert position_score(0.55, board, True) == 0.25
    assert position_score(0.4, board, True) == 0.0
    errors = [3.0, 2.0, 1.0]  # lower is better
    assert position_score(0.5, errors, False) == 1.0
    assert position_score(1.5, errors, False) == pytest.approx(2 / 3)
    assert position_score(3.5, errors, False) == 0.0
    assert score_from_status("valid", 0.5) == 0.75
    with pytest.raises(ValueError):
        position_score(1.0, [], True)


def test_shipped_leaderboard_matches_registry():
    boards = load_leaderboards()["tasks"]
    assert set(boards) == set(list_tasks())
    for tid, board in boards.items():
        t = get_task(tid)
        refs = REFERENCE_SOLUTIONS[t.problem_type]
        assert board["metric"] == t.metric and board["higher_is_better"] == t.higher_is_better
        assert [e["name"] for e in board["entries"]] == [name for name, _ in refs]
        assert [e["model_line"] for e in board["entries"]] == [line for _, line in refs]
        assert 6 <= len(board["entries"]) <= 10
        values = get_leaderboard(tid)
        assert all(math.isfinite(v) for v in values)
        assert len(set(np.round(values, 6))) >= 4, f"{tid}: the leaderboard should spread"
        assert t.starter_model_line in [line for _, line in refs]
    with pytest.raises(ValueError):
        get_leaderboard("no-such-task")


# ---------------------------------------------------------------------------------- job folder


def test_public_files_hide_the_labels(tmp_path, cache_dir):
    t = get_task(TASK)
    paths = write_public_files(t, tmp_path / "job", cache_dir=cache_dir)
    assert sorted(p.name for p in (tmp_path / "job").iterdir()) == sorted(PUBLIC_FILES)
    assert [p.name for p in paths] == list(PUBLIC_FILES)
    d = task_data(TASK)
    train = pd.read_csv(tmp_path / "job" / "train.csv")
    test = pd.read_csv(tmp_path / "job" / "test.csv")
    sample = pd.read_csv(tmp_path / "job" / "sample_submission.csv")
    assert list(train.columns) == list(d.X_train.columns) + [t.target]
    assert list(test.columns) == ["id"] + list(d.X_test.columns)
    assert list(sample.columns) == ["id", t.target] and sample[t.target].nunique() == 1
    assert len(test) == len(sample) == len(d.y_test)
    # No column of any public file holds the hidden test labels.
    y_test = d.y_test.to_numpy(dtype=float)
    for df in (train, test, sample):
        for c in df.columns:
            col = pd.to_numeric(df[c], errors="coerce").to_numpy(dtype=float)
            assert len(col) != len(y_test) or not np.allclose(col, y_test, rtol=1e-3, equal_nan=False), c
    # The cached copy is reused (identical bytes).
    write_public_files(t, tmp_path / "job2", cache_dir=cache_dir)
    assert (tmp_path / "job" / "test.csv").read_bytes() == (tmp_path / "job2" / "test.csv").read_bytes()


def test_read_submission_validates_format(tmp_path, cache_dir):
    t = get_task(LABEL_TASK)
    d = task_data(LABEL_TASK)
    ids = d.test_ids
    job = tmp_path / "job"
    job.mkdir()

    def check(df) -> str:
        df.to_csv(job / "submission.csv", index=False)
        preds, reason = read_submission(t, job)
        return "" if preds is not None else reason

    assert "not found" in read_submission(t, job)[1]
    good = pd.DataFrame({"id": ids[::-1], "fault": d.y_test.to_numpy()[::-1]})  # any row order
    assert check(good) == ""
    preds, _ = read_submission(t, job)
    assert (preds == d.y_test.to_numpy()).all()
    assert "rows" in check(good.iloc[:-1])
    assert "duplicate" in check(good.assign(id=np.r_[ids[:-1], ids[0]]))
    assert "ids" in check(good.assign(id=ids + 1))
    assert "unknown class labels" in check(good.assign(fault="broken"))
    assert "missing" in check(good.assign(fault=[None] + ["healthy"] * (len(ids) - 1)))
    assert "lacks column" in check(good.rename(columns={"fault": "label"}))
    reg = get_task(TASK)
    (job / "submission.csv").write_text("id,price\n" + "".join(f"{i},abc\n" for i in task_data(TASK).test_ids))
    assert "numeric" in read_submission(reg, job)[1]


def test_host_precheck_needs_no_sandbox(tmp_path, cache_dir):
    forbidden = ForbiddenSandbox()
    for src, status in [("", "malformed"), ("  \n\t\n", "malformed"), (SYNTAX_ERROR, "syntax_err")]:
        g = run(TASK, src, forbidden, tmp_path, cache_dir)
        assert (g.status, g.score, g.executed) == (status, 0.0, False)
    assert check_source(SYNTAX_ERROR)[0] == "syntax_err"
    assert "SyntaxError" in run(TASK, SYNTAX_ERROR, forbidden, tmp_path, cache_dir).stderr_tail
    assert check_source("print(1)\n") is None
    assert list(tmp_path.iterdir()) == []  # no job folder was created


# ----------------------------------------------------------------------------- real execution


@pytest.fixture(scope="module")
def graded(sandbox, tmp_path_factory, cache_dir):
    """Grades of hand-written solutions on the cheapest task (the only real executions here)."""
    t = get_task(TASK)
    root = tmp_path_factory.mktemp("jobs")
    sources = {
        "raising": RAISING,
        "no_submission": NO_SUBMISSION,
        "wrong_length": WRONG_LENGTH,
        "timeout": "import time\ntime.sleep(30)\n",
        "starter": t.starter_code,
        "strong": t.starter_code_with("model = HistGradientBoostingRegressor(max_iter=200, random_state=0)"),
    }
    out = {}
    for name, src in sources.items():
        limits = SandboxLimits(wall_time_s=1.0) if name == "timeout" else LIMITS
        out[name], _ = evaluate(t, src, sandbox, workdir_root=root, limits=limits, cache_dir=cache_dir)
    assert list(root.iterdir()) == []  # job folders are cleaned up
    return out


def test_failure_statuses_follow_the_scale(graded):
    assert (graded["raising"].status, graded["raising"].score) == ("runtime_err", 0.1)
    assert "RuntimeError: boom" in graded["raising"].stderr_tail
    assert "loading data" in graded["raising"].stdout_tail
    assert (graded["timeout"].status, graded["timeout"].score) == ("runtime_err", 0.1)
    assert graded["timeout"].timed_out
    assert (graded["no_submission"].status, graded["no_submission"].score) == ("ran_no_sub", 0.2)
    assert "not found" in graded["no_submission"].message
    assert (graded["wrong_length"].status, graded["wrong_length"].score) == ("ran_no_sub", 0.2)
    assert "rows" in graded["wrong_length"].message


def test_starter_and_strong_solution_are_valid(graded):
    t = get_task(TASK)
    board = get_leaderboard(TASK)
    base, strong = graded["starter"], graded["strong"]
    for g in (base, strong):
        assert g.status == "valid", g.stderr_tail
        assert g.position == position_score(g.metric_value, board, t.higher_is_better)
        assert g.score == pytest.approx(0.5 + 0.5 * g.position)
        assert g.n_reference == len(board) and g.runtime_s > 0
    ridge = [e for e in load_leaderboards()["tasks"][TASK]["entries"] if e["name"] == "ridge"][0]
    assert base.metric_value == pytest.approx(ridge["metric_value"], rel=1e-6)
    assert 0.0 < base.position < 1.0
    assert strong.score >= base.score and strong.metric_value > base.metric_value


def test_format_feedback_reports_first_then_quotes_the_log(graded):
    fb = format_feedback(graded["raising"])
    lines = fb.split("\n")
    assert lines[0] == "[grader] status: runtime_err | score 0.1 | the program exited with status 1"
    assert lines[1].startswith("[grader] $ python solution.py | exit code 1 | ")
    assert "| RuntimeError: boom" in lines and all(ln.startswith("| ") for ln in lines[2:])
    fb = format_feedback(graded["starter"])
    assert fb.startswith("[grader] status: valid | score ") and "| r2 = " in fb.split("\n")[0]
    assert "reference solutions" in fb.split("\n")[0]
    assert "[grader] $ python solution.py | killed: wall-clock" in format_feedback(graded["timeout"])
    assert all(c in CHARSET for c in fb) and len(fb) <= FEEDBACK_MAX_CHARS


# ---------------------------------------------------------------------------------- environment


def test_check_env_passes(sandbox):
    env = AutoResearchEnv(tasks=[TASK, "digits-shifted"], sandbox=sandbox, limits=LIMITS)
    check_env(env.unwrapped, skip_render_check=True)
    env.close()
    assert not sandbox.closed  # the env did not create it, so it does not close it


def test_reset_observation_and_options(sandbox):
    env = AutoResearchEnv(tasks="all", sandbox=sandbox, limits=LIMITS, render_mode="ansi")
    assert set(env.observation_space.spaces) == {"task_id", "prompt", "feedback", "turn"}
    obs, info = env.reset(seed=0, options={"task_id": "credit-default"})
    assert obs["task_id"] == info["task_id"] == "credit-default"
    assert set(obs) == {"task_id", "prompt", "feedback", "turn"}
    assert obs["feedback"] == "" and obs["turn"] == 0
    assert env.observation_space.contains(obs)
    assert {"task_id", "category", "metric", "starter_code"} <= set(info)
    assert info["category"] == "tabular-classification" and info["metric"] == "roc_auc"
    p = obs["prompt"]
    assert "roc_auc on the hidden test labels (higher is better)" in p and "train.csv: 4500 rows" in p and "income: float64" in p
    assert "f08 .. f11: float64 (4 columns)" in p and "grade: " in p and "categorical: A, B, C" in p and "model = make_pipeline" in p
    assert "credit-default" in env.render()
    ids = {env.reset(seed=s)[0]["task_id"] for s in range(30)}
    assert len(ids) > 3
    with pytest.raises(ValueError, match="valid ids"):
        env.reset(options={"task_id": "nope"})
    env.close()
    train_env = AutoResearchEnv(tasks="train", sandbox=sandbox)
    with pytest.raises(ValueError, match="not one of this environment's tasks"):
        train_env.reset(options={"task_id": "customer-churn"})
    with pytest.raises(RuntimeError):
        AutoResearchEnv(tasks="train", sandbox=sandbox).step("print(1)")
    for tid in list_tasks():
        prompt = build_prompt(tid)
        assert len(prompt) < PROMPT_MAX_CHARS and "```python" in prompt, tid
    with pytest.raises(ValueError):
        AutoResearchEnv(tasks="everything", sandbox=sandbox)
    with pytest.raises(TypeError):
        AutoResearchEnv(sandbox=42)  # type: ignore[arg-type]


def test_single_turn_step(sandbox, tmp_path):
    env = AutoResearchEnv(tasks=[TASK], sandbox=sandbox, limits=LIMITS, workdir_root=str(tmp_path))
    obs0, _ = env.reset(seed=1)
    calls = sandbox.calls
    obs, reward, terminated, truncated, info = env.step(NO_SUBMISSION)
    assert sandbox.calls == calls + 1
    assert (reward, terminated, truncated) == (0.2, True, False)
    assert info["status"] == "ran_no_sub" and info["task_id"] == TASK
    assert {"status", "score", "metric_value", "position", "runtime_s", "stdout_tail", "stderr_tail",
            "task_id"} <= set(info)
    assert obs == next_observation(obs0, obs["feedback"])
    assert obs["turn"] == 1 and "ran_no_sub" in obs["feedback"] and env.observation_space.contains(obs)
    assert not list((tmp_path / "jobs").iterdir())
    with pytest.raises(RuntimeError, match="reset"):
        env.step("print(1)")
    env.close()


def test_multi_turn_return_is_the_max(sandbox):
    env = AutoResearchEnv(tasks=[TASK], sandbox=sandbox, limits=LIMITS, max_turns=3)
    obs, _ = env.reset(seed=0)
    rewards, statuses = [], []
    for i, src in enumerate([RAISING, NO_SUBMISSION, SYNTAX_ERROR]):
        obs, r, terminated, truncated, info = env.step(src)
        rewards.append(r)
        statuses.append(info["status"])
        assert obs["turn"] == i + 1 and terminated == (i == 2) and not truncated
        assert info["status"] in obs["feedback"]
        assert info["step_score"] == info["score"]  # the turn's own score (the reward is the improvement)
    assert statuses == ["runtime_err", "ran_no_sub", "syntax_err"]
    assert rewards == pytest.approx([0.1, 0.1, 0.0])
    assert sum(rewards) == pytest.approx(0.2) == info["best_score"]
    assert "SyntaxError" in obs["feedback"]
    env.close()


def test_keep_job_dirs_and_sanitising(sandbox, tmp_path):
    env = AutoResearchEnv(tasks=[TASK], sandbox=sandbox, limits=LIMITS, workdir_root=str(tmp_path), keep_job_dirs=True)
    env.reset(seed=0)
    _, _, _, _, info = env.step("print('caf\u00e9 \u2014 ok \u4e2d')\n")
    job = Path(info["job_dir"])
    assert info["status"] == "ran_no_sub"
    assert sorted(p.name for p in job.iterdir()) == sorted([*PUBLIC_FILES, "solution.py"])
    env.close()
    assert job.is_dir()
    assert sanitize_text("caf\u00e9 \u2014 x", 100) == "caf? - x"
    assert sanitize_text("a" * 500, 200, keep="tail").endswith("a") and len(sanitize_text("a" * 500, 200)) == 200


def test_backend_name_is_resolved_lazily():
    env = AutoResearchEnv(tasks=[TASK], sandbox="no-such-backend")
    env.reset(seed=0)
    _, r, _, _, info = env.step(SYNTAX_ERROR)  # decided on the host: no sandbox needed
    assert (r, info["status"], env._sandbox) == (0.0, "syntax_err", None)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="unknown sandbox backend"):
        env.step(NO_SUBMISSION)
    env.close()


def test_registration_and_gym_make(sandbox):
    register_envs()
    register_envs()  # idempotent
    assert ENV_ID in gym.registry
    env = gym.make(ENV_ID, tasks=[TASK], sandbox=sandbox, max_turns=2)
    obs, info = env.reset(seed=0)
    assert info["task_id"] == TASK and env.observation_space["turn"].n == 3
    _, r, terminated, _, info = env.step("")
    assert (r, terminated, info["status"]) == (0.0, False, "malformed")
    env.close()


@pytest.mark.parametrize(
    "extras, exit_code, signal, expected",
    [
        ({"oom_killed": True}, None, 9, "memory limit exceeded"),
        ({"oom_killed": False}, None, 9, "killed by signal 9"),
        ({"workdir_limit_exceeded": "workdir_max_files"}, None, 9, "job folder limit exceeded (workdir_max_files)"),
        ({"workdir_limit_exceeded": "workdir_size_mb"}, 0, None, "job folder limit exceeded (workdir_size_mb)"),
    ],
)
def test_grade_names_the_sandbox_limit_that_stopped_the_program(tmp_path, extras, exit_code, signal, expected):
    from wmrl_envs.envs.autoresearch.env import grade
    from wmrl_envs.sandbox import ExecutionResult

    res = ExecutionResult(exit_code, "", "", 1.0, signal=signal, backend="fake", extras=extras)
    g = grade("hastie-noisy", tmp_path, res, source="print(1)\n")
    assert g.status == "runtime_err"  # the agent's own limit: graded, not ungraded
    assert expected in g.message


# ------------------------------------------------------------- hostile submission.csv (issue 9)

CHURN = "customer-churn"  # roc_auc on int labels; target `churned`


def _churn_rows(value=lambda y: str(y)) -> str:
    d = task_data(CHURN)
    return "".join(f"{i},{value(y)}\n" for i, y in zip(d.test_ids, d.y_test))


def _grade_file(job: Path, content: bytes, task: str = CHURN):
    from wmrl_envs.envs.autoresearch.env import grade

    job.mkdir(exist_ok=True)
    (job / "submission.csv").write_bytes(content)
    return grade(task, job, ExecutionResult(0, "", "", 1.0, backend="fake"), leaderboard=[0.5])


def _malformed_submissions() -> dict[str, tuple[bytes, str]]:
    """name -> (file content, substring the grader's message must hold)."""
    d = task_data(CHURN)
    rows = _churn_rows()
    first = int(d.test_ids[0])
    rest = "".join(f"{i},{y}\n" for i, y in zip(d.test_ids[1:], d.y_test[1:]))
    wide = ",".join(["id", "churned"] + [f"x{i}" for i in range(98)]) + "\n"
    twice = "".join(f"{i},{y},{y}\n" for i, y in zip(d.test_ids, d.y_test))  # each row's second field twice
    ids_twice = "".join(f"{i},{i},{y}\n" for i, y in zip(d.test_ids, d.y_test))
    wide_rows = "".join(f"{i},{y}" + ",0" * 98 + "\n" for i, y in zip(d.test_ids, d.y_test))
    return {
        "same id after strip": (("id,id ,churned\n" + ids_twice).encode(), "duplicate column"),
        "same target after strip": (("id,churned, churned\n" + twice).encode(), "duplicate column"),
        "exact duplicate": (("id,churned,churned\n" + twice).encode(), "duplicate column"),
        "empty file": (b"", "empty"),
        "blank lines only": (b"\n\n   \n", "empty"),
        "header only": (b"id,churned\n", "rows"),
        "not utf-8": (b"id,churned\n" + f"{first},\xff\xfe\n".encode("latin-1") + rest.encode(), "UTF-8"),
        "utf-16": (("id,churned\n" + rows).encode("utf-16"), "UTF-8"),
        "NUL bytes": (b"id,churned\n" + f"{first}\x00,1\x00\n".encode() + rest.encode(), "NUL"),
        "NUL in header": (b"id\x00,churned\n" + rows.encode(), "NUL"),
        "unclosed quote": (b'id,churned\n"' + rows.encode(), "could not parse"),
        "ragged rows": (b"id,churned\n" + rows.encode() + b"1,2" + b",0" * 100_000 + b"\n", "fields; the header has 2"),
        "wide first row": (b"id,churned\n" + f"{first},1".encode() + b",0" * 150_000 + b"\n" + rest.encode(), "fields"),
        "short row": (b"id,churned\n" + f"{first}\n".encode() + rest.encode(), "missing values"),
        "huge field": (b"id,churned\n" + f"{first},{'7' * 3_000_000}\n".encode() + rest.encode(), "too large"),
        "long number": (b"id,churned\n" + f"{first},{'7' * 300_000}\n".encode() + rest.encode(), "field limit"),
        "quoted newline in header": (b'"id\nx",churned\n' + rows.encode(), "lacks column"),
        "huge number": (b"id,churned\n" + f"{first},1e999999\n".encode() + rest.encode(), "non-finite"),
        "float ids": (b"id,churned\n" + f"{first + 0.5},1\n".encode() + rest.encode(), "integer ids"),
        "infinite id": (b"id,churned\n" + b"inf,1\n" + rest.encode(), "integer ids"),
        "huge integer id": (b"id,churned\n" + b"9" * 40 + b",1\n" + rest.encode(), "integer ids"),
        "binary garbage": (bytes(np.random.default_rng(0).integers(0, 256, 50_000, dtype=np.uint8)), "submission.csv"),
        "too many columns": ((wide + wide_rows).encode(), "100 columns; at most 64"),
        "long column name": (("id," + "c" * 3000 + "\n" + rows).encode(), "lacks column"),
        "numeric header": (b"1,2\n" + rows.encode(), "lacks column"),
        "target is text": (b"id,churned\n" + rows.replace(",1\n", ",yes\n").encode(), "numeric"),
    }


@pytest.mark.parametrize("name", list(_malformed_submissions()))
def test_any_malformed_submission_is_the_agents_ran_no_sub(tmp_path, name):
    content, expected = _malformed_submissions()[name]
    g = _grade_file(tmp_path / "job", content)
    assert (g.status, g.score) == ("ran_no_sub", 0.2), g.message
    assert expected in g.message, g.message
    assert len(g.message) <= 600 and "\x00" not in g.message


def test_a_duplicate_column_after_strip_is_graded_not_raised_by_step(sandbox, tmp_path):
    env = AutoResearchEnv(tasks=[TASK], sandbox=sandbox, limits=LIMITS, workdir_root=str(tmp_path))
    env.reset(seed=1)
    src = ("import pandas as pd\nt = pd.read_csv('test.csv')\n"
           "pd.DataFrame({'id': t['id'], 'id ': t['id'], 'price': 1.0}).to_csv('submission.csv', index=False)\n")
    obs, reward, terminated, _, info = env.step(src)
    assert (reward, terminated, info["status"]) == (0.2, True, "ran_no_sub")
    assert "duplicate column" in info["message"] and "duplicate column" in obs["feedback"]
    env.close()


def test_submission_size_is_bounded_by_the_test_set(tmp_path):
    from wmrl_envs.envs.autoresearch.grading import submission_max_bytes

    d = task_data(CHURN)
    limit = submission_max_bytes(CHURN)
    assert limit == 64 * 1024 + 256 * len(d.test_ids)  # 448 kB for 1500 test rows
    # a generous valid submission (17-digit floats, two extra columns) stays far below it
    rows = "".join(f"{i},{float(y) + 1 / 3!r},{1 / 7!r},note\n" for i, y in zip(d.test_ids, d.y_test))
    generous = ("id,churned,p2,comment\n" + rows).encode()
    assert len(generous) < limit / 3
    assert _grade_file(tmp_path / "ok", generous).status == "valid"
    # a 4000-column, 12 MB file is refused before it is read
    big = ("id,churned," + ",".join(f"x{i}" for i in range(3998)) + "\n").encode()
    tail = ("," + ",".join(["0"] * 3998) + "\n").encode()
    big += b"".join(f"{i},{y}".encode() + tail for i, y in zip(d.test_ids, d.y_test))
    assert len(big) > 12_000_000
    g = _grade_file(tmp_path / "big", big)
    assert g.status == "ran_no_sub"
    assert f"{len(big)} bytes" in g.message and f"at most {limit} bytes" in g.message


def test_missing_column_message_caps_names_and_the_report_keeps_both_grader_lines(tmp_path):
    d = task_data(CHURN)
    header = "id," + "c" * 3000 + "," + ",".join(f"col{i}" for i in range(30)) + "\n"
    rows = "".join(f"{i},{y}" + ",0" * 30 + "\n" for i, y in zip(d.test_ids, d.y_test))
    g = _grade_file(tmp_path / "job", (header + rows).encode())
    assert g.status == "ran_no_sub" and "lacks column(s) ['churned']" in g.message
    assert "'" + "c" * 37 + "..." in g.message and "c" * 41 not in g.message
    assert "and 22 more" in g.message and len(g.message) < 700
    fb = format_feedback(g).split("\n")
    assert fb[0].startswith("[grader] status: ran_no_sub | score 0.2 | ")
    assert fb[1].startswith("[grader] $ python solution.py | exit code 0 | ")


@pytest.mark.parametrize("n", [10, 2_999, 3_000, 50_000])
def test_layout_feedback_never_drops_the_run_line(n):
    from wmrl_envs.envs.autoresearch.observation import layout_feedback

    fb = layout_feedback("ran_no_sub", 0.2, ["m" * n], run="exit code 0 | 1.00 s", output="log\n" * 5000)
    lines = fb.split("\n")
    assert lines[0].startswith("[grader] status: ran_no_sub | score 0.2 | m")
    assert lines[1] == "[grader] $ python solution.py | exit code 0 | 1.00 s"
    assert len(fb) <= FEEDBACK_MAX_CHARS and lines[-1] == "| log"
    assert ("m" * n in lines[0]) == (n < 2_999)


def test_a_killed_leaderboard_build_leaves_nothing_after_the_next_one(tmp_path, monkeypatch):
    import tempfile

    from wmrl_envs.envs.autoresearch.leaderboards import build_leaderboards

    task = "digits-upscaled"  # the smallest test set: the quickest public files to write
    killer = f"""
import os, signal
from wmrl_envs.envs.autoresearch.leaderboards import build_leaderboards
from wmrl_envs.sandbox.base import Sandbox

class Kill(Sandbox):
    name = "kill"
    def run_python(self, source, workdir, *, limits=None, env=None, filename="solution.py"):
        os.kill(os.getpid(), signal.SIGKILL)

build_leaderboards([{task!r}], path=None, sandbox=Kill(), verbose=False)
"""
    proc = subprocess.run([sys.executable, "-c", killer], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TMPDIR": str(tmp_path)})
    assert proc.returncode == -9, proc.stderr[-3000:]
    left = [p.name for p in tmp_path.iterdir() if p.name.startswith("wmrl-leaderboards-") and p.is_dir()]
    assert len(left) == 1 and (tmp_path / left[0] / "cache").is_dir()  # what the killed build left

    class Failing(Sandbox):
        name = "failing"

        def run_python(self, source, workdir, *, limits=None, env=None, filename="solution.py"):
            return ExecutionResult(1, "", "no", 0.1, backend=self.name)

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(RuntimeError, match="reference solution"):
        build_leaderboards([task], path=None, sandbox=Failing(), verbose=False)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("wmrl-leaderboards-")] == []
