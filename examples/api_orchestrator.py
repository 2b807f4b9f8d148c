""".venv/bin/python examples/api_orchestrator.py  [--endpoint URL --model NAME [--api-key-env VAR]]
                                                  [--judge-endpoint URL --judge-model NAME] [--n 20]

Prompted models as the orchestrator, the way the paper runs GPT-5 or Qwen3-235B: the same tasks (the
orchestra-mini test split), tools, preferences and reward as a trained policy, through the same loop
and accounting; answers graded by an LLM judge whose cost is reported apart.

Offline by default: a local server plays two prompted models over the OpenAI protocol, "frugal" (the
calculator for arithmetic, else the cheapest model tool offered) and "spender" (the dearest), and a
judge. Neither can work the shop's database, so both fail the shop tasks. Give --endpoint/--model
(e.g. http://127.0.0.1:8000/v1 and a model served by vLLM, or https://api.openai.com/v1 gpt-5 with
--api-key-env OPENAI_API_KEY) to run a real model instead, and --judge-endpoint/--judge-model for a
real judge. Takes about ten seconds offline.
"""

from __future__ import annotations

import argparse
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from orchlib.env import Environment
from orchlib import Judge, OpenAIPolicy, Reward, Toolbox, evaluate, make_suite, use_judge
from orchlib.cards import Price
from orchlib.evaluate import compare, reward_across


def played(body: dict) -> str | dict:
    """What the local server's models write: a tool call (dict) or text."""
    msgs = body["messages"]
    if msgs[0]["role"] != "system":  # the judge: one user message holding the grading prompt
        prompt = msgs[0]["content"]
        said, ref = (re.search(rf"\[{k}\]: (.*)", prompt).group(1) for k in ("response", "reference answer"))
        return "GRADE: CORRECT" if ref.lower() in said.lower() else "GRADE: INCORRECT"
    if msgs[-1]["role"] == "tool":  # a result came back: answer with it
        return msgs[-1]["content"]
    offered = [t["function"]["name"] for t in body.get("tools", [])]
    sum_ = re.fullmatch(r"What is (\d+ [-+*/] \d+)\?", msgs[1]["content"].split("\n")[0])
    if body["model"] == "frugal" and sum_ and "calculator" in offered:
        return {"name": "calculator", "arguments": {"expression": sum_[1]}}
    liked = ("mixtral", "specialist", "generalist") if body["model"] == "frugal" else ("gpt4", "generalist")
    tool = next((t for t in liked if t in offered), None)
    return {"name": tool, "arguments": {}} if tool else "I cannot do that with these tools."


def local_server() -> str:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            out = played(body)
            msg = ({"role": "assistant", "content": out} if isinstance(out, str) else
                   {"role": "assistant", "content": None, "tool_calls": [
                       {"id": "c1", "type": "function",
                        "function": {"name": out["name"], "arguments": json.dumps(out["arguments"])}}]})
            payload = json.dumps({"choices": [{"index": 0, "message": msg, "finish_reason": "stop"}],
                                  "usage": {"prompt_tokens": 600, "completion_tokens": 30}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass

    class Server(ThreadingHTTPServer):
        request_queue_size = 256  # the default 5 makes simultaneous connects wait a second
        daemon_threads = True

    httpd = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{httpd.server_address[1]}/v1"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    ap.add_argument("--endpoint", help="an OpenAI-compatible endpoint serving the orchestrator")
    ap.add_argument("--model", help="the model name at --endpoint")
    ap.add_argument("--api-key-env", help="environment variable holding its API key")
    ap.add_argument("--judge-endpoint")
    ap.add_argument("--judge-model")
    ap.add_argument("--n", type=int, default=20, help="test tasks (of 100)")
    args = ap.parse_args()

    local = local_server()
    price = Price(per_m_input=0.6, per_m_output=2.4)  # the played models: priced like a mid-size API model
    played = [OpenAIPolicy(base_url=local, model=m, price=price) for m in ("frugal", "spender")]
    policies = ([OpenAIPolicy(base_url=args.endpoint, model=args.model, api_key_env=args.api_key_env)]
                if args.endpoint else played)
    judge = Judge(base_url=args.judge_endpoint or local, model=args.judge_model or "judge",
                  price=Price(per_m_input=0.25, per_m_output=2.0))
    # answers graded by the judge rather than the suite's own checkers (shop tasks keep theirs: they
    # check the database the episode left behind, not the text)
    test = make_suite(0).test  # 20 tasks of each category, in order: take every k-th for a mix
    tasks = [t if t.category == "shop" else t.model_copy(update={"checker": "judge"})
             for t in test[::max(1, len(test) // args.n)][:args.n]]
    toolbox, reward = Toolbox.load("toolcards"), Reward.load("rewards/toolorchestra.yaml")

    with use_judge(judge):
        reports = {p.name: evaluate(p, Environment(test=tasks, tools=toolbox, reward=reward),
                                    name=p.name) for p in policies}
    print(compare(reports, extra={"reward*": reward_across(reports, reward)} if len(reports) > 1 else None))
    print(f"\njudge {judge.name}: {judge.stats} (not in the policies' cost)")
    first = reports[policies[0].name].trajectories[0]
    print(f"\n{policies[0].name} on {first.task_id!r}: calls {first.calls}, answer {first.final_answer!r}, "
          f"${first.cost_usd:.5f}, {first.latency_s:.1f} s, trainable: {first.meta['trainable']}")


if __name__ == "__main__":
    main()
