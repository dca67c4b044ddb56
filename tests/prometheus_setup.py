#!/usr/bin/env python3
"""Unpack Debian's `prometheus` (with promtool) and `prometheus-pushgateway` into a cache outside the clone,
for the tests of replayer/observe; no service is installed or started, nothing runs as a daemon.

    python3 tests/prometheus_setup.py [--check] [--allow-missing]

`apt-get download` fetches the packages (after one `apt-get update` when the package lists lack them),
`dpkg -x` unpacks them into `$LLMREPLAY_TOOLS_CACHE` (default `~/.cache/llmreplay/tools`)/<package>/;
a `stamp.json` there records the version, so a warm rerun takes a second. With --allow-missing a machine
without apt-get or dpkg (or the packages) gets `MISSING-prometheus.txt` instead, whose line the tests'
skip message quotes. Standard library only, like tests/engines/engine_setup.py beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# package -> the binaries the tests run from it (prometheus 2.42 has --web.enable-remote-write-receiver)
PACKAGES = {"prometheus": ("prometheus", "promtool"), "prometheus-pushgateway": ("prometheus-pushgateway",)}
MISSING = "MISSING-prometheus.txt"
APT = ["-q", "-o", "APT::Sandbox::User=root"]  # root may write where _apt may not (a temp dir)


class Missing(Exception):
    """The machine cannot provide the packages: with --allow-missing the tests skip, quoting this."""


def cache_root() -> Path:
    env = os.environ.get("LLMREPLAY_TOOLS_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "llmreplay" / "tools"


def tool(name: str) -> Path | None:
    """The unpacked binary `name` when set up, else None (tool_missing says why)."""
    for package, binaries in PACKAGES.items():
        if name in binaries:
            path = cache_root() / package / "usr" / "bin" / name
            return path if path.is_file() and os.access(path, os.X_OK) else None
    raise KeyError(name)


def tool_missing() -> str:
    """Why the tools are absent, for a skip message."""
    reason = cache_root() / MISSING
    if reason.is_file():
        return reason.read_text().strip()
    return f"not set up in {cache_root()}: run `python3 tests/prometheus_setup.py` (make test-engines does)"


def _run(cmd: list[str], cwd: Path | None = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise Missing(f"{' '.join(cmd)} failed (exit {proc.returncode}): {proc.stderr.strip()[-300:]}")
    return proc.stdout


def _download(folder: Path) -> list[Path]:
    """The .deb files of PACKAGES, fetched into `folder` (the package lists refreshed once if needed)."""
    for tool_name in ("apt-get", "dpkg", "dpkg-deb"):
        if shutil.which(tool_name) is None:
            raise Missing(f"{tool_name} not found: this machine does not install Debian packages")
    try:
        _run(["apt-get", *APT, "download", *PACKAGES], cwd=folder)
    except Missing:
        _run(["apt-get", *APT, "update"])
        _run(["apt-get", *APT, "download", *PACKAGES], cwd=folder)
    return sorted(folder.glob("*.deb"))


def set_up(check: bool) -> bool:
    root = cache_root()
    if all(tool(name) for binaries in PACKAGES.values() for name in binaries):
        print(f"prometheus_setup: ready in {root}", flush=True)
        return True
    if check:
        print(f"prometheus_setup: not set up in {root}", flush=True)
        return False
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root) as temp:
        for deb in _download(Path(temp)):
            package = _run(["dpkg-deb", "-f", str(deb), "Package"]).strip()
            version = _run(["dpkg-deb", "-f", str(deb), "Version"]).strip()
            target = root / package
            shutil.rmtree(target, ignore_errors=True)
            _run(["dpkg", "-x", str(deb), str(target)])
            stamp = {"package": package, "version": version, "deb": deb.name}
            (target / "stamp.json").write_text(json.dumps(stamp, indent=2) + "\n")
            print(f"prometheus_setup: {package} {version} unpacked into {target}", flush=True)
    (root / MISSING).unlink(missing_ok=True)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="report whether the tools are there; fetch nothing"
    )
    parser.add_argument(
        "--allow-missing", action="store_true", help="a machine without them: exit 0, tests skip"
    )
    args = parser.parse_args(argv)
    try:
        return 0 if set_up(args.check) else 2
    except (Missing, subprocess.TimeoutExpired) as exc:
        if args.allow_missing:
            cache_root().mkdir(parents=True, exist_ok=True)
            (cache_root() / MISSING).write_text(f"{exc}\n")
            print(f"prometheus_setup: left out, its tests will skip: {exc}", flush=True)
            return 0
        print(f"prometheus_setup: error: {exc}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
