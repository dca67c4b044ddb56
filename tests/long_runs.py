"""The `long` marker's table: end-to-end runs of 15 s or more each (measured with --durations on the
2-core machine), which `make test` leaves out to stay under 15 minutes and `make test-engines` runs.
A plugin of tests/conftest.py; tests/test_long_runs.py holds every name to a test that exists."""

from __future__ import annotations

import pytest

LONG = frozenset(
    {
        "tests/replayer/capacity/test_capacity_kill.py::test_a_killed_search_resumes_from_its_finished_steps_to_the_same_answer",
        "tests/replayer/capacity/test_capacity_e2e.py::test_a_throttled_client_is_client_bound_and_a_rerun_that_keeps_up_runs_it_again",
        "tests/recorder/test_recorder_e2e.py::test_converter_deaths_at_start_and_after_never_stop_the_proxy",
        "tests/replayer/compare/test_compare_e2e.py::test_replays_against_fast_and_slow_sims_show_a_ttft_regression",
        "tests/recorder/test_recorder_reasoning_e2e.py::test_reasoning_is_measured_alike_recorded_replayed_and_compared",
        "tests/replayer/compare/test_compare_ci_outputs.py::test_gate_in_ci_against_sims",
        "tests/recorder/test_recorder_fleet_e2e.py::test_three_recorders_siblings_are_one_trace",
        "tests/replayer/results/test_soak_e2e.py::test_a_warmed_up_soak_loops_the_window_and_reports_its_drift",
        "tests/recorder/test_recorder_sigkill.py::test_three_sigkills_under_mixed_traffic_lose_no_completed_request",
        "tests/replayer/test_ray_e2e.py::test_a_replay_on_two_ray_nodes_is_the_whole_trace_merged",
        "tests/replayer/test_ray_e2e.py::test_keys_reach_the_nodes_through_the_environment_never_their_argv",
        "tests/recorder/test_recorder_bomb_e2e.py::test_a_gzip_bomb_neither_stalls_nor_loses_anything",
        "tests/replayer/test_multihost_e2e.py::test_merge_refuses_what_is_not_one_replays_shards",
        "tests/replayer/test_multihost_e2e.py::test_shards_merged_are_the_whole_trace_on_time[4]",
        "tests/replayer/test_multihost_e2e.py::test_shards_merged_are_the_whole_trace_on_time[2]",
        "tests/replayer/test_multihost_e2e.py::test_start_at_starts_every_shard_at_the_given_instant",
        "tests/replayer/test_multihost_e2e.py::test_a_skewed_host_clock_is_measured_and_flagged",
        "tests/recorder/test_recorder_hostile.py::test_poison_values_are_nulled_named_and_forwarding_goes_on",
        "tests/recorder/test_recorder_hostile.py::test_hostile_requests_never_stop_forwarding_and_all_are_filed",
        "tests/replayer/test_replay_e2e_lengths_no_tokenize.py::test_lengths_without_tokenize_land_within_two_percent",
        "tests/replayer/capacity/test_capacity_e2e.py::test_one_progress_line_per_finished_step_and_none_under_quiet",
        "tests/replayer/test_replay_e2e_agentic.py::test_recorded_with_the_sdks_anonymized_replayed_and_compared_faithful",
        "tests/replayer/test_replay_e2e_errors.py::test_every_injected_fault_is_classified",
        "tests/recorder/test_recorder_e2e.py::test_sigkill_loses_nothing_completed_a_second_before",
        "tests/recorder/test_recorder_e2e.py::test_a_killed_converter_is_restarted_and_loses_nothing",
        "tests/replayer/test_replay_e2e_orphans.py::test_kill_9_mid_run_stops_every_worker_within_a_second[pdeathsig]",
        "tests/replayer/test_replay_e2e_orphans.py::test_kill_9_mid_run_stops_every_worker_within_a_second[pipe-only]",
        "tests/replayer/observe/test_prometheus_e2e.py::test_prometheus_scrapes_the_live_run_and_receives_the_finished_one",
        "tests/replayer/observe/test_capacity_metrics_e2e.py::test_one_live_endpoint_across_the_steps_and_each_step_pushed",
        "tests/replayer/capacity/test_capacity_e2e.py::test_the_knee_and_the_tpot_limit_are_found_within_ten_percent",
        "tests/recorder/test_recorder_e2e.py::test_recorder_in_front_of_sim",
        "tests/llmreplay/test_bad_input_cli.py::test_one_key_file_policy_for_record_and_anonymize[anonymize]",
        "tests/recorder/test_recorder_agentic_e2e.py::test_responses_and_messages_recorded_chained_and_keyless",
        "tests/recorder/test_recorder_agentic_e2e.py::test_thinking_and_reasoning_are_timed_and_a_thinking_turn_echoed_back_links",
    }
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid in LONG:
            item.add_marker(pytest.mark.long)
