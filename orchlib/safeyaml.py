"""Reading YAML from outside safely: bounded nesting and alias expansion, and the line a person looks at.

Cards, reward files and config files come from users and from the internet. ruamel's composer recurses
once per nesting level (about 400 levels exhaust Python's stack) and its aliases share one node, which
every later step (`dict(...)` copies, pydantic, JSON Schema) expands again: ten anchors of ten aliases
each are 10^10 nodes, the "billion laughs" (https://en.wikipedia.org/wiki/Billion_laughs_attack).
`load` first walks ruamel's event stream, which is produced without recursion, and refuses a document
nested deeper than `MAX_DEPTH` or whose aliases expand to more than `MAX_NODES` nodes, naming the line.
"""

from __future__ import annotations

from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import AliasEvent, CollectionEndEvent, CollectionStartEvent, NodeEvent

__all__ = ["MAX_DEPTH", "MAX_NODES", "YAMLInputError", "load"]

MAX_DEPTH = 64  # a card's JSON Schema nests a dozen levels; the composer fails near 400
MAX_NODES = 100_000  # nodes after expanding aliases; a large shipped card has a few hundred


class YAMLInputError(ValueError):
    """Why a YAML text was refused; `line` is 1-based (0: unknown). Callers wrap it in their own error."""

    def __init__(self, line: int, problem: str):
        self.line, self.problem = line, problem
        super().__init__(f"line {line}: {problem}")


def load(yaml: YAML, text: str) -> Any:
    """`yaml.load(text)`, after checking nesting and alias expansion; every failure is YAMLInputError."""
    try:
        _check_brackets(text)
        _check_shape(yaml, text)
        return yaml.load(text)
    except MarkedYAMLError as e:
        raise YAMLInputError(*_where(e, text)) from None
    except YAMLError as e:
        raise YAMLInputError(0, " ".join(str(e).split())) from None
    except RecursionError:  # not expected after _check_shape; kept so no traceback can reach a user
        raise YAMLInputError(0, "nested too deeply to read") from None
    except YAMLInputError:  # _check_shape's own refusal (nesting, alias expansion), with its line
        raise
    except (ValueError, IndexError, KeyError, TypeError, OverflowError) as e:
        # ruamel's constructors of explicitly tagged scalars raise these bare (`!!float` with no value:
        # IndexError; `!!int abc`: ValueError; `!!bool maybe`: KeyError)
        raise YAMLInputError(_node_line(e), f"a tagged value cannot be read ({type(e).__name__}: "
                                            f"{str(e)[:80]})") from None


def _check_brackets(text: str) -> None:
    """Refuse deep flow nesting before ruamel sees it: its scanner keeps a possible simple key per open
    bracket and re-checks them all at every token, so 5,000 `[` on one line take seconds (and 100,000
    minutes) before the first event. Brackets inside quotes do not count; in a block scalar or a plain
    scalar they do, so a text with more than MAX_DEPTH unclosed brackets there is refused too."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return
    depth, quote, line = 0, "", 1
    chars = iter(text)
    for c in chars:
        if c == "\n":
            line += 1
        if quote:
            if c == "\\" and quote == '"':
                next(chars, None)
            elif c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise YAMLInputError(line, f"nested deeper than {MAX_DEPTH} levels")
        elif c in "]}" and depth:
            depth -= 1


def _check_shape(yaml: YAML, text: str) -> None:
    sizes: dict[str, int] = {}  # anchor -> nodes in its expansion
    stack: list[tuple[int, str | None]] = []  # per open collection: nodes so far, its anchor
    total = 0
    for event in yaml.parse(text):
        line = event.start_mark.line + 1 if event.start_mark else 0
        if isinstance(event, AliasEvent):
            size = sizes.get(event.anchor, 1)  # an alias of an unknown anchor: the composer says so
        elif isinstance(event, CollectionStartEvent):
            if len(stack) >= MAX_DEPTH:
                raise YAMLInputError(line, f"nested deeper than {MAX_DEPTH} levels")
            stack.append((1, event.anchor))
            continue
        elif isinstance(event, CollectionEndEvent):
            size, anchor = stack.pop()
            if anchor is not None:
                sizes[anchor] = size
            if stack:
                stack[-1] = (stack[-1][0] + size, stack[-1][1])
            continue
        elif isinstance(event, NodeEvent):  # a scalar
            size = 1
            if event.anchor is not None:
                sizes[event.anchor] = 1
        else:  # stream and document events
            continue
        total += size
        if stack:
            stack[-1] = (stack[-1][0] + size, stack[-1][1])
        if total > MAX_NODES or (stack and stack[-1][0] > MAX_NODES):
            raise YAMLInputError(line, f"aliases expand to more than {MAX_NODES:,} nodes "
                                       "(nested anchors such as a 'billion laughs' are refused)")


def _node_line(error: BaseException) -> int:
    """1-based line of the node a ruamel constructor failed on: the innermost frame of the traceback that
    holds a `node` with a start mark (0 when there is none)."""
    line, tb = 0, error.__traceback__
    while tb is not None:
        mark = getattr(tb.tb_frame.f_locals.get("node"), "start_mark", None)
        line = mark.line + 1 if mark is not None else line
        tb = tb.tb_next
    return line


def _where(e: MarkedYAMLError, text: str) -> tuple[int, str]:
    """The line to show and the problem. A scanner that runs off the end of the text ("found unexpected
    end of stream" for an unterminated quote or bracket) is reported where the unclosed thing began."""
    problem = " ".join(str(e.problem or e.context or e).split())
    mark = e.problem_mark or e.context_mark
    at_end = e.problem_mark is not None and e.problem_mark.index >= len(text.rstrip())
    if at_end and e.context_mark is not None:
        mark = e.context_mark
        if e.context:
            problem = f"{' '.join(e.context.split())}: {problem}"
    return (mark.line + 1 if mark is not None else 0), problem
