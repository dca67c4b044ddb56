"""GET /metrics: the sim's state in Prometheus text, under the vLLM row's names (llmreplay.engines).

The sim identifies as vLLM-like, so one scraper reads a real vLLM and the sim alike; sim:* are extras.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass

from llmreplay.engines import BY_NAME
from llmreplay.sim.engine import Engine

NAMES = BY_NAME["vllm"].metrics
# Each role of the engine row's PrometheusNames, as the sim's engine knows it (the sim never preempts).
ROLE_VALUES: dict[str, Callable[[Engine], float]] = {
    "running": lambda engine: engine.num_running,
    "waiting": lambda engine: engine.num_waiting,
    "kv_cache_usage": lambda engine: engine.kv_used_tokens / engine.params.kv_cache_tokens,
    "prefix_cache_queries": lambda engine: engine.prompt_tokens_total,
    "prefix_cache_hits": lambda engine: engine.prefix_hit_tokens_total,
    "preemptions": lambda engine: 0,
}


@dataclass(frozen=True, slots=True)
class ServerCounters:
    outcomes: Mapping[str, int]  # requests by outcome
    step_lateness_ns: Iterable[int]  # recent steps


def _quantile(sorted_values: list[int], q: float) -> float:
    if not sorted_values:
        return 0.0
    return float(sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))])


def _sample(name: str, label: str, value: float) -> list[str]:
    """A `# TYPE` line and the sample; a `_total` name is a counter (its TYPE names it without the suffix)."""
    if name.endswith("_total"):
        return [f"# TYPE {name.removesuffix('_total')} counter", f"{name}{label} {_number(value)}"]
    return [f"# TYPE {name} gauge", f"{name}{label} {_number(value)}"]


def _number(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:.6f}"


def render_metrics(engine: Engine, model: str, counters: ServerCounters) -> str:
    label = f'{{model_name="{model}"}}'
    lines = []
    for role, name in asdict(NAMES).items():
        if name is not None:
            lines += _sample(name, label, ROLE_VALUES[role](engine))
    lines += [
        *_sample("vllm:prompt_tokens_total", label, engine.prompt_tokens_total),
        *_sample("vllm:generation_tokens_total", label, engine.generation_tokens_total),
        *_sample("vllm:request_success_total", label, counters.outcomes.get("ok", 0)),
        "# TYPE sim:requests counter",
        *(
            f'sim:requests_total{{outcome="{name}"}} {count}'
            for name, count in sorted(counters.outcomes.items())
        ),
        *_sample("sim:engine_steps_total", "", engine.steps_total),
        *_sample("sim:prefix_cache_blocks", "", len(engine.prefix_cache)),
    ]
    lateness = sorted(counters.step_lateness_ns)
    lines.append("# TYPE sim:step_lateness_seconds summary")
    for q in (0.5, 0.99):
        lines.append(f'sim:step_lateness_seconds{{quantile="{q}"}} {_quantile(lateness, q) / 1e9:.6f}')
    lines.append(f"sim:step_lateness_seconds_count {len(lateness)}")
    return "\n".join(lines) + "\n"
