"""Real tool definitions in as they are: names as OpenAI and MCP write them (mapped where an export
forbids them, and back), loose types normalised, schema-only cards, validate_cards on objects, exact
YAML round trips for any string, and a corpus of a few hundred varied OpenAI schemas end to end."""

from __future__ import annotations

import json
import random
import string

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_cards import MCP_TOOL, OPENAI_TOOL

from orchlib.cards import CardError, ToolCard, load_card, save_card
from orchlib.chat import parse_tool_calls, render_call, system_text
from orchlib.cli import main
from orchlib.tools import validate_cards
from orchlib.toolnames import ToolNames, card_name, export_name, fits
from orchlib.tools import Toolbox, bind, build_tool
from orchlib.trajectory import ToolCall

NAME_CHARS = string.ascii_letters + string.digits + "_-."


# ---------------------------------------------------------------------------------------------- names
@pytest.mark.parametrize("name", ["math.factorial", "fetch_DNA_sequence", "getWeather", "api-v2.users.list", "X",
                                  "a" * 128, "9lives"])
def test_names_openai_and_mcp_use_are_card_names(name):
    card = ToolCard(name=name, kind="function", description="d")
    assert card.to_transformers()["function"]["name"] == name and card.to_mcp()["name"] == name
    jsonschema.validate(card.to_openai(), OPENAI_TOOL)  # mapped where OpenAI forbids it
    jsonschema.validate(card.to_mcp(), MCP_TOOL)


@pytest.mark.parametrize("name, problem", [
    ("", "must not be empty"), ("has space", "' ' not allowed"), ("a/b", "'/' not allowed"),
    ("café", "'é' not allowed"), ("a" * 129, "129 characters, over the 128 that MCP allows")])
def test_names_no_format_accepts_are_refused(name, problem):
    with pytest.raises(ValueError, match=problem):
        ToolCard(name=name, kind="function", description="d")


def test_openai_names_map_one_to_one_and_calls_map_back():
    names = ["math.factorial", "math_factorial", "fetch_DNA", "a" * 100, "a" * 100 + ".x", "x.y.z", "x_y.z"]
    openai = ToolNames(names, "openai")
    shown = [openai.exported(n) for n in names]
    assert len(set(shown)) == len(names) and all(fits(s, "openai") for s in shown)
    assert openai.exported("math_factorial") == "math_factorial" and openai.exported("fetch_DNA") == "fetch_DNA"
    assert openai.exported("math.factorial") != "math_factorial"  # taken by a card's own name
    assert openai.exported("x.y.z") == "x_y_z" and len(openai.exported("a" * 100)) == 64
    assert {openai.internal(s) for s in shown} == set(names)
    assert openai.internal("not_a_tool") == "not_a_tool"
    assert openai.changed == {n: s for n, s in zip(names, shown) if n != s}
    # a call written under the exported name parses back to the card's name, arguments untouched
    for name in names:
        text = render_call(ToolCall(name=openai.exported(name), arguments={"q": "ü", "n": [1, {"k": None}]}))
        [call] = parse_tool_calls(text, openai)[1]
        assert call == ToolCall(name=name, arguments={"q": "ü", "n": [1, {"k": None}]})
    # MCP allows every card name; the same set maps to itself
    assert ToolNames(names, "mcp").changed == {}
    assert export_name("math.factorial", "openai") == "math_factorial"  # a card on its own: no collision known


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(NAME_CHARS, min_size=1, max_size=128), min_size=1, max_size=12, unique=True))
def test_any_set_of_card_names_maps_one_to_one(names):
    openai = ToolNames(names, "openai")
    shown = [openai.exported(n) for n in names]
    assert len(set(shown)) == len(names) and all(fits(s, "openai") for s in shown)
    assert [openai.internal(s) for s in shown] == names
    assert all(openai.exported(n) == n for n in names if fits(n, "openai"))  # a name that fits is kept


def test_mcp_names_a_card_cannot_take_are_mapped_and_kept_for_the_server():
    card = ToolCard.from_mcp({"name": "files/read file", "description": "Read.", "inputSchema": {"type": "object"}},
                             kind="mcp", backend={"command": "srv"})
    assert card.name == "files_read_file" == card_name("files/read file")
    assert card.backend == {"command": "srv", "tool": "files/read file"}  # calls go out under the server's name
    assert card.normalized == ["name: 'files/read file' -> 'files_read_file'"]


# ---------------------------------------------------------------------------------------------- loose types
LOOSE = {"type": "function", "function": {
    "name": "lab.sequence_DNA", "description": "Sequence a sample.",
    "parameters": {"type": "dict", "properties": {
        "sample": {"type": "String", "description": "sample id"},
        "depth": {"type": "float", "default": 30},
        "reads": {"type": "long"},
        "region": {"type": "tuple", "items": {"type": "integer"}, "description": "start and end"},
        "meta": {"type": "any"},
        "tags": {"type": "List[str]"},
        "note": {"type": "Optional[str]"},
        "counts": {"type": "Dict[str, int]"},
        "pair": {"type": "Tuple[int, float]"},
        "mixed": {"type": ["str", "None"]},
        "options": {"type": "dict", "properties": {"fast": {"type": "bool", "required": True},
                                                   "level": {"type": "int", "enum": [1, 2, 3]}}},
        "points": {"type": "array", "items": [{"type": "double"}, {"type": "double"}]}},
        "required": ["sample"]}}}


def test_loose_types_become_json_schema_and_the_changes_are_listed():
    card = ToolCard.from_openai(LOOSE)
    assert card.name == "lab.sequence_DNA" and card.kind == "function" and card.backend == {}
    assert card.parameters == {"type": "object", "required": ["sample"], "properties": {
        "sample": {"type": "string", "description": "sample id"},
        "depth": {"type": "number", "default": 30},
        "reads": {"type": "integer"},
        "region": {"type": "array", "items": {"type": "integer"}, "description": "start and end"},
        "meta": {},
        "tags": {"type": "array", "items": {"type": "string"}},
        "note": {"type": ["string", "null"]},
        "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
        "pair": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "number"}], "minItems": 2,
                 "maxItems": 2},
        "mixed": {"type": ["string", "null"]},
        "options": {"type": "object", "required": ["fast"], "properties": {
            "fast": {"type": "boolean"}, "level": {"type": "integer", "enum": [1, 2, 3]}}},
        "points": {"type": "array", "prefixItems": [{"type": "number"}, {"type": "number"}]}}}
    assert card.normalized == [
        "parameters.type: 'dict' -> 'object'",
        "parameters.properties.sample.type: 'String' -> 'string'",
        "parameters.properties.depth.type: 'float' -> 'number'",
        "parameters.properties.reads.type: 'long' -> 'integer'",
        "parameters.properties.region.type: 'tuple' -> 'array'",
        "parameters.properties.meta.type: 'any' -> (any value)",
        "parameters.properties.tags.type: 'List[str]' -> 'array' with items",
        "parameters.properties.note.type: 'Optional[str]' -> ['string', 'null']",
        "parameters.properties.counts.type: 'Dict[str, int]' -> 'object' with additionalProperties",
        "parameters.properties.pair.type: 'Tuple[int, float]' -> 'array' with maxItems, minItems, prefixItems",
        "parameters.properties.mixed.type: ['str', 'None'] -> ['string', 'null']",
        "parameters.properties.options.type: 'dict' -> 'object'",
        "parameters.properties.options.properties.fast.required: a boolean -> the object's required list",
        "parameters.properties.options.properties.fast.type: 'bool' -> 'boolean'",
        "parameters.properties.options.properties.level.type: 'int' -> 'integer'",
        "parameters.properties.points.items: a list -> prefixItems",
        "parameters.properties.points.prefixItems.0.type: 'double' -> 'number'",
        "parameters.properties.points.prefixItems.1.type: 'double' -> 'number'",
    ]
    assert card.check_arguments({"sample": "S1", "pair": [1, 2.5], "note": None, "options": {"fast": True}}) is None
    assert "at pair" in card.check_arguments({"sample": "S1", "pair": [1, 2, 3]})
    assert "'fast' is a required property" in card.check_arguments({"sample": "S1", "options": {}})
    # nothing to normalise: nothing listed, the definition comes back as it was
    clean = ToolCard.from_openai(card.to_transformers())
    assert clean == card and clean.normalized == []


def test_unknown_types_and_bad_definitions_name_the_place():
    bad = {"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "integr"}}}}
    with pytest.raises(CardError, match=r"<openai f>:0: parameters.properties.x.type: unknown type 'integr'"):
        ToolCard.from_openai(bad)
    with pytest.raises(CardError, match="expected {'type': 'function'"):
        ToolCard.from_openai({"type": "function", "function": {"description": "no name"}})
    with pytest.raises(CardError, match="no name: pass name= or give the schema a 'title'"):
        ToolCard.from_json_schema({"type": "object"})


def test_from_json_schema_and_from_mcp_agree_with_from_openai():
    ref = ToolCard.from_openai(LOOSE)
    schema = LOOSE["function"]["parameters"]
    assert ToolCard.from_json_schema(schema, name="lab.sequence_DNA", description="Sequence a sample.") == ref
    titled = ToolCard.from_json_schema({**schema, "title": "lab.sequence_DNA"}, description="Sequence a sample.")
    assert titled.name == "lab.sequence_DNA" and titled.parameters["title"] == "lab.sequence_DNA"
    mcp_tool = {"name": "lab.sequence_DNA", "description": "Sequence a sample.", "inputSchema": schema}
    assert ToolCard.from_mcp(mcp_tool) == ref
    assert ToolCard.from_mcp(ref.to_mcp()) == ref  # export, import: the same card
    mcp = pytest.importorskip("mcp")
    assert ToolCard.from_mcp(mcp.types.Tool(name="lab.sequence_DNA", description="Sequence a sample.",
                                            input_schema=schema)) == ref


# ---------------------------------------------------------------------------------------------- schema-only
def test_a_card_known_only_by_its_schema_is_listed_rendered_checked_and_bound_later():
    card = ToolCard.from_openai(LOOSE)
    assert validate_cards([card]) == []  # builds: nothing to import
    box = Toolbox.from_cards([card])
    assert box.names == ["lab.sequence_DNA"]
    prompt = system_text("", box.schemas())
    assert '"name": "lab.sequence_DNA"' in prompt and '"depth": {"type": "number", "default": 30}' in prompt
    [obs] = box.call_many_sync([ToolCall(name="lab.sequence_DNA", arguments={"depth": 1})])
    assert obs.error_kind == "schema_violation" and "'sample' is a required property" in obs.error
    assert obs.error.endswith(card.check_arguments({"depth": 1}).split(": ", 1)[1])
    [obs] = box.call_many_sync([ToolCall(name="lab.sequence_DNA", arguments={"sample": "S1"})])
    assert obs.error_kind == "tool_failure" and "no implementation" in obs.error
    tool = bind(card, lambda sample, **rest: f"sequenced {sample}")
    assert Toolbox([tool]).call_many_sync([ToolCall(name="lab.sequence_DNA", arguments={"sample": "S1"})])[0] \
        .content == "sequenced S1"


# ---------------------------------------------------------------------------------------------- validate_cards
def test_validate_cards_takes_cards_dicts_and_paths_together(tmp_path):
    good = ToolCard(name="ok", kind="function", description="d")
    (tmp_path / "ok.yaml").write_text("name: ok\nkind: function\ndescription: from a file\n")
    problems = [str(p) for p in validate_cards([good, {"name": "bad name", "kind": "function"},
                                                {"kind": "nope", "description": "d"}, tmp_path, 42])]
    assert problems == [
        "<card bad name>:0: name: ' ' not allowed: a name uses letters, digits, '_', '-' and '.' (what OpenAI and "
        "MCP tool names use)",
        "<card bad name>:0: description: required field is missing",
        "<card #2>:0: name: required field is missing",
        "<card #2>:0: kind: Input should be 'function', 'python', 'search', 'llm', 'replay', 'simulated' or 'mcp'",
        f"{tmp_path / 'ok.yaml'}:1: name: duplicate tool name 'ok' (also in <card ok>)",
        "<item #4>:0: (card): expected a card file or folder, a ToolCard or a dict, got int",
    ]
    broken = ToolCard(name="b", kind="function", description="d", backend={"callable": "no_such_mod:f"})
    assert [p.field for p in validate_cards(broken)] == ["backend.callable"]
    assert validate_cards(broken, build=False) == []


# ---------------------------------------------------------------------------------------------- YAML round trip
AWKWARD = ["a\x07b", "x\r\ny", "p\u2028q\nr", "a\x85\nb", "\x1b\nz", "\ufeffbom", "tab\there\n\tnext", " lead\nx",
           "trail \nx", "x\n\n", "\n", "null", "123", "- item", "# not a comment", "key: value", "'q'", '"dq"',
           "\u2029", "\x00", "é😀\n\x9f", "line\r", "a\x7fb"]


def _card_with(text: str) -> ToolCard:
    return ToolCard(name="t", kind="function", description=text, tags=[text],
                    parameters={"type": "object", "properties": {text: {"type": "string", "enum": [text]}}})


@pytest.mark.parametrize("text", AWKWARD, ids=range(len(AWKWARD)))
def test_awkward_strings_round_trip_exactly(text, tmp_path):
    card = _card_with(text)
    assert load_card(save_card(card, tmp_path / "t.yaml")) == card
    # and through a file that exists (its comments kept, only the value rewritten)
    (tmp_path / "c.yaml").write_text("# keep me\nname: t\nkind: function\ndescription: plain\n")
    loaded = load_card(tmp_path / "c.yaml")
    changed = loaded.model_copy(update={"description": text})
    text_out = save_card(changed, tmp_path / "c.yaml").read_text()
    assert text_out.startswith("# keep me\n") and load_card(tmp_path / "c.yaml") == changed


@settings(max_examples=150, deadline=None)
@given(st.text(min_size=1, max_size=40))
def test_any_string_round_trips_exactly(tmp_path_factory, text):
    card = _card_with(text)
    path = save_card(card, tmp_path_factory.mktemp("rt") / "t.yaml")
    assert load_card(path) == card


# ---------------------------------------------------------------------------------------------- a corpus
WORDS = ["get", "fetch", "list", "create", "update", "search", "calc", "weather", "stock", "price", "user", "order",
         "DNA", "sequence", "factorial", "area", "circle", "flight", "hotel", "book", "translate", "email", "ID",
         "v2", "geo", "api", "lookup", "convert", "Currency", "movie", "recipe", "event", "playlist", "song"]
MODULES = ["math", "finance", "geometry", "biology", "travel", "music", "api.v1", "spotify", "weather_service"]


def _name(rng: random.Random) -> str:
    words = rng.sample(WORDS, rng.randint(1, 4))
    style = rng.randrange(6)
    if style == 0:
        base = "_".join(w.lower() for w in words)
    elif style == 1:
        base = words[0].lower() + "".join(w[:1].upper() + w[1:] for w in words[1:])  # camelCase
    elif style == 2:
        base = "_".join(words)  # fetch_DNA_sequence
    elif style == 3:
        base = "-".join(w.lower() for w in words)
    elif style == 4:
        base = "_".join(words) + str(rng.randint(1, 99))
    else:
        base = "_".join(w.lower() for w in words) + "_" + "x" * rng.randint(40, 80)  # past 64 characters
    if rng.random() < 0.5:
        base = rng.choice(MODULES) + "." + base  # math.factorial
    return base[:128]


LOOSE_NAMES = {"string": ["string", "str", "String", "text"], "integer": ["integer", "int", "long", "Integer"],
               "number": ["number", "float", "double", "Float"], "boolean": ["boolean", "bool", "Boolean"]}


def _text(rng: random.Random) -> str:
    pool = string.ascii_letters + " éü😀-_.,:'\"\\/{}[]<>\n"
    return "".join(rng.choice(pool) for _ in range(rng.randint(0, 12)))


def _prop(rng: random.Random, depth: int) -> tuple[dict, object, str]:
    """(a loosely written property schema, a value it admits, the JSON type that value has)."""
    kind = rng.choice(["string", "integer", "number", "boolean", "enum", "any", "array", "tuple", "object",
                       "optional", "list_generic", "dict_generic"][:12 if depth < 3 else 6])
    desc = {"description": _text(rng)} if rng.random() < 0.7 else {}
    if kind in LOOSE_NAMES:
        value = {"string": lambda: _text(rng), "integer": lambda: rng.randint(-10**6, 10**6),
                 "number": lambda: rng.choice([rng.uniform(-1e3, 1e3), rng.randint(-5, 5)]),
                 "boolean": lambda: rng.random() < 0.5}[kind]()
        return {"type": rng.choice(LOOSE_NAMES[kind]), **desc}, value, kind
    if kind == "enum":
        options = rng.sample(["celsius", "fahrenheit", "kelvin", "metric", "imperial", "ASC", "DESC"], 3)
        return {"type": rng.choice(LOOSE_NAMES["string"]), "enum": options, **desc}, rng.choice(options), "string"
    if kind == "any":
        return {"type": rng.choice(["any", "Any"]), **desc}, rng.choice([1, "x", None, [1], {"a": 2}]), "any"
    if kind in ("array", "tuple"):
        item, value, _ = _prop(rng, depth + 1)
        values = [value] * rng.randint(0, 3)
        return {"type": rng.choice(["array", "list", "tuple"] if kind == "array" else ["tuple"]), "items": item,
                **desc}, values, "array"
    if kind == "object":
        schema, value = _object(rng, depth + 1, rng.choice(["dict", "object", "Dict"]))
        return {**schema, **desc}, value, "object"
    if kind == "optional":
        return {"type": "Optional[str]", **desc}, rng.choice([None, _text(rng)]), "optional"
    if kind == "list_generic":
        return {"type": rng.choice(["List[int]", "list[int]", "typing.List[int]"]), **desc}, [1, 2], "array"
    return {"type": "Dict[str, float]", **desc}, {"a": 1.5}, "object"


def _object(rng: random.Random, depth: int, written: str) -> tuple[dict, dict]:
    props, values, required = {}, {}, []
    for _ in range(rng.randint(0, 6 if depth == 0 else 3)):
        key = rng.choice(["query", "location", "unit", "n", "limit", "IDs", "start.date", "user-id", "x",
                          "deep_nested_field", "Symbol", "currency", "ratio", "flags"]) + rng.choice(["", "2", "_b"])
        prop, value, _ = _prop(rng, depth)
        if key in props:
            continue
        props[key] = prop
        if rng.random() < 0.6:
            required.append(key)
            values[key] = value
        elif rng.random() < 0.5:
            values[key] = value
    schema = {"type": written, "properties": props}
    if required:
        schema["required"] = sorted(set(required))
    return schema, values


def corpus(n: int, seed: int = 0) -> list[tuple[dict, dict]]:
    """`n` OpenAI function definitions written as function-calling data sets write them, each with
    arguments it admits (built beside the schema, not derived from the normalised one)."""
    rng = random.Random(seed)
    out, names = [], set()
    while len(out) < n:
        name = _name(rng)
        if name in names:
            continue
        names.add(name)
        params, args = _object(rng, 0, rng.choice(["dict", "object"]))
        fn = {"name": name, "description": rng.choice([_text(rng), "Fetch it.\r\nTwo lines\u2028 and a \x07 bell."]),
              "parameters": params}
        out.append(({"type": "function", "function": fn} if rng.random() < 0.5 else fn, args))
    # names that collide once OpenAI's rules map them
    out.append(({"name": "math.factorial", "parameters": {"type": "dict", "properties": {}}}, {}))
    out.append(({"name": "math_factorial", "parameters": {"type": "dict", "properties": {}}}, {}))
    return out


def test_a_corpus_of_real_world_style_schemas_converts_exports_and_round_trips(tmp_path):
    specs = corpus(300)
    cards = [ToolCard.from_openai(spec) for spec, _ in specs]  # every one converts (raises otherwise)
    assert len({c.name for c in cards}) == len(cards)
    assert sum(bool(c.normalized) for c in cards) > 200  # loose types were there to normalise
    assert validate_cards(cards) == []
    openai = ToolNames([c.name for c in cards], "openai")
    assert len(openai.changed) > 80  # dots and long names
    formats = {"openai": jsonschema.Draft202012Validator(OPENAI_TOOL), "mcp": jsonschema.Draft202012Validator(MCP_TOOL)}
    for card, (_, args) in zip(cards, specs):
        jsonschema.Draft202012Validator.check_schema(card.parameters)
        shown = openai.exported(card.name)
        for exported, fmt in [(card.to_openai(name=shown), "openai"), (card.to_transformers(), None),
                              (card.to_mcp(), "mcp")]:
            if fmt is not None:
                formats[fmt].validate(exported)
            assert json.loads(json.dumps(exported)) == exported
        assert card.check_arguments(args) is None, (card.name, args)
        # a call rendered under either name parses back to the card's name and the same arguments
        for written, names in [(card.name, None), (shown, openai)]:
            [call] = parse_tool_calls(render_call(ToolCall(name=written, arguments=args)), names)[1]
            assert call.name == card.name and call.arguments == args
        # the exports import back to the same card (exports strip the description's outer whitespace;
        # a blank one imports as the name, as a definition without a description does)
        same = card.model_copy(update={"description": card.to_mcp()["description"] or card.name})
        assert ToolCard.from_openai(card.to_transformers()) == same == ToolCard.from_mcp(card.to_mcp())
    for i, card in enumerate(cards[::8]):  # YAML: a sample (ruamel takes ~10 ms a card)
        assert load_card(save_card(card, tmp_path / f"{i}.yaml")) == card


def test_cli_import_writes_schema_only_cards_and_refuses_to_overwrite(tmp_path, capsys):
    records = tmp_path / "bench.jsonl"
    records.write_text("\n".join(json.dumps({"id": i, "function": [LOOSE["function"], spec]})
                                 for i, (spec, _) in enumerate(corpus(5, seed=1))) + "\n")
    out = tmp_path / "cards"
    assert main(["cards", "import", str(records), "--out", str(out), "--changes"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("wrote 8 card(s) to")  # LOOSE repeated in every record: kept once
    assert "lab.sequence_DNA: parameters.properties.depth.type: 'float' -> 'number'" in printed
    assert load_card(out / "lab.sequence_DNA.yaml") == ToolCard.from_openai(LOOSE)
    assert main(["cards", "validate", str(out)]) == 0
    capsys.readouterr()
    assert main(["cards", "import", str(records), "--out", str(out)]) == 2
    assert "8 card file(s) exist" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text(json.dumps([{"name": "f", "parameters": {"type": "object", "properties": {
        "x": {"type": "integr"}}}}]))
    assert main(["cards", "import", str(tmp_path / "bad.json"), "--out", str(tmp_path / "none")]) == 2
    assert "bad.json[0]:0: parameters.properties.x.type: unknown type 'integr'" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()  # nothing written
    assert main(["cards", "export", str(out), "--format", "openai", "--out", str(tmp_path / "o.json")]) == 0
    assert "exported as 'lab_sequence_DNA'" in capsys.readouterr().err
    exported = json.loads((tmp_path / "o.json").read_text())
    assert "lab_sequence_DNA" in {t["function"]["name"] for t in exported}
    assert build_tool(load_card(out / "lab.sequence_DNA.yaml")).bound is False
