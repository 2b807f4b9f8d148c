"""The shop: a small database, function tools that read and change it, and a checker — a domain built
on `orchlib.envs.db` (fresh copy per episode, state hash, golden replay through the tools).

Scoring follows τ²-bench (Barres et al. 2025, arXiv 2506.07982): a task's golden calls are replayed
on a fresh copy of the database; the agent's episode scores 1 only when its final database state has
the same hash as the golden one *and* its answer contains every required fact (`task.meta["required"]`).
A read-only task's golden state is the initial state, so an unrequested write also scores 0.

Money is kept in integer cents so that state hashes never depend on float formatting.
"""

from __future__ import annotations

import functools
import hashlib
import random
from collections import defaultdict
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field

from orchlib.env import Environment, RewardFunction
from orchlib.envs.db import Database, DBDomain
from orchlib.tasks import Task
from orchlib.trajectory import ToolCall, Trajectory

__all__ = ["Product", "Customer", "OrderLine", "Order", "ShopDB", "initial_db", "make_shop_env", "replay", "check",
           "SHOP_TOOLS", "WRITE_TOOLS", "shop_search_products", "shop_get_product", "shop_get_customer",
           "shop_get_order", "shop_place_order", "shop_cancel_order", "shop_update_email", "money", "shop_tasks",
           "SHOP", "environment"]


class _Row(BaseModel):
    # Rows are mutable: the tools change them in place, exactly like a database would.
    model_config = ConfigDict(extra="forbid")


class Product(_Row):
    id: str
    name: str
    category: str
    price_cents: int = Field(ge=0)
    stock: int = Field(ge=0)


class Customer(_Row):
    id: str
    name: str
    email: str
    city: str


class OrderLine(_Row):
    product_id: str
    quantity: int = Field(ge=1)
    unit_price_cents: int = Field(ge=0, description="price when ordered; later price changes leave it alone")


class Order(_Row):
    id: str
    customer_id: str
    lines: list[OrderLine]
    status: Literal["placed", "shipped", "cancelled"] = "placed"

    @property
    def total_cents(self) -> int:
        return sum(line.quantity * line.unit_price_cents for line in self.lines)


class ShopDB(Database):
    """The whole state of one shop. `state_hash()` (canonical JSON of every table) is what stateful
    tasks are scored on."""

    products: dict[str, Product]
    customers: dict[str, Customer]
    orders: dict[str, Order]
    next_order: int = Field(1001, description="number of the next order id (O1001, O1002, ...)")


def money(cents: int) -> str:
    return f"${cents // 100}.{cents % 100:02d}"


# ---------------------------------------------------------------------------------------------- seed data
_CATALOGUE = [  # (name, category): the names are what tasks ask about
    ("Blue Mug", "kitchen"), ("Red Kettle", "kitchen"), ("Steel Pan", "kitchen"), ("Bread Knife", "kitchen"),
    ("Desk Lamp", "office"), ("Oak Desk", "office"), ("Notebook", "office"), ("Fountain Pen", "office"),
    ("Rain Jacket", "clothing"), ("Wool Scarf", "clothing"), ("Running Shoes", "clothing"), ("Sun Hat", "clothing"),
]
_PEOPLE = [("Ada Lovelace", "London"), ("Alan Turing", "Manchester"), ("Grace Hopper", "New York"),
           ("Edsger Dijkstra", "Austin"), ("Barbara Liskov", "Boston"), ("Donald Knuth", "Stanford")]


@functools.lru_cache(maxsize=16)
def _initial(seed: int) -> ShopDB:
    rng = random.Random(f"shop:{seed}")
    products = {}
    for i, (name, category) in enumerate(_CATALOGUE, 1):
        pid = f"P{i:03d}"
        products[pid] = Product(id=pid, name=name, category=category,
                                price_cents=rng.randrange(300, 12000, 25), stock=rng.randint(0, 20))
    customers = {}
    for i, (name, city) in enumerate(_PEOPLE, 1):
        cid = f"C{i:03d}"
        first = name.split()[0].lower()
        customers[cid] = Customer(id=cid, name=name, email=f"{first}@example.com", city=city)
    orders = {}
    for i in range(1, 7):
        oid = f"O{i:04d}"
        picks = rng.sample(sorted(products), rng.randint(1, 2))
        lines = [OrderLine(product_id=p, quantity=rng.randint(1, 3), unit_price_cents=products[p].price_cents)
                 for p in picks]
        orders[oid] = Order(id=oid, customer_id=rng.choice(sorted(customers)), lines=lines,
                            status=rng.choice(["placed", "placed", "shipped"]))
    return ShopDB(products=products, customers=customers, orders=orders)


def initial_db(seed: int = 0) -> ShopDB:
    """A fresh copy of the seeded starting database (the cached original is never handed out)."""
    return _initial(int(seed)).model_copy(deep=True)


def make_shop_env(task: Task) -> ShopDB:
    """Task.state factory: a fresh database for one episode (seed from `task.meta["shop_seed"]`, default 0)."""
    return SHOP.make_state(task)


# ---------------------------------------------------------------------------------------------- tools
# Tools raise on bad input; the function backend turns the exception into an error observation the
# policy reads, and the rollout counts it. Nothing is written when a call fails.
def _product(env: ShopDB, product_id: str) -> Product:
    if product_id not in env.products:
        raise ValueError(f"no product {product_id!r}")
    return env.products[product_id]


def _order(env: ShopDB, order_id: str) -> Order:
    if order_id not in env.orders:
        raise ValueError(f"no order {order_id!r}")
    return env.orders[order_id]


def _customer(env: ShopDB, customer_id: str) -> Customer:
    if customer_id not in env.customers:
        raise ValueError(f"no customer {customer_id!r}")
    return env.customers[customer_id]


def _show_product(p: Product) -> str:
    return f"{p.id} {p.name} ({p.category}) {money(p.price_cents)}, {p.stock} in stock"


def _show_order(env: ShopDB, o: Order) -> str:
    items = ", ".join(f"{line.quantity} x {env.products[line.product_id].name}" for line in o.lines)
    return f"{o.id} for {o.customer_id}: {items}; total {money(o.total_cents)}; {o.status}"


def shop_search_products(env: ShopDB, query: str) -> str:
    """Find products whose name or category contains every word of the query.

    Args:
        query: words to look for, e.g. "mug" or "kitchen".
    """
    words = query.lower().split()
    hits = [p for p in env.products.values() if all(w in f"{p.name} {p.category}".lower() for w in words)]
    return "\n".join(_show_product(p) for p in hits) or "no products found"


def shop_get_product(env: ShopDB, product_id: str) -> str:
    """Price and stock of one product.

    Args:
        product_id: the product id, e.g. "P003".
    """
    return _show_product(_product(env, product_id))


def shop_get_customer(env: ShopDB, customer_id: str) -> str:
    """A customer's details and order ids.

    Args:
        customer_id: the customer id, e.g. "C002".
    """
    c = _customer(env, customer_id)
    orders = sorted(o.id for o in env.orders.values() if o.customer_id == c.id)
    return f"{c.id} {c.name}, {c.email}, {c.city}; orders: {', '.join(orders) or 'none'}"


def shop_get_order(env: ShopDB, order_id: str) -> str:
    """Items, total and status of one order.

    Args:
        order_id: the order id, e.g. "O0004".
    """
    return _show_order(env, _order(env, order_id))


def shop_place_order(env: ShopDB, customer_id: str, product_id: str, quantity: int = 1) -> str:
    """Order a product for a customer; takes it out of stock.

    Args:
        customer_id: who orders, e.g. "C002".
        product_id: what to order, e.g. "P003".
        quantity: how many (at least 1).
    """
    _customer(env, customer_id)
    p = _product(env, product_id)
    if quantity < 1:
        raise ValueError(f"quantity must be at least 1, got {quantity}")
    if p.stock < quantity:
        raise ValueError(f"only {p.stock} of {p.id} in stock, {quantity} asked")
    oid = f"O{env.next_order:04d}"
    p.stock -= quantity
    env.orders[oid] = Order(id=oid, customer_id=customer_id,
                            lines=[OrderLine(product_id=p.id, quantity=quantity, unit_price_cents=p.price_cents)])
    env.next_order += 1
    return "placed " + _show_order(env, env.orders[oid])


def shop_cancel_order(env: ShopDB, order_id: str) -> str:
    """Cancel an order that has not shipped; its items go back into stock.

    Args:
        order_id: the order id, e.g. "O0004".
    """
    o = _order(env, order_id)
    if o.status != "placed":
        raise ValueError(f"order {o.id} is {o.status} and cannot be cancelled")
    for line in o.lines:
        env.products[line.product_id].stock += line.quantity
    o.status = "cancelled"
    return "cancelled " + _show_order(env, o)


def shop_update_email(env: ShopDB, customer_id: str, email: str) -> str:
    """Change a customer's email address.

    Args:
        customer_id: the customer id, e.g. "C002".
        email: the new address.
    """
    c = _customer(env, customer_id)
    if "@" not in email:
        raise ValueError(f"not an email address: {email!r}")
    c.email = email
    return f"updated {c.id}: email {c.email}"


SHOP_TOOLS: dict[str, Callable[..., str]] = {fn.__name__: fn for fn in (
    shop_search_products, shop_get_product, shop_get_customer, shop_get_order,
    shop_place_order, shop_cancel_order, shop_update_email)}
WRITE_TOOLS: frozenset[str] = frozenset({"shop_place_order", "shop_cancel_order", "shop_update_email"})


# The domain: the seeded database (deep-copied per episode), the tools, replay and the checker.
SHOP = DBDomain("shop", lambda task: _initial(int(task.meta.get("shop_seed", 0))), list(SHOP_TOOLS.values()),
                write_tools=WRITE_TOOLS, tags=["shop", "local", "free"])


# ---------------------------------------------------------------------------------------------- scoring
def replay(task: Task, calls: list[ToolCall] | None = None) -> ShopDB:
    """A fresh database after running `calls` (default: the task's golden calls) in order through the
    shop's tools. A failing call raises: golden calls must be valid, and a test that perturbs them
    wants to know."""
    return SHOP.replay(task, calls)


def check(answer: str | None, task: Task, env: Any = None, trajectory: Trajectory | None = None) -> float:
    """Task checker (`checker: "orchlib.envs.shop:check"`): 1.0 when the episode's database has the
    golden state hash and the answer (every turn, given the trajectory) names every fact in
    `task.meta["required"]`, else 0.0. `env=None` means no episode database was kept, which is scored
    as the untouched initial state."""
    return SHOP.check(answer, task, env, trajectory)



# ---------------------------------------------------------------------------------------------- tasks
def _call(name: str, **arguments: Any) -> ToolCall:
    return ToolCall(name=name, arguments=arguments)


def _shop_task(seed: int, kind: str, prompt: str, calls: list[ToolCall], answer: str, required: list[str]) -> Task:
    from orchlib.tasks import Golden

    return Task(id=f"shop-{hashlib.sha1(prompt.encode()).hexdigest()[:10]}", prompt=prompt, category="shop",
                tools=sorted(SHOP_TOOLS), checker="orchlib.envs.shop:check", answer=answer,
                state="orchlib.envs.shop:make_shop_env", golden=Golden(calls=calls, answer=answer),
                meta={"shop_seed": seed, "required": required, "kind": kind})


def shop_tasks(seed: int = 0, rng: random.Random | None = None) -> list[Task]:
    """Every distinct shop task over the database of `seed`, kinds interleaved so that any prefix is
    balanced (reads: price, stock, order total, a customer's orders; writes: place an order, with or
    without looking the product up first, cancel an order, change an email). Shuffled by `rng`."""
    rng = rng or random.Random(seed)
    db = initial_db(seed)
    kinds: dict[str, list[Task]] = defaultdict(list)
    for p in db.products.values():
        q = p.name.lower()
        kinds["price"].append(_shop_task(seed, "price", f"What does the {p.name} cost?",
                                         [_call("shop_search_products", query=q)],
                                         f"The {p.name} costs {money(p.price_cents)}.", [money(p.price_cents)[1:]]))
        kinds["stock"].append(_shop_task(seed, "stock", f"How many {p.name} are in stock?",
                                         [_call("shop_search_products", query=q)], f"{p.stock} in stock.",
                                         [str(p.stock)]))
    for o in db.orders.values():
        total = money(o.total_cents)
        kinds["total"].append(_shop_task(seed, "total", f"What is the total of order {o.id}?",
                                         [_call("shop_get_order", order_id=o.id)], f"Order {o.id} totals {total}.",
                                         [total[1:]]))
        if o.status == "placed":
            kinds["cancel"].append(_shop_task(seed, "cancel", f"Cancel order {o.id}.",
                                              [_call("shop_cancel_order", order_id=o.id)],
                                              f"Order {o.id} is cancelled.", ["cancelled"]))
    new_id = f"O{db.next_order:04d}"
    for c in db.customers.values():
        mine = sorted(o.id for o in db.orders.values() if o.customer_id == c.id)
        if mine:
            kinds["orders"].append(_shop_task(seed, "orders", f"Which orders does customer {c.id} have?",
                                              [_call("shop_get_customer", customer_id=c.id)],
                                              "Orders " + ", ".join(mine) + ".", mine))
        for domain in ("mail.com", "post.org", "work.net"):
            email = f"{c.name.split()[0].lower()}@{domain}"
            kinds["email"].append(_shop_task(seed, "email", f"Change the email of customer {c.id} to {email}.",
                                             [_call("shop_update_email", customer_id=c.id, email=email)],
                                             "The email is updated.", []))
        for p in db.products.values():
            for qty in (1, 2, 3):
                if p.stock < qty:
                    continue
                place = _call("shop_place_order", customer_id=c.id, product_id=p.id, quantity=qty)
                kinds["order"].append(_shop_task(
                    seed, "order", f"Order {qty} {p.name} ({p.id}) for customer {c.id} and give the order id.",
                    [place], f"Placed order {new_id}.", [new_id]))
                kinds["find_and_order"].append(_shop_task(
                    seed, "find_and_order", f"Customer {c.id} wants {qty} {p.name}. Order it and give the order id.",
                    [_call("shop_search_products", query=p.name.lower()), place], f"Placed order {new_id}.",
                    [new_id]))
    for pool in kinds.values():
        rng.shuffle(pool)
    order = sorted(kinds)
    out: list[Task] = []
    for i in range(max(len(v) for v in kinds.values())):
        out += [kinds[k][i] for k in order if i < len(kinds[k])]
    return out


def environment(seed: int = 0, reward: RewardFunction | str | None = None, n_train: int = 200,
                     n_test: int = 50) -> Environment:
    """The shop as an Environment: the database of `seed`, its function tools, and `shop_tasks(seed)`
    split into `n_test` test tasks then `n_train` train tasks (the kinds interleave, so both splits
    hold every kind; the same seed always gives the same splits)."""
    tasks = shop_tasks(seed)
    if n_train < 1 or n_test < 0 or n_train + n_test > len(tasks):
        raise ValueError(f"the shop of seed {seed} has {len(tasks)} tasks; n_train={n_train} (at least 1) and "
                         f"n_test={n_test} ask for {n_train + n_test}")
    return Environment(name="shop", train=tasks[n_test:n_test + n_train], test=tasks[:n_test], tools=SHOP.toolbox,
                       reward=reward)
