"""The Prometheus flags refuse bad values at parse time: one line, exit 2, no secret echoed."""

from __future__ import annotations

import socket

import pytest
from click.testing import CliRunner

from llmreplay.cli import cli


def _invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def _refused(result, *expected: str) -> str:
    lines = result.stderr.splitlines()
    assert result.exit_code == 2, (result.exit_code, result.output, result.stderr)
    assert len(lines) == 1, result.stderr
    for text in expected:
        assert text in lines[0], (text, lines[0])
    return lines[0]


@pytest.mark.parametrize("command", ["replay", "capacity"])
@pytest.mark.parametrize(
    ("flag", "value", "expected"),
    [
        ("--pushgateway", "ftp://gateway:9091", "--pushgateway"),
        ("--remote-write", "http://prom:notaport/api/v1/write", "--remote-write"),
        ("--remote-write", "https://admin:hunter2@prom:9090/api/v1/write", "user name or password"),
        ("--metrics-bind", "localhost.example", "--metrics-bind"),
        ("--metrics-port", "70000", "--metrics-port"),
        ("--push-header-from-env", "Authorization:LLMREPLAY_TEST_UNSET_VARIABLE", "LLMREPLAY_TEST_UNSET"),
    ],
)
def test_a_bad_prometheus_flag_is_one_line_and_exit_2(tmp_path, command, flag, value, expected):
    result = _invoke(
        command,
        str(tmp_path / "t.parquet"),
        "--target",
        "http://127.0.0.1:9",
        "-o",
        str(tmp_path / "o"),
        flag,
        value,
    )
    line = _refused(result, expected)
    assert "hunter2" not in line
    assert not (tmp_path / "o").exists()


def test_a_metrics_port_in_use_is_refused_before_anything_is_written(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _invoke(
            "replay",
            str(tmp_path / "t.parquet"),
            "--target",
            "http://127.0.0.1:9",
            "-o",
            str(tmp_path / "run"),
            "--metrics-port",
            str(port),
        )
    _refused(result, f"--metrics-port {port}", "cannot listen on 127.0.0.1")
    assert not (tmp_path / "run").exists()
