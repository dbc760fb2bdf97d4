"""Training runs that can always be continued: Ctrl-C or SIGTERM saves and says so, a finished or timed-out run goes on with a
larger budget, and a checkpoint of another model is refused without being touched. Tiny runs, in separate processes."""
import csv, hashlib, os, signal, subprocess, time
from pathlib import Path
import pytest
import torch

def run(*args, **kw):
    return subprocess.run(['worldplay2', *args], capture_output=True, text=True, timeout=300, env=dict(os.environ, HF_HUB_OFFLINE='1'), **kw)

@pytest.fixture(scope='module')
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp('train_faults')/'data'
    assert run('data', 'generate', '--out', str(d), '--episodes', '3', '--seconds', '2', '--res', '32', '--quiet').returncode == 0
    return d

def vae(data, out, *extra):
    return run('train', 'vae', '--preset', 'tiny', '--data', str(data), '--out', str(out), '--quiet', *extra)

def step_of(out): return torch.load(Path(out)/'checkpoints'/'last.ckpt', map_location='cpu', weights_only=False)['global_step']

def first_logged_step(out, version):
    rows = list(csv.DictReader(open(Path(out)/'logs'/f'version_{version}'/'metrics.csv')))
    return min(int(r['step']) for r in rows)

def one_error_line(stderr, start):
    lines = [l for l in stderr.splitlines() if l.startswith('worldplay2:')]
    return len(lines) == 1 and lines[0].startswith(start) and 'Traceback' not in stderr

def test_finished_run_continues_to_more_steps(data, tmp_path):
    "A run that reached --max-steps goes on from its last step when given more (the one-cycle schedule stretched), never refused."
    assert vae(data, tmp_path/'r', '--max-steps', '4').returncode == 0 and step_of(tmp_path/'r') == 4
    r = vae(data, tmp_path/'r', '--max-steps', '8')
    assert r.returncode == 0, r.stderr[-800:]
    assert step_of(tmp_path/'r') == 8                                 # before: OneCycleLR refused to step past its first length

@pytest.mark.parametrize('sig,status', [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_saves_and_the_same_command_continues(data, tmp_path, sig, status):
    out = tmp_path/'r'
    args = ['train', 'vae', '--preset', 'tiny', '--data', str(data), '--out', str(out), '--quiet', '--max-steps', '100000']
    p = subprocess.Popen(['worldplay2', *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, HF_HUB_OFFLINE='1'))
    t0 = time.time()
    while not (out/'logs'/'version_0'/'metrics.csv').exists() and time.time() - t0 < 120: time.sleep(.2)
    time.sleep(3); p.send_signal(sig)
    _, err = p.communicate(timeout=120)
    assert p.returncode == status, err[-800:]
    assert one_error_line(err, 'worldplay2: interrupted: ') and 'the same command continues' in err
    n = step_of(out)
    assert n > 0 and f'at step {n}:' in err                                               # saved at the step it reports
    r = vae(data, out, '--max-steps', str(n + 25))                            # enough steps to log a few rows
    assert r.returncode == 0, r.stderr[-800:]
    assert step_of(out) == n + 25 and first_logged_step(out, 1) >= n - 1       # it went on from n, not from 0

def test_max_time_rerun_trains_again(data, tmp_path):
    "--max-time is this invocation's budget: the same command run again trains further instead of stopping at once."
    args = ('--max-steps', '100000', '--max-time', '3')
    assert vae(data, tmp_path/'r', *args).returncode == 0
    n1 = step_of(tmp_path/'r')
    assert vae(data, tmp_path/'r', *args).returncode == 0
    assert step_of(tmp_path/'r') > n1 > 0

def test_checkpoint_of_another_model_is_refused_untouched(data, tmp_path):
    assert vae(data, tmp_path/'v', '--max-steps', '2').returncode == 0
    base = ['train', 'base', '--preset', 'tiny', '--data', str(data), '--vae', str(tmp_path/'v'/'vae'), '--out', str(tmp_path/'b'),
            '--max-steps', '2', '--quiet']
    assert run(*base).returncode == 0
    files = sorted(p for p in (tmp_path/'b').rglob('*') if p.is_file())
    before = {p: hashlib.sha1(p.read_bytes()).hexdigest() for p in files}
    r = run(*base[:-3], '--max-steps', '4', '--screen-pos', '--quiet')                 # another model: a learned screen embedding
    assert r.returncode == 2 and one_error_line(r.stderr, 'worldplay2: error: '), r.stderr[-800:]
    assert 'holds a checkpoint of another model' in r.stderr and 'screen' in r.stderr
    assert {p: hashlib.sha1(p.read_bytes()).hexdigest() for p in files} == before
    # the other way: the checkpoint has a part this run does not
    placed = base[:8] + ['--out', str(tmp_path/'b2'), '--max-steps', '2', '--screen-pos', '--quiet']
    assert run(*placed).returncode == 0
    r = run(*placed[:-4], '--max-steps', '4', '--quiet')
    assert r.returncode == 2 and 'holds a checkpoint of another model' in r.stderr and 'which this run does not have' in r.stderr, r.stderr[-800:]
