"""`orchlib prices check|ledger`: audit what tools cost.

    orchlib prices check [CARDS ...] [--table FILE] [--factor 2] [--model CARD=MODEL ...]
    orchlib prices ledger RUN.jsonl [--cards CARDS ...] [--policy-price-in 0.2 --policy-price-out 0.2]

`check` compares every card's token prices with the price table (`orchlib.audit.check_prices`) and
exits 1 when a price is flagged (off by more than the factor, swapped, per thousand, or without a
source). `ledger` splits a run's trajectories' cost by payer and token class (`orchlib.ledger`) and exits
1 when the lines do not add up to the reported totals. Both exit 2 on bad input, naming the file,
line and field.
"""

from __future__ import annotations

import argparse
import math

from orchlib.cli import UsageError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("prices", help="check cards' prices against the price table; a run's bill")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    check = actions.add_parser("check", help="every card's token prices against the price table")
    check.add_argument("cards", nargs="*", default=["toolcards"], help="card files or folders (default: toolcards)")
    check.add_argument("--table", default=None, help="a price table (default: orchlib/data/prices.yaml)")
    check.add_argument("--factor", type=float, default=2.0, help="how far a price may be from the table's (x, > 1)")
    check.add_argument("--model", action="append", default=[], metavar="CARD=MODEL",
                       help="the table model a card stands for, when its backend does not say")
    led = actions.add_parser("ledger", help="a run's cost by payer and token class, checked against its totals")
    led.add_argument("trajectories", help="a trajectories.jsonl file (as `orchlib eval` writes)")
    led.add_argument("--cards", nargs="*", default=["toolcards"], help="the tools' cards (default: toolcards)")
    led.add_argument("--policy-price-in", type=float, default=None, help="USD per million ids the policy read "
                     "(default: RolloutConfig's)")
    led.add_argument("--policy-price-out", type=float, default=None, help="USD per million ids it sampled")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    return check(args) if args.action == "check" else ledger(args)


def _models(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        card, sep, model = pair.partition("=")
        if not sep or not card.strip() or not model.strip():
            raise UsageError(f"--model {pair!r}: write CARD=MODEL, e.g. --model generalist=gpt-5")
        out[card.strip()] = model.strip()
    return out


def _cards(paths: list[str]):
    from orchlib.cards import CardError, load_cards

    return _read(load_cards, paths, CardError)


def check(args: argparse.Namespace) -> int:
    from orchlib.audit import check_prices
    from orchlib.prices import PriceTableError, load_prices

    if not (math.isfinite(args.factor) and args.factor > 1):  # nan and inf: no price is ever `off`
        raise UsageError(f"--factor {args.factor:g}: a factor must be a finite number above 1")
    models = _models(args.model)
    table = _read(load_prices, args.table, PriceTableError)
    cards = _cards(args.cards)
    unknown = sorted(set(models) - {c.name for c in cards})
    if unknown:
        raise UsageError(f"--model names no card among those read: {', '.join(unknown)}")
    report = check_prices(cards, table, factor=args.factor, models=models)
    print(report.table())
    return 0 if report.ok else 1


def ledger(args: argparse.Namespace) -> int:
    from orchlib.ledger import ledger as bill_of
    from orchlib.rollout import RolloutConfig
    from orchlib.trajectory import read_jsonl

    trajectories = _read(read_jsonl, args.trajectories, ValueError)
    default = RolloutConfig()
    try:
        policy = RolloutConfig(
            policy_price_in=default.policy_price_in if args.policy_price_in is None else args.policy_price_in,
            policy_price_out=default.policy_price_out if args.policy_price_out is None else args.policy_price_out)
    except ValueError as e:
        raise UsageError(f"--policy-price-in/--policy-price-out: {e.errors()[0]['msg']}") from None
    bill = bill_of(trajectories, _cards(args.cards), policy=policy)
    print(bill.table())
    return 0 if bill.reconciles else 1


def _read(load, path, malformed: type[Exception]):
    """`load(path)`, its errors as one line: `malformed` says what was wrong where, OSError that it
    could not be read (naming the file that failed, where the error knows it)."""
    try:
        return load(path)
    except malformed as e:
        raise UsageError(str(e)) from None
    except OSError as e:
        where = getattr(e, "filename", None) or path
        raise UsageError(f"{where}:0: (file): cannot read ({e.strerror or e})") from None
