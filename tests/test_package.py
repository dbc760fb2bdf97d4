"""The package as users get it: imports in a fresh interpreter, a wheel with the samples inside."""
import os, subprocess, sys, venv, zipfile
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent

def test_fresh_interpreter_smoke():
    "Import the package in a new process and run one tiny step of each stage built so far."
    code = """
import numpy as np, worldplay2
from worldplay2.world import World
from worldplay2.episodes import make_episode
from worldplay2.data import EpisodeDataset, list_episodes, samples_dir
w = World.from_seed(0); s, _ = w.step(w.start_state(1), [0, 3, 1, 0, 1, 0])
rgb, depth = w.render(s.pose[None], [0.0], 16); assert rgb.shape == (1, 16, 16, 3)
ep = make_episode('loop', 0, seconds=1, res=16); assert len(ep) == 17
ds = EpisodeDataset(list_episodes(samples_dir()), history=4, clip=5); assert ds[0]['frames'].shape == (9, 3, 64, 64)
import torch
from worldplay2.vae import CausalVAE, vae_config
from worldplay2.dit import WorldModel, FlowMatching, flow_step, model_config
from worldplay2.compressor import MemoryConfig, HistoryCompressor, RetrievalDecoder, retrieval_loss
from worldplay2.teacher_forcing import MemoryWorld, teacher_loss, student_loss
from worldplay2.stream import WorldStream
c = model_config('tiny'); fm = FlowMatching(c.dit.shift); caps = (['a'], [''], ['b'])
z, z_lr, a = torch.randn(1, 17, 8, 4, 4), torch.randn(1, 9, 8, 1, 1), torch.zeros(1, 65, 6)
mw = MemoryWorld(WorldModel(c), HistoryCompressor(MemoryConfig(), c.dit))
flow_step(mw.model, fm, z[:, :5], a[:, :17], caps).backward()                                            # stages 1-2
retrieval_loss(mw.compressor, RetrievalDecoder(MemoryConfig(), c.dit), mw.model.dit.patchify, z, z_lr)[0].backward()   # stage 3
(teacher_loss(mw, fm, z, z_lr, a, caps, 9, 8) + student_loss(mw, fm, z, z_lr, a, caps, 9, 2, 4)).backward()      # stage 4
from worldplay2.pdd import PDDWorld, PDDConfig, pdd_loss
pw = PDDWorld(MemoryWorld(WorldModel(c), HistoryCompressor(MemoryConfig(), c.dit)), PDDConfig())
pdd_loss(pw, mw.eval(), z, z_lr, a, caps, 9, 2, 4).backward()                                              # stage 5
st = WorldStream(mw, CausalVAE(vae_config('tiny')), chunk=2, steps=2).reset(torch.zeros(1, 1, 3, 32, 32), ('a', '', 'b'))
assert st.step(a[:, 1:9]).shape == (1, 2, 8, 4, 4)
st = WorldStream(pw.mw, CausalVAE(vae_config('tiny')), chunk=2, sampler=pw.sampler()).reset(torch.zeros(1, 1, 3, 32, 32), ('a', '', 'b'))
assert st.step(a[:, 1:9]).shape == (1, 2, 8, 4, 4)                                                        # 4 steps, folded heads
from worldplay2.stable_forcing import DMDConfig, rollout, clip_scores, replay
dc = DMDConfig(latents=4, clip=4)
ro = rollout(pw, CausalVAE(vae_config('tiny')), torch.zeros(1, 1, 3, 32, 32), a[:, :17], [('a', '', 'b')]*2, dc)
replay(pw, ro, clip_scores(mw, mw, ro, [('a', '', 'b')]*2, dc))                                             # stage 6
print(worldplay2.__version__)
"""
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=300, cwd='/')
    assert r.returncode == 0, r.stderr

def test_version_single_source():
    "settings.ini holds the version; nbdev_export writes it into __init__.py, which pyproject reads."
    import configparser, worldplay2
    cfg = configparser.ConfigParser(); cfg.read(ROOT/'settings.ini')
    assert worldplay2.__version__ == cfg['DEFAULT']['version']
    assert 'attr = "worldplay2.__version__"' in (ROOT/'pyproject.toml').read_text()

def _wheel(tmp_path):
    r = subprocess.run([sys.executable, '-m', 'build', '--wheel', '--outdir', str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    return next(tmp_path.glob('worldplay2-*.whl'))

def test_wheel_contents(tmp_path):
    "The wheel carries the modules, the console script, every sample file and the models of WHEEL_MODELS (not REPO_MODELS), under 70 MB."
    z = zipfile.ZipFile(_wheel(tmp_path)); names = z.namelist()
    samples = [p.relative_to(ROOT).as_posix() for p in (ROOT/'data_samples').rglob('*') if p.is_file()]
    assert samples and all(f"worldplay2/{s}" in names for s in samples)
    assert {'worldplay2/world.py', 'worldplay2/data.py', 'worldplay2/cli.py'} <= set(names)
    assert any(n.endswith('entry_points.txt') for n in names)
    from worldplay2.train import WHEEL_MODELS, REPO_MODELS
    files = lambda m: [p.relative_to(ROOT).as_posix() for p in (ROOT/'worldplay2'/'pretrained'/m).rglob('*') if p.is_file()]
    assert all(len(files(m)) >= 4 and all(f in names for f in files(m)) for m in WHEEL_MODELS)   # config, weights, metrics, card each
    assert all(files(m) and not any(f in names for f in files(m)) for m in REPO_MODELS)          # in the repository, not in the wheel
    assert sum(i.file_size for i in z.infolist()) < 70*2**20

@pytest.mark.slow
def test_wheel_installs_in_fresh_venv(tmp_path):
    "pip install torch==2.13.0, then the wheel, into a new venv; the samples are found and read."
    whl = _wheel(tmp_path)
    venv.create(tmp_path/'env', with_pip=True)
    py = str(tmp_path/'env'/'bin'/'python')
    for args in (['torch==2.13.0'], [str(whl)]):
        r = subprocess.run([py, '-m', 'pip', 'install', '-q', *args], capture_output=True, text=True, timeout=1200)
        assert r.returncode == 0, r.stderr[-2000:]
    code = ("from worldplay2.data import samples_dir, list_episodes, read_episode; d = samples_dir(); "
            "assert 'site-packages' in str(d), d; eps = list_episodes(d); [read_episode(e) for e in eps]; "
            "from worldplay2.train import pretrained; from worldplay2.vae import load_vae; "
            "from worldplay2.hub import load_pretrained; load_pretrained('small-teacher'); "
            "assert 'site-packages' in str(pretrained('small-vae')); load_vae(pretrained('small-vae')); "
            "from fastcore.test import test_fail; test_fail(lambda: pretrained('small-base'), contains='not in the wheel'); print(len(eps))")
    r = subprocess.run([py, '-c', code], capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr[-2000:]
    assert int(r.stdout.strip()) >= 7
    r = subprocess.run([str(tmp_path/'env'/'bin'/'worldplay2'), '--version'], capture_output=True, text=True)
    assert r.returncode == 0
