"""Writes reference/run-file.md, every section and key of a run file, from the validator's own rules.

The rules (``sigma_core.config.SCHEMA``), the defaults (``DEFAULTS``), the keys each component table shares
(``component_table_keys``) and the sections plugins add (``register_sections``) are read here, when the site is
built, so the page says what the validator accepts today. Only the sentence saying what each key does is written
by hand, in :data:`MEANING`; a key the validator gains without one, or a sentence for a key it no longer has,
fails the build (``mkdocs build --strict`` in CI), so neither can go stale.
"""

from __future__ import annotations

import mkdocs_gen_files

from sigma_core import ARGUMENT_CONVENTIONS, component_table_keys, components, describe_rule
from sigma_core.config import DEFAULTS, RETIRED, SCHEMA
from sigmann_help.show import rule_words, toml_value

#: What each key of SCHEMA does. Keys are dotted paths; a section's own entry introduces it.
MEANING = {
    "name": "The run's name: its checkpoints, lock file and `runs/<name>/` directory are named after it.",
    "seed": "Seeds initialisers, dropout and batch order: the same seed and handler give the identical run.",
    "handler": "The computation backend ([Backends](../backends.md)).",
    "handler.name": "`auto` (the fastest that can run here), `numpy`, or any installed handler (`sigma plugins`); "
                    "`--handler` and `SIGMA_HANDLER` take precedence.",
    "handler.dtype": "The floating-point type of every array.",
    "data": "The records to train on: `extractor` names the component that reads them, and the table's other "
            "keys are that extractor's arguments (`sigma help extractor NAME`).",
    "split": "The held-out set the epochs' `validation.*` scores come from.",
    "split.validation": "A fraction of the records (shuffled with the seed), or a `[start, stop)` record range.",
    "split.train": "A `[start, stop)` record range to train on (with a range for `validation`).",
    "split.shuffle": "Shuffle the records before a fractional split.",
    "split.seed": "The split's seed (default: the run's).",
    "network": "The network, layer by layer.",
    "network.layers": "The layers, in order: each `[[network.layers]]` table has a `type`, the layer's arguments, "
                      "and optionally `name` and `inputs` (the layers it reads; default: the one before it).",
    "initialisers": "Glob patterns on parameter ids `<layer>.<param>`, each an initialiser table "
                    "(`\"*.weights\" = { type = \"gaussian\", std = 0.1 }`); the most specific pattern wins. "
                    "Without one, weights get Xavier/Glorot and biases zeros.",
    "optimiser": "The optimiser: `type` and its arguments (`sigma help optimiser NAME`).",
    "training": "How the epochs run.",
    "training.batch_size": "Records per training step.",
    "training.epochs": "Passes over the training records.",
    "training.last_batch": "Keep or drop a last batch smaller than `batch_size`.",
    "training.shuffle": "Shuffle the training records every epoch.",
    "training.validation_batch_size": "Records per step when scoring the held-out set.",
    "training.prefetch": "Batches gathered ahead on a background thread (0: off).",
    "training.compile": "How steps run: `auto` the installed step compiler (sigmann-replay), `replay` that one "
                        "(an error when it is not installed), `none` every step in full.",
    "training.replay": "The older spelling of `compile` (`true`: `auto`, `false`: `none`); give only one.",
    "checkpoint": "Periodic checkpoints, off while both `every_*` are 0 ([Checkpoints](../checkpoints.md)).",
    "checkpoint.directory": "Where checkpoints are written.",
    "checkpoint.every_iterations": "A checkpoint every this many iterations (0: never).",
    "checkpoint.every_epochs": "A checkpoint every this many epochs (0: never).",
    "checkpoint.keep": "How many of the newest checkpoints are kept.",
    "hooks": "Hooks that take part in the run, in order: each `[[hooks]]` table has a `type` and the hook's "
             "arguments ([Hooks](../hooks.md)); `--monitor NAME[:key=value,...]` adds one.",
    "monitors": "The older name of `[[hooks]]`, read the same way.",
    "operator": "How each iteration trains: `type` (default `single_worker`) and the operator's arguments "
                "([Operators](../operators.md)).",
}

#: What each key every [data] table may have does (``component_table_keys("extractor")``), held as MEANING is.
DATA_KEYS = {
    "extractor": "The extractor that reads the records (`source`, its older name, is still read).",
    "preprocess": "Transforms applied in order to the inputs (sigmann-transforms: `normalise`, `standardise`, "
                  "`shuffle`, `permute`); what they fit to the training data is kept with the network.",
    "one_hot": "One-hot encode integer targets into this many classes.",
    "md5": "The data's expected MD5 checksum, which sigmann-data's sources verify.",
    "sha256": "The data's expected SHA-256 checksum, which sigmann-data's sources verify.",
    "blocks": "A block-wise on-disk cache (sigmann-data): `{ records = N, memory_budget = BYTES }`.",
}

#: The component kind whose arguments fill each table section, with the key naming the component.
COMPONENT_TABLES = {"data": ("extractor", "extractor"), "optimiser": ("optimiser", "type"),
                    "operator": ("operator", "type"), "hooks": ("hook", "type"), "monitors": ("hook", "type"),
                    "network.layers": ("layer", "type"), "initialisers": ("initialiser", "type")}


def keys(rule, prefix=""):
    """Every dotted key of a rule, sections first then their keys, in the validator's order."""
    for key, inner in rule.items():
        path = f"{prefix}{key}"
        yield path, inner
        if isinstance(inner, dict) and ... not in inner:
            yield from keys(inner, f"{path}.")


def default(path: str) -> str:
    value = DEFAULTS
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return ""
        value = value[part]
    return "" if isinstance(value, (dict, list)) and not value else toml_value(value)


def accepts(rule) -> str:
    if isinstance(rule, dict):
        return "a table of tables" if ... in rule else "a table"
    return rule_words(rule)


def components_of(kind: str) -> str:
    names = sorted({(c.name, c.distribution) for c in components(kind)})
    return ", ".join(f"[`{name}`](../distributions/{distribution}.md)" for name, distribution in names)


def render() -> str:
    paths = dict(keys(SCHEMA))
    data_keys = component_table_keys("extractor")
    unexplained = set(paths) - set(MEANING) | {f"data.{key}" for key in set(data_keys) - set(DATA_KEYS)}
    stale = set(MEANING) - set(paths) | {f"data.{key}" for key in set(DATA_KEYS) - set(data_keys)}
    if unexplained or stale:
        raise SystemExit(f"docs/gen/run_file.py: keys without a meaning: {sorted(unexplained)}; "
                         f"meanings of keys the validator does not have: {sorted(stale)}")
    lines = ["# Run-file reference", "",
             "Every section and key a run file may have, with the values the validator accepts and the default "
             "it fills in. Generated from `sigma_core/config.py` when this site is built; a key not listed here "
             "is refused in one line naming it. `sigma config RUN_FILE` prints a run file with every default "
             "filled in, and `--set key=value` overrides any key on the command line "
             "(`--set network.layers.1.size=64`). [Run files](../run-files.md) has an annotated example.", ""]
    section = None
    for path, rule in paths.items():
        top = path.split(".")[0]
        if top != section:
            section = top
            heading = f"`{top}`" if not isinstance(rule, (dict, list)) and rule != "table" else \
                (f"`[[{top}]]`" if isinstance(rule, list) else f"`[{top}]`")
            lines += ["", f"## {heading}", "", MEANING[top], ""]
            if top in COMPONENT_TABLES or top == "network":
                lines += table_keys("network.layers" if top == "network" else top)
            if top == "data":
                lines += ["| key | what it does |", "|---|---|"]
                lines += [f"| `{key}` | {DATA_KEYS[key]} |" for key in data_keys] + [""]
            if isinstance(rule, dict) and ... not in rule:
                lines += ["| key | accepts | default | what it does |", "|---|---|---|---|"]
            else:
                lines += [f"Accepts {accepts(rule)}" + (f"; default {default(top)}." if default(top) else ".")]
            continue
        lines.append(f"| `{path.split('.', 1)[1]}` | {accepts(rule)} | {default(path)} | {MEANING[path]} |")
    lines += plugin_sections() + conventions() + retired()
    return "\n".join(lines) + "\n"


def table_keys(section: str) -> list[str]:
    kind, named_by = COMPONENT_TABLES[section]
    shared = [key for key in component_table_keys(kind) if key != named_by]
    return ["", f"`{named_by}` names {'an' if kind[0] in 'aeiou' else 'a'} {kind}: one of {components_of(kind)}. "
                f"The table's other keys are that {kind}'s arguments (each distribution's page lists them, as "
                f"`sigma help {kind} NAME` does)" + (f", and {', '.join(f'`{k}`' for k in shared)}." if shared
                                                     else "."), ""]


def plugin_sections() -> list[str]:
    lines = []
    for section in components("section"):
        rule = section.load()
        lines += ["", f"## `[{section.name}]`", "",
                  f"{section.description} From [`{section.distribution}`](../distributions/{section.distribution}.md)"
                  " (a section a plugin adds through `register_sections`).", ""]
        if isinstance(rule, dict):
            lines += ["| key | accepts |", "|---|---|"]
            lines += [f"| `{'any other key' if key is ... else key}` | {accepts(inner)} |"
                      for key, inner in rule.items()]
    return lines


def conventions() -> list[str]:
    return ["", "## Argument conventions", "",
            "A component's argument with one of these names follows its rule unless the component declares "
            "another (PyTorch's checks):", "", "| argument | accepts |", "|---|---|",
            *[f"| `{name}` | {describe_rule(rule)} |" for name, rule in ARGUMENT_CONVENTIONS.items()]]


def retired() -> list[str]:
    return ["", "## Retired keys", "",
            "Keys older run files give that no component takes now; each is refused with this advice:", "",
            "| kind | key | instead |", "|---|---|---|",
            *[f"| {kind} | `{key}` | {advice} |" for kind, table in RETIRED.items() for key, advice in table.items()]]


with mkdocs_gen_files.open("reference/run-file.md", "w") as page:
    page.write(render())
