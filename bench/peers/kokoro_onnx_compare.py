#!/usr/bin/env python3
"""Compares choir's zero-noise Kokoro synthesis with ONNX Runtime's on the same
inputs and weights, piece by piece, to show that `bench/peers/kokoro_onnx.sh`
times the same computation on both sides.

    kokoro_onnx_compare.py DIR [--f0-tol 1e-3] [--spectrum-tol 0.6] [--audio-tol 1.0]

DIR holds piece-K.choir.{pred_dur,F0_pred,N_pred,audio}.f32 (`choir bench
kokoro --pieces-out DIR`) and piece-K.ort.{duration,f0,n,audio}.f32
(`node kokoro_onnx.mjs kokoro_zero.onnx --pieces DIR --dump`, the graph of
bench/peers/kokoro_onnx_zero.py). ONNX Runtime's audio is rebuilt from the
graph's conv_post output with the exact iSTFT (torch.istft's, as the
reference's TorchSTFT) because the export's own CustomSTFT inverse is an
approximation (no doubling of the inner bins, no window-sum normalisation:
its audio has another scale and a DC offset). Checks, per piece: durations
identical, F0 and N within --f0-tol relative L2, the audio's magnitude
spectrogram (n_fft 512, hop 128, Hann, as `choir dev parity kokoro`) within
--spectrum-tol, and the audio's relative L2 within --audio-tol. End to end the
audio cannot agree to float32 rounding on random weights: the vocoder turns
a 1e-7 relative change of F0 into ~0.5 relative L2 of audio (docs/kokoro.md),
and F0 here differs by ~1e-5 (two float32 summation orders), so the spectrum
bound is 0.6 (measured 0.36 and 0.45 on the bench paragraph's two pieces), not
parity's 0.1 of the decoder alone on identical inputs. Prints one line per piece and `compare: PASS` (exit 0) or
`compare: FAIL` (exit 1). Needs numpy.
"""
import argparse
import os
import sys

import numpy as np


def rel_l2(a, b):
    a, b = a.astype(np.float64), b.astype(np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def spectral_distance(a, b, nfft=512, hop=128):
    n = min(len(a), len(b))
    if n < nfft:
        return 0.0
    win = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(nfft) / nfft)
    starts = np.arange(0, n - nfft + 1, hop)
    frames = starts[:, None] + np.arange(nfft)[None, :]
    ma = np.abs(np.fft.rfft(a.astype(np.float64)[frames] * win, axis=1))
    mb = np.abs(np.fft.rfft(b.astype(np.float64)[frames] * win, axis=1))
    return float(np.sqrt(np.sum((ma - mb) ** 2) / max(np.sum(mb ** 2), 1e-30)))


def istft(post, nfft=20, hop=5):
    """torch.istft(exp(post[:11]) * exp(i sin(post[11:])), 20, 5, hann, center=True),
    the reference generator's tail (TorchSTFT.inverse), from the conv_post output."""
    post = post.reshape(nfft + 2, -1).astype(np.float64)
    frames = post.shape[1]
    spec = np.exp(post[: nfft // 2 + 1]) * np.exp(1j * np.sin(post[nfft // 2 + 1:]))
    win = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(nfft) / nfft)
    seg = np.fft.irfft(spec.T, n=nfft, axis=1) * win
    n = nfft + hop * (frames - 1)
    idx = (hop * np.arange(frames)[:, None] + np.arange(nfft)[None, :]).ravel()
    y, env = np.zeros(n), np.zeros(n)
    np.add.at(y, idx, seg.ravel())
    np.add.at(env, idx, np.tile(win * win, frames))
    y, env = y[nfft // 2: n - nfft // 2], env[nfft // 2: n - nfft // 2]
    return y / np.where(env > 1e-11, env, 1.0)


def load(d, k, side, what):
    return np.fromfile(os.path.join(d, f"piece-{k}.{side}.{what}.f32"), dtype="<f4")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--f0-tol", type=float, default=1e-3)
    ap.add_argument("--spectrum-tol", type=float, default=0.6)
    ap.add_argument("--audio-tol", type=float, default=1.0)
    a = ap.parse_args()
    ok, k = True, 0
    while os.path.exists(os.path.join(a.dir, f"piece-{k}.choir.audio.f32")):
        dc, do = load(a.dir, k, "choir", "pred_dur"), load(a.dir, k, "ort", "duration")
        same_dur = dc.shape == do.shape and bool(np.all(dc == do))
        f0 = rel_l2(load(a.dir, k, "choir", "F0_pred"), load(a.dir, k, "ort", "f0")) if same_dur else float("inf")
        nn = rel_l2(load(a.dir, k, "choir", "N_pred"), load(a.dir, k, "ort", "n")) if same_dur else float("inf")
        ac, ao = load(a.dir, k, "choir", "audio"), istft(load(a.dir, k, "ort", "post"))
        same_len = ac.shape == ao.shape
        audio = rel_l2(ac, ao) if same_len else float("inf")
        spec = spectral_distance(ac, ao) if same_len else float("inf")
        good = (same_dur and same_len and f0 <= a.f0_tol and nn <= a.f0_tol
                and spec <= a.spectrum_tol and audio <= a.audio_tol)
        ok &= good
        print(f"piece {k}: {len(dc)} ids, durations {'identical' if same_dur else 'DIFFER'} "
              f"({int(dc.sum())} frames), {len(ac)} samples (ort {len(ao)}); rel L2 F0 {f0:.2e}, "
              f"N {nn:.2e}, audio {audio:.3f}; spectrum {spec:.3e}  {'ok' if good else 'FAIL'}")
        k += 1
    if k == 0:
        print(f"compare: no piece-0.choir.audio.f32 in {a.dir}", file=sys.stderr)
        return 2
    print(f"compare: {'PASS' if ok else 'FAIL'} (tolerances: F0/N {a.f0_tol:g}, spectrum "
          f"{a.spectrum_tol:g}, audio {a.audio_tol:g})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
