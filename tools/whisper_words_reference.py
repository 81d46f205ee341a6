#!/usr/bin/env python3
"""Expected word timestamps from openai/whisper's own code, for choir's tests.

openai/whisper is not vendored: pass a checkout of github.com/openai/whisper
(the folder holding whisper/timing.py) as --whisper-src. Missing optional
modules of that package are replaced by stand-ins that do only what is used
here (numba.jit runs the plain Python functions; tiktoken's Encoding only
decodes, which is all word splitting needs; tqdm is unused), so no package is
downloaded.

  whisper_words_reference.py cases --whisper-src DIR [--tiktoken FILE] > tests/data/whisper_words_cases.json
      numpy only. Runs openai's split_to_word_tokens, dtw_cpu + backtrace,
      merge_punctuations and add_word_timestamps on small hand-made inputs
      (a token list, a cost matrix, word lists, a synthetic alignment matrix
      with segments) and prints inputs and results as JSON for
      tests/test_whisper_words.c. FILE is multilingual.tiktoken (default: the
      one in the checkout).

  whisper_words_reference.py fixture --whisper-src DIR --fixtures FIXTURES --out OUT
      needs torch (CPU, float32). Builds openai's Whisper at the dimensions of
      FIXTURES/whisper/whisper-ml80 with its randw-v1 weights (the manifest in
      transformers' names, mapped onto openai's), and for each case (a window
      of the fixture's reference mel, a fixed token sequence as two segments)
      runs openai's add_word_timestamps (find_alignment on the alignment heads,
      median filter, DTW, punctuation merging, segment refinement). Writes
      OUT/words.safetensors (per case: the alignment heads' cross-attention
      logits, the cost matrix given to DTW, the token probabilities, the DTW
      path) and OUT/meta.json (tokens, segments in and out, words with
      start/end/probability). OUT is meant to become
      ../shared/fixtures/whisper/whisper-ml80/words.
"""
import argparse
import base64
import importlib.util
import json
import os
import struct
import sys
import types

import numpy as np


def install_stand_ins(src):
    """Lets `import whisper...` work without numba, tiktoken or tqdm."""
    try:
        import numba  # noqa: F401
    except ImportError:
        numba = types.ModuleType("numba")

        def jit(*a, **k):
            if a and callable(a[0]):
                return a[0]
            return lambda f: f

        numba.jit = jit
        sys.modules["numba"] = numba
    try:
        import tiktoken  # noqa: F401
    except ImportError:
        tiktoken = types.ModuleType("tiktoken")

        class Encoding:
            def __init__(self, name, explicit_n_vocab, pat_str, mergeable_ranks, special_tokens):
                self.name = name
                self.bytes_of = {r: b for b, r in mergeable_ranks.items()}
                self.special = dict(special_tokens)
                for s, r in special_tokens.items():
                    self.bytes_of[r] = s.encode()
                self.special_tokens_set = set(special_tokens)
                self.eot_token = special_tokens["<|endoftext|>"]

            def encode_single_token(self, s):
                return self.special[s]

            def decode(self, ids, errors="replace"):
                return b"".join(self.bytes_of[i] for i in ids).decode("utf-8", errors=errors)

            def encode(self, *a, **k):
                raise NotImplementedError("the stand-in tiktoken only decodes")

        tiktoken.Encoding = Encoding
        sys.modules["tiktoken"] = tiktoken
    try:
        import tqdm  # noqa: F401
    except ImportError:
        tqdm = types.ModuleType("tqdm")
        tqdm.tqdm = lambda *a, **k: None
        sys.modules["tqdm"] = tqdm
    sys.path.insert(0, os.path.abspath(src))


def load_timing_without_torch(src):
    """whisper.timing and whisper.tokenizer with a placeholder torch (their
    torch code, find_alignment and the median filter, is not called)."""
    install_stand_ins(src)

    class Anything(types.ModuleType):
        def __getattr__(self, name):
            return Anything(name)

        def __call__(self, *a, **k):
            return Anything("call")

    for name in ("torch", "torch.nn", "torch.nn.functional"):
        sys.modules.setdefault(name, Anything(name))
    pkg = types.ModuleType("whisper")
    pkg.__path__ = [os.path.join(src, "whisper")]
    sys.modules["whisper"] = pkg
    mods = {}
    for name in ("utils", "audio", "tokenizer", "timing"):
        spec = importlib.util.spec_from_file_location("whisper." + name, os.path.join(src, "whisper", name + ".py"))
        m = importlib.util.module_from_spec(spec)
        sys.modules["whisper." + name] = m
        spec.loader.exec_module(m)
        mods[name] = m
    return mods["tokenizer"], mods["timing"], mods["utils"]


def ranks_of(path):
    r = {}
    for line in open(path):
        if line.strip():
            t, k = line.split()
            r[base64.b64decode(t)] = int(k)
    return r


def ids(ranks, pieces):
    return [ranks[p] for p in pieces]


def find_alignment_tail(timing, tokenizer, text_tokens, matrix, probs):
    """find_alignment after the network, line for line, on a given matrix."""
    text_indices, time_indices = timing.dtw_cpu(-matrix.astype(np.float64))
    words, word_tokens = tokenizer.split_to_word_tokens(text_tokens + [tokenizer.eot])
    if len(word_tokens) <= 1:
        return []
    word_boundaries = np.pad(np.cumsum([len(t) for t in word_tokens[:-1]]), (1, 0))
    jumps = np.pad(np.diff(text_indices), (1, 0), constant_values=1).astype(bool)
    jump_times = time_indices[jumps] / timing.TOKENS_PER_SECOND
    start_times = jump_times[word_boundaries[:-1]]
    end_times = jump_times[word_boundaries[1:]]
    word_probabilities = [np.mean(probs[i:j]) for i, j in zip(word_boundaries[:-1], word_boundaries[1:])]
    return [
        timing.WordTiming(w, t, float(s), float(e), float(p))
        for w, t, s, e, p in zip(words, word_tokens, start_times, end_times, word_probabilities)
    ]


def cases(args):
    tk, timing, utils = load_timing_without_torch(args.whisper_src)
    tpath = args.tiktoken or os.path.join(args.whisper_src, "whisper", "assets", "multilingual.tiktoken")
    ranks = ranks_of(tpath)
    enc = tk.get_encoding("multilingual", num_languages=99) if not args.tiktoken else None
    tok_en = tk.get_tokenizer(True, num_languages=99, language="en", task="transcribe")
    tok_zh = tk.get_tokenizer(True, num_languages=99, language="zh", task="transcribe")
    del enc
    eot = tok_en.eot
    out = {"eot": eot, "split": [], "dtw": [], "merge": [], "add": [], "subtitles": []}

    split_cases = [
        ("en", [b" Hello", b",", b" world", b"!"]),
        ("en", [b" caf", b"\xc3", b"\xa9", b" test"]),  # a character across tokens
        ("en", [b"a", b"\xff", b"x"]),  # bytes invalid for good
        ("en", [b"a", b"\n", b"x"]),  # whitespace counts as punctuation
        ("en", [b"f", b"()", b"x"]),  # "()" is in string.punctuation
        ("en", [b" (", b"a", b")", b" -", b"x"]),
        ("zh", [b" \xe4\xbd\xa0", b"\xe5\xa5\xbd", b"\xe4", b"\xbd", b"\xa0", b"."]),
        ("en", [b"\xe4", b"\xbd"]),  # cut at the end
    ]
    for lang, pieces in split_cases:
        t = ids(ranks, pieces) + [eot]
        tok = tok_zh if lang == "zh" else tok_en
        words, wt = tok.split_to_word_tokens(t)
        out["split"].append({"language": lang, "tokens": t, "words": words, "word_tokens": wt})

    dtw_cases = [
        [[0, 1, 1], [1, 0, 1], [1, 1, 0]],
        [[0, 0, 5, 5], [5, 5, 0, 0]],
        [[1, 1, 1], [1, 1, 1]],  # all ties: horizontal first
        [[0, 2, 0, 1], [0, 1, 1, 1], [2, 1, 0, 0]],  # the tie rule changes the path
        [[-0.5, -0.25, 0.125], [0.75, -1.0, 0.5], [0.25, 0.5, -2.0], [1.0, -0.5, -0.5]],
    ]
    for x in dtw_cases:
        a = np.array(x, dtype=np.float32).astype(np.float64)
        ti, fi = timing.dtw_cpu(a)
        out["dtw"].append({"x": x, "rows": ti.tolist(), "cols": fi.tolist()})

    merge_cases = [
        [' "', " Hello", ",", " world", '"', "."],
        [" ", "x", " (", "a", ")", " -", "y"],
        ["a ", ".", " b", "\u3002", "\u201d"],
    ]
    for words in merge_cases:
        al = [timing.WordTiming(w, [i], 0.0, 0.0, 0.0) for i, w in enumerate(words)]
        timing.merge_punctuations(al, "\"'“¿([{-", "\"'.。,，!！?？:：”)]}、")
        out["merge"].append({"in": words, "out": [a.word for a in al], "tokens": [a.tokens for a in al]})

    # add_word_timestamps on a synthetic alignment: row k of the matrix is 1
    # on the frames [b[k], b[k+1]) of its token, else 0 (plus a little ramp so
    # that no two paths cost the same).
    ts = tok_en.timestamp_begin
    add_cases = [
        {  # two segments, punctuation merged, a long sentence-final word
            "pieces": [[b" Hello", b",", b" world", b"."], [b" This", b" is", b" (", b"a", b")", b" test", b"!"]],
            "stamps": [[0, 60], [60, 140]],
            "bounds": [3, 12, 15, 30, 80, 84, 90, 100, 104, 110, 118, 130],
            "frames": 150, "seek": 0, "last": 0.0,
        },
        {  # an offset window after a pause; a first word that is far too long
            "pieces": [[b" So", b" my", b" fellow", b" Americans", b","]],
            "stamps": [[10, 120]],
            "bounds": [2, 60, 64, 70, 90, 96],
            "frames": 130, "seek": 250, "last": 0.5,
        },
    ]
    for c in add_cases:
        seg_tokens, text = [], []
        for pieces, (s0, s1) in zip(c["pieces"], c["stamps"]):
            t = ids(ranks, pieces)
            text += t
            seg_tokens.append([ts + s0] + t + [ts + s1])
        n_rows, f = len(text) + 1, c["frames"]
        b = c["bounds"]
        assert len(b) == n_rows
        m = np.zeros((n_rows, f), dtype=np.float32)
        for k in range(n_rows):
            e = b[k + 1] if k + 1 < n_rows else f
            m[k, b[k]:e] = 1.0
            m[k] -= np.float32(0.001) * np.arange(f, dtype=np.float32) / f  # no exact ties
        probs = [round(0.5 + 0.04 * k, 4) for k in range(len(text))]
        offset = c["seek"] * timing.HOP_LENGTH / timing.SAMPLE_RATE
        segments = [
            {"seek": c["seek"], "start": offset + s0 * 0.02, "end": offset + s1 * 0.02, "tokens": t}
            for t, (s0, s1) in zip(seg_tokens, c["stamps"])
        ]
        seg_in = [dict(s) for s in segments]
        saved = timing.find_alignment
        timing.find_alignment = lambda model, tokenizer, tt, mel, nf, **kw: find_alignment_tail(
            timing, tokenizer, tt, m, probs)
        timing.add_word_timestamps(segments=segments, model=None, tokenizer=tok_en, mel=None, num_frames=2 * f,
                                   last_speech_timestamp=c["last"])
        timing.find_alignment = saved
        out["add"].append({
            "segments_in": seg_in, "frames": f, "bounds": b, "ramp": 0.001, "probs": probs,
            "last_speech": c["last"], "time_offset": offset,
            "segments_out": [{"start": s["start"], "end": s["end"],
                              "words": [{"word": w["word"], "start": w["start"], "end": w["end"],
                                         "probability": float(w["probability"])} for w in s["words"]]}
                             for s in segments],
        })
    # subtitles by words: openai's SubtitlesWriter.iterate_result (srt timing)
    def seg(words):
        return {"start": words[0][1], "end": words[-1][2],
                "words": [{"word": w, "start": a, "end": b, "probability": 0.9} for w, a, b in words]}
    result = {"segments": [
        seg([(" And", 0.0, 0.32), (" so,", 0.32, 0.7), (" my", 0.9, 1.1), (" fellow", 1.1, 1.5),
             (" Americans,", 1.5, 2.2)]),
        seg([(" ask", 3.1, 3.4), (" not", 3.4, 3.8), (" what", 3.8, 4.0), (" your", 4.0, 4.3),
             (" country", 4.3, 4.8), (" can", 4.8, 5.0), (" do", 5.0, 5.2), (" for", 5.2, 5.4),
             (" you.", 5.4, 6.0)]),
        seg([(" Über", 10.0, 10.5), (" café", 10.5, 11.2)]),
    ]}
    for opts in [{}, {"max_line_width": 12}, {"max_line_width": 12, "max_line_count": 2},
                 {"max_words_per_line": 2}, {"max_line_width": 16, "max_line_count": 1},
                 {"highlight_words": True}, {"max_line_width": 20, "max_line_count": 3, "highlight_words": True}]:
        w = utils.WriteSRT(".")
        cues = [list(c) for c in w.iterate_result(result, None, **opts)]
        out["subtitles"].append({"options": opts, "cues": cues})
    out["subtitle_segments"] = result["segments"]
    json.dump(out, sys.stdout, ensure_ascii=False, indent=1)
    print()


# --- the full reference on the fixture weights (torch) ----------------------

HF_TO_OPENAI = [
    ("model.encoder.embed_positions.weight", "encoder.positional_embedding"),
    ("model.decoder.embed_positions.weight", "decoder.positional_embedding"),
    ("model.decoder.embed_tokens.", "decoder.token_embedding."),
    ("model.encoder.layer_norm.", "encoder.ln_post."),
    ("model.decoder.layer_norm.", "decoder.ln."),
    ("model.encoder.conv", "encoder.conv"),
    ("model.encoder.layers.", "encoder.blocks."),
    ("model.decoder.layers.", "decoder.blocks."),
    (".self_attn_layer_norm.", ".attn_ln."),
    (".encoder_attn_layer_norm.", ".cross_attn_ln."),
    (".final_layer_norm.", ".mlp_ln."),
    (".self_attn.", ".attn."),
    (".encoder_attn.", ".cross_attn."),
    (".q_proj.", ".query."),
    (".k_proj.", ".key."),
    (".v_proj.", ".value."),
    (".out_proj.", ".out."),
    (".fc1.", ".mlp.0."),
    (".fc2.", ".mlp.2."),
]


def openai_name(hf):
    n = hf
    for a, b in HF_TO_OPENAI:
        n = n.replace(a, b)
    return n


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    dt = {"F32": np.float32, "I32": np.int32}
    return {k: np.frombuffer(data[v["data_offsets"][0]:v["data_offsets"][1]], dtype=dt[v["dtype"]]).reshape(v["shape"])
            for k, v in head.items() if k != "__metadata__"}


def write_safetensors(path, tensors):
    head, blobs, off = {}, [], 0
    for k, v in tensors.items():
        v = np.ascontiguousarray(v)
        dtype = {np.dtype(np.float32): "F32", np.dtype(np.int32): "I32"}[v.dtype]
        b = v.tobytes()
        head[k] = {"dtype": dtype, "shape": list(v.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(head).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def fixture(args):
    install_stand_ins(args.whisper_src)
    import torch
    import whisper.model as wm
    import whisper.timing as timing
    from whisper.tokenizer import get_tokenizer

    torch.manual_seed(0)
    sys.path.insert(0, args.fixtures)
    from randw_reference import randw

    fx = os.path.join(args.fixtures, "whisper", "whisper-ml80")
    cfg = json.load(open(os.path.join(fx, "config.json")))
    man = json.load(open(os.path.join(fx, "manifest.json")))
    dims = wm.ModelDimensions(
        n_mels=cfg["num_mel_bins"], n_audio_ctx=cfg["max_source_positions"], n_audio_state=cfg["d_model"],
        n_audio_head=cfg["encoder_attention_heads"], n_audio_layer=cfg["encoder_layers"], n_vocab=cfg["vocab_size"],
        n_text_ctx=cfg["max_target_positions"], n_text_state=cfg["d_model"],
        n_text_head=cfg["decoder_attention_heads"], n_text_layer=cfg["decoder_layers"])
    model = wm.Whisper(dims).float().eval()
    state = {openai_name(t["name"]): torch.from_numpy(randw(t["name"], t["shape"], t["offset"], t["scale"]).copy())
             for t in man["tensors"]}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected, unexpected
    assert all(k == "alignment_heads" for k in missing), missing
    ref = read_safetensors(os.path.join(fx, "reference.safetensors"))
    meta_in = json.load(open(os.path.join(fx, "meta.json")))
    tok = get_tokenizer(True, num_languages=99, language="en", task="transcribe")
    ranks = ranks_of(os.path.join(args.whisper_src, "whisper", "assets", "multilingual.tiktoken"))
    ts = tok.timestamp_begin
    heads = model.alignment_heads.to_dense().nonzero().tolist()

    cases = [
        {"name": "hello", "audio": 0, "seek": 0,
         "pieces": [[b" Hello", b",", b" world", b"."], [b" This", b" is", b" (", b"a", b")", b" test", b"!"]],
         "stamps": [[0, 50], [50, 160]]},
        {"name": "fox", "audio": 1, "seek": 120,
         "pieces": [[b" So", b" my", b" fellow", b" Americans", b","], [b" caf", b"\xc3", b"\xa9", b" \"", b"x", b"\""]],
         "stamps": [[20, 300], [300, 420]]},
    ]
    tensors, meta = {}, {"alignment_heads": heads, "sot_sequence": list(tok.sot_sequence),
                         "no_timestamps": tok.no_timestamps, "eot": tok.eot, "cases": []}
    for c in cases:
        a = c["audio"]
        mel = torch.from_numpy(ref["a%d.mel" % a].copy())
        num_frames = min(3000, meta_in["audio"][a]["samples"] // 160 - c["seek"])
        offset = c["seek"] * timing.HOP_LENGTH / timing.SAMPLE_RATE
        segments, text = [], []
        for pieces, (s0, s1) in zip(c["pieces"], c["stamps"]):
            t = ids(ranks, pieces)
            text += t
            segments.append({"seek": c["seek"], "start": offset + s0 * 0.02, "end": offset + s1 * 0.02,
                             "tokens": [ts + s0] + t + [ts + s1]})
        seg_in = [dict(s) for s in segments]
        # what find_alignment sees, captured on the way
        qks = [None] * dims.n_text_layer
        hooks = [b.cross_attn.register_forward_hook(lambda _, ins, outs, i=i: qks.__setitem__(i, outs[-1][0]))
                 for i, b in enumerate(model.decoder.blocks)]
        seen = {}
        dtw_ref = timing.dtw

        def dtw_spy(x):
            seen["cost"] = x.float().numpy().copy()
            r = dtw_ref(x)
            seen["path"] = r
            return r

        timing.dtw = dtw_spy
        timing.add_word_timestamps(segments=segments, model=model, tokenizer=tok, mel=mel, num_frames=num_frames,
                                   last_speech_timestamp=0.0)
        timing.dtw = dtw_ref
        for h in hooks:
            h.remove()
        full = [*tok.sot_sequence, tok.no_timestamps, *text, tok.eot]
        with torch.no_grad(), wm.disable_sdpa():
            logits = model(mel.unsqueeze(0), torch.tensor([full]))[0]
            probs = logits[len(tok.sot_sequence):, :tok.eot].softmax(-1)[np.arange(len(text)), text]
        qk = torch.stack([qks[l][h] for l, h in heads]).float().numpy()
        n = c["name"]
        tensors[n + ".qk"] = qk  # [heads][positions][1500]
        tensors[n + ".cost"] = seen["cost"]  # -matrix, [len(text) + 1][num_frames // 2]
        tensors[n + ".probs"] = probs.float().numpy()
        tensors[n + ".path"] = np.stack(seen["path"]).astype(np.int32)
        meta["cases"].append({
            "name": n, "audio": meta_in["audio"][a]["file"], "mel": "a%d.mel" % a, "seek": c["seek"],
            "num_frames": num_frames, "tokens": full, "text_tokens": text, "segments_in": seg_in,
            "segments_out": [{"start": s["start"], "end": s["end"],
                              "words": [{"word": w["word"], "start": w["start"], "end": w["end"],
                                         "probability": float(w["probability"])} for w in s["words"]]}
                             for s in segments]})
    os.makedirs(args.out, exist_ok=True)
    write_safetensors(os.path.join(args.out, "words.safetensors"), tensors)
    meta["reference"] = "openai-whisper timing.py (find_alignment, add_word_timestamps), torch %s, CPU fp32" % (
        torch.__version__)
    with open(os.path.join(args.out, "meta.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, ensure_ascii=False, indent=1)
    for cse in meta["cases"]:
        print(cse["name"], [(w["word"], w["start"], w["end"]) for s in cse["segments_out"] for w in s["words"]])


def main():
    sys.stdout.reconfigure(encoding="utf-8")  # words are UTF-8 whatever the locale
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="mode", required=True)
    a = sub.add_parser("cases")
    a.add_argument("--whisper-src", required=True)
    a.add_argument("--tiktoken")
    b = sub.add_parser("fixture")
    b.add_argument("--whisper-src", required=True)
    b.add_argument("--fixtures", required=True)
    b.add_argument("--out", required=True)
    args = p.parse_args()
    cases(args) if args.mode == "cases" else fixture(args)


if __name__ == "__main__":
    main()
