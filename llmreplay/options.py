"""Command-line options declared once, as metadata on the config dataclass fields they fill.

Flag, type, help, parser and check sit on the field; its default is the default; click options are
built from them. No click (or anything heavy) at import: the mitmproxy process reads them too.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from dataclasses import MISSING, dataclass
from pathlib import Path

from llmreplay.errors import BadInput

KEY = "llmreplay.option"
NOT_A_FLAG = object()  # Option.flag_value of an option that takes a value
# The bound of every int option that declares none: counts, seeds, sizes and ports are never negative,
# and a value past 2^53 would overflow int64 arithmetic or the JSON of run.json long after the flag.
INT_BOUNDS = (0, 2**53)


@dataclass(frozen=True, slots=True)
class Option:
    """One option: `parse` turns the given value into the field's, `check` refuses a bad final value."""

    help: str
    flags: tuple[str, ...] = ()  # empty: "--" and the field name with dashes
    type: type = str  # int, float, str or bool (a --yes/--no switch)
    choices: tuple[str, ...] = ()
    int_range: tuple[int, int] | None = None  # None: INT_BOUNDS
    metavar: str | None = None
    parse: Callable[[object, str], object] | None = None  # (given value, flag) -> field value
    check: Callable[[object, str], None] | None = None  # (field value, flag); None values skip it
    show: Callable[[object], str] | str | None = None  # how help states the default; None: str()
    flag_value: object = NOT_A_FLAG  # an on/off flag: the field's value when the flag is given
    multiple: bool = False
    envvar: tuple[str, ...] = ()
    required: bool = False
    hidden: bool = False
    cli: bool = True  # False: a setting of the mitmproxy addon only


def option(default=MISSING, *, default_factory=MISSING, repr: bool = True, **declared) -> dataclasses.Field:
    """A dataclass field carrying its Option (the keyword arguments of Option)."""
    return dataclasses.field(
        default=default, default_factory=default_factory, repr=repr, metadata={KEY: Option(**declared)}
    )


@dataclass(frozen=True, slots=True)
class Declared:
    """A field with an Option, found at `path` (nested config dataclasses included)."""

    path: tuple[str, ...]
    option: Option
    default: object

    @property
    def name(self) -> str:
        return self.path[-1]

    @property
    def flags(self) -> tuple[str, ...]:
        return self.option.flags or ("--" + self.name.replace("_", "-"),)

    @property
    def flag(self) -> str:
        """The name a message uses: the long flag (of a --yes/--no pair, the first)."""
        return self.flags[-1].split("/")[0]


def declared(cls, path: tuple[str, ...] = ()) -> Iterator[Declared]:
    """Every field of `cls` that declares an Option, in field order; nested dataclasses are walked."""
    for f in dataclasses.fields(cls):
        found = f.metadata.get(KEY)
        if found is not None:
            default = f.default if f.default_factory is MISSING else f.default_factory()
            yield Declared((*path, f.name), found, default)
        elif isinstance(f.default_factory, type) and dataclasses.is_dataclass(f.default_factory):
            yield from declared(f.default_factory, (*path, f.name))


def flag_of(cls, name: str) -> str:
    """The flag of the field `name` of `cls`, for messages about it."""
    return next(d.flag for d in declared(cls) if d.name == name)


def click_options(cls, only: frozenset[str] | set[str] | None = None):
    """A decorator adding a click option for every declared field of `cls` (or of those in `only`)."""

    def decorate(command):
        for item in reversed([d for d in declared(cls) if d.option.cli and (only is None or d.name in only)]):
            command = _click_option(item)(command)
        return command

    return decorate


def _click_option(item: Declared):
    import click

    opt = item.option
    kwargs: dict = {
        "help": _help(item),
        "required": opt.required,
        "hidden": opt.hidden,
        "metavar": opt.metavar,
    }
    if opt.envvar:
        kwargs["envvar"] = list(opt.envvar)
    if opt.flag_value is not NOT_A_FLAG:
        kwargs.update(is_flag=True, default=False)
    elif opt.type is bool:
        kwargs["default"] = None
    else:
        kwargs.update(type=_click_type(click, opt), multiple=opt.multiple)
        if not opt.required:
            kwargs["default"] = None  # not given: None, so the field keeps its default
    return click.option(*item.flags, item.name, **kwargs)


def _click_type(click, opt: Option):
    if opt.choices:
        return click.Choice(opt.choices)
    if opt.type is int:
        return click.IntRange(*(opt.int_range or INT_BOUNDS))
    return opt.type


def _help(item: Declared) -> str:
    opt = item.option
    if opt.required or opt.flag_value is not NOT_A_FLAG:
        return opt.help
    shown = opt.show(item.default) if callable(opt.show) else opt.show
    if shown is None and item.default not in (None, (), ""):
        shown = _plain(item.default, opt)
    return f"{opt.help} [default: {shown}]" if shown else opt.help


def _plain(value, opt: Option) -> str:
    if isinstance(value, bool) and opt.type is bool:
        return opt.flags[0].split("/")[0 if value else 1].lstrip("-") if opt.flags else str(value).lower()
    if isinstance(value, tuple):
        return ", ".join(map(str, value))
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def given(cls, values: dict) -> dict[tuple[str, ...], object]:
    """The parsed values of the flags given, by field path; a flag not given (None, (), off) is absent."""
    found: dict[tuple[str, ...], object] = {}
    for item in declared(cls):
        value = values.get(item.name)
        if value is None or value == () or (item.option.flag_value is not NOT_A_FLAG and not value):
            continue
        if item.option.flag_value is not NOT_A_FLAG:
            value = item.option.flag_value
        elif item.option.multiple:
            value = tuple(value)
        found[item.path] = item.option.parse(value, item.flag) if item.option.parse else value
    return found


def build(cls, values: dict, **fixed):
    """`cls` from click's values: given flags over the field defaults, `fixed` fields as they are; checked."""
    config = assemble(cls, given(cls, values), fixed)
    check(config)
    return config


def assemble(cls, by_path: dict[tuple[str, ...], object], fixed: dict | None = None):
    """`cls` with the values at their field paths (nested dataclasses built from their defaults)."""
    kwargs = dict(fixed or {})
    for f in dataclasses.fields(cls):
        if (f.name,) in by_path:
            kwargs[f.name] = by_path[(f.name,)]
            continue
        inner = {path[1:]: value for path, value in by_path.items() if len(path) > 1 and path[0] == f.name}
        if inner:
            kwargs[f.name] = assemble(f.default_factory, inner)
    return cls(**kwargs)


def check(config) -> None:
    """Run every declared field's check on its value in `config`; the first failure is BadInput."""
    for item in declared(type(config)):
        value = config
        for name in item.path:
            value = getattr(value, name)
        if item.option.check is not None and value is not None:
            item.option.check(value, item.flag)
        if isinstance(value, float) and not math.isfinite(value):  # nan and inf pass most checks
            raise BadInput(f"{item.flag} {value}: must be a finite number")


def force_field() -> dataclasses.Field:
    """The `--force` field of a config that writes one output file (llmreplay.output_paths refuses without it)."""
    return option(False, flag_value=True, help="Replace the output file if it exists.")


# -- kinds of value: the keyword arguments an option of that kind takes -----------------------------
def as_path(text: str, flag: str) -> Path:
    return Path(text)


def duration(**bounds) -> dict:
    """A DURATION flag (600s, 10m, 24h) filling an `*_ns` field; `bounds` as llmreplay.durations takes."""

    def parse(text, flag):
        from llmreplay.durations import parse_duration_ns

        return parse_duration_ns(text, flag, **bounds)

    return {"metavar": "DURATION", "parse": parse, "show": _duration_text}


def duration_s(**bounds) -> dict:
    """A DURATION flag filling a field kept in (float) seconds."""

    def parse(text, flag):
        from llmreplay.durations import parse_duration_ns

        return parse_duration_ns(text, flag, **bounds) / 1e9

    return {"metavar": "DURATION", "parse": parse, "show": _seconds_text}


def _seconds_text(seconds: float | None) -> str | None:
    return None if seconds is None else _duration_text(round(seconds * 1e9))


def _duration_text(ns: int | None) -> str | None:
    if ns is None:
        return None
    from llmreplay.durations import format_duration

    return "0s" if ns == 0 else format_duration(ns)


def share(allow_all: bool = False) -> dict:
    """A PCT flag: '10%' or '0.1' -> 0.1; 100% (1) only when `allow_all`."""
    return {"metavar": "PCT", "parse": lambda text, flag: parse_share(text, flag, allow_all), "show": percent}


def percent(value: float) -> str:
    return f"{100 * value:g}%"


def parse_share(text: str, where: str, allow_all: bool = False) -> float:
    """'10%' or '0.1' -> 0.1; 100% (1) only when `allow_all`."""
    raw = str(text).strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise BadInput(f"{where}: {text!r} is not a share (write 10% or 0.1)") from None
    if not (0 <= value <= 1 if allow_all else 0 <= value < 1):
        upper = "100%" if allow_all else "below 100%"
        raise BadInput(f"{where}: {text!r} must be between 0% and {upper} (write 10% or 0.1)")
    return value


def factor(value: float, flag: str) -> None:
    """A time or load factor: finite and greater than 0."""
    if not (math.isfinite(value) and value > 0):
        raise BadInput(f"{flag} {value}: must be a finite number greater than 0")


def positive(value, flag: str) -> None:
    if value <= 0:
        raise BadInput(f"{flag}: must be > 0, got {value}")


def non_negative(value, flag: str) -> None:
    if value < 0:
        raise BadInput(f"{flag}: must be >= 0, got {value}")


def fraction(value: float, flag: str) -> None:
    """A share of requests, streams or steps: within [0, 1]."""
    if not 0.0 <= value <= 1.0:
        raise BadInput(f"{flag}: must be within [0, 1], got {value}")


def http_url(url: str, flag: str):
    """The one parser of a server URL (--target, --upstream, --server-metrics): http(s), a host, a port."""
    import urllib.parse

    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError as exc:
        raise BadInput(f"{flag} {url!r}: not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadInput(
            f"{flag} {url!r}: expected an http:// or https:// URL with a host, e.g. http://HOST:PORT"
        )
    if parts.username is not None or parts.password is not None:  # never echoed: it may be a password
        shown = urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
        raise BadInput(
            f"{flag} {shown!r}: the URL holds a user name or password, which would be written to run.json, "
            "manifests and process lists; pass credentials as --api-key or a header instead"
        )
    try:
        parts.port  # noqa: B018 (raises ValueError for a port that is not a number)
    except ValueError:
        raise BadInput(f"{flag} {url!r}: the port is not a number from 1 to 65535") from None
    return parts


def url() -> dict:
    """A URL flag, checked by http_url and kept as written."""
    return {"metavar": "URL", "parse": _checked_url}


def _checked_url(text: str, flag: str) -> str:
    http_url(text, flag)
    return text
