# The library tools, written by a model and checked by orchlib.synth.

import math


def get_book(env: dict, book_id: str) -> str:
    """A book's title, author and the copies on the shelf.

    Args:
        book_id: the book id, e.g. "B1".
    """
    if book_id not in env["books"]:
        raise ValueError(f"no book {book_id!r}")
    b = env["books"][book_id]
    return f"{book_id}: {b['title']} by {b['author']}, {b['copies']} copies available"


def borrow_book(env: dict, member_id: str, book_id: str) -> str:
    """Lend a book on the shelf to a member.

    Args:
        member_id: the member id, e.g. "M1".
        book_id: the book id, e.g. "B1".
    """
    if member_id not in env["members"] or book_id not in env["books"]:
        raise ValueError("unknown member or book")
    if env["books"][book_id]["copies"] < 1:
        raise ValueError(f"no copy of {book_id} is on the shelf")
    loan_id = f"L{len(env['loans']) + 1}"
    env["books"][book_id]["copies"] -= 1
    env["loans"][loan_id] = {"book_id": book_id, "member_id": member_id, "status": "out"}
    env["members"][member_id]["loans"].append(loan_id)
    return f"loan {loan_id}: {book_id} lent to {member_id}"


def return_book(env: dict, loan_id: str) -> str:
    """Take a lent book back.

    Args:
        loan_id: the loan id, e.g. "L1".
    """
    loan = env["loans"].get(loan_id)
    if loan is None or loan["status"] != "out":
        raise ValueError(f"loan {loan_id} is not out")
    loan["status"] = "returned"
    env["books"][loan["book_id"]]["copies"] += 1
    return f"loan {loan_id} returned"


def add_copies(env: dict, book_id: str, n: int) -> str:
    """Put more copies of a book on the shelf.

    Args:
        book_id: the book id.
        n: how many copies.
    """
    env["books"][book_id]["copies"] += int(math.floor(n))  # no check on n: a negative n breaks the schema
    return f"{book_id} now has {env['books'][book_id]['copies']} copies"
