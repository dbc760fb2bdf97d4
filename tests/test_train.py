"""Training from the shell: the tiny VAE with Lightning DDP on two CPU processes (gloo)."""
import json, subprocess
from pathlib import Path
import pytest

def run(*args, timeout=600):
    return subprocess.run(['worldplay2', *args], capture_output=True, text=True, timeout=timeout)

@pytest.fixture(scope='module')
def data32(tmp_path_factory):
    d = tmp_path_factory.mktemp('data')
    r = run('data', 'generate', '--out', str(d), '--episodes', '4', '--kind', 'navigation', '--seconds', '2', '--res', '32', '--quiet')
    assert r.returncode == 0, r.stderr
    return d

def test_train_vae_ddp_two_cpu_processes(data32, tmp_path):
    "The same command scales out with Lightning flags: 2 processes, gloo; rank 0 writes the model and the metrics."
    r = run('train', 'vae', '--preset', 'tiny', '--data', str(data32), '--out', str(tmp_path), '--max-steps', '6',
            '--devices', '2', '--strategy', 'ddp', '--quiet')
    assert r.returncode == 0, r.stderr[-3000:]
    m = json.loads((tmp_path/'metrics.json').read_text())
    assert m['steps'] == 6 and m['preset'] == 'tiny'
    assert (tmp_path/'vae'/'model.safetensors').exists() and (tmp_path/'checkpoints'/'last.ckpt').exists()
    assert 'distributed_backend=gloo' in r.stderr or 'gloo' in r.stderr, r.stderr[-2000:]

def test_train_rejects_wrong_resolution(data32, tmp_path):
    r = run('train', 'vae', '--preset', 'small', '--data', str(data32), '--out', str(tmp_path), '--max-steps', '1', '--quiet')
    assert r.returncode == 2 and 'are not 128x128' in r.stderr and 'Traceback' not in r.stderr
