#!/usr/bin/env python3
"""Exports hexgrad's reference Kokoro-82M to ONNX with random weights at the
real dimensions, for bench/peers/kokoro_onnx.mjs (ONNX Runtime on the CPU,
the route people use to run Kokoro without PyTorch).

    kokoro_onnx_export.py KOKORO_SRC OUT.onnx [--config CONFIG.json] [--seed 0]

KOKORO_SRC is a checkout of github.com/hexgrad/kokoro (its `kokoro` package is
imported from there; nothing is downloaded). CONFIG.json is Kokoro's
config.json (default: ../shared/fixtures/kokoro/kokoro-v1/config.json beside
this repo). Weights are PyTorch's default initialisation after
torch.manual_seed(seed): the audio is noise, the cost is the real model's.
Needs torch and onnx. The graph is the one the reference's examples/export.py
exports (KModelForONNX: input_ids [1, T], style [1, 256], speed [1] ->
waveform, duration), with the real-valued STFT (disable_complex=True) so the
generator exports without complex tensors; input_ids length is dynamic.
"""
import argparse
import os
import sys
import tempfile


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("kokoro_src")
    ap.add_argument("out")
    ap.add_argument("--config", default=os.path.join(
        here, "..", "..", "..", "shared", "fixtures", "kokoro", "kokoro-v1", "config.json"))
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    sys.path.insert(0, os.path.abspath(a.kokoro_src))
    import torch
    from kokoro.model import KModel, KModelForONNX

    torch.manual_seed(a.seed)
    # KModel loads every key of the checkpoint it is given; an empty one
    # leaves the freshly initialised (random) modules as they are.
    with tempfile.TemporaryDirectory() as tmp:
        empty = os.path.join(tmp, "empty.pth")
        torch.save({}, empty)
        kmodel = KModel(repo_id="hexgrad/Kokoro-82M", config=a.config, model=empty,
                        disable_complex=True).eval()
    model = KModelForONNX(kmodel).eval()
    n_params = sum(p.numel() for p in model.parameters())
    ids = torch.randint(1, 100, (48,), generator=torch.Generator().manual_seed(a.seed))
    input_ids = torch.LongTensor([[0, *ids.tolist(), 0]])
    style = torch.randn(1, 256)
    speed = torch.ones(1)
    with torch.no_grad():
        torch.onnx.export(
            model, (input_ids, style, speed), a.out, export_params=True,
            input_names=["input_ids", "style", "speed"], output_names=["waveform", "duration"],
            opset_version=17, do_constant_folding=True,
            dynamic_axes={"input_ids": {1: "input_ids_len"}, "waveform": {0: "samples"},
                          "duration": {0: "tokens"}})
    import onnx
    onnx.checker.check_model(onnx.load(a.out))
    print(f"kokoro_onnx_export: wrote {a.out} ({n_params / 1e6:.1f} M parameters, "
          f"{os.path.getsize(a.out) / 1e6:.0f} MB), onnx check ok")


if __name__ == "__main__":
    main()
