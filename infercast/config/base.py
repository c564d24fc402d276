"""The fleet file's building blocks: bounded number types, the maxima every key is checked against, the
error a bad file raises, the strict base model, and the checks several sections share (URLs, listen addresses,
priority shares)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

GIB = 1024**3
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "fp8": 1, "int8": 1}

Ratio = Annotated[float, Field(ge=0.0, le=1.0)]
PosFloat = Annotated[float, Field(gt=0.0)]
PosInt = Annotated[int, Field(gt=0)]
#: the most nodes one pool may have (the twin builds every node: 100,000,000 would grow its memory without end)
MAX_NODES_PER_POOL = 10_000
# Every count and rate has a maximum, so a typo of a few zeros cannot make a service allocate or loop without end: a
# value past it is a ConfigError naming the key and the bound ("Input should be less than or equal to ..."), rc 2.
# docs/security.md lists them.
#: requests per second: a traffic phase, the router's and a lane's token bucket, an announced event
MAX_RPS = 1_000_000.0
#: tokens of one request: context limits and splits, length distributions, the client's max_tokens, prefill chunks
MAX_TOKENS = 10_000_000
#: requests in one engine batch
MAX_BATCH = 100_000
#: a scenario's length, seconds (7 days)
MAX_SCENARIO_SECONDS = 7 * 86_400.0
#: phases of one stream, streams of a scenario, faults of a scenario
MAX_PHASES, MAX_STREAMS, MAX_FAULTS = 10_000, 100, 10_000
#: changes per rolling hour the guardrails may allow (one a second)
MAX_CHANGE_BUDGET_PER_HOUR = 3_600
# Every duration and count has an upper bound a human would accept, because a scheduler cannot run `.inf` or `1e308`
# seconds from now (the daemon would crash at start, or look active with every run failing).  The actuator's own
# timings have tight bounds of their own (an hour); any other `*_seconds` at most a year, any other number at most
# MAX_NUMBER, every number finite: `check_bounds` checks the whole validated file, naming the key.
#: the most any duration in the fleet file may be (a year), seconds
MAX_DURATION_SECONDS = 366 * 86_400.0
#: the actuator's loop interval, misfire grace and leader lease: an hour at most
MAX_ACTUATOR_SECONDS = 3_600.0
#: any other number (a count, a factor, a size): finite and at most this (bytes: MAX_BYTES; a seed: any integer)
MAX_NUMBER = 1e9
MAX_BYTES = 2**40
#: a fleet file is refused above this size before it is parsed (a 50 MB file of 700k keys takes minutes and GBs)
MAX_FLEET_FILE_BYTES = 1024 * 1024
#: and nested deeper than this (a fleet file is a handful of levels deep): refused as it is read, not after
MAX_FLEET_FILE_DEPTH = 64
Rps = Annotated[float, Field(gt=0.0, le=MAX_RPS)]
Tokens = Annotated[int, Field(gt=0, le=MAX_TOKENS)]


class ConfigError(ValueError):
    """A fleet file that cannot be used; the message lists every problem as `key.path: problem`."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_priority_shares(v: dict[str, float]) -> dict[str, float]:
    unknown = set(v) - {"urgent", "normal", "low"}
    if unknown:
        raise ValueError(f"unknown priority classes {sorted(unknown)}; use urgent, normal, low")
    if abs(sum(v.values()) - 1.0) > 1e-6:
        raise ValueError(f"priority shares must sum to 1, got {sum(v.values()):.3f}")
    return v


def _check_url(v: str | None, schemes: tuple[str, ...]) -> str | None:
    if v is not None and not v.startswith(schemes):
        raise ValueError(f"must start with {' or '.join(schemes)}, got {v!r}")
    return v


def parse_listen(value: str, default_host: str | None = None) -> tuple[str, int]:
    """`HOST:PORT` -> (host, port): the one parser of every listen address (fleet file and `--listen` flags).

    The port is digits in 0-65535; an IPv6 host may be bracketed (`[::1]:9400` -> `::1`).  An empty host is an
    error unless `default_host` is given (the predictor's `:9401` means loopback).  ValueError says what is wrong.
    """
    host, sep, port = value.rpartition(":")
    host = host.strip("[]") or (default_host or "")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected host:port, got {value!r}")
    return host, int(port)


def _check_listen(v: str) -> str:
    parse_listen(v)
    return v
