"""`orchlib cards list|show|validate|export|describe`: look at, check, convert and describe tool cards.

`validate` prints one line per problem (`file:line: field: problem`) and exits 2 when there is any.
`describe` tries a card's tool on sampled tasks and writes its description from the results
(orchlib.describe); bad input exits 2, a failing describer model exits 1, and either way the card file
is left as it was.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

__all__ = ["add_parser", "FORMATS"]

FORMATS = ("openai", "transformers", "mcp")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cards", help="list, show, validate and export tool cards")
    cmds = p.add_subparsers(dest="cards_command", metavar="SUBCOMMAND", required=True)

    ls = cmds.add_parser("list", help="one line per card: name, kind, price, latency")
    ls.add_argument("path", nargs="?", default="toolcards", help="card file or folder (default: ./toolcards)")
    ls.set_defaults(handler=run_list)

    show = cmds.add_parser("show", help="a card's YAML and the schema the orchestrator sees")
    show.add_argument("name", help="card name (looked up in --cards) or a card file")
    show.add_argument("--cards", default="toolcards", help="folder to look the name up in")
    show.add_argument("--format", choices=FORMATS, default="openai", help="schema format shown")
    show.set_defaults(handler=run_show)

    val = cmds.add_parser("validate", help="check cards; exit 2 with one line per problem")
    val.add_argument("paths", nargs="*", default=["toolcards"], help="card files or folders")
    val.add_argument("--no-build", action="store_true", help="skip building the tools (imports, settings)")
    val.set_defaults(handler=run_validate)

    exp = cmds.add_parser("export", help="the cards as a JSON list of tool schemas")
    exp.add_argument("path", nargs="?", default="toolcards", help="card file or folder")
    exp.add_argument("--format", choices=FORMATS, default="openai")
    exp.add_argument("--with-costs", action="store_true", help="append price and latency to descriptions")
    exp.add_argument("--out", help="write to this file instead of standard output")
    exp.set_defaults(handler=run_export)

    desc = cmds.add_parser("describe", help="try a card's tool on sampled tasks and write its description "
                                            "from the results (the card file is rewritten, comments kept)")
    desc.add_argument("card", metavar="CARD", help="card file, or a card name looked up in --cards")
    desc.add_argument("--tasks", required=True, metavar="FILE",
                      help="tasks JSONL, as written by orchlib.tasks.save_tasks (the default suite's: "
                           "make_suite(0).save(folder))")
    desc.add_argument("--n", type=int, default=40, help="tasks to try, stratified by category (default 40)")
    desc.add_argument("--describer", metavar="CARD", help="an llm card file whose model writes the text "
                                          "(default: an offline template over the statistics)")
    desc.add_argument("--seed", type=int, default=0, help="which tasks are drawn (default 0)")
    desc.add_argument("--cards", default="toolcards", help="folder to look a card name up in")
    desc.set_defaults(handler=run_describe)


def _load(path: str):
    from orchlib.cards import CardError, load_cards
    from orchlib.cli import UsageError

    try:
        return load_cards(path)
    except CardError as e:
        raise UsageError(str(e)) from None


def run_list(args: argparse.Namespace) -> int:
    cards = _load(args.path)
    rows = [(c.name, c.kind + (f" ({c.label})" if c.label and c.label != c.kind else ""), c.price.describe(),
             f"{c.latency.seconds:g} s", ("final " if c.final else "") + ("task" if c.input == "task" else ""),
             c.description.strip().splitlines()[0][:60]) for c in cards]
    header = ("name", "kind", "price (USD)", "latency", "input", "description")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1])
    return 0


def run_show(args: argparse.Namespace) -> int:
    from orchlib.cards import CardError, load_card
    from orchlib.cli import UsageError

    if Path(args.name).is_file():
        try:
            card = load_card(args.name)
        except CardError as e:
            raise UsageError(str(e)) from None
    else:
        found = {c.name: c for c in _load(args.cards)}
        if args.name not in found:
            raise UsageError(f"no card named {args.name!r} in {args.cards} (have: {', '.join(found) or 'none'})")
        card = found[args.name]
    print(f"# {card.source}")
    print(card.source.read_text(encoding="utf-8").rstrip())
    print(f"\n# as the orchestrator sees it ({args.format}):")
    print(json.dumps(_export(card, args.format, False), indent=2, ensure_ascii=False))
    return 0


def run_validate(args: argparse.Namespace) -> int:
    from orchlib.cards import card_files, validate_cards

    problems = validate_cards(args.paths, build=not args.no_build)
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        return 2
    count = 0
    for path in args.paths:
        count += len(card_files(path))
    print(f"ok: {count} card(s) in {', '.join(args.paths)}")
    return 0


def run_export(args: argparse.Namespace) -> int:
    text = json.dumps([_export(c, args.format, args.with_costs) for c in _load(args.path)], indent=2,
                      ensure_ascii=False)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    else:
        print(text)
    return 0


def run_describe(args: argparse.Namespace) -> int:
    from orchlib.cards import CardError, load_card
    from orchlib.cli import UsageError
    from orchlib.describe import DescribeError, DescriberError, describe_file
    from orchlib.describe_stats import stats_table
    from orchlib.tasks import TaskFileError

    path = Path(args.card)
    if not path.is_file():
        found = {c.name: c for c in _load(args.cards)} if Path(args.cards).is_dir() else {}
        if args.card not in found:
            raise UsageError(f"{args.card}: no such card file, and no card of that name in {args.cards}")
        path = found[args.card].source
    try:
        describer = load_card(args.describer) if args.describer else None
        result = describe_file(path, args.tasks, n=args.n, describer=describer, seed=args.seed)
    except DescriberError as e:  # the model failed, the input was fine: a failed run, not bad input
        print(f"orchlib cards describe: {e} ({path} unchanged)", file=sys.stderr)
        return 1
    except (CardError, DescribeError, TaskFileError) as e:
        raise UsageError(f"{e} ({path} unchanged)") from None
    except OSError as e:
        raise UsageError(f"{e.filename or args.tasks}: {e.strerror or e} ({path} unchanged)") from None
    stats = result.stats
    print(f"{stats.tool}: tried on {stats.n} task(s) from {stats.task_source}"
          + (f"; skipped {stats.skipped} without arguments for it" if stats.skipped else ""))
    print(stats_table(stats))
    print(f"\ndescription ({result.card.auto_description['method']}):\n{result.description}")
    print(f"\nwrote {result.path} (the previous description is in auto_description.history)")
    return 0


def _export(card, fmt: str, with_costs: bool) -> dict:
    return {"openai": card.to_openai, "transformers": card.to_transformers, "mcp": card.to_mcp}[fmt](with_costs)
