"""The importer table: the CLI offers its rows, each row's reader loads, the docs name every source."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmreplay.errors import BadInput
from llmreplay.importers import BY_NAME, IMPORTERS
from llmreplay.importers.cli import import_trace
from llmreplay.importers.pipeline import ImportConfig, check_config

README = Path(__file__).parents[3] / "README.md"


def test_the_cli_offers_exactly_the_rows():
    source = next(p for p in import_trace.params if p.name == "source")
    assert tuple(source.type.choices) == tuple(BY_NAME)


@pytest.mark.parametrize("importer", IMPORTERS, ids=lambda i: i.name)
def test_each_row_names_a_reader_that_loads(importer):
    module, function = importer.reader.split(":")
    assert callable(getattr(__import__(module, fromlist=[function]), function))
    assert importer.title and importer.source


@pytest.mark.parametrize("importer", IMPORTERS, ids=lambda i: i.name)
def test_block_size_is_refused_where_the_row_has_no_prefix_ids(importer, tmp_path):
    config = ImportConfig(importer.name, tmp_path / "in", tmp_path / "out.parquet", block_size=64)
    if importer.block_ids:
        check_config(config)
    else:
        with pytest.raises(BadInput, match="carry no prefix hash ids"):
            check_config(config)


def test_the_readme_names_every_source():
    assert f"llmreplay import {'|'.join(BY_NAME)} FILE" in README.read_text()
