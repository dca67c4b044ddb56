"""The `long` marker's table: end-to-end runs of 15 s or more each (measured with --durations on the
2-core machine), which `make test` leaves out to stay under 15 minutes and `make test-engines` runs.
A plugin of tests/conftest.py; tests/test_long_runs.py holds every name to a test that exists."""

from __future__ import annotations

import pytest

LONG = frozenset(
    {
        "tests/e2e/capacity/test_kill.py::test_a_killed_search_resumes_from_its_finished_steps_to_the_same_answer",
        "tests/e2e/capacity/test_capacity.py::test_a_throttled_client_is_client_bound_and_a_rerun_that_keeps_up_runs_it_again",
        "tests/e2e/recorder/test_recorder.py::test_converter_deaths_at_start_and_after_never_stop_the_proxy",
        "tests/e2e/compare/test_regression.py::test_replays_against_fast_and_slow_sims_show_a_ttft_regression",
        "tests/e2e/recorder/test_reasoning.py::test_reasoning_is_measured_alike_recorded_replayed_and_compared",
        "tests/llmreplay/test_compare_outputs.py::test_gate_in_ci_against_sims",
        "tests/e2e/recorder/test_fleet.py::test_three_recorders_siblings_are_one_trace",
        "tests/e2e/replay/test_soak.py::test_a_warmed_up_soak_loops_the_window_and_reports_its_drift",
        "tests/e2e/recorder/test_sigkill.py::test_three_sigkills_under_mixed_traffic_lose_no_completed_request",
        "tests/e2e/replay/test_ray.py::test_a_replay_on_two_ray_nodes_is_the_whole_trace_merged",
        "tests/e2e/replay/test_ray.py::test_keys_reach_the_nodes_through_the_environment_never_their_argv",
        "tests/e2e/recorder/test_bomb.py::test_a_gzip_bomb_neither_stalls_nor_loses_anything",
        "tests/e2e/replay/test_multihost.py::test_merge_refuses_what_is_not_one_replays_shards",
        "tests/e2e/replay/test_multihost.py::test_shards_merged_are_the_whole_trace_on_time[4]",
        "tests/e2e/replay/test_multihost.py::test_shards_merged_are_the_whole_trace_on_time[2]",
        "tests/e2e/replay/test_multihost.py::test_start_at_starts_every_shard_at_the_given_instant",
        "tests/e2e/replay/test_multihost.py::test_a_skewed_host_clock_is_measured_and_flagged",
        "tests/e2e/recorder/test_hostile.py::test_poison_values_are_nulled_named_and_forwarding_goes_on",
        "tests/e2e/recorder/test_hostile.py::test_hostile_requests_never_stop_forwarding_and_all_are_filed",
        "tests/e2e/replay/test_lengths_no_tokenize.py::test_lengths_without_tokenize_land_within_two_percent",
        "tests/e2e/capacity/test_capacity.py::test_one_progress_line_per_finished_step_and_none_under_quiet",
        "tests/e2e/replay/test_agentic.py::test_recorded_with_the_sdks_anonymized_replayed_and_compared_faithful",
        "tests/e2e/replay/test_errors.py::test_every_injected_fault_is_classified",
        "tests/e2e/recorder/test_recorder.py::test_sigkill_loses_nothing_completed_a_second_before",
        "tests/e2e/recorder/test_recorder.py::test_a_killed_converter_is_restarted_and_loses_nothing",
        "tests/e2e/replay/test_orphans.py::test_kill_9_mid_run_stops_every_worker_within_a_second[pdeathsig]",
        "tests/e2e/replay/test_orphans.py::test_kill_9_mid_run_stops_every_worker_within_a_second[pipe-only]",
        "tests/e2e/observe/test_prometheus.py::test_prometheus_scrapes_the_live_run_and_receives_the_finished_one",
        "tests/e2e/observe/test_capacity_metrics.py::test_one_live_endpoint_across_the_steps_and_each_step_pushed",
        "tests/e2e/capacity/test_capacity.py::test_the_knee_and_the_tpot_limit_are_found_within_ten_percent",
        "tests/e2e/recorder/test_recorder.py::test_recorder_in_front_of_sim",
        "tests/e2e/cli/test_bad_input.py::test_one_key_file_policy_for_record_and_anonymize[anonymize]",
        "tests/e2e/recorder/test_agentic.py::test_responses_and_messages_recorded_chained_and_keyless",
        "tests/e2e/recorder/test_agentic.py::test_thinking_and_reasoning_are_timed_and_a_thinking_turn_echoed_back_links",
    }
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid in LONG:
            item.add_marker(pytest.mark.long)
