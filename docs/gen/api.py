"""Writes reference/api.md, the public API from its docstrings: what ``sigma_core`` exports, module by module.

``sigma_core``'s public surface is its lazy table (``sigma_core._LAZY``: public name -> defining module and the name
there); plugins import only these names. The page asks mkdocstrings for exactly those members of each module, so a
name added to or removed from the surface is on the page the next time the site is built, and one mkdocstrings
cannot find fails the build.
"""

from __future__ import annotations

from collections import defaultdict

import mkdocs_gen_files

import sigma_core


#: Modules shown whole: the plugin contract's every hookspec, not only ``hookimpl``.
WHOLE = {"hookspecs"}


def render() -> str:
    modules = defaultdict(list)
    for public, (module, own) in sigma_core._LAZY.items():
        modules[module].append((public, own))
    lines = ["# API reference", "",
             "Everything a plugin or a program imports from `sigma_core` (`from sigma_core import Trainer`), "
             "grouped by the module that defines it; a name exported under another name says so. Start with "
             "the plugin contract, `sigma_core.hookspecs`, and [Sigma in Python](../python.md).", "",
             "::: sigma_core", "    options:", "      members: false", "      show_root_heading: false", ""]
    for module, names in modules.items():
        renamed = [f"`{public}` is `{own}` here" for public, own in names if public != own]
        lines += [f"## `sigma_core.{module}`", ""] + ([", ".join(renamed) + ".", ""] if renamed else [])
        members = [] if module in WHOLE else ["      members:", *[f"        - {own}" for _, own in names]]
        lines += [f"::: sigma_core.{module}", "    options:", "      show_root_heading: false", *members, ""]
    return "\n".join(lines)


with mkdocs_gen_files.open("reference/api.md", "w") as page:
    page.write(render())
