"""GET /metrics: the sim's state in Prometheus text, under vLLM's metric names.

vLLM names (vllm:*) let one scraper read a real engine and the sim alike; sim:* are extras.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from llmreplay.sim.engine import Engine


@dataclass(frozen=True, slots=True)
class ServerCounters:
    outcomes: Mapping[str, int]  # requests by outcome
    step_lateness_ns: Iterable[int]  # recent steps


def _quantile(sorted_values: list[int], q: float) -> float:
    if not sorted_values:
        return 0.0
    return float(sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))])


def render_metrics(engine: Engine, model: str, counters: ServerCounters) -> str:
    label = f'{{model_name="{model}"}}'
    kv_usage = engine.kv_used_tokens / engine.params.kv_cache_tokens
    lines = [
        "# TYPE vllm:num_requests_running gauge",
        f"vllm:num_requests_running{label} {engine.num_running}",
        "# TYPE vllm:num_requests_waiting gauge",
        f"vllm:num_requests_waiting{label} {engine.num_waiting}",
        "# TYPE vllm:gpu_cache_usage_perc gauge",
        f"vllm:gpu_cache_usage_perc{label} {kv_usage:.6f}",
        "# TYPE vllm:kv_cache_usage_perc gauge",
        f"vllm:kv_cache_usage_perc{label} {kv_usage:.6f}",
        "# TYPE vllm:prefix_cache_queries counter",
        f"vllm:prefix_cache_queries_total{label} {engine.prompt_tokens_total}",
        "# TYPE vllm:prefix_cache_hits counter",
        f"vllm:prefix_cache_hits_total{label} {engine.prefix_hit_tokens_total}",
        "# TYPE vllm:gpu_prefix_cache_hit_rate gauge",
        f"vllm:gpu_prefix_cache_hit_rate{label} {_ratio(engine.prefix_hit_tokens_total, engine.prompt_tokens_total):.6f}",
        "# TYPE vllm:prompt_tokens counter",
        f"vllm:prompt_tokens_total{label} {engine.prompt_tokens_total}",
        "# TYPE vllm:generation_tokens counter",
        f"vllm:generation_tokens_total{label} {engine.generation_tokens_total}",
        "# TYPE vllm:request_success counter",
        f'vllm:request_success_total{{model_name="{model}"}} {counters.outcomes.get("ok", 0)}',
        "# TYPE sim:requests counter",
        *(
            f'sim:requests_total{{outcome="{name}"}} {count}'
            for name, count in sorted(counters.outcomes.items())
        ),
        "# TYPE sim:engine_steps counter",
        f"sim:engine_steps_total {engine.steps_total}",
        "# TYPE sim:prefix_cache_blocks gauge",
        f"sim:prefix_cache_blocks {len(engine.prefix_cache)}",
    ]
    lateness = sorted(counters.step_lateness_ns)
    lines.append("# TYPE sim:step_lateness_seconds summary")
    for q in (0.5, 0.99):
        lines.append(f'sim:step_lateness_seconds{{quantile="{q}"}} {_quantile(lateness, q) / 1e9:.6f}')
    lines.append(f"sim:step_lateness_seconds_count {len(lateness)}")
    return "\n".join(lines) + "\n"


def _ratio(part: int, whole: int) -> float:
    return part / whole if whole else 0.0
