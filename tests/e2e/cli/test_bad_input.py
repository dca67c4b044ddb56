"""Bad input through the real CLI: one line on stderr naming what and where, exit status 2, no
traceback, no output half-written or put in the place of a device, link or directory.

docs/bad-input.md lists these cases and their answers.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from bad_input import assert_refused, leftovers, refused, run_cli
from live_processes import ROOT, free_port, llmreplay_cmd

from llmreplay.trace_format import METADATA_KEY, MessageShape, TraceMeta
from llmreplay.trace_io import write_trace
from tests.llmreplay.test_trace_io import good_table, record, write_raw

pytestmark = pytest.mark.e2e  # every test here starts processes

SAMPLES = ROOT / "samples"
MOONCAKE_JSONL = SAMPLES / "public" / "mooncake_conversation_head400.jsonl"
MOONCAKE_TRACE = SAMPLES / "mooncake_conversation.parquet"
CONTENT_TRACE = SAMPLES / "content_multiturn.parquet"
NO_SERVER = "http://127.0.0.1:9"  # refused before any request is sent


def file_outputs(tmp: Path) -> dict:
    """Each command that writes one file: its arguments for an output path (and whether --force applies)."""
    key = tmp / "anon.key"
    return {
        "import": (lambda out: ["import", "mooncake", str(MOONCAKE_JSONL), "-o", str(out)], True),
        "export": (lambda out: ["export", "mooncake", str(MOONCAKE_TRACE), "-o", str(out)], True),
        "anonymize": (
            lambda out: ["anonymize", str(CONTENT_TRACE), "-o", str(out), "--key-file", str(key)],
            True,
        ),
        "report --html": (lambda out: ["report", str(CONTENT_TRACE), "--html", str(out)], False),
        "compare --html": (
            lambda out: ["compare", str(CONTENT_TRACE), str(CONTENT_TRACE), "--html", str(out)],
            False,
        ),
    }


def dir_outputs(tmp: Path) -> dict:
    rec = [
        "record",
        "--upstream",
        NO_SERVER,
        "--listen",
        f"127.0.0.1:{free_port()}",
        "--key-file",
        str(tmp / "rk"),
    ]
    return {
        "replay -o": lambda out: ["replay", str(CONTENT_TRACE), "--target", NO_SERVER, "-o", str(out)],
        "record -o": lambda out: [*rec, "-o", str(out)],
        "record --confdir": lambda out: [*rec, "-o", str(tmp / "rec"), "--confdir", str(out)],
        "demo --out": lambda out: ["demo", "--out", str(out)],
    }


FILE_COMMANDS = list(file_outputs(Path("/")))
DIR_COMMANDS = list(dir_outputs(Path("/")))


@pytest.mark.parametrize("command", FILE_COMMANDS)
def test_file_output_under_a_file_in_a_directory_or_on_a_fifo(tmp_path, command):
    args, forceable = file_outputs(tmp_path)[command]
    force = ["--force"] if forceable else []
    (tmp_path / "plain").write_text("keep")
    refused(*args(tmp_path / "plain" / "out"), *force, expected=("plain is a file, not a directory",))
    (tmp_path / "dir").mkdir()
    refused(*args(tmp_path / "dir"), *force, expected=("is a directory",))
    os.mkfifo(tmp_path / "fifo")
    refused(*args(tmp_path / "fifo"), *force, expected=("is a device or special file", "refusing"))
    assert stat.S_ISFIFO(os.lstat(tmp_path / "fifo").st_mode)
    assert (tmp_path / "plain").read_text() == "keep" and not leftovers(tmp_path)


@pytest.mark.parametrize("command", FILE_COMMANDS)
def test_file_output_through_a_symbolic_link_is_refused(tmp_path, command):
    args, forceable = file_outputs(tmp_path)[command]
    target = tmp_path / "real.txt"
    target.write_text("keep")
    (tmp_path / "link").symlink_to(target)
    refused(*args(tmp_path / "link"), *(["--force"] if forceable else []), expected=("is a symbolic link",))
    assert (tmp_path / "link").is_symlink() and target.read_text() == "keep"


def test_import_force_onto_a_device_keeps_the_device(tmp_path):
    device = tmp_path / "null"
    try:
        os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (PermissionError, OSError):
        pytest.skip("creating a device node needs privileges")
    refused("import", "mooncake", str(MOONCAKE_JSONL), "-o", str(device), "--force",
            expected=("is a device or special file",))  # fmt: skip
    assert stat.S_ISCHR(os.lstat(device).st_mode)


def unwritable_dir(tmp_path: Path) -> Path:
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        return locked
    for candidate in (Path("/sys"), Path("/proc")):
        try:
            (candidate / ".llmreplay-probe").open("w").close()
        except OSError:
            return candidate
    pytest.skip("no directory this (root) process cannot write")


@pytest.mark.parametrize("command", ["import", "export", "anonymize", "report --html"])
def test_file_output_in_an_unwritable_directory(tmp_path, command):
    args, _ = file_outputs(tmp_path)[command]
    line = refused(*args(unwritable_dir(tmp_path) / "out.file"), expected=("cannot write",))
    assert "out.file" in line


def test_existing_output_needs_force(tmp_path):
    out = tmp_path / "t.parquet"
    out.write_text("keep")
    refused("import", "mooncake", str(MOONCAKE_JSONL), "-o", str(out), expected=("already exists", "--force"))
    assert out.read_text() == "keep"


@pytest.mark.parametrize("command", DIR_COMMANDS)
def test_directory_output_under_a_file_or_onto_a_file(tmp_path, command):
    args = dir_outputs(tmp_path)[command]
    (tmp_path / "plain").write_text("keep")
    refused(*args(tmp_path / "plain" / "sub"), expected=("plain is a file, not a directory",))
    done = run_cli(*args(tmp_path / "plain"))
    assert_refused(done, "file")  # our check or click's, in one line either way
    assert (tmp_path / "plain").read_text() == "keep"


# -- trace files -----------------------------------------------------------------------------------
def trace_with_meta(tmp_path: Path, raw: bytes) -> Path:
    path = tmp_path / "t.parquet"
    pq.write_table(good_table(3).replace_schema_metadata({METADATA_KEY: raw}), path)
    return path


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"[1, 2]", "an array ([1, 2]), expected an object"),
        (json.dumps({"source": "t", "block_size": 0}).encode(), "'block_size' 0"),
        (json.dumps({"source": "t", "block_size": -5}).encode(), "'block_size' -5"),
        (json.dumps({"source": "t", "block_size": "512"}).encode(), "'block_size' is a string"),
        (json.dumps({"source": "t", "extra": []}).encode(), "'extra' is an array"),
        (b"{not json", "not JSON"),
    ],
)
def test_bad_metadata(tmp_path, raw, expected):
    refused(
        "inspect", str(trace_with_meta(tmp_path, raw)), expected=("unreadable llmreplay metadata", expected)
    )


def test_think_time_beyond_the_format_bound(tmp_path):
    path = tmp_path / "t.parquet"
    table = good_table(3)
    index = table.schema.get_field_index("think_time_ns")
    write_raw(path, table.set_column(index, "think_time_ns", pq_array([None, 9 * 10**18, None])))
    refused("inspect", str(path), expected=("column 'think_time_ns' row 1", "out of range", "104 days"))


def pq_array(values):
    import pyarrow as pa

    return pa.array(values, pa.int64())


def test_corrupt_data_pages(tmp_path):
    path = tmp_path / "t.parquet"
    write_trace(path, [record(i) for i in range(50)], TraceMeta(source="t"))
    raw = bytearray(path.read_bytes())
    for at in range(200, 1200, 7):
        raw[at] ^= 0xFF
    path.write_bytes(bytes(raw))
    refused("inspect", str(path), expected=("t.parquet", "corrupt Parquet data"))


def test_one_garbage_file_in_a_directory_for_anonymize(tmp_path):
    trace = tmp_path / "trace"
    write_trace(trace / "a.parquet", [record(0)], TraceMeta(source="t"))
    (trace / "b.parquet").write_bytes(b"garbage")
    out = tmp_path / "anon.parquet"
    refused("anonymize", str(trace), "-o", str(out), "--key-file", str(tmp_path / "k"),
            expected=("b.parquet: not a Parquet file",))  # fmt: skip
    assert not out.exists() and not leftovers(tmp_path)


def test_a_message_of_two_billion_tokens_is_refused_before_building(tmp_path):
    path = tmp_path / "t.parquet"
    huge = record(0, prompt_tokens=2_000_000_000, messages=(MessageShape("user", 2_000_000_000),),
                  prefix_block_hashes=())  # fmt: skip
    write_trace(path, [huge], TraceMeta(source="t"))
    started = time.monotonic()
    refused("replay", str(path), "--target", NO_SERVER, "-o", str(tmp_path / "run"), "--model", "m",
            expected=("2,000,000,000 tokens cannot be replayed",))  # fmt: skip
    assert time.monotonic() - started < 30 and not (tmp_path / "run").exists()


def test_a_56_year_arrival_gap_is_refused_not_waited_for(tmp_path):
    path = tmp_path / "t.parquet"
    later = record(0).arrival_time + 56 * 365 * 86_400 * 10**6
    write_trace(path, [record(0), record(1, arrival_time=later)], TraceMeta(source="t"))
    refused("replay", str(path), "--target", NO_SERVER, "-o", str(tmp_path / "run"), "--model", "m",
            expected=("spans 56 years", "--max-idle-gap"))  # fmt: skip


# -- usage errors: click's three lines become one ------------------------------------------------
USAGE = [
    (["nosuch"], "No such command 'nosuch'"),
    (["import"], "Missing argument"),
    (["import", "nosuch", "x", "-o", "y"], "'nosuch' is not one of"),
    (["import", "mooncake", str(SAMPLES), "-o", "y"], "is a directory"),
    (["export", "nosuch", "x", "-o", "y"], "'nosuch' is not one of 'mooncake', 'csv'"),
    (["export", "mooncake", "x", "-o"], "Option '-o' requires an argument"),
    (["anonymize", "x", "-o", "y", "--prefix-sharing", "some"], "'some' is not one of"),
    (["anonymize", "x"], "Missing option '-o' / '--out'"),
    (["replay", "x", "-o", "y"], "Missing option '--target'"),
    (["replay", "x", "--target", "u", "-o", "y", "--speed", "fast"], "'fast' is not a valid float"),
    (["replay", "x", "--target", "u", "-o", "y", "--bogus"], "No such option '--bogus'"),
    (["record", "-o", "y"], "Missing option '--upstream'"),
    (["sim", "--port", "70000"], "70000 is not in the range"),
    (["inspect", "a", "b"], "unexpected extra argument"),
    (["compare", "a"], "Missing argument 'CANDIDATE'"),
    (["demo"], "Missing option '-o' / '--out'"),
]


@pytest.mark.parametrize(("args", "expected"), USAGE, ids=[" ".join(a)[:40] for a, _ in USAGE])
def test_usage_errors_are_one_line(args, expected):
    line = refused(*args, expected=(expected,))
    assert line.startswith("llmreplay: error: ") and "--help" in line


# -- values that make no sense ---------------------------------------------------------------------
def test_nonsense_values(tmp_path):
    replay = ["replay", str(CONTENT_TRACE), "--target", NO_SERVER, "-o", str(tmp_path / "run")]
    cases = [
        ([*replay, "--speed", "inf"], "--speed inf: must be a finite number greater than 0"),
        ([*replay, "--speed", "0"], "--speed 0.0: must be a finite number greater than 0"),
        ([*replay, "--scale", "nan"], "--scale nan"),
        ([*replay, "--scale", "1e12"], "fit in memory"),
        ([*replay, "--lag-bound-ms", "-1"], "--lag-bound-ms -1.0"),
        ([*replay, "--duration", "200d"], "--duration 200d: too long"),
        ([*replay, "--duration", "0s"], "--duration 0s: must be greater than zero"),
        ([*replay, "--to", "soon"], "--to soon: not a duration"),
        ([*replay, "--max-idle-gap", "-5s"], "--max-idle-gap -5s: must not be negative"),
        ([*replay, "--read-timeout", "inf"], "--read-timeout inf: not a duration"),
        ([*replay, "--server-metrics", "notaurl"], "--server-metrics 'notaurl': expected an http"),
        ([*replay, "--server-metrics", "http://[::1"], "not a URL"),
        (["replay", str(CONTENT_TRACE), "--target", "http://[::1", "-o", str(tmp_path / "r")], "not a URL"),
        (["replay", str(CONTENT_TRACE), "--target", "http://h:port", "-o", str(tmp_path / "r")], "the port"),
        (
            [
                "anonymize",
                str(CONTENT_TRACE),
                "-o",
                str(tmp_path / "a.parquet"),
                "--key-file",
                str(tmp_path / "k"),
                "--keep-meta",
                "nosuch",
            ],
            "--keep-meta nosuch: the trace's metadata has no such key",
        ),  # fmt: skip
        (
            [
                "anonymize",
                str(CONTENT_TRACE),
                "-o",
                str(tmp_path / "a.parquet"),
                "--key-file",
                str(tmp_path / "k"),
                "--prefix-sharing",
                "session",
                "--nonce-tokens",
                "0",
            ],
            "--nonce-tokens 0",
        ),  # fmt: skip
        (
            ["export", "mooncake", str(MOONCAKE_TRACE), "-o", str(tmp_path / "e.jsonl"), "--block-size", "0"],
            "--block-size 0",
        ),  # fmt: skip
        (
            ["record", "--upstream", NO_SERVER, "-o", str(tmp_path / "rec"), "--duration", "0s"],
            "--duration 0s",
        ),
        (
            ["record", "--upstream", NO_SERVER, "-o", str(tmp_path / "rec"), "--drain-timeout", "soon"],
            "--drain-timeout soon: not a duration",
        ),  # fmt: skip
        (["demo", "--out", str(tmp_path / "demo"), "--speed", "inf"], "--speed inf"),
    ]
    for args, expected in cases:
        refused(*args, expected=(expected,))
    assert not (tmp_path / "a.parquet").exists() and not (tmp_path / "e.jsonl").exists()


# -- record: busy port, key file policy (shared with anonymize) ------------------------------------
def test_record_on_a_busy_port_is_one_line(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        line = refused("record", "--upstream", NO_SERVER, "--listen", f"127.0.0.1:{port}", "-o",
                       str(tmp_path / "rec"), "--key-file", str(tmp_path / "rk"))  # fmt: skip
    assert f"--listen 127.0.0.1:{port}: address already in use" in line and "--mode" not in line


@pytest.mark.parametrize("command", ["record", "anonymize"])
def test_one_key_file_policy_for_record_and_anonymize(tmp_path, command):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]

    def run(key: Path) -> subprocess.CompletedProcess:
        if command == "record":
            args = [
                "record",
                "--upstream",
                NO_SERVER,
                "--listen",
                f"127.0.0.1:{port}",
                "-o",
                str(tmp_path / "rec"),
            ]
        else:
            args = ["anonymize", str(CONTENT_TRACE), "-o", str(tmp_path / "a.parquet"), "--force"]
        return run_cli(*args, "--key-file", str(key))

    readable = tmp_path / "readable.key"
    readable.write_text("ab" * 32 + "\n")
    readable.chmod(0o644)
    assert_refused(run(readable), "permissions 0644", "chmod 600")
    short = tmp_path / "short.key"
    short.write_text("ab" * 16 + "\n")  # 128 bits: accepted by neither
    short.chmod(0o600)
    assert_refused(run(short), "32 hex digits (128 bits), need at least 64 (256 bits)")
    good = tmp_path / "good.key"
    good.write_text("ab" * 32 + "\n")
    good.chmod(0o600)
    done = run(good)
    busy.close()
    if command == "record":  # the key passes; the next check (a busy port) refuses
        assert_refused(done, f"--listen 127.0.0.1:{port}: address already in use")
    else:
        assert done.returncode == 0, done.stderr


# -- Ctrl-C ----------------------------------------------------------------------------------------
def test_sigint_exits_130_with_one_line_and_no_output(tmp_path):
    source = tmp_path / "big.jsonl"
    with open(source, "w") as handle:
        for i in range(400_000):
            handle.write(
                f'{{"timestamp": {i}, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}}\n'
            )
    out = tmp_path / "t.parquet"
    proc = subprocess.Popen(llmreplay_cmd("import", "mooncake", str(source), "-o", str(out)),
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)  # fmt: skip
    time.sleep(2.0)  # inside the import, well past interpreter start-up
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert stderr.strip().splitlines() == ["llmreplay: error: interrupted"], stderr
    assert not out.exists() and not leftovers(tmp_path)
