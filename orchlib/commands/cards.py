"""`orchlib cards list|show|validate|export`: look at, check and convert tool cards.

`validate` prints one line per problem (`file:line: field: problem`) and exits 2 when there is any.
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


def _export(card, fmt: str, with_costs: bool) -> dict:
    return {"openai": card.to_openai, "transformers": card.to_transformers, "mcp": card.to_mcp}[fmt](with_costs)
