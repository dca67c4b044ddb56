"""A Responses `instructions` given as an array of input items: the recorder's dialect reading
(request_messages) and the anonymizer count it by one definition (responses_api.instructions_item
read by item_message), and it is rewritten to exactly that count with nothing of it left."""

from __future__ import annotations

import orjson

from anonymizer.dialect_items import item_text, system_message
from llmreplay.wire.dialects import DIALECTS
from llmreplay.wire.responses_api import instructions_item
from tests.anonymizer.test_dialect_items import SECRET, TOKENIZER, anonymized_exactly, dialect_record

INSTRUCTIONS = [
    {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": f"Serve {SECRET}."}]},
    {"role": "system", "content": "Answer in one line."},
    {"type": "input_text", "text": "Be polite."},
    {"type": "input_image", "image_url": "https://example.com/a.png"},
]


def test_instructions_items_count_alike_for_the_recorder_and_the_anonymizer():
    system = DIALECTS["responses"].request_messages({"instructions": INSTRUCTIONS, "input": "hi"})[0]
    assert system == ("system", f"Serve {SECRET}.\nAnswer in one line.\nBe polite.")
    assert item_text("responses")(system_message(INSTRUCTIONS)) == system
    assert system_message(INSTRUCTIONS) == instructions_item(INSTRUCTIONS)


def test_instructions_items_are_rewritten_to_their_count(tmp_path):
    record = dialect_record(
        0, "responses", INSTRUCTIONS, [{"role": "user", "content": "Where is my parcel?"}]
    )
    assert record.messages[0].tokens == TOKENIZER.count(f"Serve {SECRET}.\nAnswer in one line.\nBe polite.")
    _, after = anonymized_exactly(tmp_path, [record])
    assert SECRET.lower() not in after[0]["content_system"].lower()
    assert len(orjson.loads(after[0]["content_system"])) == len(INSTRUCTIONS)
