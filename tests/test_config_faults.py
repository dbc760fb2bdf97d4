"""Nothing silently wrong, for configs and checkpoints: every config field is checked for type, range and finiteness with the
field named (`check_fields`), a checkpoint's config.json and weights are checked before a network is built from them
(`load_weights`), and a model that produces non-finite values stops the evaluation and play paths with an error (`check_finite`)
instead of returning black frames. Fast: the tiny preset, random weights."""
import json, math
import numpy as np
import pytest
import torch
from worldplay2.vae import VAEConfig, CausalVAE, vae_config, save_vae, load_vae, check_fields, check_finite, VAE_PRESETS
from worldplay2.controls import ControlConfig
from worldplay2.dit import DiTConfig, ModelConfig, FlowMatching, EulerSampler, WorldModel, model_config
from worldplay2.compressor import MemoryConfig, HistoryCompressor
from worldplay2.teacher_forcing import MemoryWorld, save_memory_world, load_memory_world
from worldplay2.pdd import PDDConfig, PDDWorld, save_pdd_world, load_pdd_world
from worldplay2.stable_forcing import DMDConfig
from worldplay2.train import save_world, load_world
from worldplay2.hub import from_pretrained
from worldplay2.control_eval import model_generator
from worldplay2.realtime import Session

NAN, INF = float('nan'), float('inf')

# ---------------------------------------------------------------- config fields

@pytest.mark.parametrize('make, field', [
    (lambda: DiTConfig(shift=NAN), 'DiTConfig.shift'),
    (lambda: DiTConfig(high_sigma=INF), 'DiTConfig.high_sigma'),
    (lambda: VAEConfig(lr=NAN), 'VAEConfig.lr'),
    (lambda: VAEConfig(kl_weight=-INF), 'VAEConfig.kl_weight'),
    (lambda: FlowMatching(shift=NAN), 'FlowMatching.shift'),
    (lambda: EulerSampler(cfg=NAN), 'EulerSampler.cfg'),
    (lambda: DMDConfig(guidance=INF), 'DMDConfig.guidance'),
    (lambda: DiTConfig(depth=NAN), 'DiTConfig.depth'),                # NaN where an int is expected
])
def test_non_finite_float_field(make, field):
    with pytest.raises(ValueError, match=rf'{field}: expected .*, got (nan|inf|-inf)'): make()

@pytest.mark.parametrize('make, field', [
    (lambda: DiTConfig(depth='8'), 'DiTConfig.depth'),
    (lambda: DiTConfig(patch=2.0), 'DiTConfig.patch'),
    (lambda: VAEConfig(res='64'), 'VAEConfig.res'),
    (lambda: ControlConfig(d_action='64'), 'ControlConfig.d_action'),
    (lambda: MemoryConfig(n_tmp='4'), 'MemoryConfig.n_tmp'),
    (lambda: PDDConfig(blocks='4'), 'PDDConfig.blocks'),
    (lambda: DMDConfig(latents='16'), 'DMDConfig.latents'),
    (lambda: EulerSampler(steps=2.5), 'EulerSampler.steps'),
    (lambda: ControlConfig(structured=1), 'ControlConfig.structured'),   # bool strictly bool
    (lambda: DiTConfig(camera_rope='yes'), 'DiTConfig.camera_rope'),
    (lambda: DiTConfig(d_model=True), 'DiTConfig.d_model'),              # ... and a bool is not an int
    (lambda: DiTConfig(pred=1), 'DiTConfig.pred'),
    (lambda: ModelConfig(vae_config('tiny'), dict(z_ch=8), ControlConfig()), 'ModelConfig.dit'),
])
def test_wrong_type(make, field):
    with pytest.raises(ValueError, match=rf'{field}: expected '): make()

def test_widths_not_a_list():
    "The user's case: `\"widths\": 64` is an error naming the field, not a TypeError deep in model construction."
    with pytest.raises(ValueError, match=r"VAEConfig.widths: expected a list of ints ≥ 1, got 64"): VAEConfig(widths=64)
    with pytest.raises(ValueError, match=r"VAEConfig.widths: expected a list of ints ≥ 1, got \[16, 'a'\]"): VAEConfig(widths=[16, 'a'])
    with pytest.raises(ValueError, match=r"VAEConfig.widths: expected a list of ints ≥ 1, got \(16, 0\)"): VAEConfig(widths=(16, 0))
    with pytest.raises(ValueError, match=r"VAEConfig.widths: expected at least one level"): VAEConfig(widths=[])

@pytest.mark.parametrize('make, field', [
    (lambda: DiTConfig(d_model=-64), 'DiTConfig.d_model'),
    (lambda: DiTConfig(depth=0), 'DiTConfig.depth'),
    (lambda: VAEConfig(z_ch=-1), 'VAEConfig.z_ch'),
    (lambda: VAEConfig(crop=-8), 'VAEConfig.crop'),
    (lambda: ControlConfig(vocab=0), 'ControlConfig.vocab'),
    (lambda: MemoryConfig(d_fine=-1), 'MemoryConfig.d_fine'),
    (lambda: MemoryConfig(l=0), 'MemoryConfig.l'),                       # was a ZeroDivisionError in `n_sink % l`
    (lambda: MemoryConfig(max_cmp=-1), 'MemoryConfig.max_cmp'),
    (lambda: PDDConfig(intervals=0), 'PDDConfig.intervals'),
    (lambda: EulerSampler(steps=-1), 'EulerSampler.steps'),
    (lambda: EulerSampler(cfg_above=-0.5), 'EulerSampler.cfg_above'),
    (lambda: DMDConfig(clip=0), 'DMDConfig.clip'),                       # was a ZeroDivisionError in `latents % clip`
    (lambda: FlowMatching(shift=0.0), 'FlowMatching.shift'),
    (lambda: DiTConfig(sigma_floor=0.0), 'DiTConfig.sigma_floor'),
])
def test_out_of_range_size(make, field):
    with pytest.raises(ValueError, match=rf'{field}: expected '): make()

@pytest.mark.parametrize('field', ['p_uncond', 'p_i2v', 'p_frame_sigma', 'p_high_sigma', 'high_sigma'])
def test_probability_of_two(field):
    with pytest.raises(ValueError, match=rf'DiTConfig.{field}: expected a finite number in \[0, 1\], got 2'): DiTConfig(**{field: 2})
    with pytest.raises(ValueError, match=rf'DiTConfig.{field}: expected a finite number in \[0, 1\], got -0.1'): DiTConfig(**{field: -0.1})

@pytest.mark.parametrize('make, field', [
    (lambda: DiTConfig(d_model=100, heads=3), 'DiTConfig.heads'),
    (lambda: DiTConfig(latent_res=16, patch=3), 'DiTConfig.patch'),
    (lambda: ControlConfig(d_text=64, text_heads=3), 'ControlConfig.text_heads'),
    (lambda: MemoryConfig(d_fine=64, fine_heads=5), 'MemoryConfig.fine_heads'),
    (lambda: VAEConfig(res=60), 'VAEConfig.res'),
    (lambda: DMDConfig(sigma_min=0.9, sigma_max=0.1), 'DMDConfig.sigma_min'),
])
def test_inconsistent_sizes(make, field):
    "Sizes that the network cannot be built from are refused at once, named, not as a shape error inside torch."
    with pytest.raises(ValueError, match=rf'{field}: '): make()

def test_valid_configs_unchanged():
    "What was valid stays valid and equal: presets, a JSON list for a tuple (kept as a tuple), numpy scalars, None where allowed."
    for p in ('tiny', 'small', 'base'): model_config(p)
    assert VAEConfig(**json.loads(json.dumps(vars(VAE_PRESETS['small'])))) == VAE_PRESETS['small']
    assert VAEConfig(widths=[16, 32]).widths == (16, 32)
    c = DiTConfig(depth=np.int64(2), shift=np.float32(3.0), p_i2v=1)
    assert type(c.depth) is int and c.depth == 2 and c.shift == 3.0 and c.p_i2v == 1
    assert MemoryConfig(max_cmp=None).max_cmp is None and MemoryConfig(max_cmp=3).max_cmp == 3
    assert EulerSampler(4, 10.0, cfg=-1.5).cfg == -1.5                   # guidance may be any finite number
    with pytest.raises(TypeError, match='has no fields'): check_fields(DiTConfig(), dpeth='[1, inf)')   # a typo in the ranges

# ---------------------------------------------------------------- checkpoints

def edit_config(folder, **changes):
    "Rewrite a checkpoint's config.json with `changes`: 'section.field' = value (Python's json writes NaN and Infinity)."
    cfg = json.loads((folder/'config.json').read_text())
    for k, v in changes.items():
        *sec, f = k.split('.')
        (cfg[sec[0]] if sec else cfg)[f] = v
    (folder/'config.json').write_text(json.dumps(cfg))

@pytest.fixture(scope='module')
def tiny(tmp_path_factory):
    "A tiny VAE, base model, memory world and PDD student saved with the project's save functions."
    d = tmp_path_factory.mktemp('ck')
    torch.manual_seed(0)
    c = model_config('tiny')
    vae = CausalVAE(c.vae).eval()
    mw = MemoryWorld(WorldModel(c), HistoryCompressor(MemoryConfig(), c.dit)).eval()
    save_vae(vae, d/'vae'); save_world(mw.model, d/'base', vae=vae); save_memory_world(mw, d/'mw', vae=vae)
    save_pdd_world(PDDWorld(mw, PDDConfig()), d/'pdd', vae=vae)
    return d

def copy(src, dst):
    import shutil
    shutil.copytree(src, dst); return dst

@pytest.mark.parametrize('kind, load, change, field', [
    ('vae', load_vae, {'kl_weight': NAN}, 'VAEConfig.kl_weight'),
    ('vae', load_vae, {'widths': 64}, 'VAEConfig.widths'),
    ('vae', load_vae, {'z_ch': '8'}, 'VAEConfig.z_ch'),
    ('base', load_world, {'dit.shift': NAN}, 'DiTConfig.shift'),
    ('base', load_world, {'vae.widths': 64}, 'VAEConfig.widths'),
    ('base', load_world, {'dit.p_i2v': 2}, 'DiTConfig.p_i2v'),
    ('base', load_world, {'control.d_action': -32}, 'ControlConfig.d_action'),
    ('base', load_world, {'latents.z_std': [NAN]*8}, r'latents.z_std\[0\]'),
    ('base', load_world, {'latents.z_std': [1.0]*7 + [0.0]}, r'latents.z_std\[7\]: expected a number > 0'),
    ('mw', load_memory_world, {'latents.z_mean': [0.0]*4}, r'latents.z_mean: expected one number per latent channel \(vae.z_ch = 8\), got 4'),
    ('mw', load_memory_world, {'memory.l': 0}, 'MemoryConfig.l'),
    ('mw', load_memory_world, {'dit.sigma_floor': INF}, 'DiTConfig.sigma_floor'),
    ('pdd', load_pdd_world, {'pdd.blocks': '4'}, 'PDDConfig.blocks'),
    ('pdd', from_pretrained, {'dit.shift': -INF}, 'DiTConfig.shift'),
])
def test_checkpoint_config_refused(tiny, tmp_path, kind, load, change, field):
    "A checkpoint whose config.json holds a NaN or a field of the wrong type or range is refused, naming the file and the field."
    bad = copy(tiny/kind, tmp_path/'bad')
    edit_config(bad, **change)
    with pytest.raises(ValueError, match=rf"config.json: {field}"): load(bad)

def test_checkpoint_config_unknown_field_and_missing_section(tiny, tmp_path):
    """Sound checkpoints load as before (a JSON list of widths comes back as the annotated tuple); a config.json section with a field
    its class lacks, or without a section the network needs, is refused naming it (was a TypeError or KeyError)."""
    assert load_vae(tiny/'vae').config == vae_config('tiny')
    assert load_world(tiny/'base').config == model_config('tiny')
    assert load_pdd_world(tiny/'pdd').pc == PDDConfig()
    bad = copy(tiny/'base', tmp_path/'bad')
    edit_config(bad, **{'dit.dpeth': 3})
    with pytest.raises(ValueError, match=r"config.json: DiTConfig: .*unexpected keyword argument 'dpeth'"): load_world(bad)
    cfg = json.loads((tiny/'base'/'config.json').read_text()); del cfg['dit']
    (bad/'config.json').write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"config.json: no 'dit' section"): load_world(bad)

def test_checkpoint_nan_weights_refused(tiny, tmp_path):
    torch.manual_seed(0)
    m = WorldModel(model_config('tiny'))
    with torch.no_grad(): m.dit.head.bias.fill_(NAN)
    save_world(m, tmp_path/'bad')
    with pytest.raises(ValueError, match=r"model.safetensors: non-finite weights \(NaN or inf\) in dit.head.bias"): load_world(tmp_path/'bad')

def test_eval_control_cli_refuses_nan_config(tiny, tmp_path, capsys):
    "The user's case end to end: `eval control` on a checkpoint with a NaN in config.json ends with an error, not exit 0 and JSON."
    from worldplay2.cli import main
    bad = copy(tiny/'base', tmp_path/'bad')
    edit_config(bad, **{'dit.shift': NAN})
    with pytest.raises(SystemExit) as e:
        main(['eval', 'control', '--checkpoint', str(bad), '--vae', str(tiny/'vae'), '--clips', '1', '--steps', '1', '--json'])
    assert e.value.code not in (0, None)
    out = capsys.readouterr()
    assert 'DiTConfig.shift' in out.out + out.err

# ---------------------------------------------------------------- non-finite outputs

def nan_world(c):
    torch.manual_seed(0)
    m = WorldModel(c).eval()
    with torch.no_grad(): m.dit.head.bias.fill_(NAN)
    return m

def test_check_finite():
    x = torch.zeros(3)
    assert check_finite(x) is x
    with pytest.raises(ValueError, match=r'the model produced non-finite values \(NaN or inf in 1 of 3\)'): check_finite(torch.tensor([0, NAN, 1]))
    m = torch.nn.Linear(1, 1); m.checkpoint = 'runs/x'
    with pytest.raises(ValueError, match=r'the Linear of checkpoint runs/x produced non-finite values'): check_finite(torch.tensor([INF]), m)

def test_model_generator_nan_model_raises():
    "eval control's generation: a model that produces NaN raises instead of returning (black) frames."
    c = model_config('tiny')
    vae = CausalVAE(c.vae).eval()
    gen = model_generator(nan_world(c), vae, steps=1)
    first, acts = np.zeros((32, 32, 3), np.uint8), np.zeros((5, 6)); acts[:, 4] = 1
    with pytest.raises(ValueError, match='the WorldModel produced non-finite values'): gen(first, acts, dict(scene='a', character='', event=''))
    gen = model_generator(WorldModel(c).eval(), nan_vae(c), steps=1)               # a broken VAE: its frames are caught
    with pytest.raises(ValueError, match='the CausalVAE produced non-finite values'): gen(first, acts, dict(scene='a', character='', event=''))

def nan_vae(c):
    torch.manual_seed(0)
    v = CausalVAE(c.vae).eval()
    with torch.no_grad(): v.dec.head.bias.fill_(NAN)
    return v

def test_session_step_nan_model_raises(tiny):
    "play's path (`Session.step` over `WorldStream`): a NaN model raises, naming the checkpoint it was loaded from."
    mw = from_pretrained(tiny/'mw')
    with torch.no_grad(): mw.model.dit.head.bias.fill_(NAN)
    s = Session(mw, load_vae(tiny/'vae'), EulerSampler(1, mw.config.dit.shift), seed=0)
    s.reset(3)
    with pytest.raises(ValueError, match=rf"the WorldModel of checkpoint {tiny/'mw'} produced non-finite values"): s.step('w')

def test_session_step_nan_vae_raises(tiny):
    c = model_config('tiny')
    mw = from_pretrained(tiny/'mw')
    s = Session(mw, nan_vae(c), EulerSampler(1, mw.config.dit.shift), seed=0)
    with pytest.raises(ValueError, match='the CausalVAE produced non-finite values'):
        s.reset(3); s.step('w')

def test_forcing_config_sizes_are_checked():
    from worldplay2.teacher_forcing import ForcingConfig
    for bad in (dict(chunk=0), dict(chunks=-1), dict(teacher_latents=2.5)):
        with pytest.raises(ValueError, match=f"ForcingConfig.{next(iter(bad))}"): ForcingConfig(**bad)
    assert ForcingConfig() == ForcingConfig(2, 4, 8)
