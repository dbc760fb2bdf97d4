"""The notebook player in a real browser: JupyterLab on 127.0.0.1, the demo notebook opened in headless Chromium through
Playwright, keys pressed and an event typed; new frames must arrive and the kernel must see the keys and the event. Run twice:
over the true world (`WorldSession`), where holding the right (left) arrow must slide the view left (right) — the player's keys
reach the frames the commanded way — and over the shipped student, whose drift is printed (how far the model itself turns is
`worldplay2 eval steering`'s measure). Screenshots land in tests/artifacts/widget/<which>/. Slow tier (`pytest -m slow`)."""
import json, os, shutil, socket, subprocess, sys, time, urllib.request
from pathlib import Path
import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
ART = ROOT/'tests'/'artifacts'/'widget'
CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking']
SETUP = """
from worldplay2.hub import load_pretrained
from worldplay2.realtime import Session, WorldSession
from worldplay2.widget import Player
player = Player({make}, scale=2)
display(player.show())
player.start()
"""

MAKERS = dict(world="WorldSession(128)", student="Session.from_pdd(load_pretrained('small-student'), load_pretrained('small-vae'))")

def view_drift(page, img, key: str, seconds: float = 6.0) -> int:
    "Hold `key` on the player; once the kernel has it, capture the image for `seconds` and sum the horizontal shifts between captures."
    import io
    import numpy as np
    from PIL import Image
    from worldplay2.realtime import h_shift
    img.hover(); page.keyboard.down(key)
    wait_text(page, f"keys: {key.replace('Arrow', '').lower()}", 60)
    time.sleep(1.5)                                                         # let the chunk asked for before the key finish
    shots, t_end = [], time.time() + seconds
    while time.time() < t_end:
        shots.append(np.asarray(Image.open(io.BytesIO(img.screenshot())).convert('RGB').resize((128, 128))))
        time.sleep(0.15)
    page.keyboard.up(key)
    return sum(h_shift(a, b, 24) for a, b in zip(shots[:-1], shots[1:]) if not np.array_equal(a, b))

def wait_text(page, needle: str, seconds: float):
    "Poll the player's readout until it shows `needle`."
    deadline, seen = time.time() + seconds, ''
    while time.time() < deadline:
        seen = ' | '.join(e.inner_text() for e in page.locator('.widget-html-content').all()).replace('\xa0', ' ')
        if needle in seen: return seen
        time.sleep(0.25)
    pytest.fail(f"the readout never showed {needle!r}; last: {seen!r}")

def _port():
    with socket.socket() as s: s.bind(('127.0.0.1', 0)); return s.getsockname()[1]

@pytest.mark.slow
@pytest.mark.parametrize('which', ['world', 'student'])
def test_player_in_jupyterlab(tmp_path, which):
    exe = shutil.which('chromium')
    if not exe:
        if os.environ.get('CI'): pytest.fail('no chromium on PATH')
        pytest.skip('no chromium on PATH')
    pytest.importorskip('jupyterlab'); pytest.importorskip('ipyevents')
    from playwright.sync_api import sync_playwright
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(SETUP.format(make=MAKERS[which]))]), tmp_path/'play.ipynb')
    port = _port()
    env = dict(os.environ, HF_HUB_OFFLINE='1', OMP_NUM_THREADS='1', JUPYTER_CONFIG_DIR=str(tmp_path/'cfg'))
    server = subprocess.Popen([sys.executable, '-m', 'jupyter', 'lab', '--no-browser', '--allow-root', f'--port={port}', '--ServerApp.ip=127.0.0.1',
                               '--IdentityProvider.token=', '--ServerApp.password=', f'--ServerApp.root_dir={tmp_path}', '--LabApp.news_url=None',
                               '--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate'],
                              stdout=subprocess.DEVNULL, stderr=open(tmp_path/'server.log', 'w'), env=env)
    art = ART/which; art.mkdir(parents=True, exist_ok=True)
    try:
        url = f'http://127.0.0.1:{port}'
        for _ in range(120):
            try: urllib.request.urlopen(f'{url}/api', timeout=2); break
            except OSError: time.sleep(0.5)
        else: pytest.fail(f"JupyterLab did not start: {(tmp_path/'server.log').read_text()[-2000:]}")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={'width': 1400, 'height': 900})
            page.goto(f'{url}/lab/tree/play.ipynb')
            page.wait_for_selector('.jp-Notebook', timeout=120_000)
            page.wait_for_selector('.jp-Notebook-ExecutionIndicator[data-status="idle"], .jp-Toolbar-kernelStatus', timeout=120_000)
            time.sleep(3)
            for _ in range(3):                                                  # a kernel choice or a notice may ask first
                dialog = page.locator('.jp-Dialog .jp-mod-accept')
                if dialog.count(): page.screenshot(path=str(art/'0-dialog.png')); dialog.first.click(); time.sleep(1)
            page.click('.jp-Notebook .jp-Cell .jp-InputArea-editor'); page.keyboard.press('Shift+Enter')
            img = page.wait_for_selector('.widget-image', timeout=180_000)
            readout = page.locator('.widget-html-content').last
            wait_text(page, 'frames/s', 120)
            first = img.get_attribute('src')
            page.screenshot(path=str(art/'1-started.png'))
            right = view_drift(page, img, 'ArrowRight'); page.screenshot(path=str(art/'3-turned-right.png'))
            left = view_drift(page, img, 'ArrowLeft'); page.screenshot(path=str(art/'4-turned-left.png'))
            print(f"{which}: view drift while turning right {right} px, left {left} px")
            img.hover()
            page.keyboard.down('w')
            wait_text(page, 'keys: w', 60)                                      # the kernel got the held key
            page.keyboard.up('w')
            assert img.get_attribute('src') != first                            # new frames arrived
            page.fill('input[placeholder^="an event"]', 'It starts to snow.'); time.sleep(0.5)
            page.get_by_role('button', name='send event').click()
            wait_text(page, 'event: It starts to snow.', 60)
            page.get_by_role('button', name='v', exact=True).click()
            page.screenshot(path=str(art/'2-keys-and-event.png'))
            text = readout.inner_text()
            browser.close()
        assert 'memory tokens' in text
        if which == 'world': assert right < 0 < left                            # the keys reach the frames the way they say
    finally:
        server.terminate()
        try: server.wait(10)
        except subprocess.TimeoutExpired: server.kill()
