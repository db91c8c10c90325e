"""The runs a path names for the metrics files' readers (sigma plot, sigma dashboard), and their labels."""

from sigmann_monitors import run_directories, run_label


def test_a_folder_of_versions_names_each_version_with_a_metrics_file_in_version_order(tmp_path):
    runs = tmp_path / "runs" / "digits"
    for n in (0, 2, 10):
        (runs / f"version_{n}").mkdir(parents=True)
        (runs / f"version_{n}" / "metrics.jsonl").write_text("")
    (runs / "version_5").mkdir()  # trained without the metrics hook: not a run to read
    assert [path.name for path in run_directories(runs)] == ["version_0", "version_2", "version_10"]
    assert [run_label(path) for path in run_directories(runs)] == [f"digits/version_{n}" for n in (0, 2, 10)]


def test_a_run_directory_or_a_metrics_file_names_itself(tmp_path):
    run = tmp_path / "my-run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("")
    assert run_directories(run) == [run] and run_directories(run / "metrics.jsonl") == [run / "metrics.jsonl"]
    assert run_label(run) == "my-run" and run_label(run / "metrics.jsonl") == "my-run"
    version = tmp_path / "runs" / "digits" / "version_3"
    version.mkdir(parents=True)
    (version / "metrics.jsonl").write_text("")
    assert run_label(version / "metrics.jsonl") == "digits/version_3"
    assert run_directories(tmp_path / "runs" / "digits" / "empty") == [tmp_path / "runs" / "digits" / "empty"]
