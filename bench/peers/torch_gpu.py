#!/usr/bin/env python3
"""PyTorch baselines for choir's GPU figures, on the same work as `choir bench`.

Runs on a GPU machine that has torch and transformers (the lent H200 does);
nothing is downloaded. Weights are random, so outputs are noise; only the cost
is measured. Every figure is wall time around CUDA-synchronised work, after a
warm-up, median of --repeat runs.

  torch_gpu.py whisper [--dims large-v3-turbo] [--batch 1,8,32] [--windows 64]
                       [--tokens 48] [--dtype fp16|bf16]
      transformers' WhisperForConditionalGeneration built from a config at
      the published dimensions, SDPA attention; per batch of B 30-s windows:
      the encoder, then a hand-written greedy loop of --tokens steps with the
      KV cache after the 4-token start sequence (no generate() overhead: a
      generous baseline). Prints the real-time factor of --windows windows.

  torch_gpu.py kokoro --src KOKORO_SRC --manifest M --config C --voice V.bin
                      [--tokens 380] [--randw shared/fixtures/randw_reference.py]
      hexgrad's KModel (from the source folder KOKORO_SRC, a checkout of
      github.com/hexgrad/kokoro) in fp32 with the randw-v1 weights of the
      manifest (the same weights `choir dev weights` writes, so the durations
      and the audio length match choir's), one piece of --tokens phoneme ids
      at batch 1. Prints seconds of audio per second of compute.

Each figure line starts with "torch" and ends with key=value pairs that
bench/peers/gpu_vs_torch.sh reads.
"""
import argparse
import os
import statistics
import sys
import time

import torch

WHISPER_DIMS = {
    # d_model, encoder layers, decoder layers, heads, mel bins, vocabulary
    "tiny": (384, 4, 4, 6, 80, 51865),
    "base": (512, 6, 6, 8, 80, 51865),
    "small": (768, 12, 12, 12, 80, 51865),
    "medium": (1024, 24, 24, 16, 80, 51865),
    "large-v3": (1280, 32, 32, 20, 128, 51866),
    "large-v3-turbo": (1280, 32, 4, 20, 128, 51866),
}


def timed(fn, repeat):
    fn()  # warm-up: allocator, cuBLAS handles, kernels chosen
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def whisper(args):
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    d, n_enc, n_dec, heads, mels, vocab = WHISPER_DIMS[args.dims]
    cfg = WhisperConfig(
        vocab_size=vocab, num_mel_bins=mels, d_model=d, encoder_layers=n_enc,
        decoder_layers=n_dec, encoder_attention_heads=heads, decoder_attention_heads=heads,
        encoder_ffn_dim=4 * d, decoder_ffn_dim=4 * d, max_source_positions=1500,
        max_target_positions=448)
    dtype = torch.float16 if args.dtype == "fp16" else torch.bfloat16
    try:
        model = WhisperForConditionalGeneration._from_config(
            cfg, attn_implementation="sdpa", torch_dtype=dtype)
    except TypeError:
        cfg._attn_implementation = "sdpa"
        model = WhisperForConditionalGeneration(cfg).to(dtype)
    model = model.cuda().eval()
    attn = getattr(model.config, "_attn_implementation", "?")
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache

    start = torch.tensor([50258, 50259, 50360, 50364], device="cuda")  # sot, en, transcribe, notimestamps
    g = torch.Generator(device="cuda").manual_seed(0)
    print(f"torch {torch.__version__}, transformers whisper {args.dims} ({d} wide, "
          f"{n_enc}+{n_dec} layers), {args.dtype}, attention {attn}, {torch.cuda.get_device_name()}")

    @torch.no_grad()
    def run_batch(feats):
        enc = model.model.encoder(feats).last_hidden_state
        B = feats.shape[0]
        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        ids = start.expand(B, -1)
        for _ in range(args.tokens):
            out = model.model.decoder(input_ids=ids, encoder_hidden_states=enc,
                                      past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            ids = model.proj_out(out.last_hidden_state[:, -1]).argmax(-1, keepdim=True)
        return ids

    for B in [int(b) for b in args.batch.split(",")]:
        windows = max(B, args.windows // B * B)
        if B == 1:
            windows = min(windows, args.windows_b1)
        feats = torch.randn(B, mels, 3000, generator=g, device="cuda", dtype=dtype)

        @torch.no_grad()
        def enc_only():
            model.model.encoder(feats)

        def all_windows():
            for _ in range(windows // B):
                run_batch(feats)

        t_enc = timed(enc_only, args.repeat) / B
        t = timed(all_windows, args.repeat)
        audio = 30.0 * windows
        print(f"torch whisper batch {B}: {windows} windows in {t:.3f} s, RTF {t / audio:.5f} "
              f"({audio / t:.0f}x real time), encoder {t_enc * 1e3:.2f} ms per window "
              f"batch={B} rtf={t / audio:.6f} enc_ms={t_enc * 1e3:.3f}")


def kokoro(args):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from kokoro_randw import kmodel_randw

    model = kmodel_randw(args.src, args.manifest, args.config, args.randw).cuda()

    import numpy as np
    voice = torch.from_numpy(np.fromfile(args.voice, dtype=np.float32).reshape(-1, 1, 256))
    base = [50, 83, 54, 156, 57, 135, 16, 65, 156, 87, 158, 54, 46, 4]  # the "hello" fixture's ids
    n = args.tokens
    ids = torch.tensor([[0] + [base[i % len(base)] for i in range(n)] + [0]], device="cuda")
    ref_s = voice[min(n, voice.shape[0] - 1)].cuda()
    out = {}

    def once():
        audio, _ = model.forward_with_tokens(ids, ref_s, 1.0)
        out["n"] = audio.shape[-1]

    t = timed(once, args.repeat)
    audio_s = out["n"] / 24000.0
    print(f"torch {torch.__version__}, hexgrad KModel fp32, {torch.cuda.get_device_name()}, "
          f"cudnn.allow_tf32={torch.backends.cudnn.allow_tf32} (convolutions), "
          f"matmul.allow_tf32={torch.backends.cuda.matmul.allow_tf32}")
    print(f"torch kokoro batch 1: {n} phonemes, {audio_s:.2f} s audio in {t:.4f} s, RTF {t / audio_s:.5f} "
          f"({audio_s / t:.0f}x real time) rtf={t / audio_s:.6f} audio_s={audio_s:.3f}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("whisper")
    w.add_argument("--dims", default="large-v3-turbo", choices=sorted(WHISPER_DIMS))
    w.add_argument("--batch", default="1,8,32")
    w.add_argument("--windows", type=int, default=64)
    w.add_argument("--windows-b1", type=int, default=16, help="windows at batch 1 (slow)")
    w.add_argument("--tokens", type=int, default=48)
    w.add_argument("--dtype", default="fp16", choices=["fp16", "bf16"])
    w.add_argument("--repeat", type=int, default=3)
    k = sub.add_parser("kokoro")
    k.add_argument("--src", required=True)
    k.add_argument("--manifest", required=True)
    k.add_argument("--config", required=True)
    k.add_argument("--voice", required=True)
    k.add_argument("--randw", required=True)
    k.add_argument("--tokens", type=int, default=380)
    k.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    {"whisper": whisper, "kokoro": kokoro}[args.cmd](args)


if __name__ == "__main__":
    main()
