"""The one parser of header flags (`--header NAME:VALUE`, `--*-header-from-env NAME:ENV`) for every stage.

Light (no click, no pyarrow): the replay workers import it through replayer.config. Values are secrets:
no message here ever holds one.
"""

from __future__ import annotations

from llmreplay.errors import BadInput

_CONTROL = {"\r": "carriage return (CR)", "\n": "line feed (LF)", "\0": "NUL byte"}


def parse_headers(values: tuple[str, ...], flag: str) -> tuple[tuple[str, str], ...]:
    """`NAME:VALUE` strings -> (name, value) pairs, spaces around both trimmed."""
    pairs = []
    for value in values:
        name, sep, rest = value.partition(":")
        if not sep or not name.strip():
            raise BadInput(
                f"{flag}: expected NAME:VALUE, got a value without a name or colon (name {name.strip()!r})"
            )
        name, rest = name.strip(), rest.strip()
        bad = next((c for c in "\r\n\0" if c in name or c in rest), None)
        if bad is not None:
            raise BadInput(
                f"{flag} {name!r}: {'the name' if bad in name else 'the value'} holds a {_CONTROL[bad]} "
                "(a header is one line; it would split the request)"
            )
        if any(c.isspace() for c in name):
            raise BadInput(f"{flag} {name!r}: a header name cannot hold spaces")
        try:
            rest.encode("latin-1")
        except UnicodeEncodeError:
            raise BadInput(
                f"{flag} {name!r}: the value has characters HTTP/1.1 cannot carry (not Latin-1)"
            ) from None
        pairs.append((name, rest))
    return tuple(pairs)


def parse_env_headers(values: tuple[str, ...], flag: str) -> tuple[tuple[str, str], ...]:
    """`NAME:ENV` strings -> (name, value of $ENV): a header whose secret value never reaches argv
    (a Kubernetes Secret or Ray's runtime_env puts it in the environment)."""
    import os

    pairs = []
    for text in values:
        name, _, env = (part.strip() for part in text.partition(":"))
        if not name or not env or not env.replace("_", "a").isalnum():
            raise BadInput(f"{flag} {text!r}: expected NAME:ENV, e.g. x-api-key:STAGING_API_KEY")
        value = os.environ.get(env)
        if value is None:
            raise BadInput(f"{flag} {text!r}: the environment has no {env}")
        pairs.extend(parse_headers((f"{name}:{value}",), flag))
    return tuple(pairs)
