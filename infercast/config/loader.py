"""Reading a fleet file: the size, depth and duplicate-key checks of the YAML reader, validation into a
`FleetConfig`, the bounds every number is held to, and error messages that name each bad key (and, for a key
in the wrong section, where it belongs)."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from .base import MAX_BYTES, MAX_DURATION_SECONDS, MAX_FLEET_FILE_BYTES, MAX_FLEET_FILE_DEPTH, MAX_NUMBER, ConfigError
from .fleet import FleetConfig

#: what a section of the fleet file is for, when a misplaced key's hint points there
_SECTION_NOTES = {
    "versions.<version>.model": "the twin's model shape",
    "twin": "the twin's constants",
    "scenario": "the twin's traffic",
}


def _submodels(annotation: Any, name: str) -> list[tuple[type[BaseModel], str]]:
    """The models a field holds, each with the path step to reach it: `.<pool>` for a dict's values, `.<i>` for a
    tuple's items, nothing for the model itself."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [(annotation, "")]
    args = get_args(annotation)
    origin = get_origin(annotation)
    if origin is dict and len(args) == 2:
        return [(m, f".<{name.removesuffix('s')}>{step}") for m, step in _submodels(args[1], name)]
    if origin is tuple:
        return [(m, f".<i>{step}") for m, step in _submodels(args[0], name)] if args else []
    return [found for a in args for found in _submodels(a, name)]  # a union or Annotated: each of its arms


def _field_places(model: type[BaseModel], prefix: str = "", depth: int = 0) -> dict[str, list[str]]:
    """Every key of the fleet-file schema -> the sections where it is a field (`versions.<version>.model`)."""
    places: dict[str, list[str]] = {}
    for name, field in model.model_fields.items():
        places.setdefault(name, []).append(prefix)
        if depth < 8:
            path = f"{prefix}.{name}" if prefix else name
            for sub, step in _submodels(field.annotation, name):
                for key, where in _field_places(sub, path + step, depth + 1).items():
                    places.setdefault(key, []).extend(w for w in where if w not in places[key])
    return places


_FIELD_PLACES: dict[str, list[str]] | None = None


def misplaced_key_hint(loc: tuple[str | int, ...]) -> str | None:
    """For an unknown key that is a field elsewhere in the fleet file: where it belongs, e.g. "'layers' belongs in
    versions.<version>.model (the twin's model shape)"; None when it is a field nowhere (a typo)."""
    global _FIELD_PLACES
    if _FIELD_PLACES is None:
        _FIELD_PLACES = _field_places(FleetConfig)
    key = str(loc[-1])
    here = ".".join(str(p) for p in loc[:-1])
    places = [
        w
        for w in _FIELD_PLACES.get(key, [])
        if not re.fullmatch(re.sub(r"<[^>]+>", "[^.]+", re.escape(w)), here)  # `<pool>` matches any pool name
    ]
    if not places:
        return None
    named = [f"{w or 'the top level'}" + (f" ({_SECTION_NOTES[w]})" if w in _SECTION_NOTES else "") for w in places]
    shown = " or ".join(named[:3]) + (f" (and {len(named) - 3} more)" if len(named) > 3 else "")
    return f"{key!r} belongs in {shown}"


#: keys a release renamed or merged: (where, key) -> what to write instead
RENAMED_KEYS: dict[tuple[str, str], str] = {
    ("actuator", k): "the fast and predictive loops ran the same tick; set actuator.interval_seconds instead"
    for k in ("fast_interval_seconds", "predictive_interval_seconds")
}


def unknown_key_message(loc: tuple[str | int, ...]) -> str:
    """What to tell a user about a key the fleet file may not have here: a key a release renamed, a field of
    another section, or a typo."""
    renamed = RENAMED_KEYS.get((".".join(str(p) for p in loc[:-1]), str(loc[-1]))) if loc else None
    if renamed:
        return f"no longer a field: {renamed}"
    hint = misplaced_key_hint(loc)
    return f"not a field here; {hint}" if hint else "unknown key (typo?)"


def _format_errors(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = unknown_key_message(tuple(e["loc"]))
        lines.append(f"  {loc}: {msg}")
    return "\n".join(lines)


def parse_config(data: Any, source: str = "<config>") -> FleetConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level, got {type(data).__name__}")
    # top-level `x-...` keys are the file's own (anchors for merge keys, `x-pool: &pool {...}` then `<<: *pool`,
    # as Docker Compose has them): not fields, never read
    data = {k: v for k, v in data.items() if not (isinstance(k, str) and k.startswith("x-"))}
    try:
        cfg = FleetConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(f"{source}: invalid fleet configuration:\n{_format_errors(err)}") from None
    except RecursionError:
        raise ConfigError(f"{source}: invalid fleet configuration: nested deeper than a fleet file can be") from None
    problems = check_bounds(cfg)
    if problems:
        raise ConfigError(f"{source}: invalid fleet configuration:\n" + "\n".join(f"  {p}" for p in problems))
    return cfg


def _bound_of(key: str) -> tuple[float, str]:
    """(the most a number under `key` may be, how to say it)."""
    if key.endswith("_seconds"):
        return MAX_DURATION_SECONDS, "a year (31,622,400 s)"
    if key.endswith("_bytes"):
        return float(MAX_BYTES), "1 TiB"
    return MAX_NUMBER, f"{MAX_NUMBER:,.0f}"


def check_bounds(cfg: BaseModel) -> list[str]:
    """Every number of a validated fleet file finite and within its bound (`_bound_of`: a duration a year, a
    size 1 TiB, anything else MAX_NUMBER; a field's own tighter bound was checked by validation), as
    `key.path: problem` lines.  A `seed` may be any integer."""
    problems: list[str] = []

    def walk(value: Any, path: str, key: str) -> None:
        if isinstance(value, BaseModel):
            for name in type(value).model_fields:
                walk(getattr(value, name), f"{path}.{name}" if path else name, name)
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(v, f"{path}.{k}", key)  # a mapping's values are bounded as its key's: slo_seconds.urgent
        elif isinstance(value, tuple | list):
            for i, v in enumerate(value):
                walk(v, f"{path}.{i}", key)
        elif isinstance(value, int | float) and not isinstance(value, bool) and key != "seed":
            if isinstance(value, float) and not math.isfinite(value):
                problems.append(f"{path}: must be a finite number, got {value!r}")
                return
            bound, said = _bound_of(key)
            if value > bound:
                problems.append(f"{path}: {value:g} is above the most a fleet file may give here, {said}")

    walk(cfg, "", "")
    return problems


def load_config(path: str | Path) -> FleetConfig:
    """Read and validate a fleet file, or a shipped example named without a suffix (`flash-sale`); raises
    ConfigError with every problem, or returns the whole config."""
    p = Path(path)
    if not p.suffix and not p.exists():
        p = resolve_scenario(str(path))
    try:
        with p.open("rb") as f:  # at most one byte over the cap is read: a FIFO or a growing file cannot hold us
            raw = f.read(MAX_FLEET_FILE_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such file") from None
    except OSError as e:
        raise ConfigError(f"{p}: cannot read: {e}") from None
    if len(raw) > MAX_FLEET_FILE_BYTES:
        raise ConfigError(
            f"{p}: larger than a fleet file can be (over {MAX_FLEET_FILE_BYTES // 1024} KiB); refused before parsing"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{p}: cannot read: {e}") from None
    if _DEEP_FLOW.search(text):  # the reader would scan every bracket before the depth check sees one
        raise ConfigError(
            f"{p}: not valid YAML: nested deeper than a fleet file can be (over {MAX_FLEET_FILE_DEPTH} levels of "
            "brackets in a row)"
        )
    try:
        data = yaml.load(text, Loader=UniqueKeyLoader)  # a SafeLoader subclass
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML: {e}") from None
    except RecursionError:  # "{" * 5000: the reader recurses once per level (found by bench/hostile.py)
        raise ConfigError(f"{p}: not valid YAML: nested deeper than the reader can follow") from None
    return parse_config(data, str(p))


#: more opening brackets in a row than a fleet file nests: PyYAML's scanner reads all of `{` x 5000 looking for a
#: simple key (1.2 s on a busy machine) before the composer's depth check can stop it
_DEEP_FLOW = re.compile(r"(?:[\[{]\s*){" + str(MAX_FLEET_FILE_DEPTH + 1) + "}")


class UniqueKeyLoader(yaml.SafeLoader):
    """`yaml.safe_load`, except that a key repeated in one mapping is an error naming its line (YAML's own rule;
    PyYAML silently keeps the last value, so `nodes: 4` then `nodes: 400` ran with 400), and a document nested
    deeper than MAX_FLEET_FILE_DEPTH is refused as soon as the reader gets there (`"{" * 5000` took 2.6 s to fail
    in the reader's recursion).  Merge keys (`<<: *base`, `<<: [*a, *b]`) work as YAML 1.1 says: the keys written
    beside them override the merged ones, which is no repeat."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_FLEET_FILE_DEPTH:
                mark = self.peek_event().start_mark
                raise yaml.composer.ComposerError(
                    None, None, f"nested deeper than a fleet file can be (over {MAX_FLEET_FILE_DEPTH} levels)", mark
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<`: flattened by the base class
                continue
            try:
                key = self.construct_object(key_node, deep=True)
                hash(key)
            except TypeError:
                continue  # an unhashable key: the base class reports it
            line = key_node.start_mark.line + 1
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {str(key)[:60]!r} (line {line}; first on line {seen[key]})",
                    key_node.start_mark,
                )  # fmt: skip
            seen[key] = line
        return super().construct_mapping(node, deep)


def resolve_scenario(name_or_path: str) -> Path:
    """`flash-sale` -> the shipped examples/flash-sale.yaml; a path is returned as is."""
    from infercast.resources import example_fleet, examples_dir

    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        return p
    candidate = example_fleet(name_or_path)
    if candidate.exists():
        return candidate
    known = sorted(x.stem for x in examples_dir().glob("*.yaml"))
    raise ConfigError(f"unknown scenario {name_or_path!r}; known: {', '.join(known)} (or give a .yaml path)")
