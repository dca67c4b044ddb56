"""The one key-file policy, and what each command takes from a key file (README, "Key"): `record` its hex
decoded, `anonymize` its exact bytes. Pinned: changing either re-maps every hash made with an existing key."""

from __future__ import annotations

import os

from anonymizer.keys import Rekeyer, load_key
from recorder.keys import load_or_create_key

HEX = "0123456789abcdef" * 4  # 256 bits


def _key_file(path, text: str):
    path.write_text(text)
    os.chmod(path, 0o600)
    return path


def test_record_decodes_hex_so_the_newline_does_not_matter(tmp_path):
    with_newline = load_or_create_key(_key_file(tmp_path / "a.key", HEX + "\n"))
    without = load_or_create_key(_key_file(tmp_path / "b.key", HEX))
    assert with_newline == without == bytes.fromhex(HEX)


def test_anonymize_keys_with_the_exact_bytes_newline_included(tmp_path):
    with_newline = load_key(_key_file(tmp_path / "a.key", HEX + "\n"))
    without = load_key(_key_file(tmp_path / "b.key", HEX))
    assert with_newline == (HEX + "\n").encode() and without == HEX.encode()
    ids = [Rekeyer(k).id("session", "s-1", "sess_") for k in (with_newline, without)]
    assert ids[0] != ids[1]  # another byte, another mapping: copy key files, never retype them


def test_a_new_key_file_is_64_hex_digits_both_read_as_created(tmp_path):
    path = tmp_path / "new.key"
    recorded = load_or_create_key(path)
    text = path.read_text()
    assert len(text.strip()) == 64 and text.endswith("\n") and recorded == bytes.fromhex(text.strip())
    assert load_key(path) == text.encode()
