"""An engine that writes given text instead of sampling: golden trajectories, baselines, tests.

A script is a list of turns, or a function `(conversation_text, turn_index) -> text`. One script may
serve every episode, or each task has its own (`{task_id: turns}` with `tasks=`), or each episode of
a task has its own (`{task_id: [turns_for_g0, turns_for_g1, ...]}`: the g-th episode of the task in a
rollout gets the g-th; `ScriptedEngine.from_trajectories` replays recorded conversations this way).
Its ids are the tokenizer's encoding of that text plus the stop id, so everything downstream (parsing,
masks, observation and user segments, accounting) runs exactly as with a real model. Log-probs are a
constant placeholder: these ids were not sampled.

Scripts are keyed by task id and episode. `orchlib.rollout` tells the engine which task and group
index each episode is (`start_rollout`) and, before every generate call, which of those episodes the
call's prompts are (`follow_rollout`), so each episode replays its own turns whatever it shares with
another: tasks whose prompts are the same words (recorded conversations that open alike), and two
episodes whose conversations are the same so far (the same opening, the same first reply) alike.

An engine used outside a rollout finds a new episode's task by its opening words, which then must tell
the tasks apart, and follows each episode by its ids (a prompt that extends a sequence it wrote is that
episode's next turn; of two episodes that wrote the same sequence, it cannot tell which). Either way it
never decodes a whole conversation per turn: a new episode's prompt is decoded at most once (to find
its task by its words, or for a function script), and a function script reads text decoded piece by
piece. A script
that runs out raises `ScriptExhausted` (`on_end="repeat"` repeats its last turn instead, as a policy
stuck in a loop would).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Literal, Mapping, Sequence

from orchlib.chat import IM_END, IM_START
from orchlib.engines.base import GenerateResult, Generation, SamplingParams

__all__ = ["ScriptedEngine", "ScriptExhausted"]

Script = Sequence[str] | Callable[[str, int], str]
_TAIL = 16  # ids at the end of a written sequence that file it (its whole prefix is compared on a match)


class ScriptExhausted(RuntimeError):
    """The policy was asked for a turn its script does not have."""


@dataclass
class _Episode:
    script: Script
    label: str
    turn: int = 0
    text: str = ""  # the conversation so far, for function scripts (built from the pieces)
    unread: tuple[int, ...] = ()  # the ids it wrote last, decoded into `text` only if it goes on (most
    # replayed episodes end at their one call, and their text would be copied for nothing)
    seen: int = 0  # ids of the conversation so far that `text` covers, with `unread`


class ScriptedEngine:
    def __init__(self, tokenizer, turns: Script | Mapping[str, Script | Sequence[Sequence[str]]],
                 logprob: float = -1.0, *, tasks: Sequence[Any] | None = None,
                 on_end: Literal["error", "repeat"] = "error"):
        """`turns`: one script for every episode, or `{task_id: script}` / `{task_id: [script per
        episode]}` with `tasks` (the Task objects, whose prompts identify them in the conversation)."""
        if on_end not in ("error", "repeat"):
            raise ValueError(f'on_end must be "error" or "repeat", not {on_end!r}')
        self.tokenizer, self.logprob, self.on_end = tokenizer, logprob, on_end
        self.calls: list[int] = []  # batch size of each generate call, for tests
        self._eos = tokenizer.convert_tokens_to_ids(IM_END)
        self._shared: Script | None = None
        self._by_task: dict[str, list[Script]] = {}
        self._by_prompt: dict[str, list[str]] = {}  # opening words → the tasks that open with them, in order
        self._coming: list[tuple[str, int]] | None = None  # (task id, group index) of the next new episodes
        if isinstance(turns, Mapping):
            if tasks is None:
                raise ValueError("scripts per task need tasks=[...] (their prompts say which task an episode is)")
            known = {t.id for t in tasks}
            unknown = sorted(set(turns) - known)
            if unknown:
                raise ValueError(f"scripts for unknown task ids {unknown}")
            for t in tasks:
                if t.id in turns:
                    self._add(t.prompt, t.id, turns[t.id])
        else:
            self._shared = turns
        # length → last _TAIL ids → (prompt, ids written after it, its episode), in the order they were
        # written: the sequence is kept in its two pieces, so filing it copies no prompt
        self._live: dict[int, dict[tuple[int, ...], list[tuple[tuple[int, ...], tuple[int, ...], _Episode]]]] = {}
        self._started: dict[str, int] = {}
        # a rollout's episodes ((task id, group index), in its order), the episode at each position, and the
        # positions of the next generate call's prompts (`follow_rollout`)
        self._rollout: list[tuple[str, int]] | None = None
        self._at: dict[int, _Episode] = {}
        self._positions: list[int] | None = None

    @classmethod
    def from_trajectories(cls, tokenizer, trajectories: Sequence[Any], **kw: Any) -> ScriptedEngine:
        """The recorded policy turns of `trajectories`, each replayed by the episode of the same task
        and group index (run the same tasks with the same group size)."""
        engine = cls(tokenizer, [], **kw)
        by_task: dict[str, dict[int, list[str]]] = {}
        prompts: dict[str, str] = {}
        for t in trajectories:
            if t.group_index in by_task.get(t.task_id, {}):
                raise ValueError(f"task {t.task_id}: two trajectories of group index {t.group_index}")
            by_task.setdefault(t.task_id, {})[t.group_index] = [turn.text for turn in t.turns]
            prompts[t.task_id] = t.prompt
        for task_id, groups in by_task.items():
            if sorted(groups) != list(range(len(groups))):
                raise ValueError(f"task {task_id}: group indices {sorted(groups)} are not 0..{len(groups) - 1}")
            engine._add(prompts[task_id], task_id, [groups[g] for g in range(len(groups))])
        engine._shared = None
        return engine

    def _add(self, prompt: str, task_id: str, script: Any) -> None:
        per_episode = (not callable(script) and len(script) > 0
                       and all(not isinstance(s, str) for s in script))
        self._by_task[task_id] = list(script) if per_episode else [script]
        self._by_prompt.setdefault(prompt, []).append(task_id)

    def start_rollout(self, episodes: Sequence[tuple[str, int]]) -> None:
        """Called by `orchlib.rollout` before its first generate call: the (task id, group index) of each
        episode it starts, in the order of that call's prompts."""
        self._coming = [(str(task_id), int(g)) for task_id, g in episodes]
        self._rollout, self._at, self._positions = list(self._coming), {}, None
        self._live.clear()
        self._started.clear()

    def follow_rollout(self, positions: Sequence[int]) -> None:
        """Called by `orchlib.rollout` before each generate call: which episodes of those given to
        `start_rollout` the call's prompts are (their positions in that list), in order. Episodes are
        then followed by who they are, not by what they wrote."""
        self._positions = [int(i) for i in positions]

    # ------------------------------------------------------------------ following episodes by their ids
    def _find(self, prompt: Sequence[int]) -> tuple[_Episode, int] | None:
        """The episode whose written sequence `prompt` extends, and that sequence's length (of several
        episodes that wrote the same sequence, the last one)."""
        for length in sorted(self._live, reverse=True):
            if length < len(prompt):
                # sequences are filed by their last ids: a whole prefix is copied and compared only where
                # those match
                waiting = self._live[length].get(tuple(prompt[max(0, length - _TAIL):length]))
                if waiting:
                    head = tuple(prompt[:length])
                    for k in range(len(waiting) - 1, -1, -1):
                        before, wrote, _ = waiting[k]
                        if head[len(before):] == wrote and head[:len(before)] == before:
                            return waiting.pop(k)[2], length
        return None

    def _new(self, prompt: Sequence[int], known: tuple[str, int] | None = None) -> _Episode:
        """A new episode: of the task and group index the rollout said (`known`), else found by its words."""
        if self._shared is not None and not callable(self._shared):  # nothing to read
            return _Episode(self._shared, "every episode")
        if known is not None and self._shared is None and known[0] in self._by_task:
            return self._episode(known[0], known[1], prompt)
        # a task without a script of its own takes the script of the task that opens with its words
        # a list or tuple as it is (the prompt is thousands of ids; a tokenizer takes either)
        text = self.tokenizer.decode(prompt if isinstance(prompt, (list, tuple)) else list(prompt),
                                     skip_special_tokens=False)
        if self._shared is not None:
            return _Episode(self._shared, "every episode", text=text)
        # the task's words are the last user turn of the first prompt (P, the price-order line may follow them)
        start = text.rfind(f"{IM_START}user\n")
        said = text[start + len(IM_START) + 5:].split(IM_END, 1)[0] if start >= 0 else ""
        found = [p for p in self._by_prompt if said == p or said.startswith(p + "\n")]
        if not found:
            raise ScriptExhausted(f"no script for an episode whose task says {said[:80]!r}")
        tasks = self._by_prompt[max(found, key=len)]
        if len(tasks) > 1 and any(self._by_task[t] != self._by_task[tasks[0]] for t in tasks):
            raise ScriptExhausted(f"tasks {tasks} open with the same words and have different scripts: run them "
                                  "through orchlib.rollout, which tells the engine each episode's task")
        g = self._started.get(tasks[0], 0)
        self._started[tasks[0]] = g + 1
        return self._episode(tasks[0], g, prompt, text)

    def _episode(self, task_id: str, g: int, prompt: Sequence[int], text: str | None = None) -> _Episode:
        scripts = self._by_task[task_id]
        if g >= len(scripts) and len(scripts) > 1:
            raise ScriptExhausted(f"task {task_id}: {len(scripts)} scripts, for episodes 0..{len(scripts) - 1}; "
                                  f"episode {g} was started")
        script = scripts[min(g, len(scripts) - 1)]
        if text is None and callable(script):  # a function script reads the conversation
            text = self.tokenizer.decode(list(prompt), skip_special_tokens=False)
        return _Episode(script, f"task {task_id}" + (f" episode {g}" if len(scripts) > 1 else ""), text=text or "")

    def _next_text(self, ep: _Episode) -> str:
        script, turn = ep.script, ep.turn
        if callable(script):
            return script(ep.text, turn)
        if turn < len(script):
            return script[turn]
        if self.on_end == "repeat" and len(script):
            return script[-1]
        raise ScriptExhausted(f"the script for {ep.label} has {len(script)} turns; turn {turn + 1} was asked "
                              "(end it with an answer, or give on_end='repeat')")

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                 stop_ids: Sequence[int] = ()) -> GenerateResult:
        t0 = time.perf_counter()
        self.calls.append(len(prompts))
        positions, self._positions = self._positions, None
        if positions is not None and self._rollout is not None and len(positions) == len(prompts):
            return self._follow(prompts, positions, params, t0)
        found = [self._find(p) for p in prompts]
        coming: list[tuple[str, int]] | list[None] = [None] * len(prompts)
        if all(f is None for f in found):  # a new rollout: forget the last one's episodes
            self._live.clear()
            self._started.clear()
            if self._coming is not None and len(self._coming) == len(prompts):
                coming = self._coming
            self._coming = None
        outs = []
        for p, hit, known in zip(prompts, found, coming):
            p = p if type(p) is tuple else tuple(p)  # the one copy of the prompt: decoded, then filed below
            # (the caller extends its own list afterwards)
            if hit is None:
                ep = self._new(p, known)
            else:
                ep, length = hit
                if callable(ep.script):  # only the new pieces are decoded
                    ep.text += (self.tokenizer.decode(list(ep.unread), skip_special_tokens=False)
                                + self.tokenizer.decode(list(p[length:]), skip_special_tokens=False))
                    ep.unread = ()
            gen = self._write(ep, len(p), params)
            wrote = tuple(gen.ids)
            tail = (p[-_TAIL:] + wrote)[-_TAIL:]
            self._live.setdefault(len(p) + len(wrote), {}).setdefault(tail, []).append((p, wrote, ep))
            outs.append(gen)
        for length in [n for n, d in self._live.items() if not any(d.values())]:
            del self._live[length]
        return GenerateResult(outs, time.perf_counter() - t0, prompt_tokens=sum(map(len, prompts)))

    def _follow(self, prompts: Sequence[Sequence[int]], positions: list[int], params: SamplingParams,
                t0: float) -> GenerateResult:
        """A rollout's call whose prompts are the episodes at `positions`: each writes its own next turn."""
        assert self._rollout is not None
        outs = []
        for p, i in zip(prompts, positions):
            ep = self._at.get(i)
            if ep is None:
                ep = self._at[i] = self._new(p if type(p) is tuple else tuple(p), self._rollout[i])
            elif callable(ep.script):  # only the new pieces are decoded
                ep.text += (self.tokenizer.decode(list(ep.unread), skip_special_tokens=False)
                            + self.tokenizer.decode(list(p[ep.seen:]), skip_special_tokens=False))
                ep.unread = ()
            outs.append(self._write(ep, len(p), params))
        return GenerateResult(outs, time.perf_counter() - t0, prompt_tokens=sum(map(len, prompts)))

    def _write(self, ep: _Episode, prompt_len: int, params: SamplingParams) -> Generation:
        """The episode's next turn as ids (its text's encoding, then the stop id), cut at max_new_tokens."""
        ids = list(self.tokenizer.encode(self._next_text(ep), add_special_tokens=False)) + [self._eos]
        finish = "stop"
        if len(ids) > params.max_new_tokens:
            ids, finish = ids[:params.max_new_tokens], "length"
        ep.turn += 1
        if callable(ep.script):
            ep.unread = tuple(ids)
        ep.seen = prompt_len + len(ids)
        return Generation(ids, [self.logprob] * len(ids), finish)  # type: ignore[arg-type]
