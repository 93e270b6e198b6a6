"""The LLM judge's strict reading of answers (``wmrl_envs.envs.autoresearch.llm_judge.parser``):
exactly one schema object is a prediction, anything else is none (with the reason); the JSON
schema agrees with the parser; a model the constraint cannot steer is read strictly.
"""

from __future__ import annotations

import json

import pytest

from wmrl_envs.envs.autoresearch.grading import BUCKET_POSITIONS, QUALITY_BUCKETS
from wmrl_envs.envs.autoresearch.llm_judge import (
    FEEDBACK_MAX_CHARS,
    JUDGE_STATUSES,
    LLMJudgeWorldModel,
    ParsedJudgement,
    judge_json_schema,
    parse_judge_output,
)

from llm_judge_helpers import _obs, ScriptedModel

__all__: list[str] = []


# ----------------------------------------------------------------------------- parser

def _answer(status="valid", bucket="mid", feedback="score 0.81"):
    return json.dumps({"status": status, "bucket": bucket, "feedback": feedback})


ACCEPTED = [
    # (text, status, bucket, feedback)
    ('{"status": "valid", "bucket": "mid", "feedback": "score 0.81"}', "valid", "mid", "score 0.81"),
    ('{"status": "runtime_err", "bucket": "low", "feedback": "Traceback ..."}', "runtime_err", "low", "Traceback ..."),
    ('{"status": "ran_no_sub", "bucket": "high", "feedback": ""}', "ran_no_sub", "high", ""),
    ('  \n{"status":"valid","bucket":"high","feedback":"ok"}\n  ', "valid", "high", "ok"),  # whitespace around
    ('{"bucket": "fair", "feedback": "x", "status": "valid"}', "valid", "fair", "x"),  # any key order
    # nested quotes, escapes, braces inside the string
    ('{"status": "runtime_err", "bucket": "low", "feedback": "KeyError: \\"id\\"\\n  at {\'a\': 1}"}',
     "runtime_err", "low", "KeyError: \"id\"\n  at {'a': 1}"),
    ('{"status": "valid", "bucket": "low", "feedback": "\\u00e9t\\u00e9 \\\\ 50%"}', "valid", "low", "été \\ 50%"),
    (_answer(feedback="x" * FEEDBACK_MAX_CHARS), "valid", "mid", "x" * FEEDBACK_MAX_CHARS),  # at the limit
]

REJECTED = {
    # truncated
    "truncated in the feedback": '{"status": "valid", "bucket": "mid", "feedback": "fitted model; wrote subm',
    "truncated before the brace": '{"status": "valid", "bucket": "mid", "feedback": "ok"',
    "truncated in the status": '{"status": "val',
    "the bare prefill": '{"status": "',
    # two objects, mixed fields, trailing text
    "two objects": _answer() + " " + _answer(status="runtime_err"),
    "fields mixed across two objects": '{"status": "valid"} {"bucket": "high", "feedback": "x"}',
    "object then prose": _answer() + "\nThe JSON object is above.",
    "object then braces": _answer() + "}}}",
    "prose then object": "Sure! " + _answer(),
    "fenced object": "```json\n" + _answer() + "\n```",
    "array of objects": "[" + _answer() + "]",
    # fields
    "status missing": '{"bucket": "high", "feedback": "x"}',
    "bucket missing": '{"status": "valid", "feedback": "x"}',
    "feedback missing": '{"status": "runtime_err", "bucket": "low"}',
    "extra field": '{"status": "valid", "bucket": "mid", "feedback": "x", "score": 1.0}',
    "other key names": '{"outcome": "valid", "quality": "mid", "log": "x"}',
    "duplicate status": '{"status": "runtime_err", "status": "valid", "bucket": "mid", "feedback": "x"}',
    # status / bucket values
    "status wrong case": _answer(status="Valid"),
    "status upper case": _answer(status="VALID"),
    "status synonym": _answer(status="success"),
    "status with spaces": _answer(status=" valid"),
    "status with a suffix": _answer(status="runtime_err: KeyError"),
    "status pre-checked only": _answer(status="syntax_err"),
    "status malformed": _answer(status="malformed"),
    "status empty": _answer(status=""),
    "status not a string": '{"status": 1, "bucket": "mid", "feedback": "x"}',
    "status a list": '{"status": ["valid"], "bucket": "mid", "feedback": "x"}',
    "bucket unknown": _answer(bucket="excellent"),
    "bucket wrong case": _answer(bucket="High"),
    "bucket a number": '{"status": "valid", "bucket": 3, "feedback": "x"}',
    "bucket null": '{"status": "valid", "bucket": null, "feedback": "x"}',
    "garbage around the bucket": '{"status": "valid", "bucket": "\ufffd\ufffdhigh\ufffd", "feedback": "x"}',
    "escaped garbage around the bucket": '{"status": "valid", "bucket": "\\ufffdhigh\\u0000", "feedback": "x"}',
    "garbage around the status": '{"status": "\x00valid\x7f", "bucket": "mid", "feedback": "x"}',
    # feedback values
    "feedback too long": _answer(feedback="x" * (FEEDBACK_MAX_CHARS + 1)),
    "huge feedback": _answer(feedback="A" * 200_000),
    "feedback a list": '{"status": "valid", "bucket": "mid", "feedback": ["a", "b"]}',
    "feedback an object": '{"status": "valid", "bucket": "mid", "feedback": {"a": 1}}',
    "raw newline in a string": '{"status": "valid", "bucket": "mid", "feedback": "a\nb"}',
    "lone surrogate in the feedback": '{"status": "valid", "bucket": "mid", "feedback": "\\ud800"}',
    "unterminated escape": '{"status": "valid", "bucket": "mid", "feedback": "a\\',
    # not JSON
    "single quotes": "{'status': 'valid', 'bucket': 'mid', 'feedback': 'x'}",
    "bare words": "status: valid, bucket: mid, feedback: x",
    "key = value": "status = VALID; bucket = HIGH",
    "bare status word": "valid, mid",
    "prose": "The model is trained on the data.",
    "error prose": "Error: the script crashed",
    "NaN constant": '{"status": "valid", "bucket": "mid", "feedback": NaN}',
    "trailing comma": '{"status": "valid", "bucket": "mid", "feedback": "x",}',
    "empty": "",
    "whitespace": "   \n ",
    "braces only": "{{{{",
    "digits": "1234567890",
    "deep nesting": "{" + '"a": {' * 5000 + "}" * 5001,
    "not a string": None,
}


@pytest.mark.parametrize("text,status,bucket,feedback", ACCEPTED)
def test_strict_parser_accepts_exactly_one_schema_object(text, status, bucket, feedback):
    parsed = parse_judge_output(text)
    assert parsed == ParsedJudgement(status=status, bucket=bucket, feedback=feedback)
    pos = BUCKET_POSITIONS[bucket] if status == "valid" else None
    assert parsed.pos == pos
    assert parsed.score == pytest.approx({"valid": 0.5 + 0.5 * (pos or 0), "ran_no_sub": 0.2, "runtime_err": 0.1}[status])


@pytest.mark.parametrize("text", list(REJECTED.values()), ids=list(REJECTED))
def test_strict_parser_rejects_malformed_output(text):
    from wmrl_envs.envs.autoresearch.llm_judge import parse_judge_output_with_reason

    assert parse_judge_output(text) is None
    parsed, reason = parse_judge_output_with_reason(text, FEEDBACK_MAX_CHARS)
    assert parsed is None and reason  # a reason for the log


def test_strict_parser_feedback_limit_is_a_parameter():
    assert parse_judge_output(_answer(feedback="abcd"), max_feedback_chars=4).feedback == "abcd"
    assert parse_judge_output(_answer(feedback="abcde"), max_feedback_chars=4) is None


def test_schema_and_parser_agree():
    """The constraint's schema and the fallback parser describe the same set of answers."""
    jsonschema = pytest.importorskip("jsonschema")  # a dependency of ray (test extra)
    schema = judge_json_schema()
    assert schema["properties"]["status"]["enum"] == list(JUDGE_STATUSES)
    assert schema["properties"]["bucket"]["enum"] == list(QUALITY_BUCKETS)
    assert schema["properties"]["feedback"]["maxLength"] == FEEDBACK_MAX_CHARS
    for text, *_ in ACCEPTED:
        jsonschema.validate(json.loads(text), schema)
    for name, text in REJECTED.items():
        try:
            obj = json.loads(text)
        except (TypeError, ValueError, RecursionError):
            continue  # not JSON at all
        if text.strip().startswith("{") and text.strip().endswith("}") and "duplicate" not in name and "surrogate" not in name:
            with pytest.raises(jsonschema.ValidationError):
                jsonschema.validate(obj, schema)
    with pytest.raises(ValueError, match="max_feedback_chars"):
        judge_json_schema(-1)


def test_answers_of_an_unconstrained_model_are_read_strictly(tokenizer, next_observation):
    """A model the constraint cannot steer (its ``generate`` ignores logits processors): a whole
    object instead of the continuation is read as the prediction it is; a truncated answer, two
    objects and a huge feedback are no prediction (runtime_err, with the reason)."""
    whole = '{"status": "valid", "bucket": "high", "feedback": "wrote submission.csv"}'
    model = ScriptedModel(tokenizer, {
        "print('whole')": whole,
        "print('cut')": 'valid", "bucket": "mid", "feedback": "fitted; wro',
        "print('two')": 'valid", "bucket": "mid", "feedback": "a"} {"status": "runtime_err"}',
        "print('huge')": 'valid", "bucket": "mid", "feedback": "' + "A" * 500 + '"}',
        "": 'ran_no_sub", "bucket": "low", "feedback": "done"}',
    })
    judge = LLMJudgeWorldModel(model, tokenizer, batch_size=8, max_new_tokens=400, constrained=False)
    acts = ["print('whole')\n", "print('cut')\n", "print('two')\n", "print('huge')\n", "print('ok')\n"]
    preds = judge.predict([_obs(i) for i in range(5)], acts)
    assert [p.status for p in preds] == ["valid", "runtime_err", "runtime_err", "runtime_err", "ran_no_sub"]
    assert preds[0].raw_output == whole and preds[0].score == pytest.approx(0.5 + 0.5 * BUCKET_POSITIONS["high"])
    assert [p.extras["parse_error"] for p in preds] == [False, True, True, True, False]
    assert "not one complete JSON object" in preds[1].extras["parse_reason"]
    assert "text after the JSON object" in preds[2].extras["parse_reason"]
    assert "more than 400" in preds[3].extras["parse_reason"]
    assert judge.n_parse_errors == 3 and preds[4].score == pytest.approx(0.2)
