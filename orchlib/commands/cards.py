"""`orchlib cards list|show|validate|export|import|describe`: look at, check, convert and describe tool cards.

`import` writes one card file per tool from OpenAI / MCP / JSON Schema definitions (a JSON file, a JSON
list, a tools/list result, or JSON lines such as function-calling benchmarks use) or from a running MCP
server's tools/list; every card is made and checked before any file is written.

`validate` prints one line per problem (`file:line: field: problem`) and exits 2 when there is any.
`describe` tries a card's tool on sampled tasks and writes its description from the results
(orchlib.describe); bad input exits 2, a failing describer model exits 1, and either way the card file
is left as it was.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any, Iterable

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

    imp = cmds.add_parser("import", help="card files from OpenAI / MCP / JSON Schema tool definitions or an MCP "
                                         "server (loose types normalised; what changed is counted)")
    src = imp.add_mutually_exclusive_group(required=True)
    src.add_argument("file", nargs="?", help="JSON or JSON lines: a definition, a list, {'tools': [...]}, or "
                                             "records with a 'function' list")
    src.add_argument("--mcp-command", metavar="CMD", help="a stdio MCP server to start, e.g. 'python server.py'")
    src.add_argument("--mcp-url", metavar="URL", help="a streamable HTTP MCP server, e.g. http://127.0.0.1:8000/mcp")
    imp.add_argument("--out", required=True, help="folder to write the card files to (NAME.yaml each)")
    imp.add_argument("--format", choices=("auto", "openai", "mcp", "json-schema"), default="auto",
                     help="what the file holds (auto: by each definition's keys)")
    imp.add_argument("--kind", default="function", help="kind of the cards from a file (default function: "
                                                        "schema-only until a function is bound)")
    imp.add_argument("--force", action="store_true", help="overwrite card files that exist")
    imp.add_argument("--changes", action="store_true", help="print every change made to a schema or name")
    imp.set_defaults(handler=run_import)

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
    from orchlib.cards import card_files
    from orchlib.tools import validate_cards

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
    from orchlib.toolnames import ToolNames

    cards = _load(args.path)
    names = ToolNames([c.name for c in cards], args.format)  # one-to-one over the whole set
    for card_name, shown in names.changed.items():  # a model's calls come back under the shown name
        print(f"note: {card_name!r} is exported as {shown!r} ({args.format} forbids the name)", file=sys.stderr)
    text = json.dumps([_export(c, args.format, args.with_costs, names.exported(c.name)) for c in cards], indent=2,
                      ensure_ascii=False)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    else:
        print(text)
    return 0


def run_import(args: argparse.Namespace) -> int:
    from orchlib.cards import CardError, save_card
    from orchlib.cli import UsageError
    from orchlib.commands._output import writable_folder

    out = Path(args.out)
    try:
        if args.file:
            cards = _unique([_import_one(d, args.format, args.kind, where) for d, where in _definitions(args.file)])
        else:
            from orchlib.tools.mcp import mcp_cards

            server = {"url": args.mcp_url} if args.mcp_url else dict(zip(("command", "args"),
                                                                           _split_command(args.mcp_command)))
            cards = mcp_cards(**server)
    except (CardError, ValueError) as e:
        raise UsageError(str(e)) from None
    except OSError as e:
        raise UsageError(f"{e.filename or args.file}: {e.strerror or e}") from None
    except Exception as e:  # the MCP server failed (ToolError): not bad input, a failed run
        print(f"orchlib cards import: {e}", file=sys.stderr)
        return 1
    writable_folder(out, "--out")  # under a file, in /proc, read-only: said before any card is written
    targets = [out / f"{c.name}.yaml" for c in cards]
    existing = [str(t) for t in targets if t.exists()]
    if existing and not args.force:
        raise UsageError(f"{len(existing)} card file(s) exist, e.g. {existing[0]} (--force overwrites)")
    written: list[Path] = []
    try:
        for card, target in zip(cards, targets):
            save_card(card, target)
            written.append(target)
    except OSError as e:  # a full disk midway: take back the new files, so no half import is left
        for target in written:
            if str(target) not in existing:
                target.unlink(missing_ok=True)
        raise UsageError(f"--out {out}: cannot write {e.filename or target.name} ({e.strerror or e})") from None
    changes = [f"{c.name}: {note}" for c in cards for note in c.normalized]
    print(f"wrote {len(cards)} card(s) to {out}; {len(changes)} change(s) to names or schemas in "
          f"{sum(bool(c.normalized) for c in cards)} card(s)" + ("" if args.changes or not changes else
                                                                 " (--changes lists them)"))
    if args.changes:
        print("\n".join(changes))
    return 0


def _split_command(text: str) -> tuple[str, list[str]]:
    parts = shlex.split(text)
    if not parts:
        raise ValueError("--mcp-command is empty")
    return parts[0], parts[1:]


def _definitions(path: str) -> Iterable[tuple[dict[str, Any], str]]:
    """(definition, where) for each tool definition in a JSON or JSON-lines file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text (byte {e.start})") from None
    try:
        docs = [(_loads(text, path), path)]
    except json.JSONDecodeError as whole:
        docs = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                docs.append((_loads(line, path, n), f"{path}:{n}"))
            except json.JSONDecodeError as e:
                if n == 1:  # neither one JSON document nor JSON lines: say where the document broke
                    raise ValueError(f"{path}:{whole.lineno}: not JSON: {whole.msg}") from None
                raise ValueError(f"{path}:{n}: not JSON: {e.msg} (column {e.colno})") from None
    for doc, where in docs:
        try:
            found = list(_unpack(doc, where))
        except RecursionError:
            raise ValueError(f"{where}: lists nested too deeply") from None
        yield from found


# Past this depth a tool definition is not a schema a model is shown; json and the schema walk would
# otherwise stop at Python's recursion limit with no place named.
_MAX_DEPTH = 100


def _loads(text: str, path: str, lineno: int | None = None) -> Any:
    """json.loads, refusing nesting deeper than _MAX_DEPTH with the line where it went past (`lineno`:
    the line `text` is, in a JSON-lines file)."""
    depth, line, in_string, escaped = 0, 1, False, False
    for ch in text:
        if ch == "\n":
            line += 1
        if in_string:
            escaped, in_string = (False, True) if escaped else (ch == "\\", ch != '"')
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > _MAX_DEPTH:
                raise ValueError(f"{path}:{lineno or line}: nested more than {_MAX_DEPTH} levels deep")
        elif ch in "]}":
            depth -= 1
    return json.loads(text)


def _unpack(doc: Any, where: str) -> Iterable[tuple[dict[str, Any], str]]:
    if isinstance(doc, list):
        for i, d in enumerate(doc):
            yield from _unpack(d, f"{where}[{i}]")
    elif isinstance(doc, dict) and isinstance(doc.get("tools"), list):  # an MCP tools/list result
        yield from _unpack(doc["tools"], f"{where}.tools")
    elif isinstance(doc, dict) and isinstance(doc.get("function"), list):  # a benchmark record
        yield from _unpack(doc["function"], f"{where}.function")
    elif isinstance(doc, dict):
        yield doc, where
    else:
        raise ValueError(f"{where}: expected a tool definition (a JSON object), got {type(doc).__name__}")


def _import_one(d: dict[str, Any], fmt: str, kind: str, where: str):
    from orchlib.cards import CardError, ToolCard

    if fmt == "auto":
        fmt = ("mcp" if "inputSchema" in d else "openai" if d.get("type") == "function" or "parameters" in d
               or ("name" in d and "properties" not in d) else "json-schema")
    try:
        if fmt == "mcp":
            return ToolCard.from_mcp(d, kind=kind)
        if fmt == "openai":
            return ToolCard.from_openai(d, kind=kind)
        return ToolCard.from_json_schema(d, kind=kind)
    except CardError as e:  # name the place in the file, not only the tool
        raise CardError(where, 0, e.field, e.problem) from None


def _unique(cards: list) -> list:
    """One card per name: a definition repeated as it was (benchmarks repeat a function in many
    records) is kept once; two different definitions under one name are an error."""
    seen: dict[str, Any] = {}
    for card in cards:
        if card.name in seen and seen[card.name] != card:
            raise ValueError(f"two different definitions of tool {card.name!r}")
        seen.setdefault(card.name, card)
    return list(seen.values())


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


def _export(card, fmt: str, with_costs: bool, name: str | None = None) -> dict:
    if fmt == "transformers":
        return card.to_transformers(with_costs)
    return {"openai": card.to_openai, "mcp": card.to_mcp}[fmt](with_costs, name=name)
