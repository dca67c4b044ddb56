"""The four labels: the target is scheme://host:port and nothing else of the URL."""

from __future__ import annotations

import pytest

from llmreplay.prometheus.labels import model_label, run_labels, target_label


@pytest.mark.parametrize(
    ("url", "label"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("https://user:secret@staging.example:8443/v1?api_key=k#x", "https://staging.example:8443"),
        ("http://staging.example/v1", "http://staging.example:80"),
        ("https://[::1]/", "https://[::1]:443"),
        ("http://h:notaport", ""),
    ],
)
def test_target_label_keeps_scheme_host_and_port_only(url, label):
    assert target_label(url) == label


def test_model_label_is_the_model_sent():
    assert model_label("m", (("a", "b"),), ("s",)) == "m"
    assert model_label(None, (("a", "y"), ("b", "x"), ("c", "x")), ("s",)) == "x,y"
    assert model_label(None, (), ("s2", "s1")) == "s1,s2"
    assert model_label(None, None, None) == ""


def test_run_label_defaults_to_the_run_directory_name():
    labels = run_labels(None, "/runs/nightly-7", "http://u:p@h:1/x?key=v", "vllm", "m")
    assert labels == {"run": "nightly-7", "target": "http://h:1", "engine": "vllm", "model": "m"}
    assert run_labels("cap/00-x1", "/runs/x", "http://h:1", None, "")["run"] == "cap/00-x1"
