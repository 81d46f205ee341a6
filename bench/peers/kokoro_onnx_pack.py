#!/usr/bin/env python3
"""Exports hexgrad's Kokoro-82M to ONNX with choir's randw-v1 weights, in a
form that travels: the graph alone (a few MB) plus a recipe that rebuilds its
weights from the manifest (bench/peers/kokoro_onnx_unpack.py), instead of the
330 MB of weights themselves.

    kokoro_onnx_pack.py KOKORO_SRC OUT_DIR --manifest M --config C --randw R

Run on a machine with torch, transformers and onnx (onnxruntime too, for the
check at the end). KOKORO_SRC is a checkout of github.com/hexgrad/kokoro; M and
C are ../shared/fixtures/kokoro/kokoro-v1/{manifest,config}.json, R is
../shared/fixtures/randw_reference.py. The export is the reference's own
(KModelForONNX, real-valued STFT, opset 17, constant folding, dynamic token
count), as bench/peers/kokoro_onnx_export.py does. Writes OUT_DIR/kokoro.onnx
(weights referenced as external data in kokoro.onnx.data) and
OUT_DIR/kokoro.recipe.json. Each large initializer is matched to how it was
derived from the manifest's tensors: as stored, transposed, an LSTM's
W/R/B (gates reordered to ONNX's i, o, f, c), or a weight-norm pair folded
(g * v / |v|); small ones are kept inside the graph.
"""
import argparse
import json
import os
import sys
import tempfile

import numpy as np


def lstm_parts(manifest_names):
    """LSTM prefixes: names ending in weight_ih_l0."""
    return sorted(n[: -len("weight_ih_l0")] for n in manifest_names if n.endswith("weight_ih_l0"))


def gates_onnx(w):
    """PyTorch's gate blocks (i, f, g, o) along axis 0 in ONNX's order (i, o, f, c)."""
    i, f, g, o = np.split(w, 4, axis=0)
    return np.concatenate([i, o, f, g], axis=0)


def candidates(arrays):
    """[(recipe, array)] of every way an initializer may derive from the manifest."""
    out = []
    for name, a in arrays.items():
        out.append(({"op": "as_is", "src": [name]}, a))
        if a.ndim == 2:
            out.append(({"op": "transpose", "src": [name]}, a.T))
    for p in lstm_parts(arrays):
        dirs = [""] + (["_reverse"] if p + "weight_ih_l0_reverse" in arrays else [])
        for part, key in (("W", "weight_ih_l0"), ("R", "weight_hh_l0")):
            srcs = [p + key + d for d in dirs]
            out.append(({"op": "lstm_" + part, "src": srcs},
                        np.stack([gates_onnx(arrays[s]) for s in srcs])))
        srcs = [p + k + d for d in dirs for k in ("bias_ih_l0", "bias_hh_l0")]
        out.append(({"op": "lstm_B", "src": srcs},
                    np.stack([np.concatenate([gates_onnx(arrays[p + "bias_ih_l0" + d]),
                                              gates_onnx(arrays[p + "bias_hh_l0" + d])])
                              for d in dirs])))
    for name in arrays:
        if name.endswith("weight_g"):
            v = name[:-1] + "v"
            out.append(({"op": "weight_norm", "src": [name, v]}, weight_norm(arrays[name], arrays[v])))
    return out


def weight_norm(g, v):
    axes = tuple(range(1, v.ndim))
    n = np.sqrt(np.sum(v.astype(np.float64) ** 2, axis=axes, keepdims=True))
    return (g.astype(np.float64) * v / n).astype(np.float32)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kokoro_src")
    ap.add_argument("out_dir")
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--randw", required=True)
    ap.add_argument("--inline-max", type=int, default=1 << 16, help="bytes kept in the graph")
    a = ap.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import onnx
    import torch
    from onnx import numpy_helper
    from kokoro_randw import import_kmodel, kmodel_randw, load_randw

    model = kmodel_randw(a.kokoro_src, a.manifest, a.config, a.randw, disable_complex=True)
    _, KModelForONNX = import_kmodel(a.kokoro_src)
    wrapper = KModelForONNX(model).eval()
    ids = torch.LongTensor([[0] + [50, 83, 54, 156, 57, 135, 16, 65] * 6 + [0]])
    style = torch.randn(1, 256, generator=torch.Generator().manual_seed(0))
    speed = torch.ones(1)
    os.makedirs(a.out_dir, exist_ok=True)
    tmp = tempfile.mkdtemp()
    full = os.path.join(tmp, "full.onnx")
    kw = dict(export_params=True, input_names=["input_ids", "style", "speed"],
              output_names=["waveform", "duration"], opset_version=17, do_constant_folding=True,
              dynamic_axes={"input_ids": {1: "input_ids_len"}, "waveform": {0: "samples"},
                            "duration": {0: "tokens"}})
    with torch.no_grad():
        try:
            torch.onnx.export(wrapper, (ids, style, speed), full, dynamo=False, **kw)
        except TypeError:
            torch.onnx.export(wrapper, (ids, style, speed), full, **kw)
    g = onnx.load(full)

    randw = load_randw(a.randw)
    with open(a.manifest) as f:
        manifest = json.load(f)
    arrays = {t["name"]: randw(t["name"], t["shape"], t["offset"], t["scale"]) for t in manifest["tensors"]}
    by_shape = {}
    for recipe, arr in candidates(arrays):
        by_shape.setdefault(tuple(arr.shape), []).append((recipe, arr))

    data_name = "kokoro.onnx.data"
    entries, offset, inline, unmatched = [], 0, 0, []
    for init in g.graph.initializer:
        arr = numpy_helper.to_array(init)
        if arr.nbytes <= a.inline_max:
            inline += arr.nbytes
            continue
        found = None
        for recipe, cand in by_shape.get(tuple(arr.shape), []):
            if cand.dtype == arr.dtype and np.array_equal(cand, arr):
                found = dict(recipe, exact=True)
                break
        if found is None:  # folded arithmetic (weight norm) matches to rounding only
            for recipe, cand in by_shape.get(tuple(arr.shape), []):
                if recipe["op"] == "weight_norm" and np.allclose(cand, arr, rtol=1e-5, atol=1e-7):
                    found = dict(recipe, exact=False)
                    break
        if found is None:
            unmatched.append((init.name, list(arr.shape), arr.nbytes))
            continue
        offset = (offset + 4095) // 4096 * 4096
        entries.append(dict(name=init.name, shape=list(arr.shape), dtype=str(arr.dtype),
                            offset=offset, nbytes=arr.nbytes, recipe=found,
                            abs_sum=float(np.abs(arr.astype(np.float64)).sum())))
        init.ClearField("raw_data")
        for fld in ("float_data", "int64_data", "int32_data", "double_data"):
            init.ClearField(fld)
        init.data_location = onnx.TensorProto.EXTERNAL
        del init.external_data[:]
        for k, v in (("location", data_name), ("offset", str(offset)), ("length", str(arr.nbytes))):
            init.external_data.add(key=k, value=v)
        offset += arr.nbytes
    if unmatched:
        big = sum(n for _, _, n in unmatched)
        print(f"kokoro_onnx_pack: {len(unmatched)} large initializers match no recipe "
              f"({big / 1e6:.1f} MB), first: {unmatched[:4]}", file=sys.stderr)
        sys.exit(1)
    onnx.save(g, os.path.join(a.out_dir, "kokoro.onnx"))
    with open(os.path.join(a.out_dir, "kokoro.recipe.json"), "w") as f:
        json.dump({"data": data_name, "bytes": offset, "tensors": entries}, f)
    print(f"kokoro_onnx_pack: {len(entries)} initializers ({offset / 1e6:.0f} MB) by recipe, "
          f"{inline / 1e6:.2f} MB inline, graph {os.path.getsize(os.path.join(a.out_dir, 'kokoro.onnx')) / 1e6:.1f} MB")

    # Check: rebuild the data here exactly as the unpacker does and run it.
    from kokoro_onnx_unpack import rebuild
    rebuild(a.out_dir, a.manifest, a.randw)
    try:
        import onnxruntime as ort
    except ImportError:
        print("kokoro_onnx_pack: onnxruntime missing, rebuilt graph not run")
        return
    sess = ort.InferenceSession(os.path.join(a.out_dir, "kokoro.onnx"), providers=["CPUExecutionProvider"])
    wav, dur = sess.run(None, {"input_ids": ids.numpy(), "style": style.numpy(), "speed": speed.numpy()})
    with torch.no_grad():
        ref, ref_dur = wrapper(ids, style, speed)
    ref = ref.numpy().reshape(-1)
    wav = wav.reshape(-1)
    n = min(len(ref), len(wav))
    rel = float(np.linalg.norm(wav[:n] - ref[:n]) / max(np.linalg.norm(ref[:n]), 1e-30))
    print(f"kokoro_onnx_pack: rebuilt model run by onnxruntime {ort.__version__}: {len(wav)} samples "
          f"(torch {len(ref)}), durations equal {bool(np.array_equal(dur, ref_dur.numpy()))}, "
          f"audio rel L2 {rel:.2e}")


if __name__ == "__main__":
    main()
