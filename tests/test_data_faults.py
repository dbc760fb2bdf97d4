"""Nothing lost, nothing silently wrong, for episode datasets: `generate` never deletes or replaces what the project did not write,
a dataset folder refuses a rerun with other parameters, a damaged episode of ours is written again on resume, and `read_episode`
checks the files instead of trusting meta.json. Each case asserts the message and that no file was lost (SHA-1 of every file
under the folder before and after). Fast: 1-second episodes at 16x16."""
import hashlib, json, subprocess
from pathlib import Path
import numpy as np
import pytest
from worldplay2.data import generate, read_episode, write_episode, list_episodes
from worldplay2.episodes import Episode, make_episode

def tree(folder) -> dict:
    "SHA-1 of every file under `folder` (and 'dir' for each folder), by relative path."
    return {str(p.relative_to(folder)): hashlib.sha1(p.read_bytes()).hexdigest() if p.is_file() else 'dir'
            for p in sorted(Path(folder).rglob('*'))}

def kept(before: dict, after: dict):
    "Every file there before is there after, byte for byte (but the dataset index, which a run that adds episodes updates)."
    lost = {k: v for k, v in before.items() if after.get(k) != v and k != 'dataset.json'}
    assert not lost, f"lost or changed: {sorted(lost)}"

GEN = dict(seconds=1, res=16, progress=False)

def test_users_tmp_folders_survive_generate(tmp_path):
    "Only leftovers carrying the project's marker are cleared; a user's `notes.tmp-1`, even one named like ours, stays."
    out = tmp_path/'d'
    for name in ('notes.tmp-1', 'loop-0-00000.tmp-abcdefgh'):
        (out/name).mkdir(parents=True); (out/name/'mine.txt').write_text(f'the user wrote {name}')
    (out/'notes.tmp-2.txt').write_text('a file, too')
    before = tree(out)
    generate(out, 1, 'loop', **GEN)
    kept(before, tree(out))
    assert [p.name for p in list_episodes(out)] == ['loop-0-00000']

def test_foreign_episode_folder_is_refused_and_untouched(tmp_path):
    "A user's folder named like an episode (no meta.json): generate refuses before any work, naming it, and writes nothing."
    out = tmp_path/'d'
    (out/'loop-0-00000').mkdir(parents=True); (out/'loop-0-00000'/'notes.txt').write_text('my notes')
    before = tree(out)
    with pytest.raises(ValueError, match=r"loop-0-00000 is in the way: worldplay2 did not write it"): generate(out, 2, 'loop', **GEN)
    assert tree(out) == before                                  # nothing written either: no dataset.json, no loop-0-00001
    (out/'loop-0-00000'/'notes.txt').rename(tmp_path/'notes.txt')
    (out/'loop-0-00000').rmdir()
    generate(out, 1, 'loop', **GEN)                             # a damaged episode of ours that holds a user's file: refused too
    ep = out/'loop-0-00000'
    (ep/'frames.npz').write_bytes(b'x'); (ep/'notes.txt').write_text('my notes')
    before = tree(out)
    with pytest.raises(ValueError, match=r"loop-0-00000 needs writing again \(frames.npz has 1 bytes.*\) but holds notes.txt"):
        generate(out, 1, 'loop', **GEN)
    assert tree(out) == before

def test_foreign_episode_folder_cli_one_line(tmp_path):
    "`worldplay2 data generate` reports the refusal as its one error line, and the folder is untouched."
    out = tmp_path/'d'
    (out/'navigation-0-00000').mkdir(parents=True); (out/'navigation-0-00000'/'a.txt').write_text('mine')
    before = tree(out)
    r = subprocess.run(['worldplay2', 'data', 'generate', '--out', str(out), '--episodes', '1', '--seconds', '1', '--res', '16', '--quiet'],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and 'Traceback' not in r.stderr, r.stderr[-2000:]
    assert r.stderr.strip().splitlines() == [f"worldplay2: error: {out/'navigation-0-00000'} is in the way: worldplay2 did not write it "
                                             "(no worldplay2.json, no valid meta.json); move it away or generate into another folder"], r.stderr
    assert tree(out) == before

def test_rerun_with_other_parameters_is_refused(tmp_path):
    "The folder records each kind-seed series' parameters: another res or seconds is refused with the difference named."
    out = tmp_path/'d'
    generate(out, 1, 'loop', **GEN)
    before = tree(out)
    with pytest.raises(ValueError, match=r"loop-0 was generated with res 16; this run asks res 32\. Rerun with the same parameters"):
        generate(out, 1, 'loop', **(GEN | dict(res=32)))
    with pytest.raises(ValueError, match=r"loop-0 was generated with seconds 1, res 16; this run asks seconds 2, res 32"):
        generate(out, 2, 'loop', **(GEN | dict(res=32, seconds=2)))
    with pytest.raises(ValueError, match=r"loop-0 was generated with twins False; this run asks twins True"):
        generate(out, 1, 'loop', twins=True, **GEN)
    with pytest.raises(ValueError, match=r"loop-0 was generated with res 16; this run asks res 32\. One folder holds one frame size"):
        generate(out, 1, 'event', **(GEN | dict(res=32)))       # another kind at another res
    assert tree(out) == before
    generate(out, 1, 'event', **GEN)                            # another kind (and seed) at the same res: fine, as the recipe does
    generate(out, 1, 'navigation', seed=7, **(GEN | dict(seconds=2)))
    kept(before, tree(out))
    assert json.loads((out/'dataset.json').read_text())['generated']['loop-0'] == dict(kind='loop', seed=0, seconds=1, res=16, depth=False,
                                                                                      twins=False, format=1)

def test_damaged_episode_is_written_again_identically(tmp_path):
    "On resume a finished episode of ours whose files no longer match its checksums is regenerated, byte for byte."
    out = tmp_path/'d'
    generate(out, 3, 'loop', **GEN)
    before = tree(out)
    f = out/'loop-0-00001'/'frames.npz'; f.write_bytes(f.read_bytes()[:len(f.read_bytes())//2])      # truncated
    g = out/'loop-0-00002'/'track.npz'; b = bytearray(g.read_bytes()); b[len(b)//2] ^= 0xFF; g.write_bytes(bytes(b))   # same size, corrupt
    generate(out, 3, 'loop', **GEN)
    assert tree(out) == before
    for p in list_episodes(out): read_episode(p)
    generate(tmp_path/'fresh', 3, 'loop', **GEN)
    assert tree(tmp_path/'fresh') == before                     # the same dataset as one written in one go, dataset.json included

def test_episode_of_an_older_version_is_done(tmp_path):
    "An episode folder without the marker but with a valid meta.json (older versions wrote them) is finished, as before: not rewritten."
    out = tmp_path/'d'
    generate(out, 1, 'loop', **GEN)
    (out/'loop-0-00000'/'worldplay2.json').unlink(missing_ok=True)
    data = json.loads((out/'dataset.json').read_text()); data.pop('generated', None); (out/'dataset.json').write_text(json.dumps(data))
    before = tree(out)
    with pytest.raises(ValueError, match=r"loop-0-00000 was generated with res 16; this run asks res 32"):   # its meta.json tells its res
        generate(out, 1, 'event', **(GEN | dict(res=32)))
    assert tree(out) == before
    generate(out, 2, 'loop', **GEN)
    kept(before, tree(out))
    assert not (out/'loop-0-00000'/'worldplay2.json').exists() and (out/'loop-0-00001'/'worldplay2.json').exists()

@pytest.fixture
def episode(tmp_path):
    ep = make_episode('navigation', 0, seconds=1, res=16)
    return ep, write_episode(ep, tmp_path/'ep')

def edit_npz(f, key, fn):
    z = dict(np.load(f)); z[key] = fn(z[key]); np.savez(f, **z)

def test_read_refuses_a_lying_frame_count(episode):
    ep, d = episode
    m = json.loads((d/'meta.json').read_text()); m['n_frames'] = 1000; (d/'meta.json').write_text(json.dumps(m))
    before = tree(d)
    with pytest.raises(ValueError, match=rf"{d}: meta.json says 1000 frames but frames.npz holds {len(ep)}"): read_episode(d)
    assert tree(d) == before

def test_read_refuses_float_frames(episode):
    ep, d = episode
    edit_npz(d/'frames.npz', 'frames', lambda f: f/255.)
    with pytest.raises(ValueError, match=r"frames.npz: frames must be uint8, got float64"): read_episode(d)
    with pytest.raises(ValueError, match=r"frames must be uint8, got float64"):        # and the writer never casts them silently
        write_episode(Episode(**(vars(ep) | dict(frames=ep.frames/255.))), d.parent/'f')
    assert not (d.parent/'f').exists()

def test_read_refuses_nan_actions(episode):
    "Passes on the old code too (check_actions already refused NaN): kept as a guard."
    ep, d = episode
    edit_npz(d/'track.npz', 'actions', lambda a: np.where(np.arange(len(a))[:, None] == 5, np.nan, a))
    with pytest.raises(ValueError, match=r"track.npz\[5\]: field 'pitch' is nan, not a finite number"): read_episode(d)

def test_read_refuses_a_short_track(episode):
    "Poses, cameras and state must have one row per frame, like the actions."
    ep, d = episode
    edit_npz(d/'track.npz', 'poses', lambda p: p[:-3])
    with pytest.raises(ValueError, match=rf"track.npz: poses must be \({len(ep)}, 6\), got \({len(ep) - 3}, 6\)"): read_episode(d)
