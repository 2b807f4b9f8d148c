"""A small airline, τ²-bench style: a JSON database, tools that read and change it, and conversations
with a user who asks for changes — a domain built on `orchlib.envs.db` with scripted users.

The agent looks reservations and flights up, changes or cancels bookings once the user confirms, and
hands the conversation to a human when the policy forbids a request (`transfer_to_human_agents` ends
the episode itself). Scoring is τ²'s: the final database must equal the golden one, and the agent must
have told the user the required facts. Money is kept in integer cents so state hashes are exact.

    from orchlib.envs import airline
    trajectories = rollout(airline.environment(), engine, config=RolloutConfig(max_turns=8))
"""

from __future__ import annotations

from typing import Any

from orchlib.env import Environment, RewardFunction
from orchlib.envs.db import DBDomain
from orchlib.tasks import Golden, Task, UserSpec
from orchlib.trajectory import Observation, ToolCall

__all__ = ["AIRLINE", "INITIAL", "airline_tasks", "environment", "get_user", "get_reservation", "search_flights",
           "change_flight", "cancel_reservation", "transfer_to_human_agents", "money"]

# The whole state: users with their balance, flights with free seats, reservations. A plain JSON value.
INITIAL: dict[str, Any] = {
    "users": {
        "mia_li": {"name": "Mia Li", "balance_cents": 50000, "reservations": ["R1001"]},
        "omar_haddad": {"name": "Omar Haddad", "balance_cents": 2000, "reservations": ["R1002", "R1003"]},
    },
    "flights": {
        "HA100": {"origin": "JFK", "destination": "SFO", "date": "2024-05-10", "price_cents": 32000, "seats": 4},
        "HA101": {"origin": "JFK", "destination": "SFO", "date": "2024-05-11", "price_cents": 35000, "seats": 2},
        "HA102": {"origin": "JFK", "destination": "SFO", "date": "2024-05-12", "price_cents": 29000, "seats": 0},
        "HA200": {"origin": "BOS", "destination": "ORD", "date": "2024-05-01", "price_cents": 18000, "seats": 5},
        "HA201": {"origin": "ORD", "destination": "BOS", "date": "2024-05-20", "price_cents": 12000, "seats": 6},
    },
    "reservations": {
        "R1001": {"user_id": "mia_li", "flight_id": "HA100", "passengers": 1, "status": "booked"},
        "R1002": {"user_id": "omar_haddad", "flight_id": "HA201", "passengers": 2, "status": "booked"},
        "R1003": {"user_id": "omar_haddad", "flight_id": "HA200", "passengers": 1, "status": "flown"},
    },
}


def money(cents: int) -> str:
    return f"${cents // 100}.{cents % 100:02d}"


def _get(table: dict[str, Any], key: str, what: str) -> dict[str, Any]:
    if key not in table:
        raise ValueError(f"no {what} {key!r}")
    return table[key]


def _show_flight(fid: str, f: dict[str, Any]) -> str:
    return (f"{fid} {f['origin']}->{f['destination']} on {f['date']}, {money(f['price_cents'])}, "
            f"{f['seats']} seats left")


# Tools raise on bad input (the function backend makes that an error observation); nothing is written then.
def get_user(env: dict, user_id: str) -> str:
    """A user's name, balance and reservation ids.

    Args:
        user_id: the user id, e.g. "mia_li".
    """
    u = _get(env["users"], user_id, "user")
    return f"{user_id}: {u['name']}, balance {money(u['balance_cents'])}, reservations {', '.join(u['reservations'])}"


def get_reservation(env: dict, reservation_id: str) -> str:
    """A reservation's flight, passengers and status.

    Args:
        reservation_id: the reservation id, e.g. "R1001".
    """
    r = _get(env["reservations"], reservation_id, "reservation")
    flight = env["flights"][r["flight_id"]]
    return (f"{reservation_id} for {r['user_id']}: {r['passengers']} passenger(s) on "
            f"{_show_flight(r['flight_id'], flight)}; {r['status']}")


def search_flights(env: dict, origin: str, destination: str, date: str) -> str:
    """Flights between two airports on a date.

    Args:
        origin: airport code, e.g. "JFK".
        destination: airport code, e.g. "SFO".
        date: the day, as YYYY-MM-DD.
    """
    hits = [_show_flight(fid, f) for fid, f in sorted(env["flights"].items())
            if (f["origin"], f["destination"], f["date"]) == (origin.upper(), destination.upper(), date)]
    return "\n".join(hits) or "no flights found"


def change_flight(env: dict, reservation_id: str, flight_id: str) -> str:
    """Move a booked reservation to another flight on the same route; the fare difference is charged
    to (or refunded to) the user's balance.

    Args:
        reservation_id: the reservation to change, e.g. "R1001".
        flight_id: the new flight, e.g. "HA101".
    """
    r = _get(env["reservations"], reservation_id, "reservation")
    new = _get(env["flights"], flight_id, "flight")
    old = env["flights"][r["flight_id"]]
    user = env["users"][r["user_id"]]
    if r["status"] != "booked":
        raise ValueError(f"reservation {reservation_id} is {r['status']} and cannot be changed")
    if flight_id == r["flight_id"]:
        raise ValueError(f"reservation {reservation_id} is already on {flight_id}")
    if (new["origin"], new["destination"]) != (old["origin"], old["destination"]):
        raise ValueError(f"{flight_id} flies {new['origin']}->{new['destination']}, not the reservation's route")
    if new["seats"] < r["passengers"]:
        raise ValueError(f"{flight_id} has {new['seats']} seats left, {r['passengers']} needed")
    diff = (new["price_cents"] - old["price_cents"]) * r["passengers"]
    if user["balance_cents"] < diff:
        raise ValueError(f"the fare difference {money(diff)} is more than the balance {money(user['balance_cents'])}")
    old["seats"] += r["passengers"]
    new["seats"] -= r["passengers"]
    user["balance_cents"] -= diff
    r["flight_id"] = flight_id
    verb = "charged" if diff >= 0 else "refunded"
    return f"{reservation_id} moved to {_show_flight(flight_id, new)}; {verb} {money(abs(diff))}"


def cancel_reservation(env: dict, reservation_id: str) -> str:
    """Cancel a booked reservation; the fare is refunded to the user's balance.

    Args:
        reservation_id: the reservation to cancel, e.g. "R1002".
    """
    r = _get(env["reservations"], reservation_id, "reservation")
    if r["status"] != "booked":
        raise ValueError(f"reservation {reservation_id} is {r['status']} and cannot be cancelled")
    flight = env["flights"][r["flight_id"]]
    refund = flight["price_cents"] * r["passengers"]
    flight["seats"] += r["passengers"]
    env["users"][r["user_id"]]["balance_cents"] += refund
    r["status"] = "cancelled"
    return f"{reservation_id} cancelled; refunded {money(refund)}"


def transfer_to_human_agents(env: dict, summary: str) -> Observation:
    """Hand the conversation to a human agent when a request is outside the policy. Ends the conversation.

    Args:
        summary: what the user wants and why it could not be done.
    """
    # The call itself ends the episode (τ²'s transfer): a function may return a `final` Observation.
    return Observation(content=f"Transferred to a human agent: {summary}", final=True)


AIRLINE = DBDomain("airline", lambda task: INITIAL,
                   [get_user, get_reservation, search_flights, change_flight, cancel_reservation,
                    transfer_to_human_agents],
                   write_tools={"change_flight", "cancel_reservation"}, tags=["airline", "local", "free"])


def _call(name: str, **arguments: Any) -> ToolCall:
    return ToolCall(name=name, arguments=arguments)


def _task(id: str, prompt: str, replies: list[str], calls: list[ToolCall], required: list[str],
          answer: str) -> Task:
    return Task(id=id, prompt=prompt, category="airline", tools=sorted(AIRLINE.functions),
                checker="orchlib.envs.airline:AIRLINE.check", state="orchlib.envs.airline:AIRLINE.make_state",
                user=UserSpec(kind="scripted", turns=replies), answer=answer,
                golden=Golden(calls=calls, answer=answer), meta={"required": required})


def airline_tasks() -> list[Task]:
    """Three conversations: a flight change the user confirms (a write with a fare difference), a
    cancellation (a refund), and a refund the policy forbids (a transfer, no write)."""
    return [
        _task("airline-change", "Hi, I need to move my trip to a day later.",
              ["My reservation is R1001.", "Yes, please move me to HA101.", "Thanks, that's all. ###STOP###"],
              [_call("get_reservation", reservation_id="R1001"),
               _call("search_flights", origin="JFK", destination="SFO", date="2024-05-11"),
               _call("change_flight", reservation_id="R1001", flight_id="HA101")],
              ["HA101", "30.00"], "You are on HA101 on 2024-05-11; $30.00 was charged."),
        _task("airline-cancel", "Please cancel my booking R1002.",
              ["Yes, cancel it.", "Great, bye. ###STOP###"],
              [_call("get_reservation", reservation_id="R1002"),
               _call("cancel_reservation", reservation_id="R1002")],
              ["240.00"], "R1002 is cancelled and $240.00 is refunded."),
        _task("airline-transfer", "I want my money back for reservation R1003.",
              ["But I really want a refund!"],
              [_call("get_reservation", reservation_id="R1003"),
               _call("transfer_to_human_agents", summary="refund for a flown reservation R1003")],
              ["human agent"], "Transferred to a human agent."),
    ]


def environment(seed: int = 0, reward: RewardFunction | str | None = None) -> Environment:
    """The airline as an Environment: its three conversations (each with its scripted user) in both splits
    — a domain to run and read, too small to measure generalisation — and its tools. The database is
    fixed: `seed` is taken so that every maker of `orchlib.envs.ENVIRONMENTS` is called alike."""
    tasks = airline_tasks()
    return Environment(name="airline", train=tasks, test=tasks, tools=AIRLINE.toolbox, reward=reward)
