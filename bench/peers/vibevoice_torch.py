#!/usr/bin/env python3
"""transformers' VibeVoice-ASR at the published dimensions, random weights,
timed on one GPU: the baseline of issue #23 (see bench/peers/vibevoice_gpu.sh,
which runs choir on the same work in the same call and prints the ratios).

  vibevoice_torch.py [--audio-min 1,10] [--steps 32] [--layers 28] [--impl auto|hf|spec]

The model is VibeVoiceAsrForConditionalGeneration (transformers >= 5.3)
built from a config at the 8.3 B dimensions of microsoft/VibeVoice-ASR
(Qwen2.5-7B language model: 3584 wide, 28 layers, 28 heads, 4 kv heads,
MLP 18944, vocabulary 152064, untied head; two sigma-VAE encoders, 64 and
128 latents), bf16, SDPA attention, on the GPU, nothing downloaded. When
the installed transformers has no VibeVoice-ASR (--impl auto falls back,
--impl spec forces it), the encoders are built here from the spec
(shared/specs/vibevoice_asr.md 1.2, 1.3: causal ConvNeXt-1D, connectors)
with torch modules and the language model is transformers' Qwen2ForCausalLM.

For each audio length: the encoders and connectors (get_audio_features: the
60-s chunks with their convolution caches), one prefill of the prompt that
length makes (audio tokens + 66 text tokens, as choir's bench builds it)
through the language model with the KV cache (logits of the last position
only: generate()'s own setting), then --steps greedy steps from that cache
(argmax on the device, a hand-written loop: no generate() overhead, a
generous baseline). Also a device-to-device copy's bandwidth (bytes read +
written) and the weight-streaming bound of a decode step: the language
model's bytes without the embedding table over that bandwidth. Peak device
memory is torch.cuda.max_memory_allocated over each length's whole run.

Figure lines start with "torch vibevoice" and end in key=value pairs.
"""
import argparse
import statistics
import time
from types import SimpleNamespace

import torch
from torch import nn

TEXT = dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
            num_attention_heads=28, num_key_value_heads=4, max_position_embeddings=131072,
            rms_norm_eps=1e-6, tie_word_embeddings=False, use_sliding_window=False,
            hidden_act="silu", attention_dropout=0.0)
HOP = 3200
RATIOS = [2, 2, 4, 5, 5, 8]
DEPTHS = [3, 3, 3, 3, 3, 3, 8]


def sync_time(fn, repeat):
    """Median wall seconds of fn() over repeat runs after one warm-up, CUDA synchronised."""
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


# --- the spec's encoders in torch modules (used only without transformers' port) ---

class RMS(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.w = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):  # x [..., d]
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.w * y.to(x.dtype)


class CConv(nn.Module):
    """Causal conv1d, channel-first, left padding (k-1) - (stride-1), carried between chunks."""

    def __init__(self, cin, cout, k, stride=1, groups=1):
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, k, stride, groups=groups)
        self.pad = (k - 1) - (stride - 1)

    def forward(self, x, cache, key):
        prev = cache.get(key)
        if prev is None:
            prev = x.new_zeros(x.shape[0], x.shape[1], self.pad)
        xp = torch.cat([prev, x], -1)
        cache[key] = xp[:, :, xp.shape[-1] - self.pad:] if self.pad else prev
        return self.conv(xp)


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm, self.ffn_norm = RMS(d, 1e-5), RMS(d, 1e-5)
        self.mixer = CConv(d, d, 7, groups=d)
        self.l1, self.l2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.gamma = nn.Parameter(torch.full((d,), 1e-6))
        self.ffn_gamma = nn.Parameter(torch.full((d,), 1e-6))

    def forward(self, x, cache, key):  # x [B, C, T]
        h = self.norm(x.transpose(1, 2)).transpose(1, 2)
        x = x + self.mixer(h, cache, key) * self.gamma[:, None]
        h = self.l2(nn.functional.gelu(self.l1(self.ffn_norm(x.transpose(1, 2)))))
        return x + h.transpose(1, 2) * self.ffn_gamma[:, None]


class SpecEncoder(nn.Module):
    def __init__(self, vae):
        super().__init__()
        ch = 32
        self.convs = nn.ModuleList([CConv(1, ch, 7)])
        self.stages = nn.ModuleList([nn.ModuleList([Block(ch) for _ in range(DEPTHS[0])])])
        for i, r in enumerate(RATIOS):
            self.convs.append(CConv(ch, 2 * ch, 2 * r, r))
            ch *= 2
            self.stages.append(nn.ModuleList([Block(ch) for _ in range(DEPTHS[i + 1])]))
        self.head = CConv(ch, vae, 7)

    def forward(self, x, cache):  # x [B, 1, N] -> [B, T, vae]
        for i, (c, st) in enumerate(zip(self.convs, self.stages)):
            x = c(x, cache, f"c{i}")
            for j, b in enumerate(st):
                x = b(x, cache, f"b{i}.{j}")
        return self.head(x, cache, "head").transpose(1, 2)


class SpecModel(nn.Module):
    def __init__(self, text):
        super().__init__()
        from transformers import Qwen2Config, Qwen2ForCausalLM
        cfg = Qwen2Config(**text)
        cfg._attn_implementation = "sdpa"
        self.language_model = Qwen2ForCausalLM(cfg)
        self.ac, self.se = SpecEncoder(64), SpecEncoder(128)
        d = text["hidden_size"]
        self.proj = nn.ModuleDict(dict(a1=nn.Linear(64, d), an=RMS(d, 1e-6), a2=nn.Linear(d, d),
                                       s1=nn.Linear(128, d), sn=RMS(d, 1e-6), s2=nn.Linear(d, d)))

    def get_audio_features(self, input_values):
        ca, cs, la, ls = {}, {}, [], []
        for chunk in torch.split(input_values, 1440000, dim=-1):
            la.append(self.ac(chunk[:, None], ca))
            ls.append(self.se(chunk[:, None], cs))
        a, s, p = torch.cat(la, 1), torch.cat(ls, 1), self.proj
        return p["a2"](p["an"](p["a1"](a))) + p["s2"](p["sn"](p["s1"](s)))


def build(args):
    dt = torch.bfloat16
    text = dict(TEXT, num_hidden_layers=args.layers)
    torch.set_default_dtype(dt)
    impl = args.impl
    model = None
    if impl in ("auto", "hf"):
        try:
            from transformers import VibeVoiceAsrConfig, VibeVoiceAsrForConditionalGeneration
        except ImportError as e:
            if impl == "hf":
                raise
            print(f"torch vibevoice: this transformers has no VibeVoice-ASR ({e}); building the spec's modules")
            impl = "spec"
        else:
            try:
                cfg = VibeVoiceAsrConfig(text_config=dict(text, model_type="qwen2"),
                                         semantic_tokenizer_encoder_config=dict(hidden_size=128))
                if hasattr(cfg.acoustic_tokenizer_encoder_config, "vae_std"):
                    cfg.acoustic_tokenizer_encoder_config.vae_std = 0.0  # choir uses the mean
                # SDPA for the language model only: transformers 5.17 refuses it for
                # the tokenizer encoders (they have no attention), so it goes in the
                # text config and the model is built with the default elsewhere.
                cfg.text_config._attn_implementation = "sdpa"
                with torch.device("cuda"):
                    try:
                        model = VibeVoiceAsrForConditionalGeneration._from_config(cfg, dtype=dt)
                    except TypeError:
                        model = VibeVoiceAsrForConditionalGeneration._from_config(cfg, torch_dtype=dt)
                impl = "hf"
            except Exception as e:  # noqa: BLE001 - report and fall back under --impl auto
                if impl == "hf":
                    raise
                print(f"torch vibevoice: building VibeVoiceAsrForConditionalGeneration failed ({e!r}); "
                      "building the spec's modules")
                model, impl = None, "spec"
                torch.cuda.empty_cache()
    if model is None:
        with torch.device("cuda"):
            model = SpecModel(text)
    torch.set_default_dtype(torch.float32)
    model = model.to(device="cuda", dtype=dt).eval()
    return model, impl


class HeadedLM(nn.Module):
    """A bare decoder (no head) and the output projection that sits beside it,
    called like a causal LM: what the timing loops need."""

    def __init__(self, body, head):
        super().__init__()
        self.body, self.head, self.config = body, head, body.config

    def get_input_embeddings(self):
        return self.body.get_input_embeddings()

    def forward(self, input_ids=None, inputs_embeds=None, past_key_values=None, use_cache=True, logits_to_keep=0):
        out = self.body(input_ids=input_ids, inputs_embeds=inputs_embeds, past_key_values=past_key_values,
                        use_cache=use_cache)
        h = out.last_hidden_state
        logits = self.head(h[:, -logits_to_keep:] if logits_to_keep else h)
        return SimpleNamespace(logits=logits, past_key_values=out.past_key_values)


def text_model(model):
    """The language model as a causal LM (logits out), the parameters a
    decode step streams, and where it was found. transformers' VibeVoice-ASR
    has moved it between releases: model.language_model (a causal LM with
    its head; also the spec build here), or model.model.language_model (the
    bare Qwen2 decoder) with model.lm_head beside it. Failing both, the whole
    model's forward without audio inputs (it runs only the language model
    then), every parameter outside the encoders and the projector counted as
    streamed."""
    lm = getattr(model, "language_model", None)
    if lm is not None and getattr(lm, "get_output_embeddings", lambda: None)() is not None:
        return lm, list(lm.parameters()), "model.language_model"
    body = getattr(getattr(model, "model", None), "language_model", None)
    head = getattr(model, "lm_head", None)
    if body is not None and head is not None:
        return (HeadedLM(body, head), list(body.parameters()) + list(head.parameters()),
                "model.model.language_model + model.lm_head")
    params = [q for n, q in model.named_parameters() if not any(k in n for k in ("tokenizer", "projector"))]
    return model, params, "the whole model's forward (no language-model attribute found)"


def causal_lm_for_generate(lm):
    """A transformers causal LM whose generate() takes inputs_embeds, over the
    same language-model weights (nothing copied): the decoder-only model
    class of the text config (Qwen2ForCausalLM for VibeVoice-ASR) built on
    the meta device, its body and head replaced by the loaded ones. For
    models whose own generate() refuses embeddings (transformers 5.17's
    VibeVoiceAsrForConditionalGeneration does): each step then costs what
    generate() costs a Qwen2 user. None when no such class is found."""
    if not isinstance(lm, HeadedLM):
        return None
    cfg = lm.config
    try:
        from transformers import AutoModelForCausalLM
        with torch.device("meta"):
            wrapper = AutoModelForCausalLM.from_config(cfg)
    except Exception as e:  # noqa: BLE001 - the figure is skipped, not the run
        print(f"torch vibevoice generate(): no causal LM class for {type(cfg).__name__} "
              f"({type(e).__name__}: {str(e)[:120]})")
        return None
    wrapper.model = lm.body
    wrapper.lm_head = lm.head
    return wrapper.eval()


def streamed_params(params, emb, head):
    """Elements of the parameters, each tensor once, and of those a decode
    step streams: without the input embedding table (a step gathers one row
    of it), unless the output head is tied to it."""
    seen, n = set(), 0
    for q in params:
        if q.data_ptr() not in seen:
            seen.add(q.data_ptr())
            n += q.numel()
    tied = head is not None and head.data_ptr() == emb.data_ptr()
    return n, n if tied else n - emb.numel()


def copy_bandwidth():
    n = 4 << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    a.random_(0, 255)
    b = torch.empty_like(a)
    t = sync_time(lambda: [b.copy_(a) for _ in range(5)], 5) / 5
    del a, b
    torch.cuda.empty_cache()
    return 2 * n / t


@torch.no_grad()
def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--audio-min", default="1,10")
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--layers", type=int, default=28)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--impl", default="auto", choices=["auto", "hf", "spec"])
    p.add_argument("--generate", type=int, default=1, help="also time generate() (1) or not (0)")
    args = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    import transformers
    t0 = time.perf_counter()
    model, impl = build(args)
    torch.cuda.synchronize()
    lm, lm_params, lm_where = text_model(model)
    n_all = sum(q.numel() for q in model.parameters())
    cfg = getattr(lm.config, "text_config", lm.config)
    head = lm.head if isinstance(lm, HeadedLM) else lm.get_output_embeddings()
    n_lm, n_stream = streamed_params(lm_params, lm.get_input_embeddings().weight,
                                     getattr(head, "weight", None))
    stream_bytes = 2 * n_stream
    attn = getattr(cfg, "_attn_implementation", "?")
    print(f"torch vibevoice: torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{'VibeVoiceAsrForConditionalGeneration' if impl == 'hf' else 'spec encoders + Qwen2ForCausalLM'}, "
          f"{n_all / 1e9:.3f} B parameters ({n_lm / 1e9:.3f} B language model, {args.layers} layers), bf16, "
          f"attention {attn}, language model at {lm_where}, built on {torch.cuda.get_device_name()} in "
          f"{time.perf_counter() - t0:.1f} s")
    bw = copy_bandwidth()
    print(f"torch vibevoice copy: device-to-device {bw / 1e12:.3f} TB/s (read + write); a decode step streams "
          f"{stream_bytes / 1e9:.2f} GB of language model weights: bound {1e3 * stream_bytes / bw:.2f} ms/token "
          f"copy_tbs={bw / 1e12:.4f} stream_gb={stream_bytes / 1e9:.4f} bound_ms={1e3 * stream_bytes / bw:.4f}")
    g = torch.Generator(device="cuda").manual_seed(0)
    d = TEXT["hidden_size"]
    for m in [float(v) for v in args.audio_min.split(",")]:
        n = int(m * 60 * 24000)
        n = (n + HOP - 1) // HOP * HOP
        T = n // HOP
        L = T + 66
        x = (0.05 * torch.randn(1, n, generator=g, device="cuda")).to(torch.bfloat16)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()

        # transformers' encoders take [batch, 1 channel, samples]; the spec build adds the channel itself.
        audio_in = x[:, None] if impl == "hf" else x

        def enc():
            out = model.get_audio_features(input_values=audio_in)
            return out.pooler_output if hasattr(out, "pooler_output") else out

        t_enc = sync_time(enc, args.repeat)
        feats = enc()
        assert feats.shape[-2] == T and feats.shape[-1] == d, feats.shape
        embeds = lm.get_input_embeddings()(torch.randint(0, 150000, (1, L), device="cuda", generator=g))
        embeds[:, 33:33 + T] = feats.reshape(1, T, d).to(embeds.dtype)
        state = {}

        def prefill():
            out = lm(inputs_embeds=embeds, use_cache=True, logits_to_keep=1)
            state["cache"] = out.past_key_values
            state["tok"] = out.logits[:, -1].argmax(-1, keepdim=True)

        t_pre = sync_time(prefill, args.repeat)

        def decode():
            prefill()
            torch.cuda.synchronize()
            cache, tok = state["cache"], state["tok"]
            t1 = time.perf_counter()
            for _ in range(args.steps):
                out = lm(input_ids=tok, past_key_values=cache, use_cache=True)
                cache = out.past_key_values
                tok = out.logits[:, -1].argmax(-1, keepdim=True)
            torch.cuda.synchronize()
            state["dt"] = time.perf_counter() - t1

        decode()
        ds = []
        for _ in range(args.repeat):
            decode()
            ds.append(state["dt"])
        t_dec = statistics.median(ds) / args.steps
        # What generate() gives (the path a user of transformers takes): the
        # same prompt's embeddings, greedy, exactly --steps new tokens; per
        # token, its time less one prefill. Skipped when the model's generate
        # does not take embeddings.
        # The model's own generate() first; where it refuses embeddings, a
        # causal LM over the same weights (causal_lm_for_generate).
        gen_key = ""
        mask = torch.ones(embeds.shape[:2], dtype=torch.long, device="cuda")
        gen_fns = [("the model's", model if hasattr(model, "generate") else lm), ("a causal LM's", None)]
        for gen_name, gen_fn in gen_fns if args.generate else []:
            if gen_fn is None:
                gen_fn = causal_lm_for_generate(lm)
            if gen_fn is None or not hasattr(gen_fn, "generate"):
                continue

            def gen():
                gen_fn.generate(inputs_embeds=embeds, attention_mask=mask, max_new_tokens=args.steps,
                                min_new_tokens=args.steps, do_sample=False, pad_token_id=0)

            try:
                t_gen = (sync_time(gen, args.repeat) - t_pre) / args.steps
                gen_key = f" decode_generate_ms={1e3 * t_gen:.3f}"
                print(f"torch vibevoice {m:g} min generate(): {1e3 * t_gen:.2f} ms/token ({args.steps} new tokens, "
                      f"one prefill subtracted; {gen_name} generate())")
                break
            except Exception as e:  # noqa: BLE001 - a figure skipped, not the run
                print(f"torch vibevoice {m:g} min generate(): {gen_name} skipped "
                      f"({type(e).__name__}: {str(e)[:160]})")
        peak = torch.cuda.max_memory_allocated()
        print(f"torch vibevoice {m:g} min: encoders {t_enc:.3f} s ({m * 60 / t_enc:.0f}x real time), "
              f"prefill {L} tokens {L / t_pre:.0f} tokens/s, decode {1e3 * t_dec:.2f} ms/token "
              f"({args.steps} steps), peak {peak / 1e9:.2f} GB "
              f"min={m:g} enc_s={t_enc:.4f} prefill_tps={L / t_pre:.1f} decode_ms={1e3 * t_dec:.3f} "
              f"peak_gb={peak / 1e9:.3f} prompt={L}{gen_key}")
        del feats, embeds, state, x


if __name__ == "__main__":
    main()
