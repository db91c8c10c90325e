"""``sigma plot`` and the ``plots`` hook: PNG curves from the metrics files."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy
import pytest
from matplotlib.image import imread
from sigmann_testing import default_ctrl_c

from sigma_core import plugins
from sigma_core.cli import main
from sigmann_plots.plot import figure, read_run

@pytest.fixture
def run_file(sigma_run_file):
    return sigma_run_file("training.epochs=3")


def train(run_file, directory, *options):
    assert main(["train", str(run_file), "--quiet", "--monitor", f"metrics:directory='{directory}',every=2",
                 *options]) == 0


def assert_png(path, width=1650, height=484):
    image = imread(path)
    assert image.shape[:2] == (height, width)
    assert len(numpy.unique(image.reshape(-1, image.shape[-1]), axis=0)) > 50  # curves, text: not a blank canvas


def test_sigma_plot_draws_one_run_beside_its_metrics(run_file, tmp_path, capsys):
    train(run_file, tmp_path / "a")
    capsys.readouterr()
    assert main(["plot", str(tmp_path / "a")]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {tmp_path / 'a' / 'metrics.png'}"
    assert_png(tmp_path / "a" / "metrics.png")


def test_the_figure_is_labelled_and_overlays_runs_with_a_legend(run_file, tmp_path, monkeypatch, capsys):
    train(run_file, tmp_path / "a")
    train(run_file, tmp_path / "b", "--set", "optimiser.learning_rate=0.02")
    runs = {"a": read_run(tmp_path / "a"), "b": read_run(tmp_path / "b")}
    cost, accuracy, rate = figure(runs).axes
    assert [(axes.get_title(), axes.get_xlabel(), axes.get_ylabel()) for axes in (cost, accuracy, rate)] == [
        ("Cost", "epoch", "cost"), ("Held-out accuracy", "epoch", "accuracy"),
        ("Learning rate", "epoch", "learning rate")]
    assert [t.get_text() for t in cost.get_legend().get_texts()] == [
        f"{run}: {curve}" for run in "ab" for curve in
        ("training (logged iterations)", "training (epoch mean)", "validation")]
    assert [t.get_text() for t in rate.get_legend().get_texts()] == ["a", "b"]
    epochs = [r for r in runs["a"] if r["event"] == "epoch"]
    x, y = accuracy.lines[0].get_data()
    assert list(x) == [1, 2, 3] and list(y) == [r["validation.accuracy"] for r in epochs]
    assert list(rate.lines[1].get_ydata()) == [0.02] * len(rate.lines[1].get_ydata())
    x, _ = cost.lines[0].get_data()  # iterations 2, 4, ... of 9 per epoch, on the epoch axis
    assert x[:5] == pytest.approx([2 / 9, 4 / 9, 6 / 9, 8 / 9, 1 + 1 / 9])

    monkeypatch.chdir(tmp_path)
    assert main(["plot", "a", "b"]) == 0  # several runs: plot.png here
    assert_png(tmp_path / "plot.png")


def test_a_folder_of_versions_overlays_each_version_with_a_legend(run_file, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for rate in (0.1, 0.02):  # one run file run twice: runs/blobs/version_0 and version_1
        assert main(["train", str(run_file), "--quiet", "--monitor", "metrics:every=2", "--set",
                     f"optimiser.learning_rate={rate}"]) == 0
    drawn = {}
    monkeypatch.setattr("sigmann_plots.plot.draw", lambda runs, output: drawn.update(runs=runs, output=output))
    assert main(["plot", "runs/blobs"]) == 0
    assert list(drawn["runs"]) == ["blobs/version_0", "blobs/version_1"] and drawn["output"] == Path("runs/blobs/metrics.png")
    rate = figure(drawn["runs"]).axes[2]
    assert [t.get_text() for t in rate.get_legend().get_texts()] == ["blobs/version_0", "blobs/version_1"]
    assert [line.get_ydata()[0] for line in rate.lines] == [0.1, 0.02]  # each version its own curve, not one run


def test_a_resumed_run_is_drawn_whole(run_file, tmp_path, monkeypatch):
    from sigma_core import build_run
    from sigmann_monitors import MetricsHook
    from sigma_core import config as run_config
    from sigmann_plots.hook import PlotsHook

    monkeypatch.chdir(tmp_path)
    run_file.write_text(run_file.read_text() + '[checkpoint]\ndirectory = "saves"\nevery_epochs = 1\n')
    assert main(["train", str(run_file), "--quiet", "--monitor", "metrics:every=3", "--set", "training.epochs=2"]) == 0
    sent = []

    class Plots(PlotsHook):
        def write(self, row):
            sent.append((row["event"], row["step"]))
            super().write(row)

    run = build_run(run_config.load(run_file, ["training.epochs=3"]))
    run.resume("saves/blobs-e1-i0.ckpt")  # in runs/blobs/version_0, after epoch 1 (step 9) of 9 iterations each
    run.train([MetricsHook(every=3), Plots(every=3)])
    assert sent == [("iteration", 3), ("iteration", 6), ("iteration", 9), ("epoch", 9),  # drawn before
                    ("iteration", 12), ("iteration", 15), ("iteration", 18), ("epoch", 18),
                    ("iteration", 21), ("iteration", 24), ("iteration", 27), ("epoch", 27)]
    assert_png(tmp_path / "runs" / "blobs" / "version_0" / "metrics.png")


def test_a_resumed_or_crashed_log_is_read_once_per_step(tmp_path):
    lines = [{"event": "iteration", "step": 2, "epoch": 1, "iteration": 2, "cost": 9.0},
             {"event": "iteration", "step": 2, "epoch": 1, "iteration": 2, "cost": 1.0},  # trained again after resume
             {"event": "epoch", "step": 2, "epoch": 1, "iteration": 2, "cost": 1.5}]
    (tmp_path / "metrics.jsonl").write_text("\n".join(map(json.dumps, lines)) + '\n{"event": "ep\n')
    assert [(r["event"], r["cost"]) for r in read_run(tmp_path)] == [("iteration", 1.0), ("epoch", 1.5)]


def test_a_directory_without_metrics_is_a_one_line_error(tmp_path, capsys):
    assert main(["plot", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"error: {tmp_path / 'metrics.jsonl'}: cannot read it (No such file or directory); train with "
                   "--monitor metrics and give the run directory it wrote, e.g. runs/digits")


def test_the_plots_hook_draws_the_run_as_it_trains(run_file, tmp_path):
    train(run_file, tmp_path / "a", "--monitor", f"plots:directory='{tmp_path / 'p'}'")
    assert_png(tmp_path / "p" / "metrics.png")
    assert not (tmp_path / "p" / "metrics.jsonl").exists()  # it draws; the metrics hook writes


def test_the_drawing_process_reports_a_failure_in_one_line(tmp_path):
    failed = subprocess.run([sys.executable, "-m", "sigmann_plots.worker", str(tmp_path / "x.png"), "x"],
                            input="not json\n", text=True, capture_output=True)
    assert failed.returncode == 1 and len(failed.stderr.strip().splitlines()) == 1
    assert failed.stderr.startswith("sigma plots: cannot draw") and "JSONDecodeError" in failed.stderr


def test_a_plots_hook_that_cannot_draw_is_one_line_and_training_goes_on(run_file, tmp_path, capsys, caplog):
    (tmp_path / "taken").write_text("a file where the run directory should go")
    assert main(["train", str(run_file), "--quiet", "--monitor", f"plots:directory='{tmp_path / 'taken'}'"]) == 0
    failures = [line for line in capsys.readouterr().err.splitlines() if line.startswith("sigma: hook 'plots'")]
    assert len(failures) == 1 and failures[0].startswith("sigma: hook 'plots' failed in on_start: WriteError: plots ")
    assert failures[0].endswith("; detached, training goes on")

    import time

    from sigma_core import Hook, build_run
    from sigma_core import config as run_config
    from sigmann_plots.hook import PlotsHook

    class Kill(Hook):  # the drawing process dies after the first epoch (say, killed by the system)
        def on_epoch(self, report):
            if report.epoch == 1:
                while plots.worker is None:  # started on the hook's thread
                    time.sleep(0.01)
                plots.worker.kill()
                plots.worker.wait()

    plots = PlotsHook(directory=str(tmp_path / "p"))
    run = build_run(run_config.load(run_file, []))
    caplog.clear()
    assert run.train([plots, Kill()])["epochs"] == 3
    failures = [r.getMessage() for r in caplog.records if "plots" in r.getMessage()]
    assert len(failures) == 1 and re.fullmatch(  # its next record, whichever event that is (it runs behind)
        r"hook 'plots' failed in on_(iteration|epoch|stop): HookError: plots: the drawing process has ended "
        r"\(exit status -9\); detached, training goes on", failures[0]), failures


def test_ctrl_c_stops_the_run_and_the_drawing_process_draws_the_last_epoch_without_a_traceback(run_file, tmp_path):
    import os
    import signal
    import time

    run_file.write_text(run_file.read_text().replace("epochs = 3", "epochs = 100000"))
    training = subprocess.Popen([sys.executable, "-c", "from sigma_core.cli import main; raise SystemExit(main())",
                                 "train", str(run_file), "--quiet", "--monitor", f"plots:directory='{tmp_path}'"],
                                stderr=subprocess.PIPE, text=True, start_new_session=True, cwd=tmp_path,
                                preexec_fn=default_ctrl_c)  # Ctrl-C even under nohup
    deadline = time.monotonic() + 60
    while not (tmp_path / "metrics.png").exists():  # the worker is up and drawing
        assert time.monotonic() < deadline and training.poll() is None, "no drawing"
        time.sleep(0.1)
    os.killpg(training.pid, signal.SIGINT)  # Ctrl-C reaches every process of the terminal's group
    _, err = training.communicate(timeout=60)
    assert training.returncode == 130 and "Traceback" not in err and "stopped by Ctrl-C after training step" in err, err


def test_sigma_plugins_lists_the_hook_and_the_command_with_their_distribution():
    assert plugins.get("hook", "plots").distribution == "sigmann-plots"
    assert plugins.get("command", "plot").distribution == "sigmann-plots"


def test_a_long_run_is_drawn_from_about_a_thousand_points_a_curve_its_spike_among_them(tmp_path):
    lines = [json.dumps({"time": step / 10, "event": "iteration", "step": step, "epoch": 1 + step // 1000,
                         "iteration": step % 1000, "cost": 100.0 if step == 31_410 else 1 + step % 3 / 10,
                         "learning_rate": 0.1}) for step in range(1, 50_001)]
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    records = read_run(tmp_path)
    costs = [r["cost"] for r in records]
    assert len(records) <= 1501 and 100.0 in costs and records[-1]["step"] == 50_000  # not 50,000 records
    assert main(["plot", str(tmp_path), "-o", str(tmp_path / "long.png")]) == 0
    assert_png(tmp_path / "long.png")


def test_no_legend_covers_a_curve(tmp_path):
    """Each legend lies outside its axes, however many runs and curves it lists."""
    def records(run):
        return [{"event": "epoch", "epoch": epoch, "iteration": 9, "cost": 1 / (epoch + run), "learning_rate": 0.1,
                 "validation.cost": 1.2 / (epoch + run), "validation.accuracy": 0.5 + 0.1 * epoch - 0.05 * run}
                for epoch in range(1, 5)]

    drawn = figure({f"run-{run}": records(run) for run in range(3)})
    drawn.canvas.draw()
    for axes in drawn.axes:
        legend, area = axes.get_legend().get_window_extent(), axes.get_window_extent()
        assert legend.y1 <= area.y0, (axes.get_title(), legend, area)  # wholly below the plotting area


def test_a_version_without_metrics_is_named_not_left_out_silently(run_file, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["train", str(run_file), "--quiet", "--monitor", "metrics:every=2"]) == 0  # version_0
    assert main(["train", str(run_file), "--quiet"]) == 0  # version_1: no metrics hook
    monkeypatch.setattr("sigmann_plots.plot.draw", lambda runs, output: None)
    capsys.readouterr()
    assert main(["plot", "runs/blobs"]) == 0
    err = capsys.readouterr().err
    assert err.strip() == ("sigma plot: left out, no metrics.jsonl (trained without the metrics hook): "
                           f"{Path('runs/blobs/version_1')}"), err
