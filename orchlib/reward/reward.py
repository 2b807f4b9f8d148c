"""`Reward`: a reward file (or one expression) parsed, compiled per tool set, evaluated over groups.

    r = Reward.load("rewards/toolorchestra.yaml")
    r(group, P=task.preference)     # np.ndarray (G,): one reward per rollout of the task
    r.batch({"outcome": O, "cost": C, ...}, P)   # arrays (n_groups, G) → (n_groups, G)
    r.explain(group)                # each term's value and contribution per rollout
    r.latex()                       # the formula, for a notebook or a paper

The tool set a `sum(... for t in tools)` runs over is the one given to load/from_string/Reward, or
else the union of the tools called in the group and the tools named in P, compiled once per set.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import sympy

from orchlib.reward.compile import BY_TOOL, Program, compile_program, has_nested_tool_sum, run_program
from orchlib.reward.errors import RewardFileError, RewardSyntaxError, RewardValueError
from orchlib.reward.features import (PreferenceLike, as_preference, features, group_tools,
                                     preference_table, preference_value)
from orchlib.reward.file import Located, RewardSpec, check_term_name, read_spec
from orchlib.reward.forms import LoopSymbol
from orchlib.reward.names import (GROUP_SIZE, calls_name, is_feature_name, is_p_name, latex_name, p_tool_name,
                                  symbol, tool_of)
from orchlib.reward.parse import Parsed, parse
from orchlib.shipped import shipped_path
from orchlib.reward.rowwise import evaluate_rows
from orchlib.tasks import Preference

__all__ = ["Reward", "Explanation"]

_REWARD = "reward"        # name of the last compiled step
_MAX_PROGRAMS = 64        # compiled tool sets kept per reward (oldest dropped first)


@dataclass(frozen=True)
class Explanation:
    """Per rollout of one group: the reward, each term's value, and what each term contributes.

    A term's contribution is the reward minus the reward recomputed with that term set to 0. For a
    reward that is a sum of terms (gated or not, like the ToolOrchestra one) the contributions add
    up to the reward; for other shapes they are each term's marginal effect and need not.
    """

    reward: np.ndarray                     # (G,)
    values: dict[str, np.ndarray]          # term → (G,)
    contributions: dict[str, np.ndarray]   # term → (G,)
    inputs: dict[str, np.ndarray]          # features and P entries read → (G,)

    def as_rows(self) -> list[dict[str, Any]]:
        """Long format, one row per (rollout, term): ready for a DataFrame or a stacked bar chart."""
        return [{"rollout": i, "term": name, "value": float(self.values[name][i]),
                 "contribution": float(self.contributions[name][i]), "reward": float(self.reward[i])}
                for i in range(len(self.reward)) for name in self.values]

    def __str__(self) -> str:
        names = list(self.values)
        head = ["rollout", "reward", *[f"{n} (value → contrib.)" for n in names]]
        rows = [[str(i), f"{self.reward[i]:.4g}",
                 *[f"{self.values[n][i]:.4g} → {self.contributions[n][i]:.4g}" for n in names]]
                for i in range(len(self.reward))]
        widths = [max(len(r[c]) for r in [head, *rows]) for c in range(len(head))]
        return "\n".join("  ".join(cell.rjust(w) for cell, w in zip(r, widths)) for r in [head, *rows])


class Reward:
    """A reward written in the reward language (see docs/rewards.md)."""

    def __init__(self, reward: str, *, name: str = "inline", doc: str = "", preference: PreferenceLike = None,
                 terms: Mapping[str, str] | None = None, tools: Sequence[str] | None = None):
        self.name, self.doc, self.source = name, doc, reward
        self.preference: Preference = as_preference(preference, Preference())
        self.tools: tuple[str, ...] | None = None if tools is None else tuple(dict.fromkeys(map(str, tools)))
        self.term_sources: dict[str, str] = dict(terms or {})
        for term in self.term_sources:
            problem = check_term_name(term)
            if problem:
                raise RewardSyntaxError(problem)
        # Generic forms (sums over tools unexpanded): validate everything now, print later.
        names = list(self.term_sources)
        self._generic: dict[str, Parsed] = {
            term: _parse_field(self.term_sources[term], ("terms", term), names[:i]) for i, term in enumerate(names)}
        self._generic[_REWARD] = _parse_field(reward, ("reward",), names)
        self._programs: dict[tuple[str, ...], Program] = {}

    # --- construction ---------------------------------------------------------------------------

    @classmethod
    def load(cls, path: str | os.PathLike, tools: Sequence[str] | None = None) -> "Reward":
        """Read a reward file; a malformed one raises RewardFileError `FILE:LINE: field: problem`.
        `rewards/NAME.yaml` falls back to the shipped file when no such file is here."""
        path = shipped_path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:  # a ValueError, not an OSError: say which file and where
            line = e.object[:e.start].count(b"\n") + 1
            raise RewardFileError(str(path), line, "file", f"not UTF-8 text (byte 0x{e.object[e.start]:02x} "
                                                             f"at offset {e.start})") from None
        return cls.from_string(text, tools=tools, path=str(path))

    @classmethod
    def from_string(cls, text: str, tools: Sequence[str] | None = None, path: str = "<string>") -> "Reward":
        """A reward from the text of a reward file, or from a single line holding just an expression."""
        if "\n" not in text.strip() and not _looks_like_mapping(text):
            return cls(text.strip(), tools=tools)
        spec, where = read_spec(text, path)
        return cls._from_spec(spec, where, tools)

    @classmethod
    def _from_spec(cls, spec: RewardSpec, where: Located, tools: Sequence[str] | None) -> "Reward":
        try:
            return cls(spec.reward, name=spec.name, doc=spec.doc, preference=spec.preference,
                       terms=spec.terms, tools=tools)
        except RewardSyntaxError as e:
            loc = getattr(e, "field", ("reward",))
            line, col = e.position
            raise RewardFileError(where.path, where.expression_line(loc, e), ".".join(loc),
                                  f"{getattr(e, 'bare', e.message)} (at {line}:{col} of the expression)") from e

    # --- what it is -----------------------------------------------------------------------------

    @property
    def terms(self) -> dict[str, sympy.Expr]:
        """Named sub-terms as sympy (sums over tools unexpanded; may refer to earlier terms)."""
        return {name: p.expr for name, p in self._generic.items() if name != _REWARD}

    @property
    def expression(self) -> sympy.Expr:
        """The whole reward as one sympy expression, terms substituted, sums over tools unexpanded."""
        return _flatten(self._generic)

    @property
    def symbols(self) -> tuple[str, ...]:
        """Sorted names of every input the reward and its terms read (`calls[t]` for a loop over tools)."""
        return tuple(sorted(set().union(*(p.symbols for p in self._generic.values()))))

    @property
    def unused_terms(self) -> tuple[str, ...]:
        """Terms the reward never reaches, directly or through other terms (likely a mistake)."""
        reached: set[str] = set()
        todo = [_REWARD]
        while todo:
            for term in self._generic[todo.pop()].terms - reached:
                reached.add(term)
                todo.append(term)
        return tuple(t for t in self.term_sources if t not in reached)

    @property
    def uses_tool_sum(self) -> bool:
        return any(p.has_tool_sum for p in self._generic.values())

    def latex(self, expand_terms: bool = True) -> str:
        """LaTeX of the reward: with terms substituted (default), or written with the term names."""
        loops = frozenset().union(*(p.loop_vars for p in self._generic.values()))
        expr = self.expression if expand_terms else self._generic[_REWARD].expr
        return _latex(expr, loops)

    def term_latex(self) -> dict[str, str]:
        """LaTeX of each named term, as written (may use earlier terms by name)."""
        loops = frozenset().union(*(p.loop_vars for p in self._generic.values()))
        return {name: _latex(p.expr, loops) for name, p in self._generic.items() if name != _REWARD}

    def __repr__(self) -> str:
        return f"Reward({self.name!r}: {self.source})"

    # --- compiling --------------------------------------------------------------------------------

    def program(self, tools: Sequence[str] = ()) -> Program:
        """The reward compiled for a tool set (cached per set).

        A sum over tools compiles as one vectorised evaluation over a tool axis (see compile.py); a
        step holding a sum nested in another is compiled from its form expanded over the tools.
        Raises RewardSyntaxError in the rare case where that expansion is refused (a constant summed
        over the tools leaving the range 1e±300).
        """
        key = tuple(tools) if self.uses_tool_sum else ()
        if key not in self._programs:
            named: list[tuple[str, sympy.Expr]] = []
            inputs: set[str] = set()
            for name, generic in self._generic.items():
                if has_nested_tool_sum(generic.expr):
                    parsed = self._expanded(key)[name]
                    named.append((name, parsed.expr))
                    inputs |= parsed.symbols
                    continue
                named.append((name, generic.expr))
                loops = {x.name for x in generic.expr.free_symbols if isinstance(x, LoopSymbol)}
                inputs |= generic.symbols - loops
                for kind, make in (("calls[", calls_name), ("P.tools[", p_tool_name)):
                    if any(n.startswith(kind) for n in loops):
                        inputs |= {make(t) for t in key}
            program = compile_program(named, key, sorted(inputs))
            if len(self._programs) >= _MAX_PROGRAMS:
                self._programs.pop(next(iter(self._programs)))
            self._programs[key] = program
        return self._programs[key]

    def _expanded(self, tools: tuple[str, ...]) -> dict[str, Parsed]:
        """Every term and the reward parsed with the sums expanded over `tools`."""
        names = list(self.term_sources)
        try:
            parsed = {name: parse(self.term_sources[name], terms=names[:i], tools=tools)
                      for i, name in enumerate(names)}
            parsed[_REWARD] = parse(self.source, terms=names, tools=tools)
        except RewardSyntaxError as e:
            # The generic form was accepted at load; expanded over these tools a constant can still
            # leave the allowed range, e.g. sum(1e300 for t in tools) with two tools.
            raise RewardSyntaxError(f"expanded over tools {list(tools)}: {e.message}", e.position) from e
        return parsed

    def expression_for(self, tools: Sequence[str]) -> sympy.Expr:
        """The whole reward as sympy with the sums expanded over `tools`."""
        key = tuple(tools) if self.uses_tool_sum else ()
        return _flatten(self._expanded(key))

    def _tool_set(self, feature_names: Any, prefs: Sequence[Preference]) -> tuple[str, ...]:
        if not self.uses_tool_sum:
            return ()
        if self.tools is not None:
            return self.tools
        found = {tool_of(n) for n in feature_names} - {None}
        for p in prefs:
            found.update(p.tools)
        return tuple(sorted(found))

    # --- evaluating -------------------------------------------------------------------------------

    def __call__(self, group: Sequence[Any], P: PreferenceLike = None) -> np.ndarray:
        """One reward per rollout of one group, shape (G,), float64. P replaces the default P."""
        return self._evaluate_group(group, P)[0][_REWARD][0].copy()

    def batch(self, values: Mapping[str, Any], P: PreferenceLike | Sequence[PreferenceLike] = None,
              backend: str = "numpy") -> Any:
        """Rewards of many groups at once: every array in `values` is (n_groups, G).

        `values` is keyed by feature name (`outcome`, `cost`, ..., `calls[x]`; see
        `orchlib.reward.features`); a `calls[x]` not given is 0. P is one preference for every group
        or a sequence with one per group. backend="torch" takes and returns float64 tensors.
        """
        if backend not in ("numpy", "torch"):
            raise ValueError(f"backend must be 'numpy' or 'torch', not {backend!r}")
        if backend == "torch":
            return self._batch_torch(values, P)
        arrays = {k: np.asarray(v, dtype=np.float64) for k, v in values.items()}
        shape = _common_shape(arrays)
        prefs = self._preferences(P, shape[0])
        program = self.program(self._tool_set(arrays, prefs))
        out = run_program(program, self._inputs(program, arrays, prefs, shape), shape=shape)
        reward = np.array(out[_REWARD], dtype=np.float64)
        self._check_finite(reward)
        return reward

    def many(self, groups: Sequence[Sequence[Any]], Ps: Sequence[PreferenceLike] | PreferenceLike = None
             ) -> list[np.ndarray]:
        """Rewards of several groups (any sizes); equal-sized groups are evaluated in one batch."""
        groups = [list(g) for g in groups]
        if Ps is None or isinstance(Ps, (Preference, Mapping)):
            Ps = [Ps] * len(groups)
        if len(Ps) != len(groups):
            raise RewardValueError(f"{len(groups)} groups but {len(Ps)} preferences")
        out: list[np.ndarray | None] = [None] * len(groups)
        by_size: dict[int, list[int]] = {}
        for i, g in enumerate(groups):
            by_size.setdefault(len(g), []).append(i)
        for size, idx in by_size.items():
            prefs = [as_preference(Ps[i], self.preference) for i in idx]
            tools = self._tool_set({f"calls[{t}]" for i in idx for t in group_tools(groups[i])}, prefs)
            program = self.program(tools)
            names = [n for n in program.inputs if is_feature_name(n)]
            stacked = [features(groups[i], names) for i in idx]
            values = {n: np.stack([f[n] for f in stacked]) for n in names}
            if not values:  # a reward that reads no feature still needs the batch's shape
                values = {"outcome": np.zeros((len(idx), size))}
            rewards = self.batch(values, prefs)
            for row, i in enumerate(idx):
                out[i] = rewards[row].copy()
        return out  # type: ignore[return-value]

    def explain(self, group: Sequence[Any], P: PreferenceLike = None) -> Explanation:
        """Each term's value and contribution per rollout (see Explanation)."""
        full, inputs = self._evaluate_group(group, P)
        names = list(self.term_sources) or [_REWARD]
        reward = full[_REWARD][0]
        values = {n: np.array(full[n][0], dtype=np.float64) for n in names}
        contributions = {_REWARD: reward.copy()}
        if self.term_sources:
            # The ablated reward is not checked: a term whose removal is undefined shows as NaN/inf here.
            contributions = {n: reward - self._evaluate_group(group, P, zero=n, check=False)[0][_REWARD][0]
                             for n in names}
        shown = {n: np.array(np.broadcast_to(v, full[_REWARD].shape)[0], dtype=np.float64)
                 for n, v in inputs.items() if not n.startswith("_")}
        return Explanation(reward.copy(), values, contributions, shown)

    def reference(self, group: Sequence[Any], P: PreferenceLike = None) -> np.ndarray:
        """The same rewards computed slowly with sympy subs/evalf row by row (a check, not a tool)."""
        group = list(group)
        pref = as_preference(P, self.preference)
        tools = self._tool_set({f"calls[{t}]" for t in group_tools(group)}, [pref])
        expr = self.expression_for(tools)
        names = sorted(s.name for s in expr.free_symbols)
        feats = features(group, [n for n in names if is_feature_name(n)])
        _check_inputs(feats, "rollout")
        rows = [{n: float(v[i]) for n, v in feats.items()} for i in range(len(group))]
        per_group = {n: preference_value(pref, n, self.preference) for n in names if is_p_name(n)}
        _check_inputs({n: np.array([v]) for n, v in per_group.items()}, "P")
        per_group[GROUP_SIZE] = float(len(group))
        return evaluate_rows(expr, rows, per_group)

    # --- internals --------------------------------------------------------------------------------

    def _evaluate_group(self, group: Sequence[Any], P: PreferenceLike, zero: str | None = None,
                        check: bool = True) -> tuple[dict[str, Any], dict[str, Any]]:
        """Every step's value (arrays (1, G)) and the inputs they were computed from."""
        group = list(group)
        if not group:
            raise RewardValueError("a group needs at least one rollout")
        pref = as_preference(P, self.preference)
        program = self.program(self._tool_set({f"calls[{t}]" for t in group_tools(group)}, [pref]))
        feats = features(group, [n for n in program.inputs if is_feature_name(n)])
        shape = (1, len(group))
        arrays = {n: v[None, :] for n, v in feats.items()}
        inputs = self._inputs(program, arrays, [pref], shape)
        out = run_program(program, inputs, zero=zero, shape=shape)
        if check:
            self._check_finite(out[_REWARD])
        return out, inputs

    def _preferences(self, P: Any, n: int) -> list[Preference]:
        if P is None or isinstance(P, (Preference, Mapping)):
            return [as_preference(P, self.preference)]
        prefs = [as_preference(p, self.preference) for p in P]
        if len(prefs) != n:
            raise RewardValueError(f"{n} groups but {len(prefs)} preferences")
        return prefs

    def _inputs(self, program: Program, arrays: Mapping[str, np.ndarray], prefs: Sequence[Preference],
                shape: tuple[int, int]) -> dict[str, Any]:
        inputs: dict[str, Any] = {}
        p_names = [n for n in program.inputs if is_p_name(n)]
        if p_names:
            # Trainers pass the same few Preference objects many times: look each one up once.
            slot: dict[int, int] = {}
            distinct: list[Preference] = []
            index = np.empty(len(prefs), dtype=np.intp)
            for i, p in enumerate(prefs):
                if id(p) not in slot:
                    slot[id(p)] = len(distinct)
                    distinct.append(p)
                index[i] = slot[id(p)]
            table = preference_table(distinct, p_names, self.preference)
            _check_inputs({name: table[index, j] for j, name in enumerate(p_names)}, "group")
            for j, name in enumerate(p_names):
                # One P for all groups is a scalar; one per group is a column (n, 1). A numpy scalar,
                # not a float: `0.0 ** -1` must give inf (reported later), not raise ZeroDivisionError.
                inputs[name] = table[0, j] if len(prefs) == 1 else table[index, j][:, None]
        given: dict[str, Any] = {}
        for name in program.inputs:
            if is_p_name(name):
                continue
            if name == GROUP_SIZE:
                inputs[name] = float(shape[1])
            elif name in arrays:
                inputs[name] = given[name] = arrays[name]
            elif tool_of(name) is not None:
                inputs[name] = np.zeros(shape)  # a tool nobody called
            else:
                raise RewardValueError(f"the reward reads `{name}` but no values were given for it")
        _check_inputs(given, "(group, rollout)")
        reads = {a for step in program.steps for a in step.args}
        for kind, make in (("calls[", calls_name), ("P.tools[", p_tool_name)):
            if BY_TOOL[kind] in reads:  # a sum over tools reads each tool's values in turn
                inputs[BY_TOOL[kind]] = tuple(inputs[make(t)] for t in program.tools)
        return inputs

    def _check_finite(self, reward: np.ndarray) -> None:
        bad = ~np.isfinite(reward)
        if bad.any():
            where = [tuple(int(i) for i in ix) for ix in np.argwhere(bad)[:10]]
            raise RewardValueError(f"reward `{self.name}` is not finite at (group, rollout) {where}"
                                   f"{' ...' if bad.sum() > 10 else ''}: check divisions, logs and exponents")

    def _batch_torch(self, values: Mapping[str, Any], P: Any) -> Any:
        import torch

        tensors = {k: torch.as_tensor(v, dtype=torch.float64) for k, v in values.items()}
        shape = _common_shape(tensors)
        prefs = self._preferences(P, shape[0])
        program = self.program(self._tool_set(tensors, prefs)).for_torch()
        device = next(iter(tensors.values())).device
        inputs = self._inputs(program, tensors, prefs, shape)
        def tensor(v: Any) -> Any:
            return torch.as_tensor(v, dtype=torch.float64, device=device)

        inputs = {k: tuple(map(tensor, v)) if isinstance(v, tuple) else tensor(v) for k, v in inputs.items()}
        out = run_program(program, inputs)
        reward = torch.broadcast_to(torch.as_tensor(out[_REWARD], dtype=torch.float64, device=device), shape)
        self._check_finite(reward.detach().cpu().numpy())
        return reward.clone()


def _parse_field(text: Any, loc: tuple[str, ...], terms: Sequence[str]) -> Parsed:
    try:
        return parse(text, terms=terms)
    except RewardSyntaxError as e:
        bare = e.message
        if loc[0] == "terms":
            e = RewardSyntaxError(f"in term `{loc[1]}`: {bare}", e.position)
        # Let the file loader name the YAML field and line without repeating the term's name.
        e.field, e.bare = loc, bare  # type: ignore[attr-defined]
        raise e from None


def _flatten(parts: Mapping[str, Any], attr: str = "expr") -> sympy.Expr:
    """Substitute each term into the later ones and the reward, in order."""
    done: dict[sympy.Symbol, sympy.Expr] = {}
    for name, part in parts.items():
        expr = getattr(part, attr).xreplace(done)
        if name == _REWARD:
            return expr
        done[symbol(name)] = expr
    raise KeyError(_REWARD)


def _latex(expr: sympy.Expr, loops: frozenset[str]) -> str:
    names = {s: latex_name(s.name, loops) for s in expr.free_symbols if s.name not in loops}
    return sympy.latex(expr, symbol_names=names)


def _check_inputs(values: Mapping[str, Any], index: str) -> None:
    """Refuse NaN and ±inf in what the reward reads, naming the input and where it is.

    A non-finite input is reported even when the formula would not use it in that rollout (a NaN
    outcome under `where(outcome >= 1, ..., 0)` would otherwise score 0 without a word).
    """
    for name, value in values.items():
        array = value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)
        bad = ~np.isfinite(array)
        if bad.any():
            where = [tuple(int(i) for i in ix) if len(ix) > 1 else int(ix[0]) for ix in np.argwhere(bad)[:10]]
            first = array[tuple(np.argwhere(bad)[0])]
            raise RewardValueError(f"input `{name}` is {first} at {index} {where}"
                                   f"{' ...' if bad.sum() > 10 else ''}: a reward never scores NaN or "
                                   f"infinite inputs (fix or drop those rollouts)")


def _common_shape(arrays: Mapping[str, Any]) -> tuple[int, int]:
    if not arrays:
        raise RewardValueError("no values given")
    shapes = {tuple(a.shape) for a in arrays.values()}
    if len(shapes) != 1 or len(next(iter(shapes))) != 2:
        raise RewardValueError(f"values must all be (n_groups, G) arrays; got shapes {sorted(shapes)}")
    return next(iter(shapes))  # type: ignore[return-value]


def _looks_like_mapping(text: str) -> bool:
    # `name: x` is a one-line YAML file; an expression never has a top-level `word:`.
    head = text.strip().split(":", 1)[0]
    return ":" in text and head.strip().isidentifier()
