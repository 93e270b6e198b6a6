"""How a leaderboard is built (wmrl_envs.envs.autoresearch.leaderboards.build_leaderboards): a
task's reference solutions run in ``n_jobs`` batches, one Python process each (imports paid once
per batch), with the values of one process per solution."""

from __future__ import annotations

import pytest

from wmrl_envs.envs.autoresearch import leaderboards
from wmrl_envs.envs.autoresearch.tasks import get_task


class _Counting(leaderboards._HostRunner):
    """The host runner, counting the processes it starts."""

    def __init__(self) -> None:
        super().__init__()
        self.files: list[str] = []

    def run_python(self, source, workdir, *, limits=None, env=None, filename="solution.py"):
        self.files.append(filename)
        return super().run_python(source, workdir, limits=limits, env=env, filename=filename)


def test_batched_build_gives_the_shipped_values_in_two_processes():
    # the shipped board was built with one process per reference solution: the batched build must
    # give the same values to the last bit (the scripts are deterministic), in n_jobs processes
    task = "credit-default"  # one of the cheapest boards (about 10 CPU-seconds batched, 22 before)
    runner = _Counting()
    built = leaderboards.build_leaderboards([task], path=None, sandbox=runner, n_jobs=2, verbose=False)
    shipped = leaderboards.load_leaderboards()["tasks"][task]
    assert [e["name"] for e in built["tasks"][task]["entries"]] == [e["name"] for e in shipped["entries"]]
    assert [e["metric_value"] for e in built["tasks"][task]["entries"]] == [e["metric_value"] for e in shipped["entries"]]
    assert runner.files == [leaderboards.REFERENCE_DRIVER_FILE] * 2  # 2 processes, not 8
    assert all(e["runtime_s"] > 0 for e in built["tasks"][task]["entries"])


@pytest.mark.parametrize("task", ["digits-upscaled", "credit-default", "friedman-plant"])
@pytest.mark.parametrize("n", [1, 2, 3, 8, 20])
def test_batches_hold_every_reference_once_and_balance_the_expected_time(task, n):
    spec = get_task(task)
    batches = leaderboards._split_references(spec, n)
    refs = leaderboards.REFERENCE_SOLUTIONS[spec.problem_type]
    assert len(batches) == min(n, len(refs))
    assert sorted(i for b in batches for i, _, _ in b) == list(range(len(refs)))
    assert all(b == sorted(b) and all(refs[i] == (name, line) for i, name, line in b) for b in batches)
    cost = [sum(leaderboards._expected_runtime(task, name) for _, name, _ in b) for b in batches]
    longest = max(leaderboards._expected_runtime(task, name) for name, _ in refs)
    assert max(cost) - min(cost) <= longest + 1e-9  # greedy longest-first: within one entry


def test_a_failing_reference_in_a_batch_is_named_with_its_error(monkeypatch):
    monkeypatch.setattr(leaderboards, "REFERENCE_SOLUTIONS", {
        "classification": (("majority", "model = DummyClassifier(strategy='prior')"),
                           ("broken", "model = DecisionTreeClassifier(max_depth='deep')"),
                           ("stump", "model = DecisionTreeClassifier(max_depth=2, random_state=0)")),
        "regression": (("mean", "model = DummyRegressor()"),),
    })
    with pytest.raises(RuntimeError, match=r"reference solution 'broken' failed on task 'hastie-noisy'(.|\n)*max_depth"):
        leaderboards.build_leaderboards(["hastie-noisy"], path=None, n_jobs=1, verbose=False)


def test_a_reference_that_writes_no_submission_is_refused(monkeypatch):
    monkeypatch.setattr(leaderboards, "REFERENCE_SOLUTIONS", {
        "classification": (("majority", "model = DummyClassifier(strategy='prior')"),
                           ("silent", "model = DummyClassifier(); import os, sys; os.remove = lambda p: None; "
                                      "import pandas as pd; pd.DataFrame.to_csv = lambda *a, **k: None")),
        "regression": (("mean", "model = DummyRegressor()"),),
    })
    with pytest.raises(RuntimeError, match=r"reference solution 'silent' failed on task 'hastie-noisy': ran_no_sub"):
        leaderboards.build_leaderboards(["hastie-noisy"], path=None, n_jobs=1, verbose=False)
