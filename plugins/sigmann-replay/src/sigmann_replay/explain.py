"""``sigma explain``: the training step a run file records, kernel by kernel.

Two steps run on the first batches (the second is recorded, see
:mod:`sigmann_replay.replay`) and the recording is printed: each kernel call with
its shapes (a registered op by its name, ``lstm_sequence``, and its VJP as
``lstm_sequence.backward``), the buffers it reads and writes (the batch, parameters, optimiser
memory by name; the step's own buffers as t1, t2, ...), the bytes those
buffers hold and the FLOPs it does (exact for matrix products, 2·m·k·n; one per
element written otherwise), with totals. Nothing is saved. ``sigma train
--explain`` (the hook :class:`ExplainOnce`, ``--monitor explain``) prints the same table while training.
"""

from __future__ import annotations

import itertools
import math
import pkgutil
import sys

from sigma_core import Hook, components

from .replay import StepReplay, _root

#: ``l2_gradient``'s FLOPs per parameter element (a multiply and an add); an update rule says its own (``flops``).
L2_FLOPS = 2


def run_explain(args) -> int:
    """``sigma explain``: two steps of the run file's first batches, the second recorded, and its table."""
    from sigma_core import build_run, cli_options, load_run_file

    run = build_run(load_run_file(args.config, [*cli_options.run_overrides(args), "training.prefetch=0"]))
    trainer = run.trainer
    trainer.initialise(run.handler)
    trainer.compile_step(StepReplay.compile)
    for batch in itertools.islice(trainer.training_iterator, 2):
        trainer.run_iteration(batch)
    print(recorded(trainer, run.config))
    return 0


class ExplainOnce(Hook):
    """``sigma train --explain``: :func:`recorded` on stderr once, after the run's second step (the recorded one)."""

    steps = 0

    def on_start(self):
        if StepReplay.of(self.run.trainer) is None:  # nothing will be recorded: say so now
            self.steps = 2
            print(recorded(self.run.trainer, self.run.config), file=sys.stderr)

    def on_iteration(self):
        self.steps += 1
        if self.steps == 2:
            print(recorded(self.run.trainer, self.run.config), file=sys.stderr)


def recorded(trainer, config: dict | None = None) -> str:
    """The table of the trainer's latest recorded step, or one line saying why there is none."""
    replay = StepReplay.of(trainer)
    if replay is None:
        setting = (config or {}).get("training", {}).get("compile", "none")
        return f"run {trainer.name!r}: training steps are not recorded (training.compile = {setting!r}): nothing to explain"
    if replay.last is not None:
        return explain(replay.last)
    reasons = [entry for entry in replay.cache.values() if isinstance(entry, str)]
    return (f"run {trainer.name!r}: the training step cannot be recorded"
            + (f" ({reasons[0]}); it runs normally" if reasons else " (fewer than two steps ran through the trainer)"))


def explain(recording) -> str:
    """The table ``sigma explain`` prints."""
    trainer, types = recording.trainer, recording.arrays
    inputs = {**recording.copied, **recording.adopted}  # the batch as the kernels read it
    names = {id(_root(raw, types)): f"batch.{key}" for key, raw in inputs.items()}
    names.update((id(_root(a.data, types)), pid) for pid, a in trainer.network.parameters.items())
    optimiser = trainer.optimiser
    names.update((id(_root(m.data, types)), f"{pid}.{name}") for pid, memory in optimiser.memory.items()
                 for name, m in zip(optimiser.memory_names, memory))
    counter = itertools.count(1)
    rows, total_bytes, total_flops = [], 0, 0
    for record, form in zip(recording.records, recording.forms):
        part, name, fn, args, kwargs, new, result = record
        if name == "run_op":  # the kernel every registered op runs through: the op says more
            name = op_label(args[0], trainer.handler.name)
        if recording.captured is not None and form not in ("skipped", "check"):
            form = "graph"  # captured by the handler (a CUDA graph)
        arrays = [a for a in (*args, *kwargs.values()) for a in (a if isinstance(a, tuple) else (a,))
                  if isinstance(a, types)]
        for buffer in new:
            names.setdefault(id(buffer), f"t{next(counter)}")
        written = list(new)
        if part == "updates" and name != "l2_gradient":
            written += [args[0], *args[2:]]
        elif name in ("fill_", "copy_", "add_"):
            written.append(args[0])
        label = lambda a: names.get(id(_root(a, types)), "const")
        reads = list(dict.fromkeys(label(a) for a in arrays))
        writes = list(dict.fromkeys(label(a) for a in written))
        if part == "updates":  # the parameter's memory by its short name
            reads, writes = ([r.removeprefix(f"{label(args[0])}.") for r in names_] for names_ in (reads, writes))
        moved = sum(a.nbytes for a in arrays) + sum(a.nbytes for a in new)
        flops = _flops(part, name, arrays, written, result, trainer.handler.kernels.updates.rules)
        total_bytes, total_flops = total_bytes + moved, total_flops + flops
        shapes = " ".join("x".join(map(str, a.shape)) or "()" for a in arrays)
        out = result[0] if isinstance(result, tuple) else result
        if isinstance(out, types) and part != "updates":
            shapes += " -> " + ("x".join(map(str, out.shape)) or "()")
        kernel = f"{part}.{name}" if part else name
        extra = [a for a in args if isinstance(a, str)]
        rows.append((kernel + (f"({extra[0]})" if extra else ""), form, shapes, ", ".join(reads), ", ".join(writes) or "-",
                     _size(moved), f"{flops:,}"))
    header = ("kernel", "replay", "shapes", "reads", "writes", "bytes", "FLOPs")
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    lines = [f"recorded training step of run {trainer.name!r} on {trainer.handler}: {len(rows)} kernel calls, "
             f"{sum(form != 'skipped' for form in recording.forms)} replayed; batch "
             + ", ".join(f"{key} {v.shape} {v.dtype}" for key, v in inputs.items())]
    for row in [header, *rows]:
        lines.append("  " + "  ".join(str(cell).rjust(w) if i >= 5 else str(cell).ljust(w)
                                      for i, (cell, w) in enumerate(zip(row, widths))).rstrip())
    lines.append(f"total: {len(rows)} kernel calls, {_size(total_bytes)} read and written, {total_flops:,} FLOPs "
                 f"({total_flops / max(total_bytes, 1):.2f} FLOPs per byte)")
    return "\n".join(lines)


def op_label(rule, handler_name: str) -> str:
    """What ``k.run_op(rule, ...)`` ran: ``lstm_sequence`` for a registered op's ``forward``, and
    ``lstm_sequence.backward`` for its VJP. ``rule`` is a bound method of the op instance the handler
    made, from the op's class or from the kernel registered for the handler ``handler_name``; a class no
    op registered (as it is) is named as itself."""
    cls = type(rule.__self__)
    name = next((c.name for c in components("op") if cls in _op_classes(c, handler_name)), cls.__name__)
    return name if rule.__name__ == "forward" else f"{name}.{rule.__name__}"


def _op_classes(component, handler_name: str) -> list:
    """The op's class and its kernel for the handler, those already imported: a lazy ``"module:attr"`` whose
    module is not imported names no op that ran, so explaining imports nothing."""
    classes = []
    for target in (component.implementation, dict(component.handler_kernels).get(handler_name)):
        if isinstance(target, str):
            target = pkgutil.resolve_name(target) if target.partition(":")[0] in sys.modules else None
        if target is not None:
            classes.append(target)
    return classes


def _flops(part, name, arrays, written, result, rules) -> int:
    if name in ("matmul", "dense") and len(arrays) >= 2:
        x, w = arrays[0], arrays[1]
        product = 2 * math.prod(x.shape[:-1]) * x.shape[-1] * w.shape[-1]
        return product + (2 * result.size if name == "dense" else 0)
    if part == "updates":  # rules: the update rules the handler resolved, by name
        rule = rules.get(name) if name != "l2_gradient" else None
        return (L2_FLOPS if rule is None else rule.flops) * arrays[0].size
    return sum(a.size for a in written)


def _size(count: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
