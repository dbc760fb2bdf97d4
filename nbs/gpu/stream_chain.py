"""The streaming chain on a lent GPU: the memory teacher, the AR student, PDD and Stable Forcing (notebooks 07-09), each stage the
same `worldplay2 train <stage>` command as on the CPU, with a larger batch and as many steps as its share of the lease allows. Run
with this repository as the working directory and PYTHONPATH set to it:

    OUT=results T_END=$(( $(date +%s) + 540 )) python3 nbs/gpu/stream_chain.py

It regenerates the `small` data (208 episodes), encodes them once on the GPU, then runs the stages of STAGES (default: teacher
student pdd dmd; `base` may come first, a fine-tune of the shipped small-base with BASE_FLAGS, e.g. '--token-dims 128') in order,
each stopped by Lightning's max_time at its share of the time left (SHARES, one per stage; by default SHARE's). A stage starts
from the stage before it, or from INIT_<STAGE> (a model/ folder brought back by an earlier lease: the chain resumes stage by
stage); the teacher from TEACHER_INIT (default: the shipped camera-aligned small-base) with the shipped compressor.
What comes back under OUT (at most 8 files): the teacher and the last stage in float16 shards of under 16 MiB, and one JSON with
every stage's metrics, config and training log. Data and runs go under WORK (default runs/gpu, relative to the repository). MINI=1 rehearses it all on a CPU in a few minutes (a handful of episodes, tiny
batches, a few steps)."""
import json, os, shutil, sys, time, traceback
from pathlib import Path
import torch
T_START, T_END = time.time(), float(os.environ['T_END'])
MINI, CUDA = os.environ.get('MINI') == '1', torch.cuda.is_available()
OUT = Path(os.environ['OUT']); OUT.mkdir(parents=True, exist_ok=True)
left = lambda: T_END - time.time()
def log(*a): print(f'[{time.time() - T_START:6.1f}s, {left():6.1f}s left]', *a, flush=True)
log('cuda', CUDA, torch.__version__, torch.cuda.get_device_name() if CUDA else '', 'cpus', os.cpu_count())
torch.set_float32_matmul_precision('high')

from worldplay2.cli import main as cli
from worldplay2.fit import encode_latents
from worldplay2.vae import load_vae
WORK = Path(os.environ.get('WORK', 'runs/gpu'))                  # data and runs, under the repository (git ignores runs/)
D, RUN, VAE = WORK/'data'/'small128', WORK/'chain', 'worldplay2/pretrained/small-vae'
W = str(min(16, os.cpu_count() or 2))
for kind, n in (('navigation', 4 if MINI else 144), ('loop', 2 if MINI else 48), ('event', 2 if MINI else 16)):
    cli(['data', 'generate', '--out', str(D), '--episodes', str(n), '--kind', kind, '--seconds', '11', '--res', '128', '--seed', '0',
         '--workers', W, '--quiet'])
with torch.no_grad(): encode_latents(load_vae(VAE), D, RUN/'latents', progress=False)          # on the GPU when there is one
log('data ready')

STAGES = os.environ.get('STAGES', 'teacher student pdd dmd').split()
SHARE = dict(base=0.2, teacher=0.35, student=0.3, pdd=0.2, dmd=0.15)                 # of the time left, among the stages still to run
SHARES = [float(x) for x in os.environ['SHARES'].split()] if 'SHARES' in os.environ else [SHARE[s] for s in STAGES]
if len(SHARES) != len(STAGES) or any(s not in SHARE for s in STAGES): sys.exit(f'STAGES {STAGES} (of {list(SHARE)}) and SHARES {SHARES} do not match')
BATCH = dict(base=4 if MINI else 128, teacher=2 if MINI else 32, student=2 if MINI else 32, pdd=2 if MINI else 32)
STEPS = dict(base=3, teacher=3, student=3, pdd=3, dmd=2) if MINI else dict(base=20_000, teacher=20_000, student=20_000, pdd=10_000, dmd=2_000)
RESERVE = 40 if MINI else 90                                  # seconds kept for the last saves and the shards
records, prev = {}, None
for i, stage in enumerate(STAGES):
    out = RUN/stage
    (out/'latents').exists() or shutil.copytree(RUN/'latents', out/'latents', copy_function=os.link)   # the encoded latents, shared
    init = os.environ.get(f'INIT_{stage.upper()}') or prev
    if stage == 'base': init = init or 'worldplay2/pretrained/small-base'
    if stage == 'teacher': init = init or os.environ.get('TEACHER_INIT', 'worldplay2/pretrained/small-base')
    budget = (left() - RESERVE)*SHARES[i]/sum(SHARES[i:]) - (15 if MINI else 45)   # the stage's share, less its start and final writes
    if budget < 20: log('no time left for', stage); break
    args = ['train', stage, '--preset', 'small', '--data', str(D), '--vae', VAE, '--init', str(init), '--out', str(out),
            '--max-steps', str(STEPS[stage]), '--max-time', str(int(budget)), '--num-workers', '0' if MINI else '4', '--quiet']
    if stage == 'base': args += os.environ.get('BASE_FLAGS', '--camera-rope --start-share 0.5 --p-i2v 1').split()
    if stage == 'teacher': args += ['--compressor', 'worldplay2/pretrained/small-compressor']
    if stage in BATCH: args += ['--batch-size', str(BATCH[stage])]
    if stage == 'dmd': args += ['--teacher', str(os.environ.get('INIT_TEACHER') or RUN/'teacher'/'model')] + os.environ.get('DMD_FLAGS', '').split()
    log('stage', stage, 'from', init, f'{budget:.0f} s')
    try: cli(args)
    except (Exception, SystemExit): traceback.print_exc(); break
    prev = out/'model'
    records[stage] = dict(args=args, metrics=json.loads((out/'metrics.json').read_text()), config=json.loads((prev/'config.json').read_text()),
                          log=next((p.read_text() for p in (out/'logs').rglob('metrics.csv')), ''))
    log('done', stage, records[stage]['metrics'].get('steps'))

from safetensors.torch import load_file, save_file
def shards(folder, name, k):
    "The folder's weights in float16, in k shards of about equal size: name-0.safetensors …"
    sd = {n: t.half().contiguous() for n, t in load_file(str(Path(folder)/'model.safetensors')).items()}
    keys, size = sorted(sd, key=lambda n: -sd[n].numel()), [0]*k
    parts = [{} for _ in range(k)]
    for n in keys:                                                             # largest first, into the lightest shard
        j = size.index(min(size)); parts[j][n] = sd[n]; size[j] += sd[n].numel()
    for j, p in enumerate(parts): save_file(p, str(OUT/f'{name}-{j}.safetensors'))
if (RUN/'teacher'/'model').exists(): shards(RUN/'teacher'/'model', 'teacher', 2)
if prev is not None and prev != RUN/'teacher'/'model': shards(prev, 'last', 3)
(OUT/'records.json').write_text(json.dumps(dict(stages=records, last=str(prev), device=torch.cuda.get_device_name() if CUDA else 'cpu')))
log('done')
