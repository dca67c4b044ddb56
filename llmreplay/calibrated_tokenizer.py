"""A local tokenizer calibrated to a target without /tokenize: a probe set's `usage.prompt_tokens`
fitted on the local view (llmreplay.length_calibration); approximate, never exact. Every probe names
itself in its X-Request-ID (llmreplay.probe_ids)."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from llmreplay.engine_tokenizer import JsonHttp
from llmreplay.errors import BadInput
from llmreplay.length_calibration import SYSTEM_ROLES, LengthModel, LengthSample, fit_lengths

CALIBRATED_PREFIX = "calibrated:"
Calibration = LengthModel  # the target's count as a function of a local tokenizer's view
# The probe set: every layout at every length (local tokens of all texts), plus tools on a few; each
# probe asks for one output token. Bounded by PROBE_BUDGET_S in all; MIN_PROBES answers are needed.
PROBE_LAYOUTS = (
    ("user",),
    ("system", "user"),
    ("user", "assistant", "user"),
    ("system", "user", "assistant", "user", "assistant", "user"),
)
PROBE_LENGTHS = (16, 48, 160, 512, 1536)
PROBE_TOOL_CASES = ((("user",), 48), (("user",), 512), (("system", "user"), 160), (("system", "user"), 1536))
PROBE_WORKERS = 4
PROBE_BUDGET_S = 60.0
MIN_PROBES = 8


@dataclass(frozen=True)
class Probe:
    roles: tuple[str, ...]
    tokens: int  # local tokens of all its texts together
    tools: bool


def probe_plan() -> list[Probe]:
    plan = [Probe(roles, n, False) for n in PROBE_LENGTHS for roles in PROBE_LAYOUTS]
    return plan + [Probe(roles, n, True) for roles, n in PROBE_TOOL_CASES]


def probe_body(probe: Probe, index: int, text) -> tuple[list[dict], list[dict] | None]:
    """(messages, tools) of a probe: its tokens split unevenly over the messages (and a tool's
    description), each text its own (no prefix shared with another probe)."""
    parts = len(probe.roles) + probe.tools
    weights = [1 + (index + i) % 3 for i in range(parts)]
    sizes = [max(1, probe.tokens * w // sum(weights)) for w in weights]
    messages = [
        {"role": role, "content": text(n, f"probe{index}/{i}".encode())}
        for i, (role, n) in enumerate(zip(probe.roles, sizes, strict=False))
    ]
    tools = None
    if probe.tools:
        tools = [
            {
                "type": "function",
                "function": {
                    "name": "tool_0",
                    "description": text(sizes[-1], f"probe{index}/tool".encode()),
                    "parameters": {"type": "object", "properties": {"input": {"type": "string"}}},
                },
            }
        ]
    return messages, tools


def calibrate(base_url: str, model: str, local, text, api_key: str | None = None) -> Calibration:
    """The probe set (max_tokens 1) against a target without /tokenize, its count fitted on the local
    view (llmreplay.length_calibration); `text(tokens, seed)`: fresh text of that many local tokens
    (llmreplay.exact_text.ExactText.text). BadInput when fewer than MIN_PROBES probes were answered."""
    http_ = JsonHttp(base_url, api_key)
    deadline = time.monotonic() + PROBE_BUDGET_S
    failures: list[str] = []

    def measure(item: tuple[int, Probe]) -> LengthSample | None:
        index, probe = item
        if time.monotonic() > deadline:
            return None
        messages, tools = probe_body(probe, index, text)
        body = {"model": model, "messages": messages, "max_tokens": 1}
        if tools:
            body["tools"] = tools
        try:
            answer = http_.post("/v1/chat/completions", body, purpose="calibrate")
        except BadInput as exc:  # one probe too long for the target, say: the others still count
            failures.append(str(exc))
            return None
        try:
            counted = int(answer["usage"]["prompt_tokens"])
        except (KeyError, TypeError, ValueError):
            failures.append(f"{base_url}: a probe's answer has no usage.prompt_tokens")
            return None
        return LengthSample(*_local_view(local, messages, tools), counted)

    with ThreadPoolExecutor(PROBE_WORKERS) as pool:
        samples = [s for s in pool.map(measure, enumerate(probe_plan())) if s is not None]
    if len(samples) < MIN_PROBES:
        why = failures[0] if failures else f"only {len(samples)} answered within {PROBE_BUDGET_S:g} s"
        raise BadInput(why if why.endswith("usage.prompt_tokens") else f"length calibration: {why}")
    return fit_lengths(samples)


def _local_view(local, messages, tools):
    texts = [str(m.get("content") or "") for m in messages]
    if tools:
        texts.append(json.dumps(tools))
    system = any(m.get("role") in SYSTEM_ROLES for m in messages)
    return len(messages), system, bool(tools), sum(local.count(t) for t in texts), sum(map(len, texts))


class CalibratedTokenizer:
    """A local tokenizer whose request counts are the target's as fitted (approximate, never exact)."""

    def __init__(self, local, calibration: Calibration, local_spec: str | None):
        self.local, self.calibration, self._local_spec = local, calibration, local_spec
        self.id = f"{CALIBRATED_PREFIX}{local.id}"
        self.encode, self.decode, self.count = local.encode, local.decode, local.count
        self.encode_batch, self.vocab_size = local.encode_batch, local.vocab_size

    def count_chat(self, messages: list[dict], tools: list[dict] | None = None) -> int:
        return round(self.calibration.predict(*_local_view(self.local, messages, tools)))

    def count_prompt(self, text: str) -> int:
        return round(self.calibration.predict(1, False, False, self.local.count(text), len(text)))

    @property
    def step_rate(self) -> float:
        """Target tokens per local token added to synthesized text (the prompt fitter's step size)."""
        return self.calibration.step_rate

    @property
    def spec(self) -> str:
        cal = self.calibration
        numbers = ",".join(repr(float(getattr(cal, t))) for t in SPEC_TERMS)
        return f"{CALIBRATED_PREFIX}{numbers}:{self._local_spec or ''}"


SPEC_TERMS = (
    "per_token",
    "per_request",
    "per_message",
    "per_system",
    "per_tools",
    "per_char",
    "chars_per_token",
)


def parse_calibrated_spec(spec: str) -> tuple[Calibration, str | None]:
    """`calibrated:A,B,C,D,E,F:LOCAL` (SPEC_TERMS in order) or the older `calibrated:A:B:C:LOCAL`
    (per token, per request, per message) -> (its calibration, the local spec or None, unchecked:
    llmreplay.tokenizers checks it)."""
    rest = spec.removeprefix(CALIBRATED_PREFIX)
    try:
        head, _, tail = rest.partition(":")
        if "," in head:
            values = [float(v) for v in head.split(",")]
            if len(values) != len(SPEC_TERMS):
                raise ValueError
            calibration, local_spec = Calibration(**dict(zip(SPEC_TERMS, values, strict=True))), tail
        else:
            a, b, c, local_spec = rest.split(":", 3)
            calibration = Calibration(per_token=float(a), per_request=float(b), per_message=float(c))
    except ValueError:
        raise BadInput(
            f"--tokenizer {spec}: expected calibrated:{','.join(t.upper() for t in SPEC_TERMS)}:LOCAL"
        ) from None
    return calibration, local_spec or None
