"""--responses-state: how a turn that referenced server-side state (previous_response_id, conversation)
is sent to a target that never saw the recorded ids. Pure functions over the trace's session columns.

chain: the body carries the placeholder; the replay loop puts in the id staging returned to the
session's previous turn. expand: the ancestors' input and output are sent instead. A turn whose parent
is not its session's previous turn, and a `conversation` turn, are always sent expanded.
"""

from __future__ import annotations

from collections.abc import Sequence

CHAIN, EXPAND = "chain", "expand"
MODES = (CHAIN, EXPAND)
PLAIN, CHAINED, EXPANDED = 0, 1, 2  # how one request is sent
PREVIOUS_RESPONSE = "previous_response_id"  # the server_state value the placeholder stands in for


def sending_modes(
    server_state: Sequence[str | None],
    parent_ids: Sequence[str | None],
    previous_ids: Sequence[str | None],
    mode: str,
) -> list[int]:
    """Per request: PLAIN (no server state), CHAINED (chain mode, a previous_response_id whose parent
    is the request sent before it in its session: `previous_ids`), else EXPANDED."""
    out = []
    for state, parent, previous in zip(server_state, parent_ids, previous_ids, strict=True):
        if state is None:
            out.append(PLAIN)
        elif mode == CHAIN and state == PREVIOUS_RESPONSE and parent is not None and parent == previous:
            out.append(CHAINED)
        else:
            out.append(EXPANDED)
    return out


def default_mode(flag: str | None) -> str:
    """--responses-state unset: chain (the trace's chained rows are linked turn by turn)."""
    return flag or CHAIN


def state_summary(mode: str, modes: Sequence[int], not_previous: int) -> dict:
    """What run.json and the preflight say: the mode, and how many requests each way of sending got."""
    return {
        "mode": mode,
        "chained": sum(1 for m in modes if m == CHAINED),
        "expanded": sum(1 for m in modes if m == EXPANDED),
        "expanded_parent_not_previous": not_previous,
    }


def summary_line(summary: dict) -> str:
    """One line for the preflight: the mode and the requests it changes."""
    mode, chained, expanded = summary["mode"], summary["chained"], summary["expanded"]
    text = (
        f"{mode}: {chained:,} requests chained to staging's previous response id, {expanded:,} sent expanded"
    )
    if summary["expanded_parent_not_previous"]:
        text += (
            f" ({summary['expanded_parent_not_previous']:,} of them: parent not the session's previous turn)"
        )
    return text


def ancestors(request_id: str, parent_of: dict[str, str | None], limit: int = 100_000) -> list[str]:
    """The ids of a request's ancestors, root first, following parent_request_id (a cycle ends it)."""
    chain: list[str] = []
    seen = {request_id}
    at = parent_of.get(request_id)
    while at is not None and at not in seen and len(chain) < limit:
        chain.append(at)
        seen.add(at)
        at = parent_of.get(at)
    chain.reverse()
    return chain
