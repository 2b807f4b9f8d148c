"""The orchestration loop: tasks → trajectories.

For every active trajectory at once: generate one assistant turn (batched, stop at <|im_end|>), parse
its tool calls, run all calls of all trajectories concurrently, append each turn's observations as the
token ids of the rendered segment, and go on with the trajectories still running. An episode ends at
the policy's own answer (a turn without calls), at the answer of a tool that is `final` (its card, or
the call itself), at `max_turns`, or at the token budget.

A task with a user (τ²-style, `orchlib.users`): a turn without calls goes to the user instead,
whose reply is appended as a user segment (loss mask 0) — until the user ends the conversation
("user_stop"). The user's cost and latency are counted apart (`user_cost_usd`, `user_latency_s`).
Within one turn, calls to stateful tools (those that receive the episode's state) run one after another
in the order the policy wrote them (`stateful_calls="in_order"`), so the final state never depends
on thread scheduling; the other calls run concurrently with them. The checker receives the trajectory
(the conversation and its finish reason) when it takes one. An episode's state is let go once its
checker has run, so a rollout holds only the running episodes' states; `return_states=True` keeps them
all and gives them back.

Token in, token out: `Trajectory.ids` = prompt ids + sampled ids + observation ids, in order; the mask
is 1 exactly on sampled ids; `logprobs` are the sampling log-probs. Nothing is re-tokenised.
Money in USD, time in seconds: a turn's latency = the policy's generation time + the longest of its
concurrent calls. The policy's time is declared per token by default (reproducible runs, and what
a served 8B policy would take) — set `measure_policy_latency` to use the measured wall time instead.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Literal, Sequence

from pydantic import ConfigDict, Field, model_validator

from orchlib.cards.costs import MAX_PRICE
from orchlib.chat import IM_END, IM_START, ToolCallParseError, observation_segment, parse_tool_calls
from orchlib.configurations import backend_counts, episode_views
from orchlib.engines.base import ChatPolicy, Engine, SamplingParams
from orchlib.env import Environment
from orchlib.prompting import DEFAULT_SYSTEM_PROMPT, preference_line, render_prompt, tool_schemas, user_message
from orchlib.settings import Settings
from orchlib.users import make_user
from orchlib.tasks import Preference, Task
# run_sync: one sync bridge for the library (works inside Jupyter's loop)
from orchlib.tools.base import ToolContext, ToolError, run_sync
from orchlib.trajectory import Observation, Trajectory, Turn, UserTurn, new_turn, set_fields

__all__ = ["RolloutConfig", "rollout", "run_sync"]


class RolloutConfig(Settings):
    """How episodes are sampled and accounted. Defaults run the tiny policy on a laptop CPU."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    max_turns: int = Field(4, ge=1, description="ToolOrchestra allows up to 50; 4 covers call → answer on a laptop")
    max_new_tokens: int = Field(48, ge=1, description="per turn; a tool call of the default policy is ~20-40 ids")
    max_total_tokens: int = Field(2048, ge=16, description="token budget of one trajectory (prompt included)")
    temperature: float = Field(1.0, ge=0.0, description="1.0: the log-probs GRPO's ratio needs are exact")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="nucleus sampling; 1.0 keeps the sampled log-probs "
                                                          "those of the policy itself, as GRPO's ratio assumes")
    system_prompt: str = Field(DEFAULT_SYSTEM_PROMPT, description="the system turn's text; the tools and P are "
                                                                  "rendered after it")
    show_preference: bool = Field(True, description="render P in the prompt (the policy must see it)")
    preference_style: Literal["weights", "name", "instruction", "words"] = Field(
        "weights", description="how P is rendered: its weights (`Preference (thrifty): accuracy=1, cost=1, ...`); "
                               "its profile's name alone (`Preference (thrifty):`), for a policy that learns "
                               "named profiles (the demo's tiny policy copies digits, and P's digits between the "
                               "question and its call drew that copying off); or a sentence per weight, then the "
                               "weights (`instruction`, as ToolOrchestra shows P: `Preference.instruction`); or "
                               "the words written for the profile alone, no weights (`words`: the two demo "
                               "profiles then differ in nearly every id of their line, where the weights add ids "
                               "they share; a profile with no words written is shown as `instruction` shows it)")
    preference_words: dict[str, str] = Field(
        default_factory=dict, description="with preference_style 'instruction' or 'words': the words shown for a "
                                          "profile, by its name (ToolOrchestra's P comes with an instruction written "
                                          "for it); a profile not named here gets `Preference.instruction`'s "
                                          "sentence per weight")
    preference_at: Literal["system", "system_end", "user", "assistant"] = Field(
        "system", description="where P is rendered: the system turn, before the tools or at its end after them; "
                              "after the task in the user turn; or opening the orchestrator's own first turn as "
                              "a given prefix (which a policy reads best depends on the policy: measure it)")
    policy_price_in: float = Field(0.2, ge=0, le=MAX_PRICE, description="USD per M input ids; Qwen3-8B in the "
                                                                        "ToolOrchestra release")
    policy_price_out: float = Field(0.2, ge=0, le=MAX_PRICE, description="USD per M sampled ids; Qwen3-8B, same source")
    policy_seconds_per_token: float = Field(0.02, ge=0, description="declared generation time per sampled id "
                                                                    "(~50 tok/s, a served 8B model)")
    measure_policy_latency: bool = Field(False, description="use measured batch wall time instead")
    tool_timeout_s: float = Field(120.0, gt=0, description="per call; a timeout becomes an error observation. "
                                                         "Above the slowest declared model tool (96 s in the release)")
    max_parallel: int = Field(16, ge=1, description="cap on concurrent tool calls per trajectory turn")
    stateful_calls: Literal["in_order", "concurrent"] = Field(
        "in_order", description="calls of one turn to tools that change the episode's state: one after another in "
                                "the order written (the state never depends on scheduling; their times add up), "
                                "or all at once like the other calls (the tools must then lock what they share)")
    max_observation_chars: int = Field(1500, ge=16, description="longer tool output is cut before the policy "
                                                                "reads it (the tool's cost is unchanged)")
    tool_latency: Literal["measured", "declared"] = Field(
        "measured", description="real tools report their measured wall time; 'declared' reports the card's "
                                "declared latency instead, so training runs (rewards with a latency term) are "
                                "reproducible to the bit")
    tool_schema: Literal["full", "compact", "brief"] = Field(
        "full", description="how tools are listed in the system turn: 'full' OpenAI schemas with descriptions "
                            "(real models read them), 'compact' names and argument names only, which keeps a "
                            "tiny policy's prompt ~5x shorter (it learns what each tool does from the reward), or "
                            "'brief': the compact list, then one line per tool with its description")
    price_order: bool = Field(False, description="with tool_schema='compact' or 'brief': one more line naming the "
                                                 "offered tools from the cheapest per call to the dearest, at the "
                                                 "prices their cards show (`orchlib.prompting.price_order_line`)")
    price_order_at: Literal["system", "user"] = Field(
        "system", description="where the price-order line goes: the end of the system turn, after the tools; or "
                              "the end of the user turn, after the task (and after P there), the last line before "
                              "the reply (order drills follow it; which a policy reads best depends on the policy: "
                              "the tiny policy's drills met their gate later in the user turn)")
    evidence_order: bool = Field(False, description="with tool_schema='compact' or 'brief': a line per kind of "
                                 "question two or more offered tools were measured on, naming them from the most "
                                 "often right to the least, at the end of the system turn before the price-order "
                                 "line (`orchlib.prompting.evidence_order_lines`; the rates come from the cards' "
                                 "`auto_description`, which `orchlib.describe` writes)")
    quote_names: bool = Field(False, description="the order lines (price_order, evidence_order) write each name in "
                              "quotes, as a call writes it (`\"atlas\", \"lyra\"`): a tokenizer may cut a name "
                              "after a space differently from after a quote (SmolLM2: ' atlas' is one token, a "
                              "call's \"atlas\" two), and a policy copying from a plain line then starts a piece "
                              "no call of that name uses (`orchlib.prompting.name_list`)")
    show_kind: bool = Field(False, description="the user turn names the task's kind after it (`Kind of question: "
                            "gsm8k.`), the word the evidence lines are labelled with, as a router that sorts "
                            "questions would: the policy then finds its line by a word, where without it it must "
                            "learn which line a question's wording belongs to")

    @model_validator(mode="after")
    def _order_lines_need_a_list(self) -> RolloutConfig:
        if self.price_order and self.tool_schema == "full":
            raise ValueError("price_order: the line follows the compact or brief list of tools; tool_schema is "
                             "'full', set it to 'compact' or 'brief'")
        if self.evidence_order and self.tool_schema == "full":
            raise ValueError("evidence_order: the lines follow the compact or brief list of tools; tool_schema is "
                             "'full', set it to 'compact' or 'brief'")
        return self


def _encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


_DEFAULT_DUMP = Preference(name="default").model_dump()


def _preference_dump(task: Task) -> dict:
    """`shown_preference(task).model_dump()`, a new dict each time; the default profile's is copied from
    one dump rather than built and dumped per episode (its only containers are flat dicts of floats)."""
    if task.preference is not None:
        return task.preference.model_dump()
    return {k: dict(v) if isinstance(v, dict) else v for k, v in _DEFAULT_DUMP.items()}


class _Episode:
    """Mutable state of one trajectory while it runs."""

    def __init__(self, task: Task, index: int, prompt_ids: list[int], schemas: list[dict], keep_env: bool = False,
                 view=None):
        self.task, self.env, self.user, self.schemas = task, task.make_state(), make_user(task), schemas
        self.toolbox = None if view is None else view.toolbox  # a configuration's tools under their aliases
        self.keep_env = keep_env  # else `_finish` lets the env go: a database copy per episode adds up
        # Built without validation: every field is already of its type (the task's fields are validated,
        # the ids are the tokenizer's ints), and validating three prompt-long lists per episode copies them.
        self.traj = Trajectory.begin(task.id, index, task.prompt, task.category, _preference_dump(task),
                                     prompt_ids)
        if view is not None:  # the P the reward weighs (per-tool weights by backend), and the configuration
            self.traj.set_fields(preference=view.preference.model_dump(), configuration=view.configuration)
        self.errors: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()
        self.done = False

    def messages(self) -> list[dict]:
        return self.traj.to_messages()  # the task's prompt (when not empty), then every turn in order


def rollout(env: Environment, engine: Engine | ChatPolicy, *, config: RolloutConfig | None = None,
            group_size: int = 1, seed: int | None = None, tasks: Sequence[Task] | None = None,
            return_states: bool = False, configurations=None, episode: int = 0):
    """Run `group_size` episodes of every task of `env` (its train split, or `tasks`), with the
    environment's toolbox, under `config` (how episodes run and how a task becomes the prompt; default
    `RolloutConfig()`); returns trajectories task-major (task 0's G first), and with `return_states=True` a
    pair `(trajectories, states)`: each episode's state as it ended (None for a task without one), in the
    same order.

    `engine` is a local Engine (token in, token out) or an API policy that speaks messages
    (`ChatPolicy`, e.g. `orchlib.engines.openai.OpenAIPolicy`), whose episodes run independently,
    up to its `max_in_flight` at once; its trajectories hold no token ids (`meta["trainable"]` False).
    Tasks and tools of one's own: `rollout(Environment(train=tasks, tools=toolbox), engine)`.

    Tool configurations (orchlib.configurations): each task's G episodes run under the configuration
    its space draws for (`task.id`, `episode`; a trainer passes its step): the environment's
    `configuration_space(task)`, or `configurations` (a ConfigurationSpace, or a function task → space)."""
    if not isinstance(env, Environment):
        raise TypeError(f"rollout(env, engine, ...): env is an orchlib.Environment (e.g. Environment(train=tasks, "
                        f"tools=toolbox)), not {type(env).__name__}")
    run = env.train if tasks is None else tasks
    if tasks is None and not run:
        raise ValueError(f"environment {env.name!r} has no train tasks: pass tasks= (e.g. env.test)")
    configurations = env.configuration_space if configurations is None else configurations
    return _rollout(run, env.tools, engine, RolloutConfig() if config is None else config, group_size, seed,
                    return_states, configurations, episode)


def _rollout(tasks: Sequence[Task], toolbox, engine: Engine | ChatPolicy, config: RolloutConfig, group_size: int,
             seed: int | None, return_states: bool, configurations=None, episode: int = 0):
    views = episode_views(tasks, toolbox, configurations, episode)
    if callable(getattr(engine, "chat", None)):
        done = run_sync(_chat_rollout(list(tasks), toolbox, engine, config, group_size, return_states, views))
    else:
        done = _local_rollout(tasks, toolbox, engine, config, group_size, seed, return_states, views)
    trajectories = [ep.traj for ep in done]
    return (trajectories, [ep.env for ep in done]) if return_states else trajectories


def _user_segment(text: str) -> str:
    """A user turn after a sampled turn (which ends in <|im_end|>), opening the next assistant turn;
    what CHAT_TEMPLATE renders for a user message there."""
    return f"\n{IM_START}user\n{text}{IM_END}\n{IM_START}assistant\n"


def _local_rollout(tasks: Sequence[Task], toolbox, engine: Engine, config: RolloutConfig, group_size: int,
                   seed: int | None, keep_envs: bool = False, views=None) -> list[_Episode]:
    tok = engine.tokenizer
    eos = tok.convert_tokens_to_ids(IM_END)
    if eos is None or eos == tok.unk_token_id:
        eos = tok.eos_token_id
    episodes: list[_Episode] = []
    for task, view in zip(tasks, views or [None] * len(tasks)):
        box, task = (toolbox, task) if view is None else (view.toolbox, view.task)  # as the configuration shows it
        schemas = tool_schemas(box, task, config.tool_schema)
        known = getattr(tok, "prompt_ids", None)  # a tokenizer that keeps each task's prompt (TokenizeMemo)
        ids = known(task, schemas, config) if known is not None else _encode(tok, render_prompt(task, schemas, tok,
                                                                                                config))
        episodes += [_Episode(task, g, ids, schemas, keep_envs, view) for g in range(group_size)]
    follows = getattr(engine, "start_rollout", None)  # an engine that writes per task (ScriptedEngine): the
    if follows is not None:                            # first call's prompts are these episodes, in order
        follows([(e.task.id, e.traj.group_index) for e in episodes])
    # and before every call, which of those episodes its prompts are (two episodes whose conversations are
    # the same so far cannot be told apart by their ids)
    following = getattr(engine, "follow_rollout", None)
    params = dict(temperature=config.temperature, top_p=config.top_p)
    first = True
    while active := [e for e in episodes if not e.done]:
        if following is not None:
            following([i for i, e in enumerate(episodes) if not e.done])
        budget = [config.max_total_tokens - len(e.traj.ids) for e in active]
        max_new = max(1, min(config.max_new_tokens, max(budget)))
        result = engine.generate([e.traj.ids for e in active],
                                 SamplingParams(max_new_tokens=max_new, seed=seed if first else None, **params),
                                 stop_ids=[eos])
        first = False
        pending: list[tuple[_Episode, Turn, list]] = []
        asking: list[tuple[_Episode, Turn]] = []  # turns without calls that the task's user answers
        for ep, gen, left in zip(active, result.outputs, budget):
            ids, lps = gen.ids[:max(left, 0)], gen.logprobs[:max(left, 0)]
            ended = bool(ids) and ids[-1] == eos
            in_tokens = len(ep.traj.ids)
            ep.traj.ids.extend(ids)  # in place: `+=` would also set the field again, through pydantic
            ep.traj.mask.extend([1] * len(ids))
            ep.traj.logprobs.extend(lps)
            text = tok.decode(ids[:-1] if ended else ids, skip_special_tokens=False)
            gen_s = result.seconds if config.measure_policy_latency else len(ids) * config.policy_seconds_per_token
            turn = new_turn(text, float(gen_s), len(ids),
                            (in_tokens * config.policy_price_in + len(ids) * config.policy_price_out) / 1e6)
            ep.traj.turns.append(turn)
            try:
                content, calls = parse_tool_calls(text)
            except ToolCallParseError as e:
                ep.errors["malformed_call"] += 1
                turn.observations.append(Observation(content=f"Error: {e}", error=str(e),
                                                     error_kind="malformed_call"))
                pending.append((ep, turn, []))
                continue
            if not calls:  # the policy answered itself (or was cut off by max_new_tokens mid-answer)
                ep.traj.final_answer = content
                if ep.user is not None and ended:
                    asking.append((ep, turn))
                    continue
                over = len(ep.traj.ids) >= config.max_total_tokens
                _finish(ep, "answer" if ended else "token_budget" if over else "length")
                continue
            set_fields(turn, {"calls": calls})
            ep.calls.update(c.name for c in calls)
            pending.append((ep, turn, calls))
        _run_tools(pending, asking, toolbox, config)
        for ep, turn in asking:
            if turn.user is None or turn.user.done:
                _finish(ep, "user_stop")
                continue
            _append_context(ep, _encode(tok, _user_segment(turn.user.text)), config)
        for ep, turn, _ in pending:
            final = next((o for o in turn.observations if o.final and not o.error), None)
            if final is not None:
                ep.traj.set_fields(final_answer=final.content)
                _finish(ep, "final_tool")
                continue
            ended = ep.traj.ids[-1] == eos
            seg = ("" if ended else IM_END) + observation_segment(
                _shown(o, config.max_observation_chars) for o in turn.observations)
            _append_context(ep, _encode(tok, seg), config)
    return episodes


def _append_context(ep, seg_ids: list[int], config: RolloutConfig) -> None:
    """Append a segment the orchestrator did not write (an observation, a user turn: mask 0), or end
    the episode when it no longer fits the token budget or the turns are used up."""
    if len(ep.traj.ids) + len(seg_ids) >= config.max_total_tokens:  # no room to read and answer
        _finish(ep, "token_budget")
        return
    ep.traj.ids.extend(seg_ids)
    ep.traj.mask.extend([0] * len(seg_ids))
    ep.traj.logprobs.extend([0.0] * len(seg_ids))
    if len(ep.traj.turns) >= config.max_turns:
        _finish(ep, "max_turns")


# Checkers that compare strings or numbers: run in the loop. Others (the judge, sympy, user code) may
# take a while and run in the scoring threads.
_INSTANT_CHECKERS = frozenset({"exact", "contains", "mentions", "numeric"})


async def _chat_rollout(tasks: list[Task], toolbox, engine: ChatPolicy, config: RolloutConfig, group_size: int,
                        keep_envs: bool = False, views=None) -> list[_Episode]:
    """The loop for a policy reached by messages (an API): each episode runs on its own, at most
    `engine.max_in_flight` at once, so a server's latency overlaps across episodes. Tools, accounting
    and endings are the local loop's; the policy reads the full OpenAI tool schemas."""
    import concurrent.futures

    if config.show_preference and config.preference_at == "assistant":
        raise ValueError('preference_at="assistant" prefills the policy\'s own turn, which an API policy cannot '
                         'continue; use "system" or "user"')
    episodes: list[tuple[_Episode, list[dict]]] = []
    for task, view in zip(tasks, views or [None] * len(tasks)):
        box, task = (toolbox, task) if view is None else (view.toolbox, view.task)  # as the configuration shows it
        schemas = tool_schemas(box, task, "full")
        system = config.system_prompt
        if config.show_preference and config.preference_at in ("system", "system_end"):  # no template: same place
            system += "\n" + preference_line(task, config)
        start = engine.start(system, user_message(task, config), schemas)
        for g in range(group_size):
            ep = _Episode(task, g, [], schemas, keep_envs, view)
            ep.traj.meta = {"trainable": False, "policy": engine.name, "requests": 0, "tokens_in": 0,
                            "tokens_out": 0}
            episodes.append((ep, list(start)))
    gate = asyncio.Semaphore(engine.max_in_flight)
    # Checkers run in threads: one that calls a model (the LLM judge) must not stall the other episodes.
    with concurrent.futures.ThreadPoolExecutor(min(engine.max_in_flight, 32), "orchlib-score") as pool:
        async with engine.session() as session:
            async def run(ep: _Episode, messages: list[dict]) -> None:
                async with gate:
                    reason = await _chat_episode(ep, messages, engine, session, toolbox, config)
                    if ep.task.checker in _INSTANT_CHECKERS:
                        _finish(ep, reason)
                    else:
                        await asyncio.get_running_loop().run_in_executor(pool, _finish, ep, reason)

            await asyncio.gather(*(run(ep, messages) for ep, messages in episodes))
    return [ep for ep, _ in episodes]


async def _chat_episode(ep: _Episode, messages: list[dict], engine: ChatPolicy, session, toolbox,
                        config: RolloutConfig) -> str:
    """Turns until an answer (or the user's end), a `final` tool or `max_turns`; returns the finish reason."""
    while True:
        try:
            reply = await engine.chat(messages, ep.schemas, session)
        except Exception as e:  # an engine that raised instead of returning its failure: this episode's error
            from orchlib.engines.openai import ChatReply

            msg = f"{getattr(engine, 'name', 'policy')}: {type(e).__name__}: {e}"[:500]
            reply = ChatReply(text="", error=Observation(content=f"error: {msg}", error=msg, error_kind="tool_failure"))
        meta = ep.traj.meta
        meta["requests"] += 1
        meta["tokens_in"] += reply.tokens_in
        meta["tokens_out"] += reply.tokens_out
        turn = Turn(text=reply.text, gen_latency_s=reply.seconds, latency_s=reply.seconds,
                    tokens_out=reply.tokens_out, cost_usd=reply.cost_usd)
        ep.traj.turns.append(turn)
        if reply.error is not None:  # the request failed after its retries: counted; the turn is spent
            _record(ep, turn, [reply.error])
        elif not reply.calls:
            ep.traj.final_answer = reply.content
            if reply.finish_reason == "length" or ep.user is None:
                return "length" if reply.finish_reason == "length" else "answer"
            turn.user = await _ask_user(ep)
            if turn.user.done:
                return "user_stop"
            messages += [reply.message, {"role": "user", "content": turn.user.text}]
        else:
            calls = [c.call for c in reply.calls if c.call is not None]
            turn.calls = calls
            ep.calls.update(c.name for c in calls)
            done, tools_s = await _call_tools(ep, calls, toolbox, config)
            results = iter(done)
            obs = [next(results) if c.call is not None else
                   Observation(content=f"Error: {c.error}", error=c.error, error_kind="malformed_call")
                   for c in reply.calls]
            _record(ep, turn, obs, tools_s)
            final = next((o for o in obs if o.final and not o.error), None)
            if final is not None:
                ep.traj.final_answer = final.content
                return "final_tool"
            messages += reply.followup([_shown(o, config.max_observation_chars) for o in obs])
        if len(ep.traj.turns) >= config.max_turns:
            return "max_turns"


def _shown(obs: Observation, limit: int) -> str:
    text = obs.content if not obs.error or obs.error in obs.content else f"Error ({obs.error_kind}): {obs.error}"
    return text if len(text) <= limit else text[:limit] + " …[truncated]"


def _run_tools(pending, asking, toolbox, config: RolloutConfig) -> None:
    """All calls of all trajectories this turn, and the users' replies, concurrently; fills
    observations, cost and latency, and each asked turn's `user`."""
    async def all_():
        # Calls that only stand-ins answer (replay, simulated: nothing is waited for) are awaited one
        # episode after another, without a task each; the others run concurrently, as before.
        instant = [_stand_ins_only(calls, toolbox if ep.toolbox is None else ep.toolbox) for ep, _, calls in pending]
        quick = {i: await _call_tools(pending[i][0], pending[i][2], toolbox, config)
                 for i in range(len(pending)) if instant[i]}
        rest = await asyncio.gather(*(_call_tools(ep, calls, toolbox, config)
                                      for (ep, _, calls), fast in zip(pending, instant) if not fast),
                                    *(_ask_user(ep) for ep, _ in asking))
        slow = iter(rest)
        return [quick[i] if instant[i] else next(slow) for i in range(len(pending))] + list(slow)

    results = run_sync(all_()) if pending or asking else []
    for (ep, turn, _), (obs, tools_s) in zip(pending, results):
        _record(ep, turn, obs, tools_s)
    for (_, turn), reply in zip(asking, results[len(pending):]):
        turn.user = reply


def _stand_ins_only(calls, toolbox) -> bool:
    """Whether every call goes to a stand-in (`measured = False`) that keeps no state, or to no tool."""
    for c in calls:
        tool = toolbox[c.name] if c.name in toolbox else None
        if tool is not None and (tool.measured or tool.stateful):
            return False
    return True


async def _ask_user(ep: _Episode) -> UserTurn:
    """The user's reply to the conversation so far. A user that cannot reply (its model failed after
    its retries, or a user of one's own raised) ends the conversation; the failure is counted as
    errors["user_failure"] of this episode, and the other episodes go on."""
    try:
        return await ep.user.reply(ep.messages())
    except Exception as e:
        ep.errors["user_failure"] += 1
        msg = str(e) if isinstance(e, ToolError) else f"{type(e).__name__}: {e}"[:500]
        return UserTurn(text="", done=True, error=msg, label=getattr(ep.user, "label", ""))


async def _call_tools(ep: _Episode, calls, toolbox, config: RolloutConfig) -> tuple[list[Observation], float]:
    """One episode's calls of one turn: observations in the order of `calls`, and the seconds the
    calls took together (the slowest concurrent call, or the stateful calls' sum when longer)."""
    if not calls:
        return [], 0.0
    if ep.toolbox is not None:  # the episode's configuration: its aliases, prices and latencies
        toolbox = ep.toolbox
    ctx = _EpisodeContext(ep)
    # a tool the task does not offer is unknown to this episode, even if the toolbox has it
    offered = [i for i, c in enumerate(calls) if ep.task.tools is None or c.name in ep.task.tools]
    serial = [i for i in offered if config.stateful_calls == "in_order" and calls[i].name in toolbox
              and toolbox[calls[i].name].stateful]
    together = [i for i in offered if i not in serial]

    async def in_order() -> list[Observation]:
        return [await toolbox.call(calls[i], ctx, timeout_s=config.tool_timeout_s) for i in serial]

    if not serial and _stand_ins_only(calls, toolbox):  # nothing waits: the same calls, one after another
        parallel, chained = [await toolbox.call(calls[i], ctx, timeout_s=config.tool_timeout_s)
                             for i in together], []
    else:
        parallel, chained = await asyncio.gather(
            toolbox.call_many([calls[i] for i in together], ctx, timeout_s=config.tool_timeout_s,
                              max_parallel=config.max_parallel), in_order())
    got = dict(zip(together, parallel)) | dict(zip(serial, chained))
    obs = [got[i] if i in got else _not_offered(c, ep.task) for i, c in enumerate(calls)]
    if config.tool_latency == "declared":
        obs = [_declared(o, toolbox, ep) for o in obs]
    seconds = max(max((o.latency_s for i, o in enumerate(obs) if i not in serial), default=0.0),
                  sum(obs[i].latency_s for i in serial))
    return obs, seconds


class _EpisodeContext(ToolContext):
    """The ToolContext of one episode's turn, whose `messages` are built when a tool first reads them:
    most tools never do (a replay, a function), and the conversation costs more to build than their call.
    The episode does not change while its calls run (their observations are recorded after them all)."""

    def __init__(self, ep: _Episode):
        task = ep.task
        self.task_id, self.prompt, self.category, self.answer = task.id, task.prompt, task.category, task.answer
        self.state, self.seed = ep.env, ep.traj.group_index
        self._episode: _Episode | None = ep
        self._messages: list[dict] | None = None

    @property  # type: ignore[override]
    def messages(self) -> list[dict]:
        if self._messages is None:
            self._messages = self._episode.messages()
            self._episode = None
        return self._messages

    @messages.setter
    def messages(self, value: list[dict]) -> None:
        self._messages, self._episode = value, None


def _record(ep: _Episode, turn: Turn, obs: list[Observation], tools_s: float | None = None) -> None:
    """A turn's observations: errors counted, cost added, latency = generation + the calls' time
    (`tools_s`; default the slowest call, as concurrent calls take)."""
    for o in obs:
        if o.error_kind:
            ep.errors[o.error_kind] += 1
    turn.observations.extend(obs)  # in place; the two sums are set at once (pydantic's setattr costs)
    if tools_s is None:
        tools_s = max((o.latency_s for o in turn.observations), default=0.0)
    set_fields(turn, {"cost_usd": turn.cost_usd + sum(o.cost_usd for o in turn.observations),
                      "latency_s": turn.gen_latency_s + tools_s, "observations": turn.observations})


def _not_offered(call, task: Task) -> Observation:
    msg = f"unknown tool {call.name!r}: this task offers {', '.join(task.tools or []) or 'no tools'}"
    return Observation(content=f"error: {msg}", error=msg, error_kind="unknown_tool")


def _declared(obs: Observation, toolbox, ep: _Episode) -> Observation:
    """The observation as if the tool took its card's declared latency (price per second follows)."""
    if obs.tool not in toolbox or not toolbox[obs.tool].measured:
        return obs
    card = toolbox[obs.tool].card
    seconds = card.latency.sample(ep.traj.group_index, card.name, ep.task.id)
    cost = obs.cost_usd + card.price.per_second * (seconds - obs.latency_s)
    return obs.model_copy(update={"latency_s": seconds, "cost_usd": max(cost, 0.0)})


def _finish(ep: _Episode, reason: str) -> None:
    ep.done = True
    t = ep.traj
    users = [turn.user for turn in t.turns if turn.user is not None]  # the user's bill, apart
    # Set at once: pydantic's per-attribute assignment costs more than these sums.
    t.set_fields(finish_reason=reason, calls=backend_counts(ep.calls, t.configuration),  # by backend: reward's calls[t]
                 errors=dict(sorted(ep.errors.items())),
                 cost_usd=sum(turn.cost_usd for turn in t.turns), latency_s=sum(turn.latency_s for turn in t.turns),
                 user_cost_usd=sum(u.cost_usd for u in users), user_latency_s=sum(u.latency_s for u in users))
    # The observation a `final` tool answered with (its recorded grade, for the `recorded` checker).
    final = (next((o for o in t.turns[-1].observations if o.final and not o.error), None)
             if reason == "final_tool" else None)
    try:
        outcome = ep.task.score(t.final_answer, ep.env, final, t) if t.final_answer is not None else 0.0
    except Exception as e:  # a checker that raised (a state it cannot hash, a judge down): this episode's error,
        # counted and said on the trajectory (meta["checker_error"]); the other episodes are scored as usual
        outcome = 0.0
        t.meta["checker_error"] = f"{type(e).__name__}: {e}"[:500]
        t.set_fields(errors=dict(sorted({**t.errors, "checker_failure": 1}.items())))
    t.set_fields(outcome=outcome)
    if not ep.keep_env:  # scored: nothing reads this episode's state again
        ep.env = None
