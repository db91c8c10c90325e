"""``sigma plugin new KIND NAME``: a complete plugin distribution to start from.

It writes ``sigmann-NAME/`` (pyproject with the ``sigma`` entry point, the
module with a small working example of the kind, its tests, a README) from the
templates in ``templates/``, so that ``pip install`` and ``pytest`` pass as
written and the author replaces the example step by step. An ``op`` is an op
with the layer that runs it, and with ``--cpu`` its numba kernel for the
``cpu`` handler, in a module of its own (``cpu.py``). With ``--into DIR``
it adds a component to the distribution in ``DIR`` instead: the example's
module next to the package its ``sigma`` entry point names, that module as a
second entry point (its own ``register_*`` function, so the files already
there are left as they are), and its test. The command comes
with Sigma's test kit (this distribution), which the tests it writes use: an
authoring tool, not something a run needs.
"""

from __future__ import annotations

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
    "extractor": ("two Gaussian blobs of points", 'In a run file: `[data]` with `extractor = "$name"` and `n = 200`.'),
    "initialiser": ("uniform in ±scale/sqrt(fan in)", 'In a run file: `[initialisers]` with `"*.weights" = { type = "$name" }`.'),
    "optimiser": ("steps by the sign of a gradient momentum", 'In a run file: `[optimiser]` with `type = "$name"`.'),
    "op": ("gain · tanh(x), a learnable gain per feature",
           'In a layer: `handler.op("$name", x, gain)`; in a run file, the layer that runs it: `[[network.layers]]` '
           'with `type = "$name"`.'),
}
#: kind -> the kinds of component its example registers, when more than its own (an op comes with its layer)
REGISTERS = {"op": ("op", "layer")}
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
    new.add_argument("--into", metavar="DIR", help="add the component to the distribution in DIR (its pyproject.toml, "
                     "package and tests/) instead of writing a new one")
    new.add_argument("--cpu", action="store_true", help="op only: also write the op's numba kernel for the cpu handler "
                     "(sigmann-cpu), registered as its kernels={'cpu': ...}")
    new.set_defaults(run=run_new)


def run_new(args) -> int:
    """Write the plugin ``args`` ask for."""
    from sigma_core import atomic_path, check_writable

    kind, name, cpu = args.kind, args.name, getattr(args, "cpu", False)
    if kind == "monitor":
        raise SigmaError("monitors are hooks now: sigma plugin new hook NAME")
    if kind not in KINDS:
        raise SigmaError(f"unknown plugin kind {kind!r}; sigma plugin new writes: {', '.join(KINDS)}")
    if not NAME.fullmatch(name) or keyword.iskeyword(name):
        raise SigmaError(f"plugin name {name!r}: use lowercase letters, digits and _, starting with a letter "
                         "(it names the component and the Python module), and not a Python keyword")
    if cpu and kind != "op":
        raise SigmaError(f"--cpu writes an op's kernel for the cpu handler; a {kind} has none")
    for registered in REGISTERS.get(kind, (kind,)):
        clash = next((c for c in components(registered) if name in (c.name, *c.aliases)), None)
        if kind == "command" and clash and clash.distribution == "sigmann":
            raise SigmaError(f"command {name!r} is one of sigma's own commands, which a plugin cannot replace; "
                             "choose another name")
        if clash:
            raise SigmaError(f"{registered} {name!r} exists already (from {clash.distribution}); choose another name")
    if getattr(args, "into", None):
        return add_into(Path(args.into), kind, name, cpu)
    folder = check_writable(args.directory, folder=True, what="--directory") / f"sigmann-{name.replace('_', '-')}"
    if os.path.lexists(folder):  # False, not an error, for a name too long: atomic_path below says so in one line
        raise SigmaError(f"{folder} already exists; sigma plugin new never overwrites: remove it or choose another name")
    files = {"pyproject.toml": "pyproject", "README.md": "README", f"src/sigmann_{name}/__init__.py": kind,
             f"tests/test_{name}.py": f"{kind}_test"} | ({f"src/sigmann_{name}/cpu.py": "op_cpu"} if cpu else {})
    texts = _texts(files, kind, name, f"sigmann_{name}", folder.name, f"sigmann_{name}.cpu" if cpu else None)
    with atomic_path(folder, folder=True, what="--directory") as partial:  # the whole plugin, or nothing
        for file, text in texts.items():
            (partial / file).parent.mkdir(parents=True, exist_ok=True)
            (partial / file).write_text(text)
    print(folder)
    print(next_steps(folder, kind, name))
    return 0


def next_steps(folder: Path, kind: str, name: str) -> str:
    """What to do with a new plugin, as commands to copy: install it, run its tests, see it listed, use it."""
    import shlex

    usage = Template(KINDS[kind][1]).substitute(name=name)
    return "\n".join(["next:", f"  pip install -e {shlex.quote(f'{folder}[test]')}   # the plugin, with its tests' kit",
                      f"  python -m pytest -q {shlex.quote(str(folder))}   # its tests, which pass as written",
                      f"  sigma plugins | grep {name}   # listed once installed",
                      f"  {usage[0].lower()}{usage[1:]}"])


def _texts(files: dict, kind: str, name: str, module: str, distribution: str, cpu_module: str | None = None) -> dict:
    """File -> text, from each file's template; ``cpu_module``: where an op's cpu kernel goes, if it has one."""
    description, usage = KINDS[kind]
    cls = "".join(part.title() for part in name.split("_"))
    kernels = f' kernels={{"cpu": "{cpu_module}:Numba{cls}"}},' if cpu_module else ""  # register_ops' argument
    values = {"name": name, "kind": kind, "module": module, "distribution": distribution, "Class": cls,
              "function": name, "description": description, "usage": Template(usage).substitute(name=name),
              "cpu_module": cpu_module, "kernels": kernels}
    return {file: Template((TEMPLATES / f"{template}.tmpl").read_text()).substitute(values)
            for file, template in files.items()}


ENTRY_POINTS = "[project.entry-points.sigma]"


def add_into(folder: Path, kind: str, name: str, cpu: bool = False) -> int:
    """Add a ``kind`` component ``name`` to the distribution in ``folder``: ``<package>/<name>.py`` beside the
    package its first ``sigma`` entry point names (and an op's cpu kernel, with ``cpu``, as ``<name>_cpu.py``),
    the entry point ``name = "<package>.<name>"`` in its pyproject, and ``tests/test_<name>.py``. Everything
    is checked before anything is written; an existing file or entry point of that name is refused, never
    replaced."""
    import tomllib

    from sigma_core import atomic_write

    pyproject = folder / "pyproject.toml"
    try:
        text = pyproject.read_text(encoding="utf-8")
        entry_points = tomllib.loads(text).get("project", {}).get("entry-points", {}).get("sigma")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise SigmaError(f"--into {folder}: cannot read {pyproject}: {getattr(error, 'strerror', None) or error}") \
            from None
    lines = text.splitlines(keepends=True)
    if not entry_points or ENTRY_POINTS not in (line.strip() for line in lines):
        raise SigmaError(f"--into {folder}: {pyproject} has no {ENTRY_POINTS} table (sigma plugin new writes one)")
    package = str(next(iter(entry_points.values()))).partition(":")[0].split(".")[0]
    where = next((f"{root}{package}" for root in ("src/", "") if (folder / root / package / "__init__.py").is_file()),
                 None)
    if where is None:
        raise SigmaError(f"--into {folder}: its entry point names package {package!r}, which is not in "
                         f"{folder / 'src'} nor {folder} (a folder with __init__.py)")
    files = {f"{where}/{name}.py": kind, f"tests/test_{name}.py": f"{kind}_test"} | (
        {f"{where}/{name}_cpu.py": "op_cpu"} if cpu else {})
    taken = [f"entry point {name!r}"] * (name in entry_points) + [str(folder / file) for file in files
                                                                     if os.path.lexists(folder / file)]
    if taken:
        raise SigmaError(f"--into {folder}: {', '.join(taken)} {'exist' if len(taken) > 1 else 'exists'} already; "
                         "sigma plugin new never overwrites: choose another name")
    texts = _texts(files, kind, name, f"{package}.{name}", folder.name, f"{package}.{name}_cpu" if cpu else None)
    # The entry point goes after the table's last line (its keys, before a blank line or the next table).
    start = next(i for i, line in enumerate(lines) if line.strip() == ENTRY_POINTS)
    end = start + 1
    while end < len(lines) and lines[end].strip() and not lines[end].lstrip().startswith("["):
        end += 1
    if lines[end - 1][-1:] != "\n":
        lines[end - 1] += "\n"
    lines.insert(end, f'{name} = "{package}.{name}"\n')
    if tomllib.loads("".join(lines))["project"]["entry-points"]["sigma"] != {**entry_points, name: f"{package}.{name}"}:
        raise SigmaError(f"--into {folder}: cannot tell where {pyproject}'s {ENTRY_POINTS} table ends; add "
                         f'{name} = "{package}.{name}" to it yourself')
    for file, text in texts.items():
        (folder / file).parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(folder / file, "w", what="--into") as stream:
            stream.write(text)
    with atomic_write(pyproject, "w", what="--into") as stream:
        stream.write("".join(lines))
    for file in (*files, "pyproject.toml"):
        print(folder / file)
    print(f"reinstall it (pip install -e '{folder}[test]') so that the new entry point {name!r} is seen")
    return 0
