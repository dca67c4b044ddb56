"""A chat turn's history as the next turn sends it: the messages the previous turn was sent, word for
word, then its answer, marked so the loop sends staging's own answer (replayer.loop.answer_echo).
Re-spelling the history instead would change its last block and its fitted length, and staging's
cache would miss what production's hit."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from replayer.loop.answer_echo import marked


@dataclass(frozen=True, slots=True)
class SentTurn:
    """A chat turn's messages as built (answers unmarked), and which are answers: index -> turns back."""

    messages: list
    answers: dict[int, int] = field(default_factory=dict)


def continued(messages: list, previous: SentTurn | None) -> tuple[list, dict[int, int]]:
    """`messages` with the previous turn's sent messages in place of its history, and the answers
    they then hold (turns back); unchanged, with none, when they do not continue that turn: the
    same roles, then one plain assistant message (the answer)."""
    if previous is None or not _continues(messages, previous.messages):
        return messages, {}
    held = len(previous.messages)
    answers = {i: back + 1 for i, back in previous.answers.items()}
    answers[held] = 1
    return [*copy.deepcopy(previous.messages), *messages[held:]], answers


def sent_and_marked(messages: list, answers: dict[int, int], followed: bool) -> tuple[list, SentTurn | None]:
    """(the messages to send, each answer marked; the turn as the next one continues it, when
    `followed` by one)."""
    sent = SentTurn(copy.deepcopy(messages), answers) if followed else None
    for i, back in answers.items():
        messages[i] = {**messages[i], "content": marked(messages[i]["content"], back)}
    return messages, sent


def _continues(messages: list, history: list) -> bool:
    held = len(history)
    if len(messages) <= held or not _plain_answer(messages[held]):
        return False
    return all(_role(a) == _role(b) for a, b in zip(messages, history, strict=False))


def _plain_answer(message) -> bool:
    return (
        isinstance(message, dict)
        and message.get("role") == "assistant"
        and isinstance(message.get("content"), str)
        and not message.get("tool_calls")
    )


def _role(message) -> object:
    return message.get("role") if isinstance(message, dict) else None
