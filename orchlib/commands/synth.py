"""`orchlib synth --domain TEXT --base-url URL --model NAME --out DIR`: a ToolScale-style domain folder
(database, tools, cards, tasks) written by a model, checked by the environment. Guide: docs/synth.md."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("synth", help="synthesize a training environment (database, tools, tasks) with an LLM",
                       description="Stages: domain, schema and seed records, tools, tasks; each reply is cached "
                                   "under OUT/.synth-cache, so a rerun resumes. Prints kept and refused per stage "
                                   "and reason, and the writer model's tokens and cost.")
    p.add_argument("--domain", required=True, help="the domain in a few words, e.g. 'a small public library'")
    p.add_argument("--base-url", required=True, help="OpenAI-compatible endpoint, e.g. https://api.openai.com/v1")
    p.add_argument("--model", required=True, help="the writer model's name there")
    p.add_argument("--api-key-env", default=None, help="environment variable holding the API key")
    p.add_argument("--out", required=True, help="folder to write the domain folder into")
    p.add_argument("--package", default=None, help="the domain folder's import name (default synth_<domain>)")
    p.add_argument("--cache", default=None, help="stage cache folder (default OUT/.synth-cache/<domain>)")
    p.add_argument("--n-tools", type=int, default=6, help="tools to ask for")
    p.add_argument("--n-tasks", type=int, default=12, help="tasks to ask for")
    p.add_argument("--price-in", type=float, default=0.0, help="USD per million input tokens of the writer")
    p.add_argument("--price-out", type=float, default=0.0, help="USD per million output tokens of the writer")
    p.add_argument("--max-tokens", type=int, default=None, help="output cap per reply")
    p.add_argument("--simulated-user", action="store_true", help="give each task a simulated user (the writer)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(handler=run)


# SynthConfig's fields as the flags that set them, so an error names what the user typed
_FLAGS = {"llm.base_url": "--base-url", "llm.model": "--model", "llm.max_tokens": "--max-tokens",
          "llm.api_key_env": "--api-key-env", "n_tools": "--n-tools", "n_tasks": "--n-tasks", "package": "--package",
          "domain": "--domain", "price.per_m_input": "--price-in", "price.per_m_output": "--price-out"}


def run(args: argparse.Namespace) -> int:
    import sys

    from pydantic import ValidationError

    from orchlib.cli import UsageError
    from orchlib.commands._output import writable_folder
    from orchlib.synth import SynthConfig, SynthError, synthesize
    from orchlib.synth.llm import SynthCacheError

    try:
        config = SynthConfig(domain=args.domain, package=args.package, n_tools=args.n_tools, n_tasks=args.n_tasks,
                             simulated_user=args.simulated_user,
                             price={"per_m_input": args.price_in, "per_m_output": args.price_out},
                             llm={"model": args.model, "base_url": args.base_url, "api_key_env": args.api_key_env,
                                  "max_tokens": args.max_tokens})
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(map(str, err["loc"]))
        raise UsageError(f"{_FLAGS.get(field, field)}: {err['msg'].removeprefix('Value error, ')}") from None
    out = writable_folder(args.out, "--out")
    try:
        path, report = synthesize(config, out, cache=args.cache, progress=not args.no_progress)
    except SynthCacheError as e:  # a file of the user's, not the writer model's failure
        raise UsageError(str(e)) from None
    except SynthError as e:
        print(f"orchlib synth: {e}", file=sys.stderr)
        return 1
    print(report.table())
    print(f"wrote {path}; put {path.parent} on PYTHONPATH to load its tasks ({path / 'tasks.jsonl'}) "
          f"and cards ({path / 'cards'})")
    return 0
