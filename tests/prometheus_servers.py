"""Real Prometheus 2.42 (remote-write receiver on) and Pushgateway on 127.0.0.1 free ports with temp data
dirs, for the tests of replayer/observe; a ProcessPool stops them. The binaries come from
tests/prometheus_setup.py's cache: absent, the test skips quoting why."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from live_processes import ProcessPool, free_port
from prometheus_setup import tool, tool_missing


def binary(name: str) -> Path:
    """The tool's path, or skip the test saying why it is absent."""
    path = tool(name)
    if path is None:
        pytest.skip(f"{name}: {tool_missing()}")
    return path


def start_pushgateway(pool: ProcessPool) -> str:
    """A Pushgateway keeping pushes in memory; its base URL."""
    port = free_port()
    cmd = [str(binary("prometheus-pushgateway")), f"--web.listen-address=127.0.0.1:{port}"]
    pool.start(cmd, "pushgateway", ready_url=f"http://127.0.0.1:{port}/-/ready")
    return f"http://127.0.0.1:{port}"


def start_prometheus(pool: ProcessPool, data: Path, scrape: dict[str, str]) -> str:
    """Prometheus scraping `scrape` (job -> host:port) every second, remote-write receiver on; its base URL
    (remote-write at /api/v1/write). No honor_labels: a pushed job label becomes `exported_job`, so
    pushed series and those sent by remote-write (job="llmreplay") stay apart."""
    data.mkdir(parents=True, exist_ok=True)
    jobs = [{"job_name": job, "static_configs": [{"targets": [target]}]} for job, target in scrape.items()]
    config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"}, "scrape_configs": jobs}
    (data / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
    port = free_port()
    cmd = [
        str(binary("prometheus")),
        f"--config.file={data / 'prometheus.yml'}",
        f"--storage.tsdb.path={data / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--web.enable-remote-write-receiver",
        "--log.level=warn",
    ]
    pool.start(cmd, "prometheus", ready_url=f"http://127.0.0.1:{port}/-/ready")
    return f"http://127.0.0.1:{port}"


def query(prometheus: str, promql: str) -> list[dict]:
    """The instant query's result vector (each {'metric': labels, 'value': [t, 'v']})."""
    url = f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    return body["data"]["result"]


def wait_for(prometheus: str, promql: str, timeout_s: float = 20.0) -> list[dict]:
    """Query until the result is not empty (scrapes come every second), at most `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = query(prometheus, promql)
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.25)


def promtool_check(exposition: str) -> subprocess.CompletedProcess:
    """`promtool check metrics` on a text exposition (stdin): exit 0 and no output when it lints clean."""
    return subprocess.run(
        [str(binary("promtool")), "check", "metrics"],
        input=exposition,
        capture_output=True,
        text=True,
        timeout=30,
    )
