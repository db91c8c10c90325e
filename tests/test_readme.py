"""The README's Python example runs as written."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_examples_run(capsys):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    runnable = [b for b in blocks if "Trainer(" in b]
    assert runnable, "the README lost its Python training example"
    for block in runnable:
        exec(compile(block, str(README), "exec"), {})
    report = capsys.readouterr().out
    assert "'top1': 0.9" in report  # digits reaches > 90 % held-out accuracy
