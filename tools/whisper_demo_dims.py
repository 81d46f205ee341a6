#!/usr/bin/env python3
"""Writes a Whisper demo model description (config.json + manifest.json for
`choir dev weights`) at the dimensions of a published Whisper size, from the
tiny demo in demo/whisper-demo. The weights that `choir dev weights` then
generates are deterministic and UNTRAINED: the model's text is noise, but its
cost (memory, FLOPs, bytes moved) is that of the real size. Used to load-test
the server on a GPU at large-v3-turbo size.

    tools/whisper_demo_dims.py large-v3-turbo OUT_DIR
    choir dev weights --manifest OUT_DIR/manifest.json --config OUT_DIR/config.json --out MODEL
    cp demo/whisper-demo/multilingual.tiktoken MODEL/
"""
import json
import math
import os
import re
import sys

# d_model, heads, encoder layers, decoder layers, mel bins, vocabulary
SIZES = {
    "tiny": (384, 6, 4, 4, 80, 51865),
    "base": (512, 8, 6, 6, 80, 51865),
    "small": (768, 12, 12, 12, 80, 51865),
    "medium": (1024, 16, 24, 24, 80, 51865),
    "large-v3": (1280, 20, 32, 32, 128, 51866),
    "large-v3-turbo": (1280, 20, 32, 4, 128, 51866),
}


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in SIZES:
        sys.exit("usage: whisper_demo_dims.py {%s} OUT_DIR" % "|".join(SIZES))
    d, heads, n_enc, n_dec, mels, vocab = SIZES[sys.argv[1]]
    out = sys.argv[2]
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "demo", "whisper-demo")
    cfg = json.load(open(os.path.join(here, "config.json")))
    demo = json.load(open(os.path.join(here, "manifest.json")))["tensors"]
    ffn = 4 * d
    cfg.update(d_model=d, encoder_attention_heads=heads, decoder_attention_heads=heads,
               encoder_layers=n_enc, decoder_layers=n_dec, num_hidden_layers=n_enc,
               encoder_ffn_dim=ffn, decoder_ffn_dim=ffn, num_mel_bins=mels, vocab_size=vocab)
    tensors = []
    for side, n_layers in (("encoder", n_enc), ("decoder", n_dec)):
        for t in demo:
            name = t["name"]
            m = re.match(r"model\.%s\.layers\.(\d+)\.(.*)" % side, name)
            if m and m.group(1) == "0":
                for i in range(n_layers):
                    tensors.append(dict(t, name="model.%s.layers.%d.%s" % (side, i, m.group(2))))
            elif not m and name.startswith("model.%s." % side):
                tensors.append(dict(t))
    for t in tensors:
        n, shape = t["name"], t["shape"]
        if n.endswith("conv1.weight"):
            shape = [d, mels, 3]
        elif n.endswith("conv2.weight"):
            shape = [d, d, 3]
        elif n.endswith("embed_positions.weight"):
            shape = [shape[0], d]
        elif n.endswith("embed_tokens.weight"):
            shape = [vocab, d]
        elif n.endswith("fc1.weight"):
            shape = [ffn, d]
        elif n.endswith("fc1.bias"):
            shape = [ffn]
        elif n.endswith("fc2.weight"):
            shape = [d, ffn]
        elif len(shape) == 2:
            shape = [d, d]
        elif len(shape) == 1:
            shape = [d]
        t["shape"] = shape
        if n.endswith(".weight") and len(shape) >= 2 and "embed" not in n:
            fan_in = shape[1] * (shape[2] if len(shape) == 3 else 1)
            t["scale"] = math.sqrt(3.0 / fan_in)  # uniform with variance 1/fan_in
    os.makedirs(out, exist_ok=True)
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=1)
    json.dump({"generator": "randw-v1", "tensors": tensors},
              open(os.path.join(out, "manifest.json"), "w"), indent=1)
    print("%s: %d tensors, %.0f M parameters" % (
        sys.argv[1], len(tensors), sum(math.prod(t["shape"]) for t in tensors) / 1e6))


if __name__ == "__main__":
    main()
