"""The LLM judge's pre-check and prompt (``wmrl_envs.envs.autoresearch.llm_judge.prompt``): the
pre-check decides what the real grader decides and gives its feedback without calling the model;
the prompt is built from the env's observation within its token budget.
"""

from __future__ import annotations

import pytest

from wmrl_envs.world_models import WorldModel, WorldModelPrediction
from wmrl_envs.envs.autoresearch.grading import check_source
from wmrl_envs.envs.autoresearch.llm_judge import PREFILL, LLMJudgeWorldModel

from llm_judge_helpers import TASK_PROMPT, GOOD_CODE, _obs, _tokenizer, ExplodingModel

__all__: list[str] = []


# ----------------------------------------------------------------------------- pre-check


def test_check_source():
    """The host pre-check the real grader and the judge share."""
    assert check_source("") == ("malformed", "the solution is empty", "")
    assert check_source("  \n\t ")[0] == "malformed"
    assert check_source(None)[0] == "malformed"
    status, message, stderr = check_source("x = (1,\nprint(x)\n")
    assert status == "syntax_err" and message.startswith("SyntaxError:") and "(line 1)" in message
    assert 'File "solution.py", line' in stderr and "SyntaxError" in stderr
    status, message, stderr = check_source("def f():\nreturn 1\n")
    assert status == "syntax_err" and "IndentationError" in stderr
    assert check_source("x = 1\x00\n")[0] == "malformed"
    assert check_source(GOOD_CODE) is None


@pytest.mark.parametrize("code", ["", "  \n", "x = 1\x00", "x = (", "def f():\nreturn 1", "print('a' 'b' c)"])
def test_precheck_feedback_equals_real_feedback(code, next_observation):
    """For pre-checked actions the predicted feedback is exactly the real env's feedback."""
    from wmrl_envs.envs.autoresearch.observation import format_feedback
    from wmrl_envs.envs.autoresearch.env import grade

    real = format_feedback(grade("credit-default", None, None, source=code))
    pred = LLMJudgeWorldModel(ExplodingModel(), _tokenizer()).predict([_obs()], [code])[0]
    assert pred.feedback == real
    assert pred.observation == next_observation(_obs(), real)


def test_precheck_skips_model(tokenizer, next_observation):
    judge = LLMJudgeWorldModel(ExplodingModel(), tokenizer)
    assert isinstance(judge, WorldModel)
    ctxs = [_obs(0), _obs(1), _obs(2), _obs(3)]
    acts = ["", "   \n", "for i in range(3)\n    print(i)\n", None]
    preds = judge.predict(ctxs, acts)
    assert [p.status for p in preds] == ["malformed", "malformed", "syntax_err", "malformed"]
    for ctx, p in zip(ctxs, preds):
        assert isinstance(p, WorldModelPrediction)
        assert p.score == 0.0 and p.model_called is False and p.raw_output == ""
        assert p.extras["parse_error"] is False and p.extras["new_tokens"] == 0
        assert p.observation == next_observation(ctx, p.feedback)
    assert "SyntaxError" in preds[2].feedback and "line 1" in preds[2].feedback
    assert preds[2].feedback.startswith("[grader] status: syntax_err | score 0 | SyntaxError")
    assert preds[2].feedback.split("\n")[1] == "[grader] $ python solution.py | exit code 1 | 0.00 s"
    assert "status: malformed" in preds[0].feedback
    assert judge.n_precheck == 4 and judge.n_model_calls == 0 and judge.seconds == 0.0
    with pytest.raises(ValueError):
        judge.predict([_obs()], [])


def test_drop_section():
    from wmrl_envs.envs.autoresearch.llm_judge.prompt import _drop_section

    text = "# T\nintro\n## Data\nd\n## Starter code\n```python\n## not a heading\nx = 1\n```\n## After\na"
    assert _drop_section(text, "## Starter code") == "# T\nintro\n## Data\nd\n## After\na"
    assert _drop_section("# T\n## Starter code (x)\ncode", "## Starter code") == "# T"
    assert _drop_section(text, "## Missing") == text


@pytest.mark.parametrize("task_id", ["credit-default", "hastie-noisy"])
def test_prompt_from_real_env_observation(tokenizer, task_id):
    from wmrl_envs.envs.autoresearch.observation import build_prompt
    from wmrl_envs.envs.autoresearch.tasks import get_task

    obs = {"task_id": task_id, "prompt": build_prompt(task_id), "feedback": "", "turn": 0}
    code = get_task(task_id).starter_code
    judge = LLMJudgeWorldModel(ExplodingModel(), tokenizer)
    prompt = judge.build_prompt(obs, code)
    assert len(tokenizer(prompt, add_special_tokens=False)["input_ids"]) <= 1024
    assert "## Starter code" not in prompt  # dropped first: the action repeats it
    assert prompt.count(code.splitlines()[0]) == 1 and "model = " in prompt
    assert obs["prompt"].splitlines()[0] in prompt  # the task heading survives
    if task_id == "hastie-noisy":  # short enough once the starter section is dropped
        assert "omitted" not in prompt and "## Execution" in prompt


@pytest.mark.parametrize("budget", [300, 333, 700])
def test_prompt_never_exceeds_budget(tokenizer, budget):
    judge = LLMJudgeWorldModel(ExplodingModel(), tokenizer, max_prompt_tokens=budget)
    task = "Tâche: prédire ünïcode 数据 " * 150
    code = "".join(f"s{i} = '≈ {i} → ∑ {chr(0x4E00 + i)}'  # ünïcode\n" for i in range(400))
    for t, c in [(task, code), (task, "x = 1\n"), ("short task", code)]:
        prompt = judge.build_prompt({"prompt": t}, c)
        assert len(tokenizer(prompt, add_special_tokens=False)["input_ids"]) <= budget
        assert prompt.endswith(PREFILL)


def test_prompt_truncation_keeps_head_and_tail(tokenizer):
    judge = LLMJudgeWorldModel(ExplodingModel(), tokenizer, max_prompt_tokens=512)
    code = "import numpy as np\n" + "".join(f"x{i} = np.zeros({i})\n" for i in range(600)) + "print('END_MARK')\n"
    long_task = "TASK_START " + "The data have many columns. " * 400 + " TASK_END"
    prompt = judge.build_prompt({"prompt": long_task}, code)
    n = len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    assert n <= 512
    assert "import numpy as np" in prompt and "print('END_MARK')" in prompt
    assert "TASK_START" in prompt and "TASK_END" in prompt
    assert prompt.count("tokens omitted]") == 2
    assert prompt.endswith(PREFILL)
    # lines are cut at line boundaries: every kept code line is complete
    body = prompt.split("```python\n", 1)[1].split("\n```", 1)[0]
    for line in body.splitlines():
        assert line.startswith(("import", "x", "print", "...")), line
    # short inputs are untouched
    short = LLMJudgeWorldModel(ExplodingModel(), tokenizer).build_prompt(_obs(), GOOD_CODE)
    assert GOOD_CODE.strip() in short and TASK_PROMPT in short and "omitted" not in short


def test_judge_prompt_is_the_judges_prompt(tokenizer):
    from wmrl_envs.envs.autoresearch.llm_judge import SYSTEM_PROMPT, JudgePrompt

    prompt = JudgePrompt(tokenizer, max_prompt_tokens=512)
    judge = LLMJudgeWorldModel(ExplodingModel(), tokenizer, max_prompt_tokens=512)
    long_code = "".join(f"x{i} = {i}\n" for i in range(800))
    for code in (GOOD_CODE, long_code):
        assert prompt.build(_obs(), code) == judge.build_prompt(_obs(), code)
    assert judge.system_prompt == prompt.system_prompt == SYSTEM_PROMPT and judge.max_prompt_tokens == 512
    assert prompt.overhead == prompt.n_tokens(prompt.render("", "")) and 64 < prompt.overhead < 512
    assert prompt.render("TASK", "CODE").endswith(PREFILL) and "TASK" in prompt.render("TASK", "CODE")
    assert JudgePrompt(tokenizer, system_prompt="Be brief.").build(_obs(), GOOD_CODE).count("Be brief.") == 1
    with pytest.raises(ValueError, match="leaves no room for task and code"):
        JudgePrompt(tokenizer, max_prompt_tokens=prompt.overhead + 63)
