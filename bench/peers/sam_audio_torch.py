#!/usr/bin/env python3
"""PyTorch's figure for the work bench/cuda/bench_sam_audio.c times in choir.

SAM-Audio's DAC-VAE codec (encoder to the mean latent, decoder with its
watermark path) and its DiT at the published sizes (small 1536x12, base
2048x16, large 2816x22), random weights, written here in plain PyTorch with
the shapes and operations of facebookresearch/sam-audio (spec:
../shared/specs/sam_audio.md) — not Meta's code, which needs a hub download
and extra packages; the cost of the work is what is compared, the outputs
are noise. One separation pass of --seconds of audio: encode, the ODE
(midpoint, 16 steps = 32 evaluations), two decodes (target and residual);
each stage once to warm up, then timed (the evaluation as the median of
--evals). f32 without TF32 unless --tf32. Prints lines in choir's format:
  impl size | encode_s eval_ms ode_s decode_s total_s rtf peak_gb

  python3 bench/peers/sam_audio_torch.py [--size small|base|large|all] [--seconds 10]
"""
import argparse
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

SIZES = {"small": (1536, 12, 12), "base": (2048, 16, 16), "large": (2816, 22, 22)}


class Snake(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.alpha = nn.Parameter(torch.rand(1, c, 1) + 0.5)

    def forward(self, x):
        return x + (self.alpha + 1e-9).reciprocal() * torch.sin(self.alpha * x).pow(2)


def cconv(x, conv, stride=1):
    """Causal "auto" padding: kernel - stride on the left."""
    k = conv.kernel_size[0] * conv.dilation[0] - (conv.dilation[0] - 1)
    return conv(F.pad(x, (k - stride, 0)))


class RU(nn.Module):
    """Snake residual unit (k7 dilated, then k1), or the watermark's causal ELU unit."""

    def __init__(self, dim, dil=1, elu=False):
        super().__init__()
        self.elu = elu
        hidden = dim // 2 if elu else dim
        if not elu:
            self.a1, self.a2 = Snake(dim), Snake(hidden)
            self.c1 = nn.Conv1d(dim, hidden, 7, dilation=dil, padding=3 * dil)
        else:
            self.c1 = nn.Conv1d(dim, hidden, 3)
        self.c2 = nn.Conv1d(hidden, dim, 1)

    def forward(self, x):
        if self.elu:
            return x + self.c2(F.elu(cconv(F.elu(x), self.c1)))
        return x + self.c2(self.a2(self.c1(self.a1(x))))


class Codec(nn.Module):
    def __init__(self):
        super().__init__()
        enc_rates, dec_rates, wm_rates = [2, 8, 10, 12], [12, 10, 8, 2], [8, 5, 4, 2]
        self.hop = 1920
        layers, d = [nn.Conv1d(1, 64, 7, padding=3)], 64
        for s in enc_rates:
            layers += [RU(d, 1), RU(d, 3), RU(d, 9), Snake(d), nn.Conv1d(d, 2 * d, 2 * s, s, padding=math.ceil(s / 2))]
            d *= 2
        layers += [Snake(d), nn.Conv1d(d, 1024, 3, padding=1)]
        self.encoder = nn.Sequential(*layers)
        self.in_proj = nn.Conv1d(1024, 256, 1)
        self.out_proj = nn.Conv1d(128, 1024, 1)
        self.dec_in = nn.Conv1d(1024, 1536, 7, padding=3)
        self.blocks = nn.ModuleList()
        self.wm = nn.ModuleList()
        for i, s in enumerate(dec_rates):
            cin, cout, w = 1536 >> i, 1536 >> (i + 1), wm_rates[i]
            self.blocks.append(nn.Sequential(
                Snake(cin), nn.ConvTranspose1d(cin, cout, 2 * s, s, padding=math.ceil(s / 2), output_padding=s % 2),
                RU(cout, 1), RU(cout, 3), RU(cout, 9)))
            self.wm.append(nn.ModuleDict({
                "up": nn.ConvTranspose1d(cin // 3, cout // 3, 2 * w, w), "ru6": RU(cout // 3, elu=True),
                "ru7": RU(cout // 3, elu=True), "down": nn.Conv1d(cout // 3, cin // 3, 2 * w, w)}))
        self.wm_rates = wm_rates
        self.out_snake, self.out_conv = Snake(96), nn.Conv1d(96, 1, 7, padding=3)
        self.pre3 = nn.Conv1d(1, 32, 7)
        self.lstm1, self.lstm2 = nn.LSTM(512, 512, 2), nn.LSTM(512, 512, 2)
        self.post2, self.dpre0, self.post1 = nn.Conv1d(512, 128, 7), nn.Conv1d(128, 512, 7), nn.Conv1d(32, 1, 7)
        self.msg = nn.Parameter(torch.randn(128, 1) * 0.1)  # the 16-bit message's summed embeddings

    def encode(self, x):  # x [1, 1, n] -> [1, T, 128]
        n = x.shape[-1]
        pad = (-n) % self.hop
        if pad:
            x = F.pad(x, (0, pad), mode="reflect")
        return self.in_proj(self.encoder(x))[:, :128].transpose(1, 2)

    def _lstm(self, lstm, h):
        t = h.permute(2, 0, 1)
        return (lstm(t)[0] + t).permute(1, 2, 0)

    def decode(self, z):  # z [1, T, 128] -> [1, 1, T * hop]
        x = self.dec_in(self.out_proj(z.transpose(1, 2)))
        for b in self.blocks:
            x = b(x)
        y = torch.tanh(self.out_conv(self.out_snake(x)))
        h = cconv(y, self.pre3)
        for i in reversed(range(4)):
            m = self.wm[i]
            h = cconv(F.elu(m["ru7"](h)), m["down"], self.wm_rates[i])
        h = self._lstm(self.lstm1, h)
        h = cconv(F.elu(h), self.post2) + self.msg
        h = self._lstm(self.lstm2, cconv(h, self.dpre0))
        for i in range(4):
            m, w = self.wm[i], self.wm_rates[i]
            t = h.shape[-1]
            h = m["ru6"](m["up"](F.elu(h))[..., : t * w])
        return y + 0.25 * cconv(F.elu(h), self.post1)


def swiglu(w1, w3, w2, x):
    return w2(F.silu(w1(x)) * w3(x))


class Block(nn.Module):
    def __init__(self, D, H, Fh):
        super().__init__()
        self.H, self.hd = H, D // H
        lin = lambda a, b: nn.Linear(a, b, bias=False)  # noqa: E731
        self.wq, self.wk, self.wv, self.wo = lin(D, D), lin(D, D), lin(D, D), lin(D, D)
        self.cq, self.ck, self.cv, self.co = lin(D, D), lin(D, D), lin(D, D), lin(D, D)
        self.w1, self.w3, self.w2 = lin(D, Fh), lin(D, Fh), lin(Fh, D)
        self.table = nn.Parameter(torch.randn(6, D) * 0.1)
        self.n1, self.n2 = nn.Parameter(torch.ones(D)), nn.Parameter(torch.ones(D))
        self.qn, self.kn, self.cqn, self.ckn = (nn.Parameter(torch.ones(self.hd)) for _ in range(4))

    def heads(self, x):
        return x.view(x.shape[0], x.shape[1], self.H, self.hd).transpose(1, 2)

    def forward(self, x, y, t6, cos, sin):
        sh1, sc1, g1, sh2, sc2, g2 = (self.table + t6).chunk(6, dim=0)
        D, hd = x.shape[-1], self.hd
        h = F.rms_norm(x, (D,), self.n1, 1e-5) * (1 + sc1) + sh1
        q = F.rms_norm(self.heads(self.wq(h)), (hd,), self.qn, 1e-5)
        k = F.rms_norm(self.heads(self.wk(h)), (hd,), self.kn, 1e-5)
        v = self.heads(self.wv(h))
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(x.shape)
        x = x + g1 * self.wo(a)
        q = F.rms_norm(self.heads(self.cq(x)), (hd,), self.cqn, 1e-5)
        k = F.rms_norm(self.heads(self.ck(y)), (hd,), self.ckn, 1e-5)
        a = F.scaled_dot_product_attention(q, k, self.heads(self.cv(y))).transpose(1, 2).reshape(x.shape)
        x = x + self.co(a)
        h = F.rms_norm(x, (D,), self.n2, 1e-5) * (1 + sc2) + sh2
        return x + g2 * swiglu(self.w1, self.w3, self.w2, h)


def rope(x, cos, sin):  # interleaved pairs (2i, 2i+1)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


def sinusoid(t, dim):
    half = dim // 2
    f = torch.exp(-math.log(10000.0) * torch.arange(half, device=t.device) / half) * t
    return torch.cat([torch.cos(f), torch.sin(f)])


class DiT(nn.Module):
    def __init__(self, D, H, L):
        super().__init__()
        Fh = 64 * math.ceil(int(2 * 4 * D / 3) / 64)
        self.D, self.hd = D, D // H
        lin = lambda a, b, bias=False: nn.Linear(a, b, bias=bias)  # noqa: E731
        self.proj, self.memory_proj = lin(768, D, True), lin(768, D, True)
        self.const = nn.Parameter(torch.randn(D) * 0.1)  # zero-video and <null>-anchor terms
        self.g1, self.g2 = nn.GroupNorm(1, D), nn.GroupNorm(1, D)
        self.p1, self.p2 = nn.Conv1d(D, D, 3, padding=1), nn.Conv1d(D, D, 3, padding=1)
        self.t1, self.t3, self.t2 = lin(256, D), lin(256, D), lin(D, D)
        self.tb = lin(D, 6 * D, True)
        self.y1, self.y3, self.y2 = lin(D, D), lin(D, D), lin(D, D)
        self.layers = nn.ModuleList(Block(D, H, Fh) for _ in range(L))
        self.final = nn.Parameter(torch.randn(2, D) * 0.1)
        self.norm = nn.Parameter(torch.ones(D))
        self.out = lin(D, 256)

    def forward(self, x_t, feats, memory, t, cos, sin):
        x = self.proj(torch.cat([x_t, torch.zeros_like(x_t), feats, feats], dim=-1)) + self.const
        p = x.transpose(1, 2)
        h = self.p1(F.silu(self.g1(p)))
        h = self.p2(F.silu(self.g2(h)))
        x = (h + p).transpose(1, 2)
        te = swiglu(self.t1, self.t3, self.t2, sinusoid(t, 256))
        t6 = self.tb(F.silu(te)).view(6, -1)
        y = swiglu(self.y1, self.y3, self.y2, memory + sinusoid(t, self.D))
        for layer in self.layers:
            x = layer(x, y, t6, cos, sin)
        sh, sc = (self.final + te).chunk(2, dim=0)
        return self.out(F.rms_norm(x, (self.D,), self.norm, 1e-5) * (1 + sc) + sh)


def sync_time(fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    r = fn()
    torch.cuda.synchronize()
    return r, time.perf_counter() - t0


def run(size, seconds, steps, evals):
    with torch.inference_mode():
        _run(size, seconds, steps, evals)


def _run(size, seconds, steps, evals):
    D, H, L = SIZES[size]
    torch.manual_seed(42)
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    with torch.inference_mode(False), torch.device("cuda"):
        codec, dit = Codec().eval(), DiT(D, H, L).eval()
        for prm in list(codec.parameters()) + list(dit.parameters()):
            prm.requires_grad_(False)
    torch.cuda.synchronize()
    t_build = time.perf_counter() - t0
    n = int(seconds * 48000)
    x = (torch.rand(1, 1, n, device="cuda") - 0.5) * 0.6
    text = torch.randn(1, 8, 768, device="cuda")
    for _ in range(2):
        feats, t_enc = sync_time(lambda: codec.encode(x))
    T = feats.shape[1]
    hd = D // H
    inv = 1.0 / (20000.0 ** (torch.arange(0, hd, 2, device="cuda").float() / hd))
    ang = torch.arange(T, device="cuda").float()[:, None] * inv[None]
    cos, sin = torch.cos(ang), torch.sin(ang)
    memory = dit.memory_proj(text)
    noise = torch.randn(1, T, 256, device="cuda")
    f = lambda xt, t: dit(xt, feats, memory, torch.tensor(t, device="cuda"), cos, sin)  # noqa: E731
    f(noise, 0.5)
    ev = [sync_time(lambda: f(noise, 0.5))[1] for _ in range(evals)]

    def ode():
        y, dt = noise.clone(), 1.0 / steps
        for s in range(steps):
            t0_ = s * dt
            k = f(y, t0_)
            y = y + dt * f(y + 0.5 * dt * k, t0_ + 0.5 * dt)
        return y

    for _ in range(2):
        lat, t_ode = sync_time(ode)
    for _ in range(2):
        _, t_dec = sync_time(lambda: (codec.decode(lat[..., :128]), codec.decode(lat[..., 128:])))
    total = t_enc + t_ode + t_dec
    peak = torch.cuda.max_memory_allocated() / 2**30
    tag = "torch-cuda" + ("-tf32" if torch.backends.cuda.matmul.allow_tf32 else "")
    print(f"{tag} {size:<5} | {t_enc:7.3f} {1e3 * statistics.median(ev):8.2f} {t_ode:7.3f} {t_dec:8.3f} "
          f"{total:7.3f} {total / seconds:6.3f} {peak:7.2f}   ({T} frames, {2 * steps} evals, built in {t_build:.1f} s)",
          flush=True)
    del codec, dit
    torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="all", choices=["small", "base", "large", "all"])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--evals", type=int, default=5)
    ap.add_argument("--tf32", action="store_true", help="allow TF32 in matmuls and convolutions")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.backends.cudnn.allow_tf32 = a.tf32
    print(f"impl size  | encode_s  eval_ms   ode_s decode_s total_s    rtf peak_gb   "
          f"({a.seconds:.1f} s of audio, midpoint {a.steps} steps; torch {torch.__version__}, "
          f"{torch.cuda.get_device_name()})")
    for s in (["small", "base", "large"] if a.size == "all" else [a.size]):
        run(s, a.seconds, a.steps, a.evals)


if __name__ == "__main__":
    main()
