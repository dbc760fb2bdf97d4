"""The driver of the base model's two GPU stages (notebook 05a, "At GPU scale"; the card's `gpu_fine_tune`), run on a lent H200
with this repository as the working directory and PYTHONPATH set to it:

    OUT=results T_END=$(( $(date +%s) + 540 )) python3 nbs/gpu/finetune_base.py                                   # stage 1
    OUT=results T_END=$(( $(date +%s) + 255 )) INIT=<stage 1 model/> EXTRA_S=0 RESERVE=40 python3 nbs/gpu/finetune_base.py   # stage 2

It regenerates the world data (the `small` folder's 208 episodes, 800 4-s navigation episodes of seed 1, and as many 11-s
navigation episodes of seed 2 as EXTRA_S seconds allow), encodes them with the VAE on the GPU, times a training step at batch 128,
and calls `train_base` with as many steps as fit before T_END (its `max_time`, in seconds, stops it there in any case), then writes the
weights (float16, in two shards), the metrics and the training log under OUT. Every stage checks the clock, so a lease's minutes
are never overrun. Data and runs go under WORK (default runs/gpu, relative to the repository). MINI=1 rehearses it all on a CPU in a few minutes (a handful of episodes, batch 4, 6 steps).
The two stages ran with git 80b1cd6's copy, which moved the VAE to the GPU by wrapping its `encode`; `encode_latents` now does
that itself (`device=None`: a GPU when there is one). REFINE=1 adds the refiner (`train base --refine`, notebook 04) before
training; the base card's `refiner_ablation` has its CPU test.

Another frame side, from scratch: RES=64 renders the data at 64 pixels and reads the shipped VAE at that side (`train vae
--init worldplay2/pretrained/small-vae --res 64 --max-steps 0`: its latent statistics refitted on the new data, written under
WORK/vae64); INIT=none trains a new model of patch PATCH (default 2) instead of fine-tuning one, at P_HIGH (default 0 for a new
model, 0.7 for a fine-tune) of its windows at the noisiest levels; the base card's `patch_ablation` has its CPU test:

    OUT=results T_END=$(( $(date +%s) + 540 )) RES=64 INIT=none PATCH=2 python3 nbs/gpu/finetune_base.py"""
import json, os, sys, time, traceback
from pathlib import Path
import torch
T_START, T_END = time.time(), float(os.environ['T_END'])
MINI = os.environ.get('MINI') == '1'
OUT = Path(os.environ['OUT']); OUT.mkdir(parents=True, exist_ok=True)
CUDA = torch.cuda.is_available()
torch.set_float32_matmul_precision('high')
left = lambda: T_END - time.time()
def log(*a): print(f'[{time.time() - T_START:6.1f}s, {left():6.1f}s left]', *a, flush=True)
log('cuda', CUDA, torch.__version__, torch.cuda.get_device_name() if CUDA else '', 'cpus', os.cpu_count())

from worldplay2.cli import main as cli
from worldplay2.fit import encode_latents
from worldplay2.vae import load_vae
from worldplay2.train import load_world, train_base, train_vae, new_model_config
from worldplay2.dit import WorldModel
from worldplay2.dit import FlowMatching, flow_step
WORK = Path(os.environ.get('WORK', 'runs/gpu'))                  # data and runs, under the repository (git ignores runs/)
D, RUN = WORK/'data', WORK/'finetune'
W = str(min(16, os.cpu_count() or 2))
RES = os.environ.get('RES', '128')
if (RES != '128' or 'PATCH' in os.environ) and os.environ.get('INIT') != 'none':     # before any device time is spent
    sys.exit('RES other than 128 and PATCH are for a new model: set INIT=none')
sets = ([(f'small{RES}', 'navigation', 4, 11, 0), (f'small{RES}', 'loop', 2, 11, 0), (f'small{RES}', 'event', 2, 11, 0), (f'more{RES}', 'navigation', 3, 4, 1)]
        if MINI else
        [(f'small{RES}', 'navigation', 144, 11, 0), (f'small{RES}', 'loop', 48, 11, 0), (f'small{RES}', 'event', 16, 11, 0), (f'more{RES}', 'navigation', 800, 4, 1)])
extra = (f'extra{RES}', 'navigation', 2 if MINI else 1200, 11, 2)
roots, rate = [], None
for name, kind, n, sec, seed in sets:
    t = time.time()
    cli(['data', 'generate', '--out', str(D/name), '--episodes', str(n), '--kind', kind, '--seconds', str(sec), '--res', RES,
         '--seed', str(seed), '--workers', W, '--quiet'])
    if rate is None: rate = n/(time.time() - t)                     # 11-s episodes a second, from the first set
    roots.append(D/name); log('generated', name, kind, n)
name, kind, n, sec, seed = extra
n = n if MINI else min(n, int(rate*min(float(os.environ.get('EXTRA_S', 75)), left() - 450)))          # at most 75 s of generating, and only while time allows
if n > 0:
    cli(['data', 'generate', '--out', str(D/name), '--episodes', str(n), '--kind', kind, '--seconds', str(sec), '--res', RES,
         '--seed', str(seed), '--workers', W, '--quiet'])
    roots.append(D/name); log('generated', name, kind, n)
roots = sorted(set(roots))

VAE = 'worldplay2/pretrained/small-vae'; INIT = os.environ.get('INIT', 'worldplay2/pretrained/small-base')
if RES != '128':                                                 # the shipped VAE read at RES, its statistics refitted
    if not (WORK/f'vae{RES}'/'vae').exists(): train_vae(D/f'small{RES}', WORK/f'vae{RES}', 'small', max_steps=0, init=VAE, res=int(RES), progress=False)
    VAE = str(WORK/f'vae{RES}'/'vae')
NEW = INIT == 'none'; INIT = None if NEW else INIT; PATCH = int(os.environ.get('PATCH', 2)) if NEW else None
P_HIGH = float(os.environ.get('P_HIGH', 0.0 if NEW else 0.7))
v = load_vae(VAE)
with torch.no_grad(): paths = encode_latents(v, roots, RUN/'latents', progress=False)       # on the GPU when there is one
log('encoded', len(paths), 'episodes')

B = 4 if MINI else 128
m = (WorldModel(new_model_config('small', v.config, PATCH)) if NEW else load_world(INIT)).train(); dev = 'cuda' if CUDA else 'cpu'; m.to(dev)
c, fm = m.config, FlowMatching(m.config.dit.shift)
m.config.dit.camera_rope = True; m.config.dit.p_i2v = 1.0; m.config.dit.p_high_sigma = P_HIGH
opt = torch.optim.AdamW(m.parameters(), lr=1e-6)
z = torch.randn(B, 5, c.dit.z_ch, c.dit.latent_res, c.dit.latent_res, device=dev)
a = torch.zeros(B, 20, 6, device=dev); a[..., 4] = 1
caps = (['An open walled arena in a meadow.']*B, ['A slim figure.']*B, ['No event.']*B)
ts = []
for i in range(13):
    if CUDA: torch.cuda.synchronize()
    t = time.perf_counter(); loss = flow_step(m, fm, z, a, caps); opt.zero_grad(); loss.backward(); opt.step()
    if CUDA: torch.cuda.synchronize()
    ts.append(time.perf_counter() - t)
step_s = sorted(ts[3:])[len(ts[3:])//2]
peak = torch.cuda.max_memory_allocated()/2**20 if CUDA else 0
del m, opt, z; torch.cuda.empty_cache() if CUDA else None
train_s = left() - (float(os.environ.get('RESERVE', 80)) if not MINI else 50)     # save + final validation; Lightning's own start
steps = 6 if MINI else max(200, int(train_s/(1.35*step_s)))
probe = dict(batch_size=B, step_s=round(step_s, 4), peak_mib=round(peak), planned_steps=steps, train_budget_s=round(train_s))
log('probe', probe); (OUT/'probe.json').write_text(json.dumps(probe))

try:
    metrics = train_base(roots, RUN, 'small', max_steps=steps, batch_size=B, vae=VAE, init=INIT, start_share=0.5, p_i2v=1.0,
                         p_high_sigma=P_HIGH, camera_rope=True, patch=PATCH, refine=os.environ.get('REFINE') == '1' or None, progress=False, num_workers=0 if MINI else 4,
                         max_time=max(10, train_s), val_every=2 if MINI else 500, ckpt_every=10**6)
except Exception:
    traceback.print_exc(); metrics = None
log('trained', metrics)
if metrics:
    metrics['probe'] = probe; metrics['device'] = torch.cuda.get_device_name() if CUDA else 'cpu'
    (OUT/'metrics.json').write_text(json.dumps(metrics))
    from safetensors.torch import save_file
    sd = {k: t.half().contiguous() for k, t in load_world(RUN/'model').state_dict().items()}
    keys = sorted(sd); h = len(keys)//2
    save_file({k: sd[k] for k in keys[:h]}, str(OUT/'part0.safetensors')); save_file({k: sd[k] for k in keys[h:]}, str(OUT/'part1.safetensors'))
    (OUT/'config.json').write_text((RUN/'model'/'config.json').read_text())
    csvs = list((RUN/'logs').rglob('metrics.csv'))
    if csvs: (OUT/'log.csv').write_text(csvs[0].read_text())
log('done')
