"""Tests for the offline docs site built by `.ci/build_docs.py`.

Fast unit tests check the nbdev directive handling and the atomic swap.  The browser
tests build the real site from `nbs/` into a temporary folder, serve it on 127.0.0.1 and
open every page in headless Chromium (Playwright, system `chromium`), checking the title,
sidebar, rendered outputs, images and that nothing errors or reaches the network.
Screenshots land in `tests/artifacts/docs/`.

Without a `chromium` executable the browser tests are skipped, or fail when `CI` is set.
"""
from __future__ import annotations

import ast
import functools
import html
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

ROOT = Path(__file__).resolve().parents[1]
NBS, LIB = ROOT / 'nbs', ROOT / 'worldplay2'
ARTIFACTS = ROOT / 'tests' / 'artifacts' / 'docs'
CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run',
                 '--disable-background-networking']


# one pytest-xdist worker runs this module: the site is built once and one browser visits it
pytestmark = pytest.mark.xdist_group('docs')

def _load_build_docs():
    "Import .ci/build_docs.py (.ci/ is not a package)."
    spec = importlib.util.spec_from_file_location('build_docs', ROOT / '.ci' / 'build_docs.py')
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod   # dataclasses look their module up here
    spec.loader.exec_module(mod)
    return mod


bd = _load_build_docs()
NOTEBOOKS = bd.list_notebooks(NBS)


# ------------------------------------------------------------------------ expectations
def title_of(nb_path: Path) -> str:
    return bd.notebook_title(nbformat.read(nb_path, as_version=4), nb_path.stem)[0]


def expected_nav() -> list[tuple[str, str]]:
    "Sidebar entries `(href, text)` the site must show, in order."
    nav = [(bd.page_name(p), title_of(p)) for p in NOTEBOOKS]
    if not nav or nav[0][0] != 'index.html':
        nav.insert(0, ('index.html', bd.read_settings(ROOT).get('title', 'worldplay2')))
    return nav + [(bd.API_PAGE, bd.API_TITLE)]


_DIRECTIVE = re.compile(r'^\s*#\|\s*([\w-]+)\s*:?\s*(.*?)\s*$', re.M)


def shown_output_cells(nb) -> int:
    "Code cells with saved outputs that the docs must show (read independently of the builder)."
    count = 0
    for cell in nb.cells:
        if cell.cell_type != 'code' or not cell.get('outputs'): continue
        d = {k.lower(): v.strip('"\'').lower() for k, v in _DIRECTIVE.findall(cell.source)}
        if d.keys() & {'hide', 'default_exp'}: continue
        if 'false' in (d.get('include'), d.get('eval'), d.get('output')): continue
        count += 1
    return count


def exported_names(module_path: Path) -> list[str]:
    "`__all__` of a module, read with ast (no import)."
    for node in ast.parse(module_path.read_text(encoding='utf-8')).body:
        if isinstance(node, ast.Assign) and any(getattr(t, 'id', None) == '__all__' for t in node.targets):
            return list(ast.literal_eval(node.value))
    return []


# --------------------------------------------------------------------------- unit tests
def _stream(text):
    return new_output('stream', name='stdout', text=text)


def _text(body: str) -> str:
    "Visible text of an HTML fragment."
    return html.unescape(re.sub(r'<[^>]+>', '', body))


def test_directives_on_synthetic_notebook(tmp_path):
    nb = new_notebook(cells=[
        new_markdown_cell('# Synthetic\n> A one-line summary.\n\nBody text.'),
        new_code_cell('#| default_exp synth'),
        new_code_cell('#| hide\nHIDDEN_ONE = 1', outputs=[_stream('hidden-output')]),
        new_code_cell('#|hide\nHIDDEN_TWO = 2'),
        new_code_cell('#| include: false\nNOT_INCLUDED = 3'),
        new_code_cell('#| export\ndef visible_fn(): pass'),
        new_code_cell('#| echo: false\nECHO_SOURCE = 4', outputs=[_stream('echo-output')]),
        new_code_cell('#| eval: false\nnever_run()', outputs=[_stream('stale-output')]),
        new_code_cell('secret_line = 1  #| hide_line\nkept_line = 2'),
        new_code_cell('w', outputs=[new_output('display_data', {
            'application/vnd.jupyter.widget-view+json': {'model_id': 'x'}, 'text/plain': 'widget-fallback'})]),
        new_code_cell('fig', outputs=[new_output('execute_result', {
            'text/html': '<script src="https://cdn.example/x.js"></script>', 'text/plain': 'fig-fallback'},
            execution_count=1)]),
    ])
    assert bd.notebook_title(nb) == ('Synthetic', 'A one-line summary.')
    prepared = bd.prepare_notebook(nb)
    assert nb.cells[2].source.startswith('#| hide'), 'the original notebook must not be modified'
    assert len(prepared.cells) == 7   # markdown + 6 shown code cells
    assert not any('#|' in c.source for c in prepared.cells)

    body = bd.render_body(prepared, bd.make_exporter(), tmp_path)
    text = _text(body)
    for gone in ['HIDDEN_ONE', 'hidden-output', 'HIDDEN_TWO', 'NOT_INCLUDED', 'default_exp', '#|',
                 'ECHO_SOURCE', 'stale-output', 'secret_line', '# Synthetic', 'A one-line summary']:
        assert gone not in text, gone
    for shown in ['Body text', 'def visible_fn', 'echo-output', 'never_run()', 'kept_line',
                  'widget-fallback', 'fig-fallback']:
        assert shown in text, shown
    assert '<script' not in body and 'https://' not in body


def test_atomic_swap(tmp_path, monkeypatch):
    nbs, out = tmp_path / 'nbs', tmp_path / 'site'
    nbs.mkdir(), out.mkdir()
    nbformat.write(new_notebook(cells=[new_markdown_cell('# Home\n> Landing.')]), nbs / 'index.ipynb')
    (out / 'stale.html').write_text('old')

    def boom(*args, **kwargs): raise RuntimeError('render failed')
    with monkeypatch.context() as m:
        m.setattr(bd, 'page_html', boom)
        with pytest.raises(RuntimeError): bd.build(out, nbs, tmp_path / 'nolib')
    assert [p.name for p in out.iterdir()] == ['stale.html'], 'a failed build must keep the old site'

    assert bd.build(out, nbs, tmp_path / 'nolib') == ['index.html', bd.API_PAGE]
    assert sorted(p.name for p in out.iterdir()) == ['.nojekyll', 'api.html', 'index.html']
    assert sorted(p.name for p in tmp_path.iterdir()) == ['nbs', 'site'], 'no temp folders left behind'


# ------------------------------------------------------------------------ browser rig
@pytest.fixture(scope='module')
def site(tmp_path_factory) -> Path:
    "The real site, built from nbs/ by the command line tool."
    out = tmp_path_factory.mktemp('docs') / 'site'
    res = subprocess.run([sys.executable, str(ROOT / '.ci' / 'build_docs.py'), '--out', str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, f'build_docs.py failed:\n{res.stdout}\n{res.stderr}'
    return out


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args): pass


@pytest.fixture(scope='module')
def base_url(site):
    "Serve the site on a free port of 127.0.0.1."
    server = ThreadingHTTPServer(('127.0.0.1', 0), functools.partial(_QuietHandler, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f'http://127.0.0.1:{server.server_address[1]}'
    server.shutdown()
    server.server_close()


def _unavailable(reason: str):
    (pytest.fail if os.environ.get('CI') else pytest.skip)(reason)


@pytest.fixture(scope='module')
def browser():
    "Headless system Chromium through Playwright's sync API."
    exe = shutil.which('chromium')
    if not exe: _unavailable('no `chromium` executable on PATH: the browser tests of the docs need it')
    try: from playwright.sync_api import sync_playwright
    except ImportError: _unavailable('the `playwright` Python package is not installed')
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for old in [*ARTIFACTS.glob('*.png'), *ARTIFACTS.glob('*.jpg')]: old.unlink()
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
        yield b
        b.close()


@dataclass
class Visit:
    "What a page looked like in the browser."
    status: int
    h1: list = field(default_factory=list)
    nav: list = field(default_factory=list)
    current: list = field(default_factory=list)
    output_areas: int = 0
    broken_images: list = field(default_factory=list)
    directive_lines: list = field(default_factory=list)
    errors: list = field(default_factory=list)


def visit(browser, url: str, screenshot: Path | None = None) -> Visit:
    "Open `url`, record errors/failed or external requests, and read the page."
    ctx = browser.new_context(viewport={'width': 1280, 'height': 900})
    errors = []
    origin = url.split('/', 3)[:3]

    def route(r):
        if r.request.url.split('/', 3)[:3] == origin: return r.continue_()
        errors.append(f'external request: {r.request.url}')
        r.abort()
    ctx.route('**/*', route)
    page = ctx.new_page()
    page.on('pageerror', lambda e: errors.append(f'page error: {e}'))
    page.on('console', lambda m: m.type == 'error' and errors.append(f'console error: {m.text}'))
    page.on('requestfailed', lambda r: errors.append(f'request failed: {r.url}'))
    page.on('response', lambda r: r.status >= 400 and errors.append(f'HTTP {r.status}: {r.url}'))
    try:
        resp = page.goto(url, wait_until='load')
        v = Visit(status=resp.status if resp else 0, errors=errors)
        v.h1 = [t.strip() for t in page.locator('h1').all_inner_texts()]
        v.nav = [tuple(x) for x in page.eval_on_selector_all(
            'nav.sidebar ol a', 'as => as.map(a => [a.getAttribute("href"), a.textContent.trim()])')]
        v.current = page.eval_on_selector_all('nav.sidebar a[aria-current=page]', 'as => as.map(a => a.getAttribute("href"))')
        v.output_areas = page.locator('.output_area').count()
        v.broken_images = page.eval_on_selector_all(
            'img', 'is => is.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src.slice(0, 100))')
        v.directive_lines = [l for t in page.locator('.input_area').all_inner_texts()
                             for l in t.splitlines() if l.lstrip().startswith('#|')]
        if screenshot: page.screenshot(path=str(screenshot), full_page=True, type='jpeg', quality=70)
        return v
    finally:
        ctx.close()


def assert_clean(v: Visit, title: str, href: str):
    "Checks shared by every page."
    assert v.status == 200, f'HTTP {v.status}'
    assert v.h1 and v.h1[0] == title, f'first <h1> is {v.h1[:1]}, expected {title!r}'
    assert not v.errors, '\n'.join(v.errors)
    assert not v.broken_images, f'images that did not load: {v.broken_images}'
    assert v.nav == expected_nav(), f'sidebar {v.nav} != {expected_nav()}'
    assert v.current == [href]


# ------------------------------------------------------------------------ browser tests
_PAGES = NOTEBOOKS or [pytest.param(None, marks=pytest.mark.skip(reason='no notebooks in nbs/ yet'))]


@pytest.mark.parametrize('nb_path', _PAGES, ids=lambda p: p.stem if p else 'none')
def test_notebook_page(nb_path, browser, base_url):
    nb = nbformat.read(nb_path, as_version=4)
    href = bd.page_name(nb_path)
    v = visit(browser, f'{base_url}/{href}', ARTIFACTS / f'{nb_path.stem}.jpg')
    assert_clean(v, title_of(nb_path), href)
    want = shown_output_cells(nb)
    assert v.output_areas >= want, f'{v.output_areas} output areas rendered, {want} cells with outputs to show'
    assert not v.directive_lines, f'directive lines left in the code: {v.directive_lines}'


def test_api_page(browser, base_url):
    v = visit(browser, f'{base_url}/{bd.API_PAGE}', ARTIFACTS / 'api.jpg')
    assert_clean(v, bd.API_TITLE, bd.API_PAGE)


def test_api_page_lists_every_export(site):
    page = (site / bd.API_PAGE).read_text(encoding='utf-8')
    stems = {p.stem for p in NOTEBOOKS}
    for mod in sorted(LIB.glob('*.py')):
        if mod.name.startswith('_'): continue
        qual = f'{LIB.name}.{mod.stem}'
        assert f'id="{qual}"' in page, f'no section for {qual}'
        for name in exported_names(mod):
            assert f'id="{qual}.{name}"' in page, f'{qual}.{name} missing from {bd.API_PAGE}'
        src = re.search(r'AUTOGENERATED!.*File to edit: \S*?([^/\s]+)\.ipynb', mod.read_text(encoding='utf-8'))
        if src and src.group(1) in stems:
            assert f'href="{src.group(1)}.html"' in page, f'{qual} does not link back to {src.group(1)}.html'


def test_browser_checks_catch_a_broken_page(browser, site, base_url):
    "The checks above must be able to fail: a script error and a missing image are reported."
    (site / 'broken.html').write_text('<!DOCTYPE html><html><head><link rel="icon" href="data:,"></head><body>'
                                      '<h1>Broken</h1><img src="missing.png"><script>notDefined()</script>'
                                      '</body></html>')
    v = visit(browser, f'{base_url}/broken.html')
    assert any('page error' in e for e in v.errors), v.errors
    assert any('missing.png' in e for e in v.errors), v.errors
    assert v.broken_images
    with pytest.raises(AssertionError): assert_clean(v, 'Broken', 'broken.html')
