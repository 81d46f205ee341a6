"""hexgrad's Kokoro KModel with the randw-v1 weights of a choir manifest.

Shared by torch_gpu.py (PyTorch timings) and kokoro_onnx_pack.py (the ONNX
export): both need the reference model holding exactly the weights that
`choir dev weights --manifest M` writes, so that predicted durations, and so
the audio produced, match choir's.

    model = kmodel_randw(kokoro_src, manifest, config, randw_py, disable_complex)

kokoro_src is a checkout of github.com/hexgrad/kokoro; its package is imported
without its __init__ (which needs loguru and the G2P pipeline). randw_py is
../shared/fixtures/randw_reference.py. Needs torch and transformers.
"""
import importlib.util
import json
import os
import sys
import tempfile
import types


def load_randw(path):
    spec = importlib.util.spec_from_file_location("randw_reference", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.randw


def import_kmodel(kokoro_src):
    if "loguru" not in sys.modules:
        lg = types.ModuleType("loguru")
        quiet = lambda *a, **k: None  # noqa: E731
        lg.logger = types.SimpleNamespace(debug=quiet, info=quiet, warning=quiet)
        sys.modules["loguru"] = lg
    pkg = types.ModuleType("kokoro")
    pkg.__path__ = [os.path.join(os.path.abspath(kokoro_src), "kokoro")]
    sys.modules["kokoro"] = pkg
    from kokoro.model import KModel, KModelForONNX
    return KModel, KModelForONNX


def state_dicts(manifest, randw):
    """{top-level module: {name: tensor}} in torch's parametrization names."""
    import torch
    groups = {}
    for t in manifest["tensors"]:
        top, rest = t["name"].split(".", 1)
        rest = rest.replace("weight_g", "parametrizations.weight.original0").replace(
            "weight_v", "parametrizations.weight.original1")
        groups.setdefault(top, {})[rest] = torch.from_numpy(
            randw(t["name"], t["shape"], t["offset"], t["scale"]))
    return groups


def kmodel_randw(kokoro_src, manifest_path, config_path, randw_py, disable_complex=False):
    """The KModel with every parameter set from the manifest; raises when a
    parameter is left out or a manifest tensor has no parameter."""
    import torch
    KModel, _ = import_kmodel(kokoro_src)
    with open(config_path) as f:
        config = json.load(f)
    with open(manifest_path) as f:
        manifest = json.load(f)
    # An empty checkpoint leaves the modules as built; the weights are then
    # loaded module by module, checked both ways.
    with tempfile.TemporaryDirectory() as tmp:
        empty = os.path.join(tmp, "empty.pth")
        torch.save({}, empty)
        model = KModel(repo_id="hexgrad/Kokoro-82M", config=config, model=empty,
                       disable_complex=disable_complex)
    for top, sd in state_dicts(manifest, load_randw(randw_py)).items():
        module = getattr(model, top)
        missing, unexpected = module.load_state_dict(sd, strict=False)
        params = {n for n, _ in module.named_parameters()}
        left = sorted(set(missing) & params)
        if unexpected or left:
            raise ValueError(f"kokoro_randw: {top}: manifest tensors without a parameter "
                             f"{unexpected[:5]}, parameters not in the manifest {left[:5]}")
    return model.eval()
