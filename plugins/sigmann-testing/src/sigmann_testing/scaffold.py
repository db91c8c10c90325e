"""``sigma plugin new KIND NAME``: a complete plugin distribution to start from.

It writes ``sigmann-NAME/`` (pyproject with the ``sigma`` entry point, the
module with a small working example of the kind, its tests, a README) from the
templates in ``templates/``, so that ``pip install`` and ``pytest`` pass as
written and the author replaces the example step by step. The command comes
with Sigma's test kit (this distribution), which the tests it writes use: an
authoring tool, not something a run needs.
"""

from __future__ import annotations

import functools
import keyword
import os
import re
from pathlib import Path
from string import Template

from sigma_core import SigmaError, components, hookimpl

#: kind -> (what the example does, how a user reaches it)
KINDS = {
    "layer": ("tanh(x · weights + biases)", 'In a run file: `[[network.layers]]` with `type = "$name"` and `size = 64`.'),
    "activation": ("x · sigmoid(x)", 'In a run file: `activation = "$name"` on a dense layer.'),
    "hook": ("learning rate × factor every n epochs",
             'In a run file: `[[hooks]]` with `type = "$name"`, `factor = 0.5` and `every = [2, "epoch"]`; '
             'or `sigma train RUN --monitor $name`.'),
    "command": ("prints a checkpoint's epoch and parameter count", "On the command line: `sigma $name CHECKPOINT`."),
    "extractor": ("two Gaussian blobs of points", 'In a run file: `[data]` with `source = "$name"` and `n = 200`.'),
    "initialiser": ("uniform in ±scale/sqrt(fan in)", 'In a run file: `[initialisers]` with `"*.weights" = { type = "$name" }`.'),
    "optimiser": ("steps by the sign of a gradient momentum", 'In a run file: `[optimiser]` with `type = "$name"`.'),
}
NAME = re.compile(r"[a-z][a-z0-9_]*")
TEMPLATES = Path(__file__).with_name("templates")


@hookimpl
def register_commands(cli):
    from sigma_core import cli_options  # the sigma command's own (imported here: this function runs only there)

    parser = cli.add_parser("plugin", parents=[cli_options.DEBUG], help="write a new plugin distribution",
                            description="Tools for plugin authors.")
    new = parser.add_subparsers(dest="action", required=True).add_parser(
        "new", parents=[cli_options.DEBUG], help="write sigmann-NAME/, a plugin distribution whose tests pass as written",
        description="Write sigmann-NAME/: a pyproject with the sigma entry point, src/sigmann_NAME/ with a small "
        "working example of KIND, tests/ and a README. pip install it, run its tests, then make it yours.")
    new.add_argument("kind", help=f"what the plugin adds: {', '.join(KINDS)}")
    new.add_argument("name", help="the component's name (lowercase letters, digits and _), as run files will name it")
    new.add_argument("--directory", default=".", help="where to write sigmann-NAME/ (default: here)")
    # The commands there are before this one: sigma's own, which no plugin command may take
    new.set_defaults(run=functools.partial(run_new, commands=frozenset(cli.choices)))


def run_new(args, commands=frozenset()) -> int:
    """Write the plugin ``args`` ask for; ``commands``: the names a new command may not take."""
    from sigma_core import atomic_path, check_writable

    kind, name = args.kind, args.name
    if kind == "monitor":
        raise SigmaError("monitors are hooks now: sigma plugin new hook NAME")
    if kind not in KINDS:
        raise SigmaError(f"unknown plugin kind {kind!r}; sigma plugin new writes: {', '.join(KINDS)}")
    if not NAME.fullmatch(name) or keyword.iskeyword(name):
        raise SigmaError(f"plugin name {name!r}: use lowercase letters, digits and _, starting with a letter "
                         "(it names the component and the Python module), and not a Python keyword")
    clash = next((c for c in components(kind) if name in (c.name, *c.aliases)), None)
    if clash:
        raise SigmaError(f"{kind} {name!r} exists already (from {clash.distribution}); choose another name")
    if kind == "command" and name in commands:
        raise SigmaError(f"command {name!r} is one of sigma's own commands, which a plugin cannot replace; "
                         "choose another name")
    folder = check_writable(args.directory, folder=True, what="--directory") / f"sigmann-{name.replace('_', '-')}"
    if os.path.lexists(folder):  # False, not an error, for a name too long: atomic_path below says so in one line
        raise SigmaError(f"{folder} already exists; sigma plugin new never overwrites: remove it or choose another name")
    description, usage = KINDS[kind]
    values = {"name": name, "kind": kind, "module": f"sigmann_{name}", "distribution": folder.name,
              "Class": "".join(part.title() for part in name.split("_")), "function": name,
              "description": description, "usage": Template(usage).substitute(name=name)}
    files = {"pyproject.toml": "pyproject", "README.md": "README", f"src/sigmann_{name}/__init__.py": kind,
             f"tests/test_{name}.py": f"{kind}_test"}
    texts = {file: Template((TEMPLATES / f"{template}.tmpl").read_text()).substitute(values)
             for file, template in files.items()}
    with atomic_path(folder, folder=True, what="--directory") as partial:  # the whole plugin, or nothing
        for file, text in texts.items():
            (partial / file).parent.mkdir(parents=True, exist_ok=True)
            (partial / file).write_text(text)
    print(folder)
    return 0
