"""A JSON array field of an untrusted body (a request, a server's answer): read as its items, and as
no items when it holds any other value, so a hostile `"messages": true` reads as none."""

from __future__ import annotations


def array_items(value) -> list | tuple:
    """`value` when it is a JSON array, else ()."""
    return value if isinstance(value, list) else ()
