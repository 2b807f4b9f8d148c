"""to_json_line writes what model_dump_json writes, with the prompt's JSON kept per prompt."""

import json

from orchlib.trajectory import Observation, Trajectory, new_turn, read_jsonl, to_json_line, write_jsonl


def _traj(prompt_ids, tail=(5, 6, 7), task="t1"):
    t = Trajectory.begin(task, 0, "a question", "cat", {"name": "default"}, prompt_ids)
    t.ids.extend(tail)
    t.mask.extend([1] * len(tail))
    t.logprobs.extend([-0.25, -1e-5, -3.5][:len(tail)])
    turn = new_turn("<tool_call>x</tool_call>", 0.5, len(tail), 1e-6)
    turn.observations.append(Observation(content='an "answer" ,"prompt_len": 3', meta={"ids": [1, 2]}))
    t.turns.append(turn)
    t.set_fields(finish_reason="final_tool", outcome=1.0, cost_usd=2.5e-7, meta={"prompt_len": 9})
    return t


def test_lines_equal_pydantic_json(tmp_path):
    prompt = list(range(1000, 1400))
    runs = [_traj(prompt), _traj(prompt, tail=()), _traj(prompt[:300], task="t2"), _traj(prompt[:10], task="t3")]
    changed = _traj(prompt)
    changed.mask[3] = 1  # not a plain prompt any more: written whole
    runs.append(changed)
    for t in runs + runs:  # the second time the prompts' JSON is found, not written
        assert to_json_line(t) == t.model_dump_json()
    path = write_jsonl(runs, tmp_path / "t.jsonl")
    back = read_jsonl(path)
    assert [b.model_dump() for b in back] == [json.loads(t.model_dump_json()) for t in runs]
