#!/usr/bin/env python3
"""Writes the zero-noise variant of the Kokoro ONNX graph, for comparing its
audio with choir's CHOIR_KOKORO_NOISE_ZERO synthesis on the same weights.

    kokoro_onnx_zero.py DIR

DIR holds kokoro.onnx (bench/peers/kokoro_onnx_pack.py, weights rebuilt by
kokoro_onnx_unpack.py). Writes DIR/kokoro_zero.onnx, which shares
kokoro.onnx.data: SineGen's two random draws (RandomNormalLike, the additive
noise; RandomUniformLike, the initial phases) become Sub(x, x), i.e. zeros of
the same shape, and the F0 and N predictions (/F0_proj, /N_proj) and the
generator's last convolution (conv_post: log-magnitudes and phases before the
iSTFT, [1, 22, frames]) are added as outputs f0, n and post. (The export's
iSTFT, the reference's CustomSTFT of disable_complex=True, is by its own
comments an approximation of torch.istft; bench/peers/kokoro_onnx_compare.py
applies the exact one to `post`.) Needs no package: the protobuf is edited field by field
(ModelProto.graph = 7, GraphProto.node = 1 / output = 12, NodeProto.input =
1 / output = 2 / op_type = 4 / attribute = 5), every other byte is kept.
"""
import os
import sys


def _varint(b, i):
    r = s = 0
    while True:
        c = b[i]
        i += 1
        r |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return r, i


def _fields(b):
    """[(field, wire type, raw value)] of one message."""
    i, out = 0, []
    while i < len(b):
        k, i = _varint(b, i)
        f, w = k >> 3, k & 7
        if w == 0:
            j = i
            _, i = _varint(b, i)
            v = b[j:i]
        elif w == 2:
            n, i = _varint(b, i)
            v = b[i:i + n]
            i += n
        elif w == 1:
            v, i = b[i:i + 8], i + 8
        elif w == 5:
            v, i = b[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {w} not handled")
        out.append((f, w, v))
    return out


def _enc_varint(n):
    out = bytearray()
    while True:
        c = n & 0x7F
        n >>= 7
        out.append(c | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _emit(fields):
    out = bytearray()
    for f, w, v in fields:
        out += _enc_varint(f << 3 | w)
        if w == 2:
            out += _enc_varint(len(v))
        out += v
    return bytes(out)


def _s(b):
    return b.decode()


def zero_noise(model_bytes, extra_outputs):
    top = _fields(model_bytes)
    gi = [k for k, (f, _, _) in enumerate(top) if f == 7]
    if len(gi) != 1:
        raise ValueError("no graph in the model")
    graph = _fields(top[gi[0]][2])
    replaced, produced = [], set()
    for k, (f, w, v) in enumerate(graph):
        if f != 1:
            continue
        node = _fields(v)
        produced.update(_s(x[2]) for x in node if x[0] == 2)
        op = [_s(x[2]) for x in node if x[0] == 4][0]
        if op not in ("RandomNormalLike", "RandomUniformLike"):
            continue
        src = [x for x in node if x[0] == 1]
        if len(src) != 1:
            raise ValueError(f"{op} with {len(src)} inputs")
        keep = [x for x in node if x[0] not in (1, 4, 5)]
        node = [src[0], src[0]] + keep + [(4, 2, b"Sub")]
        graph[k] = (f, w, _emit(node))
        replaced.append(op)
    if sorted(replaced) != ["RandomNormalLike", "RandomUniformLike"]:
        raise ValueError(f"expected SineGen's two random draws, found {replaced}")
    float_type = _emit([(1, 2, _emit([(1, 0, _enc_varint(1))]))])  # tensor_type.elem_type FLOAT
    for name, alias in extra_outputs:
        if name not in produced:
            raise ValueError(f"{name} is not produced by any node")
        # An Identity gives the intermediate a plain output name.
        graph.append((1, 2, _emit([(1, 2, name.encode()), (2, 2, alias.encode()),
                                   (3, 2, ("out_" + alias).encode()), (4, 2, b"Identity")])))
        graph.append((12, 2, _emit([(1, 2, alias.encode()), (2, 2, float_type)])))
    top[gi[0]] = (7, 2, _emit(graph))
    return _emit(top), replaced


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    d = sys.argv[1]
    with open(os.path.join(d, "kokoro.onnx"), "rb") as f:
        b = f.read()
    out, replaced = zero_noise(b, [("/F0_proj/Conv_output_0", "f0"), ("/N_proj/Conv_output_0", "n"),
                                   ("/decoder/generator/conv_post/Conv_output_0", "post"),
                                   ("/MatMul_1_output_0", "asr")])
    path = os.path.join(d, "kokoro_zero.onnx")
    with open(path, "wb") as f:
        f.write(out)
    print(f"kokoro_onnx_zero: wrote {path}: {', '.join(replaced)} -> Sub(x, x); outputs f0, n, post, asr added")
    return 0


if __name__ == "__main__":
    sys.exit(main())
