"""Real engines as test targets: vLLM (CPU) and llama.cpp's llama-server on 127.0.0.1, free ports.

`engine` is a session-scoped fixture parametrized over both engines: pytest runs every test of one
engine before starting the next and stops the first when it switches, so only one engine holds the
two cores at a time. Each engine is started from the cache `engine_setup.py` fills (skipped, with
what is missing named, when it is not built), is ready when `GET /health` answers 200 within a
bounded time, and is always stopped at the end (SIGTERM to its process group, SIGKILL after a grace),
whatever the tests did. Every test here carries the `engines` marker.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from engine_client import FIGURES, MAX_MODEL_LEN, MAX_NUM_SEQS, REPO, record_figure

HERE = Path(__file__).resolve().parent


def _load_setup():
    spec = importlib.util.spec_from_file_location("engine_setup", HERE / "engine_setup.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


engine_setup = _load_setup()

VLLM_START_TIMEOUT_S = float(os.environ.get("LLMREPLAY_VLLM_START_TIMEOUT", "300"))
LLAMA_START_TIMEOUT_S = float(os.environ.get("LLMREPLAY_LLAMA_START_TIMEOUT", "120"))
STOP_GRACE_S = 20.0


def pytest_configure(config):
    config.addinivalue_line("markers", "engines: runs against a real engine (vLLM, llama.cpp); `make test-engines`")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.engines)


# --- processes --------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """In the child before exec: its own process group, and SIGKILL if pytest itself dies (a backstop)."""
    os.setsid()
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


@dataclass
class Engine:
    name: str  # "vllm" or "llama.cpp"
    base_url: str
    port: int
    proc: subprocess.Popen
    log_path: Path
    model: str = "tiny"
    model_dir: Path | None = None  # vLLM: the HF model folder (tokenizer.json inside)
    started_s: float = 0.0  # seconds from spawn to /health 200
    facts: dict = field(default_factory=dict)

    def url(self, path: str) -> str:
        return self.base_url + path

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"


def wait_healthy(engine: Engine, timeout_s: float) -> None:
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    while time.monotonic() < deadline:
        if engine.proc.poll() is not None:
            raise RuntimeError(f"{engine.name} exited with {engine.proc.returncode} before it was healthy; "
                               f"log {engine.log_path}:\n{engine.log_tail()}")
        try:
            with urllib.request.urlopen(engine.url("/health"), timeout=5) as resp:
                if resp.status == 200:
                    engine.started_s = time.monotonic() - t0
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{engine.name}: GET /health not 200 within {timeout_s:.0f} s; log {engine.log_path}:\n"
                       f"{engine.log_tail()}")


def stop(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM to the process group, SIGKILL to it after the grace; reaps the leader."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    # The leader may be gone while children of its group live on (vLLM's engine core): kill the group.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def spawn(name: str, cmd: list[str], env: dict, log_path: Path, port: int, timeout_s: float, **extra) -> Engine:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        log.write(("$ " + " ".join(cmd) + "\n").encode())
        log.flush()
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                preexec_fn=_die_with_parent, cwd=log_path.parent)
    engine = Engine(name=name, base_url=f"http://127.0.0.1:{port}", port=port, proc=proc, log_path=log_path, **extra)
    try:
        wait_healthy(engine, timeout_s)
    except BaseException:
        stop(proc)
        raise
    return engine


# --- the engines ------------------------------------------------------------------------------------


def _missing(paths: dict[str, Path]) -> list[str]:
    return [f"{what} ({p})" for what, p in paths.items() if not p.exists()]


def _skip_unbuilt(name: str, missing: list[str]) -> None:
    why = ""
    try:
        why = engine_setup.missing_file(name).read_text().strip()
    except OSError:
        pass
    if why:
        pytest.skip(f"{name} left out by engine_setup.py: this machine lacks what it needs: {why}")
    pytest.skip(f"{name} not built: missing {', '.join(missing)}; run `make test-engines` or "
                f"`python3 tests/engines/engine_setup.py --only {name}`")


def vllm_command(port: int) -> tuple[list[str], dict, Path]:
    folder = engine_setup.vllm_dir()
    py = folder / "venv" / "bin" / "python"
    model = folder / "model"
    missing = _missing({"the vLLM venv": py, "the tiny model": model / "config.json",
                        "its tokenizer": model / "tokenizer.json"})
    if not missing and "venv" not in engine_setup.read_stamp(folder):
        missing.append(f"the stamp of a finished install ({folder / 'stamp.json'})")
    if missing:
        _skip_unbuilt("vllm", missing)
    cmd = [str(py), "-m", "vllm.entrypoints.openai.api_server",
           "--model", str(model), "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port),
           "--dtype", "bfloat16", "--max-model-len", str(MAX_MODEL_LEN), "--max-num-seqs", str(MAX_NUM_SEQS),
           "--max-num-batched-tokens", str(MAX_MODEL_LEN), "--enable-prefix-caching",
           "--enable-prompt-tokens-details", "--enforce-eager", "--enable-auto-tool-choice",
           "--tool-call-parser", "hermes",
           "--structured-outputs-config", '{"backend":"xgrammar","disable_any_whitespace":true}']
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "CUDA_"))}
    env.update({
        "VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "OMP_NUM_THREADS": "1", "VLLM_HOST_IP": "127.0.0.1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "VLLM_ENFORCE_STRICT_TOOL_CALLING": "0",
        "VLLM_CONFIGURE_LOGGING": "1", "PYTHONUNBUFFERED": "1",
        # previous_response_id needs the Responses store (off by default: "not found" for every id)
        "VLLM_ENABLE_RESPONSES_API_STORE": "1",
    })
    env.pop("PYTHONPATH", None)
    env["PATH"] = f"{py.parent}:{env.get('PATH', '')}"
    preload = [p for p in (Path("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"),
                           folder / "venv" / "lib" / "libiomp5.so") if p.exists()]
    if preload:
        env["LD_PRELOAD"] = ":".join(map(str, preload))
    return cmd, env, model


def llama_command(port: int) -> tuple[list[str], dict, Path]:
    folder = engine_setup.llama_dir()
    binary = folder / "bin" / "llama-server"
    model = folder / "model" / "tiny.gguf"
    missing = _missing({"llama-server": binary, "the tiny GGUF": model})
    if missing:
        _skip_unbuilt("llama.cpp", missing)
    cmd = [str(binary), "--host", "127.0.0.1", "--port", str(port), "-m", str(model), "--alias", "tiny",
           "-c", str(MAX_NUM_SEQS * MAX_MODEL_LEN), "-np", str(MAX_NUM_SEQS), "-no-kvu", "-t", "1", "-tb", "1",
           "--metrics", "--slots", "--no-webui", "--jinja"]
    env = {**os.environ, "LLAMA_ARG_HOST": "127.0.0.1"}
    return cmd, env, model


ENGINES = ["vllm", "llama.cpp"]


@pytest.fixture(scope="session", params=ENGINES)
def engine(request):
    """One real engine, started once for all of its tests and stopped when pytest moves on."""
    name = request.param
    # Logs outside pytest's rotating temp folders (other test runs on the machine prune those): the last
    # run's log of each engine stays at <cache>/logs/<engine>.log.
    logs = engine_setup.cache_root() / "logs"
    port = free_port()
    if name == "vllm":
        cmd, env, model = vllm_command(port)
        timeout_s, extra = VLLM_START_TIMEOUT_S, {"model_dir": model}
    else:
        cmd, env, model = llama_command(port)
        timeout_s, extra = LLAMA_START_TIMEOUT_S, {}
    log_path = logs / f"{name}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_bytes(b"")
    try:
        eng = spawn(name, cmd, env, log_path, port, timeout_s, **extra)
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)
    print(f"\n[{name} healthy on port {port} after {eng.started_s:.1f} s; log {log_path}]", file=sys.stderr)
    record_figure(name, "start_to_health_s", round(eng.started_s, 1))
    try:
        yield eng
    finally:
        t0 = time.monotonic()
        stop(eng.proc)
        print(f"\n[{name} stopped in {time.monotonic() - t0:.1f} s, exit {eng.proc.returncode}]", file=sys.stderr)


@pytest.fixture(scope="session")
def llmreplay_bin() -> Path:
    exe = REPO / ".venv" / "bin" / "llmreplay"
    if not exe.exists():
        pytest.skip(f"{exe} not found: run `make venv`")
    return exe


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not FIGURES:
        return
    terminalreporter.section("engine figures")
    for name, figs in FIGURES.items():
        terminalreporter.write_line(f"{name}: {json.dumps(figs, sort_keys=True)}")
    try:
        out = engine_setup.cache_root() / "last-figures.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(FIGURES, indent=2, sort_keys=True) + "\n")
        terminalreporter.write_line(f"(also in {out})")
    except OSError:
        pass
