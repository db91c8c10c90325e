"""The CSV extractor's arguments of the wrong type or value are one line naming the key (through the run-file
validator's rules, sigma_core.config), never a traceback from deep in the reader."""

from __future__ import annotations

import pytest

from sigma_core.cli import main
from sigma_core.data import dataset_from_config
from sigma_core.errors import ConfigError

COLUMNS = 'a column index, a range "first-last" or an array of them'
MAPPING = "an array of values or a table of value -> number"


@pytest.mark.parametrize("arguments, message", [
    ({"sections": 1}, "data.sections: expected a table, got 1"),
    ({"sections": {"inputs": 1.5}}, f"data.sections.inputs: expected {COLUMNS}, got 1.5"),
    ({"sections": {"inputs": True}}, f"data.sections.inputs: expected {COLUMNS}, got True"),
    ({"sections": {"inputs": [[0]]}}, f"data.sections.inputs: expected {COLUMNS}, got [[0]]"),
    ({"mappings": {"1": 1}}, f"data.mappings.1: expected {MAPPING}, got 1"),
    ({"mappings": {"2": {"a": "x"}}}, f"data.mappings.2: expected {MAPPING}, got {{'a': 'x'}}"),
    ({"mappings": [1]}, "data.mappings: expected a table, got [1]"),
    ({"mappings": {"a": ["x"]}}, "data.mappings: the key 'a' is not a column index (an integer: "
                                 'mappings = { 4 = ["setosa", "versicolor"] })'),
    ({"delimiter": "ab"}, "data.delimiter: expected one character, got 'ab'"),
    ({"skip_header": -1}, "data.skip_header: expected an integer >= 0, got -1"),
    ({"chunk_records": 0}, "data.chunk_records: expected an integer >= 1, got 0"),
])
def test_a_wrong_argument_is_one_line_naming_its_key(tmp_path, arguments, message):
    (tmp_path / "x.csv").write_text("1,2,a\n3,4,b\n")
    with pytest.raises(ConfigError) as caught:
        dataset_from_config({"extractor": "csv", "path": str(tmp_path / "x.csv"), **arguments})
    assert str(caught.value) == message


def test_right_arguments_of_each_form_still_read(tmp_path):
    (tmp_path / "x.csv").write_text("1,2,a\n3,4,b\n")
    for mappings in ({"2": ["a", "b"]}, {"2": {"a": 0, "b": 1}}, {2: ["a", "b"]}):
        data = dataset_from_config({"extractor": "csv", "path": str(tmp_path / "x.csv"), "mappings": mappings,
                                    "sections": {"inputs": [0, "1"], "targets": 2}})
        assert data.section("inputs").tolist() == [[1, 2], [3, 4]] and data.section("targets").tolist() == [[0], [1]]


def test_at_the_cli_it_is_one_line_and_status_2(run_file, capsys, monkeypatch):
    monkeypatch.chdir(run_file.parent)
    run_file.write_text(run_file.read_text().replace('extractor = "synthetic"\nn = 96\nshape = 5\nclasses = 3\n',
                                                     f'extractor = "csv"\npath = "{run_file.parent / "x.csv"}"\nsections = 1\n'))
    (run_file.parent / "x.csv").write_text("1,2,0\n3,4,1\n")
    assert main(["train", str(run_file), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == "error: data.sections: expected a table, got 1" and "Traceback" not in err
