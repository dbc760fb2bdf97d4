"""One error path: every failure of the `worldplay2` console script is one line `worldplay2: error: ...` on stderr, no traceback,
a non-zero exit status, and with --json also {"error", "type"} on stdout. Fast: no trained model runs (each case fails before one loads)."""
import hashlib, json, os, shutil, signal, subprocess, sys, time
from pathlib import Path
import numpy as np
import pytest
import worldplay2.cli as cli

def run(*args, **kw):
    return subprocess.run(['worldplay2', *args], capture_output=True, text=True, timeout=120, **kw)

def one_error_line(r, code: int = 2, *contains) -> str:
    "The run failed with `code` and exactly one stderr line, `worldplay2: error: ...` containing each of `contains`; returns its message."
    lines = r.stderr.strip().splitlines()
    assert r.returncode == code, (r.returncode, r.stderr[-2000:])
    assert 'Traceback' not in r.stderr and len(lines) == 1 and lines[0].startswith('worldplay2: error: '), r.stderr[-2000:]
    for s in contains: assert s in lines[0], (s, lines[0])
    return lines[0][len('worldplay2: error: '):]

def json_error(r, msg: str, kind: str):
    "With --json: stdout is the one JSON object, carrying the stderr line's message and the exception's class."
    assert json.loads(r.stdout) == dict(error=msg, type=kind), r.stdout

def tree_hash(folder) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else 'dir' for p in sorted(Path(folder).rglob('*'))}

# bad numbers, choices and flags: refused by the parser, before any work, with the flag named
USAGE = [(['data', 'generate', '--out', '{tmp}/d', '--episodes', '1', '--seconds', 'inf'], '--seconds'),   # a user's traceback
         (['data', 'generate', '--out', '{tmp}/d', '--episodes', '1', '--seconds', 'nan'], '--seconds'),
         (['data', 'generate', '--out', '{tmp}/d', '--episodes', '0'], '--episodes'),
         (['data', 'generate', '--out', '{tmp}/d', '--episodes', '1', '--workers', '0'], '--workers'),
         (['data', 'generate', '--out', '{tmp}/d', '--episodes', '1', '--res', '4'], '--res'),
         (['bench', 'world', '--res', '0', '--json'], '--res'),                                          # a user's traceback
         (['bench', 'world', '--frames', '-3', '--json'], '--frames'),
         (['bench', 'world', '--bogus', '--json'], '--bogus'),                                           # unknown flag
         (['eval', 'steering', '--keys', 'space', '--json'], "invalid choice: 'space'"),                 # bad choice
         (['eval', 'control', '--clips', '0', '--json'], '--clips'),
         (['bench', 'stream', '--rounds', '0', '--json'], '--rounds'),
         (['preview', '--out', '{tmp}/p', '--seconds', 'inf'], '--seconds'),
         (['train', 'base', '--out', '{tmp}/t', '--data', '{tmp}', '--p-i2v', '2'], '--p-i2v'),
         ([], 'required: cmd')]

@pytest.mark.parametrize('argv,names', USAGE, ids=[' '.join(a[:2] + a[-2:]) or 'nothing' for a, _ in USAGE])
def test_usage_errors_are_one_line(tmp_path, argv, names):
    argv = [a.format(tmp=tmp_path) for a in argv]
    r = run(*argv)
    msg = one_error_line(r, 2, names)
    if '--json' in argv: json_error(r, msg, 'UsageError')
    else: assert r.stdout == ''
    assert not (tmp_path/'d').exists() and not (tmp_path/'p').exists() and not (tmp_path/'t').exists()   # nothing was made

def test_bad_input_errors_are_one_line(tmp_path):
    "A ValueError of a command (here `--max-time inf`, which used to overflow a timedelta) is one line, exit 2."
    r = run('train', 'vae', '--out', str(tmp_path/'v'), '--data', str(tmp_path), '--max-time', 'inf')
    one_error_line(r, 2, '--max-time must be a positive number of seconds, got inf')

def test_play_out_is_checked_before_the_clip(tmp_path):
    "`play --out` naming a folder (a user's traceback, after the whole clip was made) or a file in no folder: refused first, nothing written."
    d = tmp_path/'clips'; d.mkdir(); (d/'keep.mp4').write_bytes(b'not touched')
    before, around = tree_hash(d), sorted(p.name for p in tmp_path.iterdir())
    r = run('play', '--actions', 'w*8', '--out', str(d))
    one_error_line(r, 2, f'--out {d} is a folder')
    r = run('play', '--actions', 'w*8', '--out', str(d), '--checkpoint', str(tmp_path/'no-such-model'))
    one_error_line(r, 2, f'--out {d} is a folder')                   # the out path is checked before the model is even looked up
    r = run('play', '--actions', 'w*8', '--out', str(tmp_path/'missing'/'x.mp4'))
    one_error_line(r, 2, 'is not an existing folder')
    assert tree_hash(d) == before and sorted(p.name for p in tmp_path.iterdir()) == around

def test_demo_checks_its_input_before_the_model(tmp_path):
    (tmp_path/'file').write_text('x')
    one_error_line(run('demo', '--out', str(tmp_path/'file'), '--checkpoint', str(tmp_path/'none')), 2, 'is a file')
    one_error_line(run('demo', '--script', 'w*8', '--event', 'snow at 3', '--checkpoint', str(tmp_path/'none'), '--out', str(tmp_path/'o')),
                   2, "an event reads 'at <seconds>s: <text>'")
    assert not (tmp_path/'o').exists()

def test_config_field_of_the_wrong_type(tmp_path):
    "A checkpoint whose config.json has a field of the wrong type (a user's traceback: a TypeError deep in the model) is named in one line."
    ck = tmp_path/'vae'; ck.mkdir()
    shipped = Path(cli.__file__).parent/'pretrained'/'small-vae'
    shutil.copy(shipped/'model.safetensors', ck)
    cfg = json.loads((shipped/'config.json').read_text()); cfg['widths'] = 64     # a list of widths
    (ck/'config.json').write_text(json.dumps(cfg))
    r = run('bench', 'vae', '--checkpoint', str(ck), '--clips', '1', '--json')
    json_error(r, one_error_line(r, 2, str(ck), 'config.json'), 'ValueError')

def test_internal_errors_and_debug(monkeypatch, capsys):
    "Anything else (a bug) is one line too, exit 1, saying so; --debug, anywhere on the line, prints the traceback before it."
    def boom(a): raise RuntimeError('boom\nsecond line')
    monkeypatch.setattr(cli, 'cmd_bench_world', boom)
    with pytest.raises(SystemExit) as e: cli.main(['bench', 'world', '--json'])
    out, err = capsys.readouterr()
    assert e.value.code == 1 and 'Traceback' not in err and err.count('\n') == 1
    assert err.startswith('worldplay2: error: RuntimeError: boom second line') and '--debug' in err
    assert json.loads(out) == dict(error=err.strip()[len('worldplay2: error: '):], type='RuntimeError')
    for argv in (['--debug', 'bench', 'world'], ['bench', 'world', '--debug']):
        with pytest.raises(SystemExit) as e: cli.main(argv)
        out, err = capsys.readouterr()
        assert e.value.code == 1 and err.startswith('Traceback') and 'in boom' in err and err.strip().splitlines()[-1].startswith('worldplay2: error: RuntimeError')
    r = run('train', 'vae', '--out', '/nonexistent/v', '--data', '/nonexistent', '--max-time', '0', '--debug')
    assert r.returncode == 2 and 'Traceback' in r.stderr and r.stderr.strip().splitlines()[-1] == 'worldplay2: error: --max-time must be a positive number of seconds, got 0.0'

def test_keyboard_interrupt_in_process(monkeypatch, capsys):
    def interrupted(a): raise KeyboardInterrupt
    monkeypatch.setattr(cli, 'cmd_bench_world', interrupted)
    try: cli.main(['bench', 'world']); exc = None
    except BaseException as e: exc = e                                 # (an escaping KeyboardInterrupt would stop the whole test run)
    out, err = capsys.readouterr()
    assert isinstance(exc, SystemExit) and exc.code == 130 and err == 'worldplay2: interrupted\n' and out == ''

def sigint_default():
    """In the child before exec: SIGINT at its default, as in a terminal's process, even when these tests run under a
    shell that ignores it (a background job) — Python then leaves Ctrl-C ignored and the command never sees it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)

def test_ctrl_c_with_workers(tmp_path):
    "Ctrl-C (SIGINT to the whole process group, as a terminal sends it) during a parallel generation: one line, exit 130, no worker tracebacks."
    p = subprocess.Popen(['worldplay2', 'data', 'generate', '--out', str(tmp_path), '--episodes', '40', '--kind', 'event', '--seconds', '2',
                          '--res', '32', '--workers', '2', '--quiet'], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                         preexec_fn=sigint_default)
    deadline = time.time() + 60
    while time.time() < deadline and not list(tmp_path.glob('*/meta.json')) and p.poll() is None: time.sleep(0.05)
    assert p.poll() is None, p.communicate()
    os.killpg(p.pid, signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130 and err == 'worldplay2: interrupted\n', (p.returncode, err[-2000:])

# --out: a command writes only its own entries; one the user put there under the same name is refused, untouched
OUTS = [(['demo', '--out', '{d}', '--checkpoint', '{tmp}/none'], 'strip.png'),
        (['play', '--actions', 'w*8', '--out', '{d}/strip.png', '--checkpoint', '{tmp}/none'], 'strip.png'),
        (['preview', '--out', '{d}', '--seconds', '1', '--res', '16'], 'preview.png'),
        (['train', 'base', '--out', '{d}', '--data', '{tmp}/none', '--vae', '{tmp}/none'], 'model'),
        (['train', 'all', '--preset', 'tiny', '--out', '{d}'], 'data')]

@pytest.mark.parametrize('argv,name', OUTS, ids=[a[0] + ' ' + n for a, n in OUTS])
def test_out_never_replaces_the_users_entries(tmp_path, argv, name):
    d = tmp_path/'mine'; (d/'model').mkdir(parents=True); (d/'model'/'thesis.tex').write_text('months of work')
    (d/'data').mkdir(); (d/'data'/'notes.csv').write_text('a,b'); (d/'strip.png').write_bytes(b'my picture')
    (d/'preview.png').write_bytes(b'my sheet'); (d/'notes.txt').write_text('mine')
    before = tree_hash(d)
    r = run(*[a.format(d=d, tmp=tmp_path) for a in argv])
    one_error_line(r, 2, f'{d} holds', name, 'which worldplay2 did not write')
    assert tree_hash(d) == before                                      # nothing written, nothing replaced, no marker left

def test_out_reruns_replace_their_own(tmp_path):
    "A rerun into the same folder replaces what worldplay2 wrote there and leaves the rest; the user's other files stay."
    d = tmp_path/'p'; d.mkdir(); (d/'notes.txt').write_text('mine')
    stamps = []
    for _ in range(2):
        r = run('preview', '--out', str(d), '--seconds', '1', '--res', '16')
        assert r.returncode == 0, r.stderr[-2000:]
        stamps.append((d/'preview.png').stat().st_mtime_ns); time.sleep(0.05)
    assert stamps[1] > stamps[0]                                        # written again, not skipped
    assert (d/'notes.txt').read_text() == 'mine' and (d/'preview.png').stat().st_size > 0
    assert not [p.name for p in d.iterdir() if '.tmp' in p.name]        # no temporary file left
    assert 'preview.png' in json.loads((d/'worldplay2.json').read_text())['outputs']

def test_demo_folder_of_an_earlier_version_is_its_own(tmp_path):
    "A demo folder written before folders carried a marker is recognised by its report; a page of the user's is not."
    from worldplay2.data import claim_outputs
    from worldplay2.realtime import DEMO_FILES, DEMO_LEGACY
    (tmp_path/'report.html').write_text("<!doctype html><html><head><meta charset='utf-8'><title>worldplay2 demo</title></head>")
    (tmp_path/'demo.mp4').write_bytes(b'an old demo'); (tmp_path/'strip.png').write_bytes(b'its strip')
    assert claim_outputs(tmp_path, DEMO_FILES, legacy=DEMO_LEGACY) == tmp_path
    (tmp_path/'report.html').write_text('<title>my own page</title>')
    with pytest.raises(ValueError, match='holds demo.mp4, strip.png, report.html, which worldplay2 did not write'):
        claim_outputs(tmp_path, DEMO_FILES, legacy=DEMO_LEGACY)

@pytest.mark.slow
def test_ctrl_c_in_a_benchmark_child(tmp_path):
    "SIGINT to `bench memory` alone while it waits on its fresh-process probe: it stops the probe, one line, exit 130, no traceback."
    p = subprocess.Popen(['worldplay2', 'bench', 'memory', '--preset', 'tiny', '--horizons', '16', '--train-horizons', '1024', '--json'], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=sigint_default)
    deadline = time.time() + 60
    def children(): return subprocess.run(['pgrep', '-P', str(p.pid)], capture_output=True, text=True).stdout.split()
    while time.time() < deadline and not children() and p.poll() is None: time.sleep(0.05)
    assert p.poll() is None and children(), p.communicate()
    kids = children(); time.sleep(1)
    os.kill(p.pid, signal.SIGINT)                                       # the parent only: it must stop its child itself
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130 and err == 'worldplay2: interrupted\n', (p.returncode, err[-2000:])
    assert json.loads(out) == dict(error='interrupted', type='KeyboardInterrupt')
    def running(k):                                                      # a zombie waiting for its reaper is not running
        try: return Path(f'/proc/{k}/stat').read_text().rsplit(')', 1)[1].split()[0] not in ('Z', 'X')
        except OSError: return False
    deadline = time.time() + 10
    while time.time() < deadline and any(running(k) for k in kids): time.sleep(0.1)
    assert not [k for k in kids if running(k)]                           # no probe left running (one would run for minutes)

class FakeSession:
    "What `Player` asks of a session, without a model: an event is taken as the next caption, or refused with an error quoting it."
    res, C = 8, 1
    def __init__(self): self.log, self.captions = [], ['a scene', 'a character', '']
    def reset(self, scene, character, perspective=1): return np.zeros((8, 8, 3), np.uint8)
    def frames(self, keys, event=None):
        if event and 'refuse' in event: raise ValueError(f"cannot take the event {event!r}")
        if event: self.captions[2] = event
        self.log.append(dict(chunk=len(self.log) + 1, ms=10.0, first_ms=1.0, memory_tokens=0))
        yield np.zeros((8, 8, 3), np.uint8)

def test_widget_escapes_event_text():
    "Event text typed into the widget (and an error quoting it) is shown as text in its HTML readout, never as markup."
    pytest.importorskip('ipywidgets')
    from worldplay2.widget import Player
    pl = Player(FakeSession())
    pl.event.value = '<img src=x onerror=alert(1)> & snow'; pl.fire_event(); pl.step()
    assert '<img' not in pl.readout.value and 'event: &lt;img src=x onerror=alert(1)&gt; &amp; snow' in pl.readout.value
    pl.event.value = '<script>refuse()</script>'; pl.fire_event(); pl.step()
    assert pl.error and '<script>' not in pl.readout.value and '&lt;script&gt;refuse()&lt;/script&gt;' in pl.readout.value
