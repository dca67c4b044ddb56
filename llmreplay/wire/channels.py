"""Which parts of a streamed chunk carry generated tokens, and on which channel: answer or reasoning.

TTFT starts at the first token on any channel, TTFO at the first answer token (content, refusal or a
tool-call delta). Adding a delta key or a Responses event type is adding a row.
"""

from __future__ import annotations

from llmreplay.wire.json_array import array_items

ANSWER, REASONING = "answer", "reasoning"

# Keys of a chat delta (or of a completions choice, which has no delta) whose non-empty string is
# generated text. Reasoning models send `reasoning` (vLLM, Ollama) or `reasoning_content` (SGLang,
# llama.cpp, DeepSeek, older vLLM) before the answer.
TEXT_CHANNELS = {
    "content": ANSWER,
    "text": ANSWER,
    "refusal": ANSWER,
    "reasoning": REASONING,
    "reasoning_content": REASONING,
}
TOOL_CALLS_KEY = "tool_calls"  # a list of call deltas: answer tokens
# The OpenAI Responses API streams typed events instead of chat deltas.
RESPONSES_DELTA_CHANNELS = {
    "response.output_text.delta": ANSWER,
    "response.refusal.delta": ANSWER,
    "response.function_call_arguments.delta": ANSWER,
    "response.reasoning_text.delta": REASONING,
    "response.reasoning_summary_text.delta": REASONING,
}
RESPONSES_END_EVENTS = ("response.completed", "response.incomplete", "response.failed")
# An output item whose announcement already carries generated text: a function call's name.
RESPONSES_ITEM_CHANNELS = {"function_call": ("name", ANSWER)}
# The Anthropic Messages API: a content_block_delta's `delta.type` -> (its text key, channel), and a
# content_block_start's `content_block.type` -> the same (a tool_use block opens with the tool's name).
MESSAGES_DELTA_CHANNELS = {
    "text_delta": ("text", ANSWER),
    "input_json_delta": ("partial_json", ANSWER),
    "thinking_delta": ("thinking", REASONING),
}
MESSAGES_BLOCK_CHANNELS = {
    "text": ("text", ANSWER),
    "tool_use": ("name", ANSWER),
    "server_tool_use": ("name", ANSWER),
    "thinking": ("thinking", REASONING),
}


def text_keys(channel: str) -> tuple[str, ...]:
    """The delta keys whose text goes to `channel` (the replayer's byte patterns are built from these)."""
    return tuple(key for key, kind in TEXT_CHANNELS.items() if kind == channel)


def choice_delta(choice: dict) -> dict:
    """Where a streamed choice keeps its generated parts: `delta` (chat) or the choice itself (completions)."""
    delta = choice.get("delta")
    return delta if isinstance(delta, dict) else choice


def delta_channel(delta: dict) -> str | None:
    """ANSWER when the delta carries an answer token, else REASONING when it carries a reasoning one."""
    reasoning = False
    for key, channel in TEXT_CHANNELS.items():
        value = delta.get(key)
        if value and isinstance(value, str):
            if channel == ANSWER:
                return ANSWER
            reasoning = True
    calls = delta.get(TOOL_CALLS_KEY)
    if isinstance(calls, list) and any(isinstance(call, dict) for call in calls):
        return ANSWER
    return REASONING if reasoning else None


def event_channel(event: dict) -> str | None:
    """The channel of a whole chunk: ANSWER if any choice answers, else REASONING if any reasons."""
    found = None
    for choice in array_items(event.get("choices")):
        if isinstance(choice, dict):
            channel = delta_channel(choice_delta(choice))
            if channel == ANSWER:
                return ANSWER
            found = found or channel
    return found
