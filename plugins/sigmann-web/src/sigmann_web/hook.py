"""The ``web`` hook: a run's live dashboard in the browser (served by :mod:`sigmann_web.server`).

It runs inline, on the training thread, and does almost nothing there: a copy
of each event's run values is appended to its board's bounded inbox (:class:`~sigmann_web.board.Board`),
which the server's thread turns into chart points four times a second; a
full inbox drops its oldest entry, so a slow or stuck page never holds
training up. Running inline lets it read what only the training thread may:
the top-k accuracies of the evaluation pass the operator has just made
(served from the trainer's cache) and the first convolution's filters or dense
layer's weights for the weight images.

The page steers the run through the loop's commands: ``pause``,
``resume``, ``step``, ``reset``, ``stop``, ``set`` for optimiser
hyperparameters, and ``call`` for what must happen on the training thread at
an iteration boundary: inference on a drawn digit, a dropout layer's ``p``,
extending the run, saving a checkpoint before a stop, checking a registry
pattern to chart. These methods run on the server's worker threads, wait a
bounded time, and raise :class:`~sigma_core.errors.SigmaError` with a
message for the page; none of them can fail the training thread.
"""

from __future__ import annotations

import base64
import math
import re
import sys
import threading
from concurrent.futures import TimeoutError as FutureTimeout

import numpy

from sigma_core import ARGUMENT_CONVENTIONS as CONVENTIONS
from sigma_core import (CheckpointHook, ConfigError, DropoutLayer, Hook, HookError, SigmaError, checkpoint_now,
                        checkpoint_path, require, save_checkpoint)

from .board import Board
from .drawing import digit_image, strokes_array
from .server import connect

#: Seconds an action waits for the training loop to reach an iteration boundary.
WAIT = 10.0
#: Weight images shown for the first convolution or dense layer (one per filter or unit, the first ones).
TILES = 32
#: The exit status of ``sigma train`` when the page stopped the run (Stop, Stop & save): 0 is a finished run,
#: 130 Ctrl-C, 2 an error. Documented in the README.
STOPPED_FROM_PAGE = 3


class WebHook(Hook):
    """Serves the dashboard of the run it is attached to; see the module docstring and the README."""

    name = "web"
    #: Every option's rule: checked as a run file or ``--monitor`` gives it (naming its key), and again here for
    #: hooks built in Python, so that a port above 65535 is one line now rather than a traceback from the socket.
    argument_rules = {"host": "str", "port": "int in [0, 65535]", "every": "int >= 0", "values": "names",
                      "top": "shape", "image": "shape or null", "input_range": "interval or null",
                      "keep_serving": "bool", "paused": "bool", "checkpoints": "str or null",
                      "max_points": "int >= 100"}

    def __init__(self, host: str = "127.0.0.1", port: int = 0, every: int = 10, values: list | str = (),
                 top: list | int = (1, 3), image: list | None = None, input_range: list | None = None,
                 keep_serving: bool = False, paused: bool = False, checkpoints: str | None = None,
                 max_points: int = 2000):
        options = {"host": host, "port": port, "every": every, "values": values, "top": top, "image": image,
                   "input_range": input_range, "keep_serving": keep_serving, "paused": paused,
                   "checkpoints": checkpoints, "max_points": max_points}
        for option, value in options.items():
            require(f"web: {option}", self.argument_rules[option], value)
        self.host, self.port, self.every, self.keep_serving, self.paused = host, port, every, keep_serving, paused
        self.patterns = [values] if isinstance(values, str) else list(values)
        self.top = sorted({top} if isinstance(top, int) else set(top))
        self.image, self.input_range = image, input_range
        self.checkpoints, self.max_points = checkpoints, max_points
        self.board = self.server = self.loop = None
        self._layout = {}  # what attach() learnt about the network: image, input shape, weights layer, settables
        self._inference = threading.Lock()  # after the run, inference runs on the server's threads

    # -- events (training thread) ----------------------------------------------------------------
    def attach(self, run):
        super().attach(run)
        self.loop, trainer = run.loop, run.trainer
        self._layout = layout(trainer, self.image)
        if self.input_range is None and self._layout["image"]:
            self.input_range = data_range(trainer)
        info = describe(self.loop, self._layout, self.top, self.input_range)
        self.board = Board(trainer.name, info, max_points=self.max_points, hook=self)
        self.board.weights = self._weights()
        self.server = connect(self.host, self.port, self.keep_serving)
        self.server.add(self.board)
        print(f"sigma web: dashboard of {trainer.name!r} at {self.server.url()}", file=sys.stderr, flush=True)

    def on_start(self):
        self.post("start")
        if self.paused:  # wait for Start on the page
            self.loop.signal_pause()

    def on_iteration(self):
        self.post("iteration")

    def on_epoch(self, report):
        scores = {}
        ks = [k for k in self.top if k > 1 and k < (self._layout["classes"] or 0)]
        if ks:
            trainer = self.run.trainer
            for name, iterator in trainer.validation.items():  # ranks cached by the loop's pass
                ranked = trainer.evaluate(iterator, top=tuple(ks))
                scores.update((f"{name}.top{k}", ranked[f"top{k}"]) for k in ks)
        self.post("epoch", (report, scores, self._weights()))

    def on_pause(self):
        self.post("pause")

    def on_resume(self):
        self.post("resume")

    def on_reset(self):
        self.post("reset", self._weights())

    def on_stop(self):
        self.post("stop")

    def post(self, event: str, extra=None) -> None:
        """Hand the board a copy of this event's values (the cost included) and the charted ones it names."""
        values = self.run.values
        if self.board.folder is None and self.loop.has_directory:  # not asked for sooner: asking would make it
            self.board.folder = self.loop.directory  # where the run's published images may be served from
        charted = values.matching(self.patterns) if self.patterns and event in ("iteration", "epoch") else {}
        self.board.post(event, values.copy(("cost",)), charted, extra)

    def detach(self):
        if self.board is not None:
            self.board.ended = "finished" if self._trainer.epoch >= self.loop.epochs else "stopped"
            self.server.release(self.board)

    def _weights(self):
        """The first layer's weights as images (:func:`weight_tiles`, its first :data:`TILES`): each scaled to
        -127..127 and sent as base64 of int8 bytes, row after row, image after image (compact, quick to encode)."""
        name = self._layout.get("weights")
        if name is None:
            return None
        tiles = weight_tiles(self._trainer.network.parameters[name].to_numpy())
        tiles = tiles / numpy.maximum(numpy.abs(tiles).max(axis=1, keepdims=True), 1e-12)
        data = numpy.rint(numpy.nan_to_num(tiles) * 127).astype(numpy.int8).tobytes()
        return {"layer": name, "shape": list(self._layout["tile"]), "count": len(tiles),
                "tiles": base64.b64encode(data).decode("ascii")}

    # -- what the page asks for (server threads) ----------------------------------------------------
    def settings(self) -> dict:
        """The current value of every setting the page may edit (plain attributes: safe to read from any thread)."""
        optimiser, layers = self._trainer.optimiser, self._trainer.network.layers
        return {key: getattr(optimiser, key[10:]) if key.startswith("optimiser.") else layers[key.split(".")[2]].p
                for key in self._layout["settable"]}

    def control(self, action: str, *, epochs=None, save: bool = False) -> str:
        """Act on the run (``POST /api/control``); returns what happened, in words."""
        loop = self._loop()
        if action == "extend":
            require("epochs", "int >= 1", epochs)
            total = self._on_training_thread(lambda: setattr(loop, "epochs", loop.epochs + epochs) or loop.epochs)
            return f"extended to {total} epochs"
        if action == "stop" and save:
            path = self._on_training_thread(self._save_and_stop)
            self._settle(loop)
            command = self.run.resume_command(path) or f"Run.resume({str(path)!r}) in Python"
            return f"stopped; saved {path}; resume with: {command}"
        if action not in ("start", "pause", "resume", "step", "reset", "stop"):
            raise ConfigError(f"unknown action {action!r}; actions: start, pause, resume, step, reset, stop, extend")
        if action == "stop":
            loop.command("stop", reason="the web page's Stop", status=STOPPED_FROM_PAGE)
        else:
            loop.command("resume" if action == "start" else action)
        self._settle(loop)
        return {"start": "started", "pause": "paused", "resume": "resumed", "step": "stepped one iteration",
                "reset": "reset to the initial parameters", "stop": "stopped"}[action]

    def set(self, key, value) -> str:
        """Change a setting the page lists (``POST /api/set``), validated against its range."""
        loop = self._loop()
        rule = self._layout["settable"].get(key)
        if rule is None:
            raise ConfigError(f"cannot set {key!r}; settable: {', '.join(self._layout['settable']) or 'nothing'}")
        require(key, rule, value)
        if key.startswith("optimiser."):
            loop.command("set", key=key, value=value)
            self._settle(loop)
        else:
            layer = loop.trainer.network.layers[key.split(".")[2]]
            self._on_training_thread(lambda: setattr(layer, "p", float(value)))
        return f"{key} = {value:g}"

    def predict(self, pixels=None, strokes=None) -> dict:
        """Class probabilities for a drawing (``POST /api/predict``), and the h×w image the network saw: its
        ``strokes``, prepared as MNIST's digits were (:mod:`sigmann_web.drawing`), or ``pixels``, h×w numbers in
        [0, 1] (0 blank, 1 ink) taken as they are. Blank..ink become ``input_range``, raw input values, which
        the run's fitted preprocessing then changes as it changed the training data."""
        shape = self._layout["image"]
        if shape is None:
            raise SigmaError("the network's input is not an image, so there is nothing to draw")
        if (pixels is None) == (strokes is None):
            raise ConfigError("give the drawing as strokes or as pixels (one of them)")
        image = self._pixels(pixels, shape) if strokes is None else digit_image(strokes_array(strokes), shape)
        low, high = self.input_range
        trainer = self._trainer
        raw = (low + image * (high - low)).reshape(1, *self._layout["input_shape"])
        preprocessing = trainer.network.preprocessing
        batch = (raw if preprocessing is None else preprocessing.inputs(raw)).astype(trainer.handler.dtype)
        outputs = self._on_training_thread(lambda: infer(trainer, batch), live=False)
        probabilities = _probabilities(outputs.reshape(-1))
        return {"probabilities": [round(float(p), 6) for p in probabilities], "predicted": int(probabilities.argmax()),
                "pixels": numpy.round(image.reshape(shape), 4).tolist()}

    @staticmethod
    def _pixels(pixels, shape) -> numpy.ndarray:
        """``pixels`` checked: h×w numbers in [0, 1], flat or in rows."""
        rows = pixels if pixels and all(isinstance(row, list) for row in pixels) else [pixels]
        if not (isinstance(pixels, list) and all(isinstance(row, list) and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in row) for row in rows)):
            raise ConfigError("pixels must be an array of numbers, or an array of rows of numbers")
        try:
            image = numpy.asarray(pixels, dtype=numpy.float64)
        except ValueError:  # rows of different lengths
            raise ConfigError("pixels must be an array of numbers, or an array of rows of numbers") from None
        if image.size != math.prod(shape) or image.ndim not in (1, 2):
            raise ConfigError(f"pixels must be {shape[0]}×{shape[1]} = {math.prod(shape)} numbers, got shape "
                             f"{list(image.shape)}")
        if not (numpy.isfinite(image).all() and image.min() >= 0 and image.max() <= 1):
            raise ConfigError("pixels must be numbers in [0, 1]")
        return image

    def watch(self, pattern) -> list[str]:
        """Chart the run values ``pattern`` matches (``POST /api/watch``); returns the names it matches now."""
        self._loop()
        require("key", "str", pattern)
        keys = self._on_training_thread(lambda: list(self.run.values.matching((pattern,))))
        if not keys:
            raise ConfigError(f"{pattern!r} matches no number or array among the run's values "
                             "(e.g. learning_rate, network.layers.*.weights)")
        if pattern not in self.patterns:
            self.patterns = [*self.patterns, pattern]  # assigned, never mutated: the training thread reads it
            self.board.info = {**self.board.info, "values": self.patterns}
        return keys

    # -- helpers -------------------------------------------------------------------------------------
    @property
    def _trainer(self):
        return self._layout["trainer"]

    def _loop(self):
        if self.board is None or not self.board.live:
            raise SigmaError("the run has ended; the dashboard is read-only")
        return self.loop

    def _on_training_thread(self, fn, live: bool = True):
        """``fn()`` run by the training thread at its next boundary (or here, under a lock, once the run is over)."""
        if not live and not self.board.live:
            with self._inference:
                return fn()
        future = self._loop().command("call", fn=fn)
        try:
            return future.result(WAIT)
        except FutureTimeout:
            future.cancel()
            raise SigmaError(f"the training thread did not reach an iteration boundary within {WAIT:g} s") from None

    def _save_and_stop(self):
        """Training thread: a checkpoint where the run's [checkpoint] saves (else in ``checkpoints``, if given, else
        in the run directory's ``checkpoints/``: :func:`sigma_core.checkpoint_now`), then stop."""
        loop, trainer = self.loop, self._trainer
        if self.checkpoints is None or any(isinstance(hook, CheckpointHook) for hook in loop.hooks):
            path = checkpoint_now(loop)
        else:
            path = save_checkpoint(trainer, loop.config, checkpoint_path(self.checkpoints, trainer),
                                   directory=loop.directory)
        loop.signal_stop("the web page's Stop & save", STOPPED_FROM_PAGE)
        return path

    @staticmethod
    def _settle(loop):
        if not loop.wait_for_state_changed(WAIT):
            raise SigmaError(f"asked, but the training loop has not acted on it within {WAIT:g} s")


def layout(trainer, image=None) -> dict:
    """What the dashboard needs to know about the network, read once on the training thread."""
    network = trainer.network
    inputs = [layer for layer in network.layers.values() if getattr(layer, "external", None) and not layer.input_shapes]
    input_shape = inputs[0].output_shape if len(inputs) == 1 else None
    image = tuple(image) if image else guess_image(input_shape)
    if image and (len(image) != 2 or input_shape is None or math.prod(image) != math.prod(input_shape)):
        raise HookError(f"web: image = {list(image)} does not match the network's input shape "
                           f"{list(input_shape or ())}")
    costs = [layer for layer in network.layers.values() if layer.is_cost]
    last = costs[0].input_shape if costs else list(network.layers.values())[-1].output_shape
    # The first layer with weights to show: a convolution's filters (sigmann-vision's conv2d, weights (out, in,
    # kh, kw)) or a dense layer's units over the input image's pixels.
    weights, tile = next(((f"{name}.weights", shape[2:] if len(shape) == 4 else image)
                          for name, layer in network.layers.items()
                          for shape in [tuple(layer.parameter_shapes.get("weights", ()))]
                          if len(shape) == 4 or (image and len(shape) == 2 and shape[0] == math.prod(image))),
                         (None, None))
    optimiser = trainer.optimiser
    settable = {f"optimiser.{name}": CONVENTIONS.get(name, "number")
                for name, value in optimiser.hyperparameters().items()
                if isinstance(value, (int, float)) and not isinstance(value, bool)}
    settable.update((f"network.layers.{name}.p", CONVENTIONS["p"])
                    for name, layer in network.layers.items() if isinstance(layer, DropoutLayer))
    return {"trainer": trainer, "input_shape": input_shape, "image": image, "classes": last[-1] if last else None,
            "weights": weights, "tile": tile, "settable": settable}


def weight_tiles(weights) -> numpy.ndarray:
    """The first :data:`TILES` images of a layer's weights, one row each: a dense layer's per unit (its column:
    a weight per input pixel), a convolution's per filter ((out, in, kh, kw): each averaged over its inputs)."""
    if weights.ndim == 4:
        return weights[:TILES].mean(axis=1).reshape(min(TILES, len(weights)), -1)
    return weights[:, :TILES].T


def data_range(trainer) -> tuple[float, float]:
    """The range of the raw training inputs, which a drawing's [0, 1] is mapped to: as the run's preprocessing
    saw them, else measured on (up to 1,000) training records."""
    seen = trainer.network.preprocessing and trainer.network.preprocessing.raw_range
    if seen and seen[1] > seen[0]:
        return seen
    iterator = trainer.training_iterator
    try:
        inputs = getattr(iterator, "iterator", iterator).dataset.section("inputs")[:1000]
        low, high = float(numpy.min(inputs)), float(numpy.max(inputs))
    except Exception:  # an iterator without a dataset: assume images scaled to [0, 1]
        return (0.0, 1.0)
    return (low, high) if high > low else (0.0, 1.0)


def guess_image(shape) -> tuple | None:
    """(h, w) for an input that looks like a greyscale image: (h, w), (h, w, 1), (1, h, w), or flat 8×8 or more."""
    if shape is None:
        return None
    squeezed = [n for n in shape if n != 1]
    if len(squeezed) == 2 and min(squeezed) >= 4:
        return tuple(squeezed)
    side = math.isqrt(shape[0]) if len(shape) == 1 else 0
    return (side, side) if side >= 8 and side * side == shape[0] else None


def describe(loop, layout: dict, top, input_range) -> dict:
    """The run's facts for the run panel: handler, network summary, optimiser, what can be edited."""
    trainer = loop.trainer
    network, optimiser = trainer.network, trainer.optimiser
    layers = [{"name": name, "type": type(layer).__name__, "shape": list(layer.output_shape),
               "parameters": {param: list(shape) for param, shape in layer.parameter_shapes.items()},
               "count": sum(math.prod(shape) for param, shape in layer.parameter_shapes.items()
                            if param not in layer.shared_parameters)}  # a tied parameter counts at its owner
              for name, layer in network.layers.items()]
    return {
        "run": trainer.name, "handler": trainer.handler.name, "dtype": str(trainer.handler.dtype),
        "optimiser": type(optimiser).__name__,
        "hyperparameters": {k: v if isinstance(v, (int, float, str, bool)) else str(v)
                            for k, v in optimiser.hyperparameters().items()},
        "network": {"name": network.name, "parameters": network.parameter_count, "layers": layers},
        "epochs": loop.epochs, "iterations_per_epoch": len(trainer.training_iterator),
        "validation": list(trainer.validation), "top": list(top), "classes": layout["classes"],
        "image": list(layout["image"]) if layout["image"] else None,
        "input_range": list(input_range) if layout["image"] else None,
        "settable": {key: {"rule": rule, **bounds(rule)} for key, rule in layout["settable"].items()},
    }


def bounds(rule: str) -> dict:
    """The page's input bounds from an argument rule.

    ``"number in [0, 1)"`` -> ``{"min": 0.0, "max": 1.0, "min_open": False, "max_open": True}``.
    """
    interval = re.search(r"in ([\[(])(.+), (.+)([\])])", rule)
    if interval:
        return {"min": float(interval[2]), "max": float(interval[3]), "min_open": interval[1] == "(",
                "max_open": interval[4] == ")"}
    comparison = re.search(r"(>=|>|<=|<) (\S+)", rule)
    if not comparison:
        return {}
    side = "min" if comparison[1].startswith(">") else "max"
    return {side: float(comparison[2]), f"{side}_open": len(comparison[1]) == 1}


def infer(trainer, batch: numpy.ndarray) -> numpy.ndarray:
    """The network's predictions for ``batch`` in inference mode, on the trainer's handler."""
    handler = trainer.handler
    with handler.no_grad():
        result = trainer.network.forward({trainer.inputs_external: handler.adopt(batch)}, training=False)
    return result.outputs["predictions"].to_numpy()


def _probabilities(outputs: numpy.ndarray) -> numpy.ndarray:
    """Outputs as class probabilities: kept if they already are a distribution, else softmax (logits)."""
    outputs = outputs.astype(numpy.float64)
    if outputs.size == 1:  # one output: a binary classifier's probability of class 1
        p = float(numpy.clip(outputs[0], 0, 1))
        return numpy.array([1 - p, p])
    if outputs.min() >= 0 and abs(outputs.sum() - 1) < 1e-3:
        return outputs
    exp = numpy.exp(outputs - outputs.max())
    return exp / exp.sum()
