"""Execute notebooks top to bottom and save their outputs, skipping what `nbdev_test` skips.

    python .ci/run_nbs.py nbs/00_world.ipynb [more.ipynb ...] [--flags slow cuda]

Cells marked `#| eval: false` never run and the export call is skipped, as under `nbdev_test`;
cells flagged with a test flag from settings.ini (`slow`, `cuda`) run only when named in --flags.
Skipped cells lose their outputs, so every saved output comes from this run. Stops at the first
error and leaves that notebook unchanged.
"""
import argparse, os, sys, time
from pathlib import Path
from execnb.nbio import read_nb, write_nb
from execnb.shell import CaptureShell
from nbdev.config import get_config
from nbdev.process import extract_directives


def skip_cell(cell, skip_flags) -> bool:
    "True for cells that nbdev_test would not run."
    if cell.cell_type != 'code': return True
    if 'nbdev_export' + '(' in cell.source: return True
    d = extract_directives(cell, remove=False)
    if d.get('eval:', [''])[0].lower() == 'false': return True
    return bool(skip_flags & d.keys())


def run_notebook(path: Path, flags=()) -> float:
    "Execute `path` in a fresh shell, in its own folder, and write its outputs back; returns seconds taken."
    skip = set(get_config().tst_flags.split()) - set(flags)
    nb = read_nb(path)
    for c in nb.cells:
        if c.cell_type == 'code' and skip_cell(c, skip): c.outputs, c.execution_count = [], None
    t0, cwd = time.time(), os.getcwd()
    shell = CaptureShell(path, mpl_format='png')
    try:
        os.chdir(path.parent)
        shell.run_all(nb, exc_stop=True, preproc=lambda c: skip_cell(c, skip))
    except Exception:
        sys.stderr.write(shell.prettytb(fname=path) + '\n'); raise SystemExit(f"{path}: failed; not written")
    finally: os.chdir(cwd)
    write_nb(nb, path)
    return time.time() - t0


if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('notebooks', nargs='+', type=Path)
    ap.add_argument('--flags', nargs='*', default=[], help='test flags whose cells should run too (e.g. slow)')
    a = ap.parse_args()
    for p in a.notebooks: print(f"{p}: {run_notebook(p.resolve(), a.flags):.1f}s")
