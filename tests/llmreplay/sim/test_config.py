"""Profiles, flag precedence and bad CLI input (exit 2, one line)."""

from __future__ import annotations

import socket

import pytest
from click.testing import CliRunner

from llmreplay.cli import cli
from llmreplay.errors import BadInput
from llmreplay.sim.config import SimConfig, build_config, load_profile


def test_shipped_profiles_load_and_differ_in_knee():
    fast, slow = build_config("fast", {}), build_config("slow", {})
    assert slow.max_num_seqs == 16 and fast.max_num_seqs > 4 * slow.max_num_seqs
    assert slow.decode_base_ms > fast.decode_base_ms


def test_flags_override_profile_override_defaults(tmp_path):
    profile = tmp_path / "mine.toml"
    profile.write_text('max_num_seqs = 3\ndecode_base_ms = 2\nmodels = ["a", "b"]\n')
    config = build_config(str(profile), {"max_num_seqs": 5, "seed": None, "models": ()})
    assert (config.max_num_seqs, config.decode_base_ms, config.models) == (5, 2.0, ("a", "b"))
    assert config.prefill_ns_per_token == SimConfig().prefill_ns_per_token


@pytest.mark.parametrize(
    "text, message",
    [
        ("max_num_seqs = 'many'", "expected an integer"),
        ("unknown_knob = 1", "unknown setting 'unknown_knob'"),
        ("port = 80", "unknown setting 'port'"),
        ("max_num_seqs = [", "not valid TOML"),
    ],
)
def test_bad_profile_files(tmp_path, text, message):
    profile = tmp_path / "bad.toml"
    profile.write_text(text)
    with pytest.raises(BadInput, match=message):
        load_profile(str(profile))


def invoke(*args):
    return CliRunner().invoke(cli, ["sim", *args])


@pytest.mark.parametrize(
    "args, message",
    [
        (["--profile", "nosuch"], "--profile nosuch: no such profile or file (shipped: fast, slow)"),
        (["--error-rate", "1.5"], "--error-rate: must be within [0, 1]"),
        (["--max-num-seqs", "0"], "--max-num-seqs: must be > 0"),
        (["--output-len-min-tokens", "9", "--output-len-max-tokens", "3"], "--output-len-min-tokens"),
        (["--log", "/nonexistent-dir/gt.parquet"], "--log /nonexistent-dir/gt.parquet: directory"),
    ],
)
def test_bad_flags_exit_2_with_one_line(args, message):
    result = invoke(*args)
    assert result.exit_code == 2
    assert message in result.output and result.output.count("\n") == 1


def test_port_in_use_is_bad_input():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        result = invoke("--port", str(busy.getsockname()[1]))
    assert result.exit_code == 2 and "cannot listen" in result.output
