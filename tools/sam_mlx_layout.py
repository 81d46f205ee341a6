#!/usr/bin/env python3
"""Writes a SAM-Audio model directory in the layout mlx-audio's converter
produces (what mlx-community's sam-audio repositories hold), from a directory
in Meta's checkpoint layout (config.json + model.safetensors, e.g. the one
`choir dev weights` builds from the fixture's manifest).

    python3 tools/sam_mlx_layout.py IN_DIR OUT_DIR [--q-bits 4|8 [--q-group-size 64]]

What the converter does and this tool reproduces (mlx-audio @ ebf44dfc:
`mlx_audio/convert.py`, `lm/convert.py`, `sts/models/sam_audio/model.py`):
- sanitize: drops text_encoder.*, span_predictor.*, visual_ranker.*,
  text_ranker.*, vision_encoder.*, align_masked_video.* and any *wm_rates*;
  each LSTM layer's bias_ih + bias_hh becomes one bias (float32 sum);
  renames every tensor as _convert_weight_name does;
- load_weights: each tensor takes the MLX module parameter's shape:
  Conv1d / WNConv1d weight and weight_v [out, in, k] -> [out, k, in]
  (weight_g [out, 1, 1] kept); the decoder's ConvTranspose1d (block_1,
  block_3) [in, out, k] -> [out, k, in] and weight_g [in, 1, 1] ->
  [1, 1, in] (MLX normalizes it over all axes but the last); Snake alpha
  [1, C, 1] -> [1, 1, C]; Linear, Embedding and LSTM matrices unchanged;
- save_model: tree_flatten(model.parameters()) into model.safetensors
  (metadata {"format": "mlx"}) plus model.safetensors.index.json;
- save_config: the source config.json with "model_type": "sam_audio", keys
  sorted, indent 4, and with -q the "quantization" block (group_size, bits,
  mode "affine") duplicated as "quantization_config";
- quantization: every nn.Linear and nn.Embedding (here: each 2-D tensor named
  *.weight) whose last axis divides by 64 and by the group size becomes
  <path>.weight (uint32 codes), <path>.scales and <path>.biases (float32),
  by MLX's affine rule (../shared/specs/mlx_quant.md section 3), computed
  here in float32 emulated per operation.

Pure standard library (no numpy): safetensors is an 8-byte header length,
a JSON header and raw little-endian data. Only float32 inputs are handled.
"""
import argparse
import array
import json
import math
import os
import re
import struct
import sys

DROP_PREFIXES = ("text_encoder.", "span_predictor.", "visual_ranker.", "text_ranker.",
                 "vision_encoder.", "align_masked_video.")


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (hlen,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + hlen])
    base = 8 + hlen
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        lo, hi = info["data_offsets"]
        tensors[name] = (info["dtype"], list(info["shape"]), memoryview(blob)[base + lo:base + hi])
    return tensors


def read_model(dirname):
    index = os.path.join(dirname, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    tensors = {}
    for name in files:
        tensors.update(read_safetensors(os.path.join(dirname, name)))
    return tensors


def write_safetensors(path, tensors, metadata):
    header = {"__metadata__": metadata}
    offset = 0
    names = sorted(tensors)
    for name in names:
        dtype, shape, data = tensors[name]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name in names:
            f.write(tensors[name][2])
    return offset


# --- names (mlx-audio's _convert_weight_name, rewritten) --------------------

def _unit(name, prefix):
    parts = {"block.0.": "act1.", "block.1.": "conv1.", "block.2.": "act2.", "block.3.": "conv2."}
    rest = name[len(prefix):]
    for old, new in parts.items():
        if rest.startswith(old):
            return prefix + new + rest[len(old):]
    return name


def _swap(name, old, new):
    return new + name[len(old):] if name.startswith(old) else name


def mlx_name(name):
    n = _swap(name, "audio_codec.encoder.block.0.", "audio_codec.encoder.conv_in.")
    for e in range(1, 5):
        for r in range(3):
            old = "audio_codec.encoder.block.%d.block.%d." % (e, r)
            new = "audio_codec.encoder.blocks.%d.res%d." % (e - 1, r + 1)
            if n.startswith(old):
                n = _unit(_swap(n, old, new), new)
                break
        n = _swap(n, "audio_codec.encoder.block.%d.block.3." % e, "audio_codec.encoder.blocks.%d.snake." % (e - 1))
        n = _swap(n, "audio_codec.encoder.block.%d.block.4." % e, "audio_codec.encoder.blocks.%d.conv." % (e - 1))
    n = _swap(n, "audio_codec.encoder.block.5.", "audio_codec.encoder.snake_out.")
    n = _swap(n, "audio_codec.encoder.block.6.", "audio_codec.encoder.conv_out.")
    n = _swap(n, "audio_codec.decoder.model.0.", "audio_codec.decoder.conv_in.")
    for d in range(1, 5):
        for b in (0, 1, 3, 4, 5, 6, 7, 8, 11):
            old = "audio_codec.decoder.model.%d.block.%d." % (d, b)
            new = "audio_codec.decoder.blocks.%d.block_%d." % (d - 1, b)
            if n.startswith(old):
                n = _swap(n, old, new)
                if 4 <= b <= 8:
                    n = _unit(n, new)
                break
    n = _swap(n, "audio_codec.decoder.wm_model.encoder_block.pre.0.", "audio_codec.decoder.snake_out.")
    n = _swap(n, "audio_codec.decoder.wm_model.encoder_block.pre.1.", "audio_codec.decoder.conv_out.")
    for blk in ("encoder_block", "decoder_block"):
        for side in ("pre", "post"):
            for i in range(4):
                n = n.replace(".%s.%s.%d." % (blk, side, i), ".%s.%s_%d." % (blk, side, i))
    for pat, rep in ((r"\.lstm\.weight_ih_l(\d+)$", ".lstm.layers.%s.Wx"),
                     (r"\.lstm\.weight_hh_l(\d+)$", ".lstm.layers.%s.Wh"),
                     (r"\.lstm\.combined_bias_l(\d+)$", ".lstm.layers.%s.bias")):
        m = re.search(pat, n)
        if m:
            n = n[:m.start()] + rep % m.group(1)
            break
    n = _swap(n, "audio_codec.quantizer.in_proj.", "audio_codec.quantizer_in_proj.")
    n = _swap(n, "audio_codec.quantizer.out_proj.", "audio_codec.quantizer_out_proj.")
    return n


# --- shapes -----------------------------------------------------------------

def permute_021(data, a, b, k):
    """[a, b, k] -> [a, k, b] (raw 4-byte items)."""
    out = bytearray()
    step = b * k * 4
    for i in range(a):
        out += data[i * step:(i + 1) * step].cast("f", [b, k]).tobytes(order="F")
    return bytes(out)


def permute_120(data, a, b, k):
    """[a, b, k] -> [b, k, a]: a 2-D transpose of [a, b*k]."""
    return data.cast("f", [a, b * k]).tobytes(order="F")


def is_transposed_conv(name):
    return re.match(r"audio_codec\.decoder\.blocks\.\d+\.block_[13]\.", name) is not None


def mlx_shape(name, shape, data):
    """The tensor as the MLX module stores it: (shape, bytes)."""
    if len(shape) != 3:
        return shape, bytes(data)
    a, b, k = shape
    leaf = name.rsplit(".", 1)[1]
    if leaf == "alpha":  # Snake [1, C, 1] -> [1, 1, C]
        return [a, k, b], bytes(data)
    if leaf == "weight_g":
        if is_transposed_conv(name):  # [in, 1, 1] -> [1, 1, in]
            return [b, k, a], bytes(data)
        return shape, bytes(data)
    if is_transposed_conv(name):  # ConvTranspose1d [in, out, k] -> [out, k, in]
        return [b, k, a], permute_120(data, a, b, k)
    return [a, k, b], permute_021(data, a, b, k)  # Conv1d [out, in, k] -> [out, k, in]


# --- float32 helpers --------------------------------------------------------

def floats(data):
    v = array.array("f")
    v.frombytes(bytes(data))
    if sys.byteorder != "little":
        v.byteswap()
    return v


def float_bytes(v):
    v = array.array("f", v)
    if sys.byteorder != "little":
        v.byteswap()
    return v.tobytes()


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def quantize(w, rows, cols, bits, group):
    """MLX affine quantization of w[rows, cols]: (packed uint32 bytes,
    scales, biases as float32 lists)."""
    n = (1 << bits) - 1
    eps = 1e-7
    codes, scales, biases = [], [], []
    for r in range(rows):
        for g0 in range(0, cols, group):
            grp = w[r * cols + g0:r * cols + g0 + group]
            mx, mn = max(grp), min(grp)
            neg_edge = abs(mn) > abs(mx)
            s = f32(max(f32(f32(mx - mn) / n), eps))
            if not neg_edge:
                s = -s
            edge = mn if neg_edge else mx
            q0 = round(f32(edge / s))
            if q0 != 0:
                s = f32(edge / q0)
                b = edge
            else:
                b = 0.0
            scales.append(s)
            biases.append(b)
            for x in grp:
                q = round(f32(f32(x - b) / s))
                codes.append(min(max(q, 0), n))
    # LSB-first bit stream per row (a row's bits are a multiple of 32).
    out = bytearray()
    per_row = cols * bits
    for r in range(rows):
        acc = 0
        for j, q in enumerate(codes[r * cols:(r + 1) * cols]):
            acc |= q << (j * bits)
        out += acc.to_bytes(per_row // 8, "little")
    return bytes(out), scales, biases


# --- the conversion ---------------------------------------------------------

def convert(src, q_bits=None, q_group=64):
    out = {}
    biases = {}
    for name, (dtype, shape, data) in src.items():
        if name.startswith(DROP_PREFIXES) or "wm_rates" in name:
            continue
        if dtype != "F32":
            raise SystemExit("%s: dtype %s (this tool reads float32 only)" % (name, dtype))
        m = re.match(r"(.+\.lstm)\.bias_(ih|hh)_l(\d+)$", name)
        if m:
            biases.setdefault((m.group(1), m.group(3)), {})[m.group(2)] = data
            continue
        new = mlx_name(name)
        if new in out:
            raise SystemExit("%s and another tensor both map to %s" % (name, new))
        shape, blob = mlx_shape(new, shape, data)
        out[new] = ("F32", shape, blob)
    for (base, layer), pair in sorted(biases.items()):
        if "ih" in pair and "hh" in pair:
            ih, hh = floats(pair["ih"]), floats(pair["hh"])
            # float32 + float32 rounded once: exact in double, then to float32.
            summed = float_bytes([a + b for a, b in zip(ih, hh)])
            out[mlx_name("%s.combined_bias_l%s" % (base, layer))] = ("F32", [len(ih)], summed)
    if q_bits:
        for name in sorted(out):
            dtype, shape, blob = out[name]
            if not name.endswith(".weight") or len(shape) != 2:
                continue
            rows, cols = shape
            if cols % 64 or cols % q_group:
                continue
            packed, sc, bi = quantize(floats(blob), rows, cols, q_bits, q_group)
            prefix = name[:-len(".weight")]
            out[name] = ("U32", [rows, cols * q_bits // 32], packed)
            out[prefix + ".scales"] = ("F32", [rows, cols // q_group], float_bytes(sc))
            out[prefix + ".biases"] = ("F32", [rows, cols // q_group], float_bytes(bi))
            print("  quantize %s [%d, %d] %d bits" % (prefix, rows, cols, q_bits))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", help="model directory in Meta's checkpoint layout (safetensors)")
    ap.add_argument("dst", help="output directory (mlx-community layout)")
    ap.add_argument("--q-bits", type=int, choices=(2, 3, 4, 5, 6, 8), default=None)
    ap.add_argument("--q-group-size", type=int, choices=(32, 64, 128), default=64)
    args = ap.parse_args()
    with open(os.path.join(args.src, "config.json")) as f:
        config = json.load(f)
    tensors = convert(read_model(args.src), args.q_bits, args.q_group_size)
    os.makedirs(args.dst, exist_ok=True)
    total = write_safetensors(os.path.join(args.dst, "model.safetensors"), tensors, {"format": "mlx"})
    with open(os.path.join(args.dst, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total},
                   "weight_map": {k: "model.safetensors" for k in sorted(tensors)}}, f, indent=4)
    config.pop("_name_or_path", None)
    config.pop("vision_config", None)
    if args.q_bits:
        config["quantization"] = {"group_size": args.q_group_size, "bits": args.q_bits, "mode": "affine"}
        config["quantization_config"] = config["quantization"]
    config["model_type"] = "sam_audio"
    with open(os.path.join(args.dst, "config.json"), "w") as f:
        json.dump(dict(sorted(config.items())), f, indent=4)
    print("%d tensors, %d bytes -> %s" % (len(tensors), total, args.dst))


if __name__ == "__main__":
    main()
