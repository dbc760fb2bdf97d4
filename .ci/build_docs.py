#!/usr/bin/env python
"""Build the worldplay2 documentation site offline, straight from the notebooks.

    python .ci/build_docs.py [--out docs]

Quarto (and so `nbdev_docs`) is not available everywhere, so this script renders the
site with nbconvert alone:

* `nbs/index.ipynb` becomes `index.html`; every other `nbs/*.ipynb` (sorted by file
  name, names starting with `_` skipped) becomes `<stem>.html`, in that learning order.
* Notebooks are NOT executed: the saved outputs are shown.  nbdev directives are
  honoured: `#| hide`, `#| default_exp` and `#| include: false` drop a cell,
  `#| echo: false` shows only its outputs, `#| eval: false` / `#| output: false` show
  only its code, and every `#| ...` line is removed from the code shown.
* `api.html` documents every symbol in each module's `__all__` (signature and
  docstring) and links back to the notebook page that defines it.
* The site is fully offline: no CDN, no external JS, CSS or fonts; output JavaScript
  is replaced by a static representation.
* The site is built in a temporary folder next to `--out` and swapped in at the end,
  so a failed build leaves the previous site untouched.
"""
from __future__ import annotations

import argparse
import configparser
import html
import importlib
import inspect
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbconvert import HTMLExporter

ROOT = Path(__file__).resolve().parents[1]
API_PAGE = 'api.html'
API_TITLE = 'API reference'

# Directive handling (nbdev / Quarto conventions).
DROP_CELL = {'hide', 'default_exp'}   # the whole cell disappears
FALSE = {'false', 'no', '0'}
_DIRECTIVE = re.compile(r'^\s*#\|\s*([\w-]+)\s*:?\s*(.*?)\s*$')
_HIDE_LINE = re.compile(r'#\|\s*hide_line\s*$')
_SHOW_DOC = re.compile(r'^\s*show_doc\b')

# Output mime types that render without JavaScript, in order of preference.
STATIC_MIMES = ('text/html', 'text/markdown', 'image/svg+xml', 'image/png', 'image/jpeg',
                'image/gif', 'text/plain')


# ---------------------------------------------------------------------------- settings
def read_settings(root: Path = ROOT) -> dict:
    "The `[DEFAULT]` section of `settings.ini` (empty dict if there is none)."
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(root / 'settings.ini')
    return dict(cfg.defaults())


# --------------------------------------------------------------------------- notebooks
def list_notebooks(nbs_dir: Path) -> list[Path]:
    "`index.ipynb` first, then the other notebooks sorted by name (`_*` skipped)."
    nbs = sorted(p for p in Path(nbs_dir).glob('*.ipynb')
                 if not p.name.startswith(('_', '.')) and p.name != 'index.ipynb')
    index = Path(nbs_dir) / 'index.ipynb'
    return ([index] if index.exists() else []) + nbs


def page_name(nb_path: Path) -> str:
    "The HTML file a notebook renders to."
    return Path(nb_path).stem + '.html'


def _first_markdown(nb):
    return next((c for c in nb.cells if c.cell_type == 'markdown'), None)


def notebook_title(nb, default: str = '') -> tuple[str, str]:
    "`(title, summary)` from the first markdown cell: `# Title` then `> summary`."
    cell = _first_markdown(nb)
    lines = [l.strip() for l in (cell.source if cell else '').splitlines() if l.strip()]
    if not lines or not re.match(r'#\s', lines[0]): return default, ''
    summary = lines[1][1:].strip() if len(lines) > 1 and lines[1].startswith('>') else ''
    return lines[0][1:].strip(), summary


def strip_front_matter(source: str) -> str:
    "Drop the leading `# Title`, `> summary` and `- key: value` lines (shown in the header)."
    lines = source.splitlines()
    i = 0
    while i < len(lines) and not lines[i].strip(): i += 1
    if i < len(lines) and re.match(r'\s*#\s', lines[i]): i += 1
    else: return source
    while i < len(lines) and (not lines[i].strip() or lines[i].lstrip().startswith('>')
                              or re.match(r'\s*-\s*[\w-]+\s*:', lines[i])): i += 1
    return '\n'.join(lines[i:])


# -------------------------------------------------------------------------- directives
def parse_directives(source: str) -> tuple[dict, str]:
    "Split a code cell into `({directive: value}, source without directive lines)`."
    directives, kept = {}, []
    for line in source.splitlines():
        m = _DIRECTIVE.match(line)
        if m: directives[m.group(1).lower()] = m.group(2).strip().strip('"\'').lower()
        elif not _HIDE_LINE.search(line): kept.append(line)
    return directives, '\n'.join(kept).strip('\n')


def _is_false(directives: dict, key: str) -> bool:
    return directives.get(key) in FALSE


def static_outputs(outputs: list) -> list:
    "Keep mime types that render without JavaScript; HTML with scripts yields to a static fallback."
    kept = []
    for out in outputs:
        if out.get('output_type') not in ('display_data', 'execute_result'):
            kept.append(out)
            continue
        data = {k: v for k, v in out.get('data', {}).items() if k in STATIC_MIMES}
        html_src = ''.join(data.get('text/html', ''))
        if '<script' in html_src.lower() and len(data) > 1: del data['text/html']
        if not data: data = {'text/plain': '[interactive output: not available offline]'}
        out['data'] = data
        kept.append(out)
    return kept


def prepare_cell(cell):
    "Apply nbdev directives to one cell in place; return None if the cell is dropped."
    if cell.cell_type != 'code': return cell
    directives, source = parse_directives(cell.source)
    if directives.keys() & DROP_CELL or _is_false(directives, 'include'): return None
    cell.source = source
    if _is_false(directives, 'eval') or _is_false(directives, 'output'): cell.outputs = []
    cell.outputs = static_outputs(cell.get('outputs', []))
    if _is_false(directives, 'echo') or _SHOW_DOC.match(source) or not source.strip():
        cell.metadata.setdefault('transient', {})['remove_source'] = True
    if not source.strip() and not cell.outputs: return None
    return cell


def prepare_notebook(nb):
    "A copy of `nb` ready to render: directives applied, front matter removed."
    nb = nbformat.from_dict(nb)   # deep copy
    first = _first_markdown(nb)
    if first is not None: first.source = strip_front_matter(first.source)
    cells = [prepare_cell(c) for c in nb.cells]
    nb.cells = [c for c in cells if c is not None and (c.cell_type != 'markdown' or c.source.strip())]
    nb.metadata.pop('widgets', None)
    return nb


# --------------------------------------------------------------------------- rendering
def make_exporter() -> HTMLExporter:
    "nbconvert's 'basic' template: body HTML only, no CDN scripts; prompts off."
    return HTMLExporter(template_name='basic', exclude_input_prompt=True,
                        exclude_output_prompt=True, embed_images=True, anchor_link_text='#')


_EXTERNAL = r'''["']?(?:https?:)?//'''
_EXTERNAL_TAGS = [
    (re.compile(r'<script\b[^>]*\bsrc\s*=\s*' + _EXTERNAL + r'[^>]*>.*?</script\s*>', re.I | re.S), ''),
    (re.compile(r'<link\b[^>]*\bhref\s*=\s*' + _EXTERNAL + r'[^>]*>', re.I), ''),
    (re.compile(r'<iframe\b[^>]*\bsrc\s*=\s*' + _EXTERNAL + r'.*?</iframe\s*>', re.I | re.S), ''),
]
_EXTERNAL_IMG = re.compile(r'<img\b[^>]*\bsrc\s*=\s*' + _EXTERNAL + r'[^>]*>', re.I)
_ALT = re.compile(r'''\balt\s*=\s*["']([^"']*)["']''', re.I)


def offline_only(body: str) -> tuple[str, int]:
    "Remove external scripts/styles/frames; external images become their alt text."
    removed = 0
    for pattern, repl in _EXTERNAL_TAGS:
        body, n = pattern.subn(repl, body)
        removed += n
    def alt_text(m):
        alt = _ALT.search(m.group(0))
        return f'<span class="offline-img">[{alt.group(1) if alt else "image"}]</span>'
    body, n = _EXTERNAL_IMG.subn(alt_text, body)
    return body, removed + n


def link_notebooks(body: str) -> str:
    "Point local links to `x.ipynb` at the rendered `x.html`."
    return re.sub(r'''(href=["'])(?!https?:|//)([^"'#:]*?)\.ipynb(?=["'#])''', r'\1\2.html', body)


def render_body(nb, exporter: HTMLExporter, nbs_dir: Path) -> str:
    "HTML of a prepared notebook's cells, made offline-safe."
    body, _ = exporter.from_notebook_node(nb, resources={'metadata': {'path': str(nbs_dir)}})
    body, removed = offline_only(link_notebooks(body))
    if removed: print(f'  note: removed {removed} external resource reference(s)', file=sys.stderr)
    return body


# ------------------------------------------------------------------------------ layout
@dataclass
class Page:
    "One page of the site."
    href: str
    title: str
    summary: str = ''
    source: Path | None = None
    body: str = ''


def sidebar_html(pages: list[Page], current: str, site_title: str) -> str:
    "The navigation list shown on every page."
    items = []
    for p in pages:
        cur = ' aria-current="page"' if p.href == current else ''
        items.append(f'<li><a href="{p.href}"{cur}>{html.escape(p.title)}</a></li>')
    return (f'<nav class="sidebar" aria-label="Site"><a class="brand" href="index.html">'
            f'{html.escape(site_title)}</a><ol>{"".join(items)}</ol></nav>')


def page_html(page: Page, pages: list[Page], site_title: str) -> str:
    "A complete standalone HTML document."
    summary = f'<p class="summary">{html.escape(page.summary)}</p>' if page.summary else ''
    return f'''<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(page.title)} – {html.escape(site_title)}</title>
<link rel="icon" href="data:,">
<style>{CSS}</style>
</head>
<body>
{sidebar_html(pages, page.href, site_title)}
<main>
<header class="page-header"><h1 class="title">{html.escape(page.title)}</h1>{summary}</header>
{page.body}
</main>
</body>
</html>
'''


# ------------------------------------------------------------------------ API reference
@dataclass
class ModuleDoc:
    "What the API page shows for one module of the package."
    name: str
    notebook: str | None                     # stem of the notebook that exports it
    symbols: list = field(default_factory=list)  # (name, object) pairs
    doc: str = ''                            # the module docstring


_HEADER = re.compile(r'File to edit:\s*(\S+?\.ipynb)')


def module_notebook(path: Path) -> str | None:
    "Stem of the notebook named in an nbdev module's AUTOGENERATED header (after any docstring)."
    with open(path, encoding='utf-8') as f: m = _HEADER.search(f.read(4000))
    return Path(m.group(1)).stem if m else None


def load_modules(lib_dir: Path) -> list[ModuleDoc]:
    "Import every public module of the package and collect its `__all__`."
    lib_dir = Path(lib_dir).resolve()
    if not (lib_dir / '__init__.py').exists(): return []
    sys.path.insert(0, str(lib_dir.parent))
    docs = []
    for path in sorted(lib_dir.glob('*.py')):
        if path.name.startswith('_'): continue
        mod = importlib.import_module(f'{lib_dir.name}.{path.stem}')
        names = getattr(mod, '__all__', None)
        if names is None: names = [n for n, o in vars(mod).items() if not n.startswith('_')
                                   and getattr(o, '__module__', None) == mod.__name__]
        docs.append(ModuleDoc(mod.__name__, module_notebook(path),
                              [(n, getattr(mod, n)) for n in names if hasattr(mod, n)], mod.__doc__ or ''))
    return docs


def signature(obj) -> str:
    "`(args) -> ret` for a callable, '' when Python cannot tell."
    try: return str(inspect.signature(obj))
    except (TypeError, ValueError): return '(...)' if callable(obj) else ''


def docstring_html(obj) -> str:
    "The object's own docstring (not an inherited one), escaped, `code` kept."
    own = inspect.isclass(obj) or inspect.isroutine(obj)   # instances carry their type's doc
    doc = obj.__doc__ if own and isinstance(getattr(obj, '__doc__', None), str) else ''
    if inspect.isclass(obj) and any(doc == getattr(b, '__doc__', None) for b in obj.__mro__[1:]): doc = ''
    if not doc.strip(): return ''
    text = re.sub(r'`([^`]+)`', r'<code>\1</code>', html.escape(inspect.cleandoc(doc)))
    return ''.join(f'<p>{p}</p>' for p in re.split(r'\n\s*\n', text))


def _members(cls) -> list:
    "Public methods and properties defined on the class itself."
    out = []
    for name, raw in vars(cls).items():
        if name.startswith('_'): continue
        if isinstance(raw, property): out.append((name, raw.fget, 'property'))
        elif isinstance(raw, (staticmethod, classmethod)) or inspect.isfunction(raw):
            out.append((name, getattr(cls, name), 'method'))
    return out


def symbol_html(modname: str, name: str, obj, notebook_href: str = '') -> str:
    "One API entry: kind, signature, docstring (and methods for a class), linked to its notebook."
    anchor = html.escape(f'{modname}.{name}')
    if inspect.isclass(obj): kind, sig = 'class', signature(obj)
    elif callable(obj): kind, sig = 'function', signature(obj)
    else: kind, sig = 'object', ' = ' + _short_repr(obj)
    src = f' <a class="src" href="{notebook_href}">notebook</a>' if notebook_href else ''
    parts = [f'<section class="symbol" id="{anchor}"><h3><span class="kind">{kind}</span> '
             f'<code>{html.escape(name + sig)}</code>{src}</h3>', docstring_html(obj)]
    if kind == 'class':
        for mname, m, mkind in _members(obj):
            msig = '' if mkind == 'property' else signature(m)
            parts.append(f'<div class="member" id="{anchor}.{html.escape(mname)}"><h4>'
                         f'<span class="kind">{mkind}</span> <code>{html.escape(mname + msig)}'
                         f'</code></h4>{docstring_html(m)}</div>')
    return ''.join(parts) + '</section>'


def _short_repr(obj, limit: int = 120) -> str:
    "repr of a module-level object, without memory addresses or the checkout's own folder (so the page is the same on every machine), cut at `limit`."
    if isinstance(obj, Path) and obj.is_absolute() and obj.is_relative_to(ROOT): obj = obj.relative_to(ROOT)
    r = re.sub(r' at 0x[0-9a-f]+', '', repr(obj))
    return r if len(r) <= limit else r[:limit] + '…'


def api_body(modules: list[ModuleDoc], titles: dict[str, str]) -> str:
    "Body of `api.html`: one section per module, each linking to its notebook."
    if not modules: return '<p>No modules have been exported yet.</p>'
    parts = []
    for m in modules:
        parts.append(f'<section class="module" id="{html.escape(m.name)}"><h2><code>{m.name}</code></h2>')
        if m.doc.strip(): parts.append(f'<p class="module-doc">{html.escape(m.doc.strip())}</p>')
        href = f'{m.notebook}.html' if m.notebook in titles else ''
        if href: parts.append(f'<p class="defined-in">Defined in <a href="{href}">{html.escape(titles[m.notebook])}</a></p>')
        parts += [symbol_html(m.name, n, o, href) for n, o in m.symbols]
        parts.append('</section>')
    return '\n'.join(parts)


def api_footer(modules: list[ModuleDoc], stem: str) -> str:
    "Links from a notebook page to the API entries of the modules it exports."
    mods = [m for m in modules if m.notebook == stem]
    if not mods: return ''
    links = ', '.join(f'<a href="{API_PAGE}#{html.escape(m.name)}"><code>{m.name}</code></a>' for m in mods)
    return f'<footer class="api-link">API reference for this notebook: {links}</footer>'


# ------------------------------------------------------------------------------- build
def swap_in(tmp: Path, out: Path) -> None:
    "Replace `out` by the freshly built `tmp` folder (restoring `out` if that fails)."
    old = out.with_name(f'.{out.name}.old-{os.getpid()}') if out.exists() else None
    if old: os.replace(out, old)
    try: os.replace(tmp, out)
    except BaseException:
        if old: os.replace(old, out)
        raise
    if old: shutil.rmtree(old)


def collect_pages(nbs_dir: Path) -> list[tuple[Page, object]]:
    "Read every notebook: `(Page without body, notebook)` in learning order."
    pages = []
    for path in list_notebooks(nbs_dir):
        nb = nbformat.read(path, as_version=4)
        title, summary = notebook_title(nb, default=path.stem)
        pages.append((Page(page_name(path), title, summary, path), nb))
    return pages


def landing_body(pages: list[Page], description: str) -> str:
    "Fallback `index.html` body when there is no `nbs/index.ipynb`."
    items = ''.join(f'<li><a href="{p.href}">{html.escape(p.title)}</a></li>' for p in pages)
    return f'<p>{html.escape(description)}</p><ol>{items}</ol>'


def build(out: Path, nbs_dir: Path, lib_dir: Path, site_title: str = 'worldplay2',
          description: str = '') -> list[str]:
    "Render the whole site into `out` atomically; returns the page file names."
    out = Path(out).resolve()
    read = collect_pages(nbs_dir)
    modules = load_modules(lib_dir)
    pages = [p for p, _ in read]
    if not any(p.href == 'index.html' for p in pages):
        pages.insert(0, Page('index.html', site_title, description, body=landing_body(pages, description)))
    pages.append(Page(API_PAGE, API_TITLE, 'Every exported symbol, by module.',
                      body=api_body(modules, {p.source.stem: p.title for p in pages if p.source})))
    exporter = make_exporter()
    for page, nb in read:
        print(f'  rendering {page.source.name}', file=sys.stderr)
        page.body = render_body(prepare_notebook(nb), exporter, nbs_dir) + api_footer(modules, page.source.stem)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f'.{out.name}.tmp-', dir=out.parent))
    try:
        for page in pages: (tmp / page.href).write_text(page_html(page, pages, site_title), encoding='utf-8')
        (tmp / '.nojekyll').write_text('')
        tmp.chmod(0o755)
        swap_in(tmp, out)
    finally:
        if tmp.exists(): shutil.rmtree(tmp)
    return [p.href for p in pages]


def main(argv=None) -> int:
    "Command line entry point."
    cfg = read_settings()
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--out', type=Path, default=ROOT / cfg.get('doc_path', 'docs'), help='site folder (default: docs)')
    ap.add_argument('--nbs', type=Path, default=ROOT / cfg.get('nbs_path', 'nbs'), help='notebook folder')
    ap.add_argument('--lib', type=Path, default=ROOT / cfg.get('lib_path', 'worldplay2'), help='package folder')
    args = ap.parse_args(argv)
    t0 = time.time()
    files = build(args.out, args.nbs, args.lib, cfg.get('title', 'worldplay2'), cfg.get('description', ''))
    print(f'wrote {len(files)} pages to {args.out} in {time.time() - t0:.1f}s')
    return 0


# --------------------------------------------------------------------------------- CSS
CSS = '''
*{box-sizing:border-box}
body{margin:0;font:16px/1.55 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;color:#1d2330;background:#fff}
.sidebar{position:fixed;top:0;left:0;bottom:0;width:250px;overflow-y:auto;padding:1.2rem 1rem;background:#f5f6f8;border-right:1px solid #e1e4e8}
.sidebar .brand{display:block;font-weight:700;font-size:1.2rem;color:#1d2330;text-decoration:none;margin-bottom:.8rem}
.sidebar ol{list-style:none;margin:0;padding:0}
.sidebar li a{display:block;padding:.25rem .5rem;border-radius:4px;color:#36405a;text-decoration:none;font-size:.93rem}
.sidebar li a:hover{background:#e6e9ef}
.sidebar li a[aria-current=page]{background:#dfe6fb;color:#1a3fa8;font-weight:600}
main{margin-left:250px;padding:1.5rem 2.5rem 4rem;max-width:1050px}
@media (max-width:800px){.sidebar{position:static;width:auto;border-right:0;border-bottom:1px solid #e1e4e8}main{margin-left:0;padding:1rem}}
.page-header{border-bottom:1px solid #e1e4e8;margin-bottom:1.2rem}
h1.title{margin:.2rem 0 .3rem;font-size:2.1rem}
.summary{color:#5a6275;font-size:1.1rem;margin:0 0 1rem}
a{color:#1a56db}
.anchor-link{visibility:hidden;margin-left:.3em;text-decoration:none;color:#9aa3b5}
h1:hover .anchor-link,h2:hover .anchor-link,h3:hover .anchor-link,h4:hover .anchor-link{visibility:visible}
.prompt{display:none}
.cell{margin:.6rem 0}
.input_area{background:#f6f8fa;border:1px solid #e1e4e8;border-radius:6px;padding:.55rem .8rem;overflow-x:auto}
pre{margin:0;font:13.5px/1.45 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;white-space:pre}
code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.9em;background:#f1f3f5;padding:.05em .3em;border-radius:3px}
pre code{background:none;padding:0}
.output_wrapper{margin:.3rem 0 .2rem}
.output_area{padding:.2rem .8rem;overflow-x:auto}
.output_area pre{white-space:pre-wrap}
.output_stderr{background:#fff5f5}
.output_area img,.text_cell_render img{max-width:100%;height:auto}
table{border-collapse:collapse;margin:.5rem 0;font-size:.9rem}
th,td{border:1px solid #d8dce3;padding:.25rem .6rem;text-align:right}
th{background:#f1f3f5}
blockquote{margin:.5rem 0;padding:.1rem 1rem;border-left:4px solid #d8dce3;color:#4a5163}
.offline-img{color:#7a8194;font-style:italic}
.api-link{margin-top:2.5rem;padding-top:.8rem;border-top:1px solid #e1e4e8;color:#5a6275}
.module{margin-bottom:2.5rem}
.symbol{border-top:1px solid #e1e4e8;padding:.4rem 0}
.symbol h3,.member h4{margin:.5rem 0 .2rem;font-weight:500;overflow-wrap:anywhere}
.symbol h3 code{font-size:.95rem}
.member{margin-left:1.5rem}
.kind{color:#7a8194;font-size:.8rem;text-transform:uppercase;letter-spacing:.04em;margin-right:.3rem}
.defined-in{color:#5a6275}
.symbol h3 .src{float:right;font-size:.8rem}
.highlight .c,.highlight .c1,.highlight .cm,.highlight .ch{color:#6a737d;font-style:italic}
.highlight .k,.highlight .kn,.highlight .kc,.highlight .kd,.highlight .ow{color:#a626a4}
.highlight .s,.highlight .s1,.highlight .s2,.highlight .sd,.highlight .sa,.highlight .si{color:#50a14f}
.highlight .mi,.highlight .mf,.highlight .m{color:#986801}
.highlight .nf,.highlight .fm{color:#4078f2}
.highlight .nc,.highlight .nn{color:#c18401}
.highlight .nb,.highlight .bp{color:#0184bc}
.highlight .nd{color:#b45309}
.ansi-red-fg{color:#c81e1e}.ansi-green-fg{color:#16803c}.ansi-yellow-fg{color:#a16207}
.ansi-blue-fg{color:#1d4ed8}.ansi-cyan-fg{color:#0e7490}.ansi-bold{font-weight:700}
'''

if __name__ == '__main__':
    sys.exit(main())
