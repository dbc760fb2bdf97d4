"""Write README.md from nbs/index.ipynb (Quarto-free stand-in for `nbdev_readme`).

    python .ci/build_readme.py [--check]

Markdown cells are copied; hidden cells and `#|` directive lines are dropped; shown code cells
become fenced blocks followed by their text outputs; image links are made relative to the
repository root. `--check` exits 1 when README.md is not what the notebook gives.
"""
import argparse, re, sys
from pathlib import Path
import nbformat

ROOT = Path(__file__).resolve().parent.parent
HEADER = '<!-- Generated from nbs/index.ipynb by .ci/build_readme.py: edit the notebook, not this file. -->\n\n'


def _directives(src):
    return [l.strip()[3:].strip() for l in src.splitlines() if l.strip().startswith('#|')]


def _hidden(cell):
    d = _directives(cell.source)
    return any(x in ('hide', 'include: false') or x.startswith('default_exp') for x in d)


def _code(cell):
    "A shown code cell as markdown: the code (directives stripped), then its text outputs."
    src = '\n'.join(l for l in cell.source.splitlines() if not l.strip().startswith('#|')).strip()
    parts = [f"```python\n{src}\n```"] if src and 'echo: false' not in _directives(cell.source) else []
    for o in cell.get('outputs', []):
        text = o.get('text') or o.get('data', {}).get('text/plain')
        if text: parts.append("```\n" + (''.join(text) if isinstance(text, list) else text).rstrip() + "\n```")
    return '\n\n'.join(parts)


def readme(nb_path=ROOT/'nbs'/'index.ipynb') -> str:
    "The README text for the index notebook."
    nb = nbformat.read(nb_path, as_version=4)
    rel = nb_path.parent.relative_to(ROOT).as_posix()
    out = []
    for c in nb.cells:
        if _hidden(c): continue
        if c.cell_type == 'markdown':
            md = re.sub(r'(!\[[^\]]*\]\()(?!https?:|/|data:)([^)]+\))', rf'\1{rel}/\2', c.source)     # images relative to the repo root
            md = re.sub(r'(?<!!)(\[[^\]]*\]\()(?!https?:|/|#)([^)]+\.ipynb\))', rf'\1{rel}/\2', md)   # notebook links too
            out.append(md)
        elif c.cell_type == 'code' and (block := _code(c)): out.append(block)
    return HEADER + '\n\n'.join(out).strip() + '\n'


if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--check', action='store_true', help='fail if README.md is out of date')
    a = ap.parse_args()
    text, path = readme(), ROOT/'README.md'
    if a.check:
        if not path.exists() or path.read_text() != text: sys.exit('README.md is out of date: run python .ci/build_readme.py')
    else:
        tmp = path.with_suffix('.md.tmp'); tmp.write_text(text); tmp.replace(path); print(f"wrote {path}")
