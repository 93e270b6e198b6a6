"""docs/text_envs.md stays true: its ``python`` blocks run, in order, in one namespace, and each
"This prints `...`" after a block is what the block prints (``py`` blocks need a live server
and are not run)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

PAGE = Path(__file__).resolve().parents[1] / "docs" / "text_envs.md"
_BLOCK = re.compile(r"```python\n(.*?)```(.*?)(?=```|\Z)", re.S)


def run_page() -> tuple[dict, list[tuple[str, str]]]:
    ns: dict = {"__name__": "text_envs_doc"}
    checked = []
    for code, prose in _BLOCK.findall(PAGE.read_text()):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, str(PAGE), "exec"), ns)  # noqa: S102 - the page's own example
        m = re.search(r"This prints `([^`]*)`", prose)
        if m:
            checked.append((out.getvalue().strip(), m.group(1)))
    return ns, checked


def test_the_page_runs_and_prints_what_it_says():
    ns, checked = run_page()
    assert len(checked) == 2
    for printed, claimed in checked:
        assert printed == claimed


def test_the_worked_example_routes_whole_groups_and_never_verifies_world_model_groups():
    ns, _ = run_page()
    scorer, results, calls = ns["scorer"], ns["results"], ns["verify_calls"]
    closed_routes = scorer.loop.router.n_anchor_groups
    assert closed_routes == 4 and scorer.loop.router.n_groups_routed == 8
    # verify was called for whole anchor groups only: 4 completions per verified task
    per_task: dict[str, int] = {}
    for body in calls:
        per_task[body["expected_answer"]] = per_task.get(body["expected_answer"], 0) + 1
    assert sorted(per_task.values()) == [4, 4, 4, 4]
    assert scorer.loop.ledger.count("execution") == 16 and scorer.loop.ledger.count("world_model") == 32
    for (rewards, weight, adv), task in zip(results, ns["tasks"]):
        answer = task["fields"]["expected_answer"]
        if answer in per_task:  # anchor: the real grades, weight ρ
            assert rewards == [1.0, 0.0, 1.0, 0.0]
        else:  # world model: f̂(r̂) of 0.7 / 0.2, weight 1
            assert weight == 1.0 and rewards[0] == rewards[2] and rewards[0] > rewards[1]
        assert abs(sum(adv)) < 1e-9


def test_ungraded_completions_are_none_not_zero_and_a_dead_verifier_stops_the_run():
    import pytest

    from wmrl_envs.core import TooManyUngradedError

    ns, _ = run_page()
    make, wm, cfg = ns["WMRLGroupScorer"], ns["GuessingWM"], ns["CorrectionConfig"]

    def partial(task, completions):  # the verifier could not grade "x"
        return [None if c == "x" else float(c == task["fields"]["expected_answer"]) for c in completions]

    scorer = make(partial, wm(), groups_per_step=1, config=cfg(anchor_fraction=1.0), seed=0)
    rewards, weight = scorer(ns["tasks"][1], ["2", "3", "x", "2"])
    assert rewards == [1.0, 0.0, None, 1.0]
    adv = ns["wmrl_advantages"](rewards, weight)
    assert adv[2] == 0.0 and adv[0] > 0 > adv[1]
    assert scorer.loop.corrector.stats()["anchor_pairs"] == 3  # the ungraded one is no pair
    assert scorer.loop.ledger.ungraded_counts() == {"execution_ungraded": 1}

    def down(task, completions):
        raise ConnectionError("resource server unreachable")

    scorer = make(down, wm(), groups_per_step=1, config=cfg(anchor_fraction=1.0), seed=0)
    with pytest.raises(TooManyUngradedError, match="resource server unreachable"):
        scorer(ns["tasks"][0], ["0", "1", "0", "x"])  # the stop rule: a whole step ungraded
    assert scorer.loop.ledger.ungraded_counts() == {"execution_error": 4}
    assert scorer.loop.corrector.stats()["anchor_pairs"] == 0
