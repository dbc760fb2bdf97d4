"""The `worldplay2` console script, run as a user would: in a separate process."""
import json, os, signal, subprocess, sys, time
from pathlib import Path
import numpy as np
import pytest
from worldplay2.data import read_episode, list_episodes

def run(*args, **kw):
    return subprocess.run(['worldplay2', *args], capture_output=True, text=True, timeout=300, **kw)

def test_version_and_help():
    r = run('--version'); assert r.returncode == 0 and r.stdout.startswith('worldplay2 ')
    r = run('--help'); assert r.returncode == 0 and 'preview' in r.stdout and 'bench' in r.stdout

def test_bench_world_json():
    r = run('bench', 'world', '--json', '--res', '32', '48', '--frames', '32')
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert set(out['fps']) == {'32', '48'} and all(v > 0 for v in out['fps'].values())
    assert out['fps']['32'] > out['fps']['48']          # fewer pixels, more frames per second

def test_bad_arguments_give_clear_errors(tmp_path):
    r = run('data', 'generate', '--out', str(tmp_path), '--episodes', '0')
    assert r.returncode == 2 and 'argument --episodes: must be an integer >= 1' in r.stderr and 'Traceback' not in r.stderr   # the parser checks numbers
    r = run('data', 'generate', '--out', str(tmp_path), '--episodes', '1', '--kind', 'swim')
    assert r.returncode == 2 and "invalid choice: 'swim'" in r.stderr
    r = run('train', 'base', '--out', str(tmp_path/'b'), '--data', str(tmp_path), '--vae', str(tmp_path), '--shift', '0')
    assert r.returncode != 0 and 'shift must be positive, got 0.0' in r.stderr and 'Traceback' not in r.stderr
    r = run('train', 'vae', '--out', str(tmp_path/'v'), '--data', str(tmp_path), '--max-time', '0')
    assert r.returncode != 0 and '--max-time must be a positive number of seconds, got 0.0' in r.stderr and 'Traceback' not in r.stderr
    r = run('train', 'pdd', '--out', str(tmp_path/'p'), '--data', str(tmp_path), '--vae', str(tmp_path), '--init', str(tmp_path), '--flat-captions')
    assert r.returncode != 0 and '--flat-captions is for train base, teacher or student, not pdd' in r.stderr and not (tmp_path/'p').exists()
    r = run('train', 'base', '--out', str(tmp_path/'b2'), '--data', str(tmp_path), '--vae', str(tmp_path), '--context-noise', '0.3')
    assert r.returncode != 0 and '--context-noise is for train teacher, student or pdd' in r.stderr and not (tmp_path/'b2').exists()
    r = run('train', 'pdd', '--out', str(tmp_path/'p2'), '--data', str(tmp_path), '--vae', str(tmp_path), '--init', str(tmp_path), '--anchor')
    assert r.returncode != 0 and '--anchor is for train teacher or student, not pdd' in r.stderr and not (tmp_path/'p2').exists()
    r = run('train', 'teacher', '--out', str(tmp_path/'t'), '--data', str(tmp_path), '--vae', str(tmp_path), '--init', str(tmp_path), '--patch', '2')
    assert r.returncode != 0 and '--patch is for train base (a new model), not teacher' in r.stderr and not (tmp_path/'t').exists()
    r = run('train', 'base', '--out', str(tmp_path/'b3'), '--data', str(tmp_path), '--vae', str(tmp_path), '--res', '64')
    assert r.returncode != 0 and "--res is for train vae, not base" in r.stderr and not (tmp_path/'b3').exists()
    r = run('train', 'vae', '--out', str(tmp_path/'v0'), '--data', str(tmp_path), '--max-steps', '0')
    assert r.returncode != 0 and '--max-steps 0 is for train vae --init' in r.stderr and not (tmp_path/'v0').exists()
    r = run('eval', 'horizon', '--context-sigma', '1')
    assert r.returncode == 2 and 'argument --context-sigma: must be a number from 0 up to (not including) 1' in r.stderr

def test_generate_resumes_after_kill(tmp_path):
    "Kill a generation mid-run: no half-written episode appears, and re-running completes it identically."
    args = ['data', 'generate', '--episodes', '6', '--kind', 'event', '--seconds', '2', '--res', '32', '--seed', '3', '--quiet']
    p = subprocess.Popen(['worldplay2', *args, '--out', str(tmp_path/'a')], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    finished = lambda: [m for m in (tmp_path/'a').glob('event-3-*/meta.json') if '.tmp-' not in m.parent.name]
    while time.time() < deadline and len(finished()) < 2: time.sleep(0.05)   # episodes renamed into place
    p.send_signal(signal.SIGKILL); p.wait()
    done = [d for d in (tmp_path/'a').iterdir() if d.is_dir() and '.tmp-' not in d.name]
    assert 2 <= len(done) < 6, f"killed too late or too early: {len(done)} episodes"
    for d in done: read_episode(d)                        # every visible episode is complete and reads
    assert run(*args, '--out', str(tmp_path/'a')).returncode == 0
    assert run(*args, '--out', str(tmp_path/'b'), '--workers', '2').returncode == 0
    a, b = list_episodes(tmp_path/'a'), list_episodes(tmp_path/'b')
    assert [x.name for x in a] == [x.name for x in b] and len(a) == 6
    for x, y in zip(a, b): assert np.array_equal(read_episode(x).frames, read_episode(y).frames)
    assert not [d for d in (tmp_path/'a').iterdir() if '.tmp-' in d.name]
    r = run('data', 'generate', '--out', str(tmp_path/'c'), '--episodes', '1', '--seconds', '0.5', '--res', '16', '--twins', '--quiet')
    assert r.returncode == 0 and r.stdout.startswith('2 navigation episodes'), r.stderr[-800:]
    o, t = (read_episode(tmp_path/'c'/n) for n in ('navigation-0-00000', 'navigation-0-00000-mirrored'))
    assert np.array_equal(o.frames[0], t.frames[0]) and np.array_equal(t.actions[1:, :4], -o.actions[1:, :4])   # --twins: one start, opposite commands

def test_preview(tmp_path):
    r = run('preview', '--out', str(tmp_path), '--res', '48', '--seconds', '2')
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    for kind in ('navigation', 'loop', 'event'): assert Path(rep[kind]['mp4']).stat().st_size > 1000
    assert Path(rep['contact_sheet']).stat().st_size > 1000

def test_shipped_small_vae_bench_and_eval_defaults():
    "With no --checkpoint, `bench vae` uses the shipped small VAE and `eval control` the shipped model with the best recorded action accuracy, on the shipped samples (re-rendered at 128x128)."
    r = run('bench', 'vae', '--json', '--clips', '4')
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert {'encode_fps', 'decode_fps', 'psnr', 'ssim'} <= set(out) and out['res'] == 128 and out['clips'] == 4
    assert out['psnr'] > 22 and out['decode_fps'] > 0          # a guard: broken weights reconstruct at ~10 dB
    r = run('eval', 'control', '--json', '--clips', '2', '--steps', '10')
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert {'psnr_gt', 'psnr_copy_first', 'psnr_wrong_actions', 'action_accuracy'} <= set(out) and out['clips'] == 2
    assert out['psnr_gt'] > 12                                 # a guard: broken weights give noise at ~8 dB
    from worldplay2.control_eval import best_for_control
    assert out['checkpoint'] == str(best_for_control())
    r = run('eval', 'denoise', '--json', '--episodes', '1', '--frames', '9')
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out['episodes'] == 1 and (out['res'], out['patch']) == (128, 4) and out['checkpoint'] == str(best_for_control())
    # the estimate from little noise lies nearer the truth than from much, and below the VAE's own ceiling
    assert out['vae_psnr'] > out['x0_psnr_sigma_0.1'] > out['x0_psnr_sigma_0.9'] > 12

def test_eval_events_from_the_shell():
    "`eval events` types an event into the shipped student's stream and judges it against the world with and without it."
    r = run('eval', 'events', '--events', 'night', '--seeds', '0', '--json', '--per-trial')
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out['trials'] == 1 and list(out['by_event']) == ['night'] and out['seeds'] == [0]
    assert (out['oracle'], out['oracle_without']) == (1.0, 1.0)             # the instrument sees the night, through the VAE too
    t = out['per_trial'][0]
    assert t['kind'] == 'night' and t['typed_at_chunk'] == 4 and t['text'] == 'Night falls and the sky turns dark.'
    assert t['responded'] == (t['response'] > 0.5)

def test_eval_steering_and_action_guidance_defaults():
    "`eval steering` streams the shipped student through held keys on the world seeds asked for and reads the true render's slide; `eval control` takes action guidance (away from standing still or from the opposite commands) and reports each clip."
    r = run('eval', 'steering', '--seeds', '11', '--keys', 'right', 'left', 'w', '--chunks', '2', '--json')
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out['seeds'] == [11] and list(out['worlds']) == ['11'] and out['clips'] == 3 and list(out['by_key']) == ['right', 'left', 'w']
    assert out['turns'] == 2 and out['worlds']['11']['right']['true'] < -20 and out['worlds']['11']['left']['true'] > 20
    assert 'small-student' in out['checkpoint']
    assert out['sign_accuracy'] == 1.0 and out['drift_ratio'] > 0.2      # the shipped student turns the way it is told (a broken steering path does not)
    assert out['accuracy'] == round(sum(r['right'] for r in out['worlds']['11'].values())/3, 3)
    r = run('eval', 'steering', '--keys', 'space')
    assert r.returncode == 2 and "invalid choice: 'space'" in r.stderr
    r = run('eval', 'control', '--json', '--clips', '1', '--steps', '4', '--cfg', '2', '--guide', 'actions', '--per-clip', '--seed', '1')
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out['clips'] == 1 and len(out['per_clip']) == 1 and out['per_clip'][0]['psnr_gt'] == out['psnr_gt']
    assert out['action_accuracy'] == (out['per_clip'][0]['commanded_right'] + out['per_clip'][0]['mirrored_right'])/2
    r = run('eval', 'control', '--json', '--clips', '1', '--steps', '4', '--cfg', '2', '--guide', 'mirror', '--seed', '1')
    assert r.returncode == 0, r.stderr
    mir = json.loads(r.stdout)                                  # away from the opposite commands: another null, another sample
    assert mir['clips'] == 1 and mir['psnr_gt'] > 12 and mir['psnr_gt'] != out['psnr_gt']
    eps = lambda *extra: [x['episode'] for x in json.loads(run('eval', 'control', '--json', '--clips', '2', '--steps', '1', '--per-clip', *extra).stdout)['per_clip']]
    assert len(set(eps())) == 2 and len(set(eps('--no-spread'))) == 1   # by default one from each of two episodes; --no-spread: both from the first
    r = run('eval', 'control', '--json', '--clips', '1', '--steps', '1', '--motions')   # one held key at a time, from the first sample's start view
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out['starts'] == 1 and [out[k]['clips'] for k in ('yaw', 'pitch', 'forward', 'lateral')] == [1]*4
    r = run('eval', 'control', '--clips', '1', '--motions', '--per-clip')
    assert r.returncode != 0 and 'does not go with --motions' in r.stderr and 'Traceback' not in r.stderr

def test_eval_control_bad_arguments(tmp_path):
    r = run('eval', 'control', '--vae', str(tmp_path))
    assert r.returncode != 0 and 'pass both --checkpoint' in r.stderr and 'Traceback' not in r.stderr
    r = run('eval', 'control', '--checkpoint', str(tmp_path), '--vae', str(tmp_path))
    assert r.returncode != 0 and 'config.json' in r.stderr and 'Traceback' not in r.stderr

def test_every_training_stage_from_the_shell(tmp_path):
    "Each `worldplay2 train` stage, a couple of steps at the tiny preset, each reading the folder the previous one wrote."
    d = tmp_path
    assert run('data', 'generate', '--out', str(d/'data'), '--episodes', '3', '--kind', 'loop', '--seconds', '5', '--res', '32', '--quiet').returncode == 0
    common = ['--preset', 'tiny', '--data', str(d/'data'), '--max-steps', '2', '--quiet']
    stages = [('vae', []), ('base', ['--vae', str(d/'vae'/'vae'), '--shift', '2', '--neg-actions', '0.5', '--screen-pos', '--high-sigma', '0.95']), ('compressor', ['--vae', str(d/'vae'/'vae'), '--model', str(d/'base'/'model')]),
              # a flat-caption teacher: its student, PDD and DMD stages keep the form, and play and demo stream it
              ('teacher', ['--vae', str(d/'vae'/'vae'), '--init', str(d/'base'/'model'), '--compressor', str(d/'compressor'/'compressor'), '--flat-captions']),
              ('student', ['--vae', str(d/'vae'/'vae'), '--init', str(d/'teacher'/'model')]),
              ('pdd', ['--vae', str(d/'vae'/'vae'), '--init', str(d/'student'/'model')]),
              ('dmd', ['--vae', str(d/'vae'/'vae'), '--init', str(d/'pdd'/'model'), '--teacher', str(d/'teacher'/'model'), '--rollout-latents', '4', '--score-clip', '4']),
              ('decoder', ['--vae', str(d/'vae'/'vae'), '--init', str(d/'dmd'/'model')])]
    for stage, extra in stages:
        r = run('train', stage, '--out', str(d/stage), *common, *extra)
        assert r.returncode == 0, f"train {stage}: {r.stderr[-1500:]}"
        m = json.loads(r.stdout.strip().splitlines()[-1])
        assert m['steps'] == 2, (stage, m)
        if stage == 'teacher': assert m['structured'] is False, m
        if stage == 'base': assert m['shift'] == 2.0 and m['neg_weight'] == 0.5 and m['neg_ratio'] == 1.0 and m['screen_pos'] and m['high_sigma'] == 0.95, m
    r = run('train', 'vae', '--out', str(d/'vae-timed'), *common[:-3], '--max-steps', '100000', '--max-time', '2', '--quiet')
    assert r.returncode == 0, r.stderr[-1500:]
    assert 0 < json.loads(r.stdout.strip().splitlines()[-1])['steps'] < 100000          # --max-time stopped it, and it saved
    assert (d/'vae-timed'/'vae'/'config.json').exists()
    dit = json.loads((d/'base'/'model'/'config.json').read_text())['dit']
    assert (dit['shift'], dit['screen_pos'], dit['high_sigma']) == (2.0, True, 0.95)              # the flags reached the model it saved
    assert json.loads((d/'dmd'/'model'/'config.json').read_text())['control']['structured'] is False     # kept down the chain
    assert len(list((d/'decoder'/'pairs').glob('*.npz'))) == 3                                   # the stream's latents of every episode
    r = run('play', '--checkpoint', str(d/'dmd'/'model'), '--vae', str(d/'decoder'/'vae'), '--actions', 'w*8 right+w*4', '--event', 'at 0.5s: It starts to snow.',
            '--out', str(d/'play.mp4'))
    assert r.returncode == 0, r.stderr[-1500:]
    out = json.loads(r.stdout)
    assert out['frames'] == 17 and (d/'play.mp4').stat().st_size > 1000 and out['events'] == [[0.5, 'It starts to snow.']]
    r = run('demo', '--checkpoint', str(d/'dmd'/'model'), '--vae', str(d/'vae'/'vae'), '--out', str(d/'demo'))
    assert r.returncode == 0, r.stderr[-1500:]
    out = json.loads(r.stdout)
    assert out['frames'] > 200 and out['fps'] > 0 and {p.name for p in (d/'demo').iterdir()} == {'demo.mp4', 'strip.png', 'report.html', 'worldplay2.json'}
    assert out['cpu']['threads'] >= 1 and 'vector' in out['cpu'] and out['cpu']['torch_capability']      # the timing names its machine
    cal = out['speed']                                                                  # --speed auto, the default: the calibration's report
    assert set(cal['fps']) == {'fp32', 'int8', 'fused-int8'} and cal['cpu'] == out['cpu']
    assert out['model'].endswith(f"({cal['speed']}, chosen by calibration)")          # what played is what it chose
    assert cal['realtime'] == (cal['fps'][cal['speed']] >= 16)
    assert len(out['psnr_by_chunk']) == (out['frames'] - 1)//8 and abs(sum(out['psnr_by_chunk'])/len(out['psnr_by_chunk']) - out['psnr_vs_true']) < .01
    r = run('demo', '--checkpoint', str(d/'dmd'/'model'), '--vae', str(d/'vae'/'vae'), '--out', str(d/'demo2'), '--script', 'w*8 right*8',
            '--scene', '5', '--event', 'at 0.5s: <b>snow</b>', '--speed', 'int8+traced')  # another script and world; the user's text escaped
    assert r.returncode == 0, r.stderr[-1500:]
    out = json.loads(r.stdout)
    assert out['frames'] == 17 and out['events'] == [[0.5, '<b>snow</b>']] and len(out['psnr_by_chunk']) == 2
    assert out['model'].endswith('(int8+traced)') and 'speed' not in out                # a speed named: no calibration
    r = run('bench', 'profile', '--checkpoint', str(d/'dmd'/'model'), '--vae', str(d/'vae'/'vae'), '--speed', 'fp32', 'int8',
            '--chunks', '1', '--json')
    assert r.returncode == 0, r.stderr[-1500:]
    out = json.loads(r.stdout)                                                          # where a chunk's time goes, per speed
    assert sorted(out['speeds']) == ['fp32', 'int8'] and set(out['speeds']['int8']['ms']) == {'sample', 'decode', 'encode_lr', 'remember', 'other'}
    page = (d/'demo2'/'report.html').read_text()
    assert '&lt;b&gt;snow&lt;/b&gt;' in page and '<b>snow</b>' not in page
    r = run('eval', 'horizon', '--checkpoint', str(d/'dmd'/'model'), '--checkpoint', str(d/'pdd'/'model'), '--vae', str(d/'vae'/'vae'),
            '--seeds', '0', '--latents', '9', '--lap-latents', '4', '--json')
    assert r.returncode == 0, r.stderr[-1500:]
    out = json.loads(r.stdout)
    assert sorted(out['models']) == ['dmd', 'pdd'] and len(out['models']['dmd']['revisit_by_lap']) == 1
    r = run('eval', 'horizon', '--checkpoint', str(d/'dmd'/'model'), '--checkpoint', str(d/'dmd'/'model'), '--vae', str(d/'vae'/'vae'))
    assert r.returncode != 0 and "both named 'dmd'" in r.stderr

def test_eval_true_past():
    "A stream given the true render for its first chunks plays it (the VAE's ceiling), then draws on from it."
    r = run('eval', 'true-past', '--script', 'w*16 right*8', '--chunks', '0', '2', '--json')
    assert r.returncode == 0, r.stderr
    by = json.loads(r.stdout)['psnr_by_chunk']
    own, told = by['0'], by['2']
    assert len(own) == len(told) == 3 and told[0] > own[0] and told[1] > own[1] and told[2] != own[2]
    r = run('eval', 'true-past', '--script', 'w*3')
    assert r.returncode != 0 and 'a chunk takes 8' in r.stderr

def test_models_list_json():
    "The shipped models, each with its class, stage, size and measured results (every result carries the command that printed it)."
    r = run('models', 'list', '--json')
    assert r.returncode == 0, r.stderr
    out = {m['name']: m for m in json.loads(r.stdout)}
    assert {'small-vae', 'small-base', 'small-compressor', 'small-teacher', 'small-student'} <= set(out)     # a clone has all five
    assert {n for n, m in out.items() if m['in_wheel']} == {'small-vae', 'small-teacher', 'small-student'}
    assert out['small-vae']['model'] == 'CausalVAE' and out['small-vae']['dtype'] == 'float16' and 0 < out['small-vae']['size_mb'] < 20
    for m in out.values():
        assert m['stage'] and m['preset'] == 'small' and m['metrics'], m['name']
        for res in m['metrics'].values(): assert res['command'].startswith('worldplay2 '), (m['name'], res)
    r = run('models', 'card', 'small-vae')
    assert r.returncode == 0 and 'library_name: worldplay2' in r.stdout and 'psnr' in r.stdout
    r = run('models', 'card', 'nobody/nothing', env=dict(os.environ, HF_HUB_OFFLINE='1'))
    assert r.returncode == 2 and 'not in the local Hugging Face cache' in r.stderr and 'Traceback' not in r.stderr

@pytest.mark.slow
def test_train_all_tiny_resumes_after_kill(tmp_path):
    "`train all --preset tiny`: killed during the AR student, run again, it continues and ends with every stage's model."
    args = ['worldplay2', 'train', 'all', '--preset', 'tiny', '--out', str(tmp_path), '--quiet']
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 1200
    while time.time() < deadline and not (tmp_path/'student'/'logs').exists() and p.poll() is None: time.sleep(0.5)
    time.sleep(3); p.send_signal(signal.SIGKILL); p.wait()
    assert (tmp_path/'teacher'/'metrics.json').exists() and not (tmp_path/'student'/'metrics.json').exists()
    done = {s: (tmp_path/s/'metrics.json').stat().st_mtime_ns for s in ('vae', 'base', 'navigation', 'compressor', 'teacher')}
    r = subprocess.run(args, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr[-2000:]
    rec = json.loads((tmp_path/'recipe.json').read_text())
    assert list(rec['stages']) == ['data', 'vae', 'base', 'navigation', 'compressor', 'teacher', 'student', 'pdd', 'dmd']
    assert all((tmp_path/s/'metrics.json').stat().st_mtime_ns == t for s, t in done.items())   # the finished stages were skipped, not redone
    for s in ('student', 'pdd', 'dmd'): assert (tmp_path/s/'model'/'model.safetensors').exists()
    assert rec['stages']['dmd']['metrics']['steps'] == 20
