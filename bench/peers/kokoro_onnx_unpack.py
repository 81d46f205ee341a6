#!/usr/bin/env python3
"""Rebuilds the weights of the Kokoro ONNX graph written by kokoro_onnx_pack.py
from choir's manifest (randw-v1), so the reference model exported on a GPU
machine can be run here by ONNX Runtime without carrying 330 MB.

    kokoro_onnx_unpack.py DIR --manifest M --randw R

DIR holds kokoro.onnx and kokoro.recipe.json; writes DIR/kokoro.onnx.data.
Needs numpy (Debian: python3-numpy). Tensors recorded as exact are
reproduced bit for bit; folded weight norms to float rounding; each is
checked against the sum of magnitudes the packer recorded.
"""
import argparse
import importlib.util
import json
import os
import sys

import numpy as np


def _randw(path):
    spec = importlib.util.spec_from_file_location("randw_reference", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.randw


def _gates_onnx(w):
    i, f, g, o = np.split(w, 4, axis=0)
    return np.concatenate([i, o, f, g], axis=0)


def _build(recipe, get):
    op, src = recipe["op"], recipe["src"]
    if op == "as_is":
        return get(src[0])
    if op == "transpose":
        return get(src[0]).T
    if op in ("lstm_W", "lstm_R"):
        return np.stack([_gates_onnx(get(s)) for s in src])
    if op == "lstm_B":
        return np.stack([np.concatenate([_gates_onnx(get(src[k])), _gates_onnx(get(src[k + 1]))])
                         for k in range(0, len(src), 2)])
    if op == "weight_norm":
        g, v = get(src[0]), get(src[1])
        n = np.sqrt(np.sum(v.astype(np.float64) ** 2, axis=tuple(range(1, v.ndim)), keepdims=True))
        return (g.astype(np.float64) * v / n).astype(np.float32)
    raise ValueError(f"unknown recipe {op}")


def rebuild(out_dir, manifest_path, randw_path):
    randw = _randw(randw_path)
    with open(manifest_path) as f:
        params = {t["name"]: t for t in json.load(f)["tensors"]}
    with open(os.path.join(out_dir, "kokoro.recipe.json")) as f:
        recipe = json.load(f)
    cache = {}

    def get(name):
        if name not in cache:
            t = params[name]
            cache[name] = randw(name, t["shape"], t["offset"], t["scale"])
        return cache[name]

    path = os.path.join(out_dir, recipe["data"])
    with open(path, "wb") as f:
        f.truncate(recipe["bytes"])
        for e in recipe["tensors"]:
            arr = np.ascontiguousarray(_build(e["recipe"], get), dtype=e["dtype"])
            if list(arr.shape) != e["shape"] or arr.nbytes != e["nbytes"]:
                raise ValueError(f"{e['name']}: rebuilt shape {arr.shape}, expected {e['shape']}")
            s = float(np.abs(arr.astype(np.float64)).sum())
            if abs(s - e["abs_sum"]) > 1e-6 * max(e["abs_sum"], 1.0):
                raise ValueError(f"{e['name']}: rebuilt values differ (sum |x| {s} vs {e['abs_sum']})")
            f.seek(e["offset"])
            f.write(arr.tobytes())
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--randw", required=True)
    a = ap.parse_args()
    path = rebuild(a.dir, a.manifest, a.randw)
    print(f"kokoro_onnx_unpack: wrote {path} ({os.path.getsize(path) / 1e6:.0f} MB)")


if __name__ == "__main__":
    sys.exit(main())
