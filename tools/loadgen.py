#!/usr/bin/env python3
"""Mixed load against a running `choir serve` (Python standard library only).

    tools/loadgen.py URL --stt-model M --wav FILE --stt N
                         --tts-model K --voice V --tts N [--concurrency C]

Sends N transcriptions and N speech requests in a shuffled order from C
threads, then prints per-kind count, errors, latency p50/p95/p99 and the
overall throughput. Exit status 1 when any request failed."""
import argparse
import json
import random
import threading
import time
import urllib.request
import uuid

TEXTS = [
    "Hello from choir.",
    "The quick brown fox jumps over the lazy dog, and then it rests in the shade.",
    "Batch inference groups requests of similar length and runs them together on one device.",
    "Speech models on your own machine: fast, private, and measured.",
]


def transcribe(url, model, wav, temperature):
    b = "----choir" + uuid.uuid4().hex
    body = b"".join([
        ("--%s\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\n%s\r\n" % (b, model)).encode(),
        ("--%s\r\nContent-Disposition: form-data; name=\"temperature\"\r\n\r\n%g\r\n"
         % (b, temperature)).encode(),
        ("--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n"
         "Content-Type: audio/wav\r\n\r\n" % b).encode(), wav, b"\r\n",
        ("--%s--\r\n" % b).encode()])
    req = urllib.request.Request(url + "/v1/audio/transcriptions", data=body,
                                 headers={"Content-Type": "multipart/form-data; boundary=" + b})
    with urllib.request.urlopen(req, timeout=600) as r:
        json.loads(r.read())


def speak(url, model, voice, text):
    body = json.dumps({"model": model, "input": text, "voice": voice,
                       "response_format": "pcm"}).encode()
    req = urllib.request.Request(url + "/v1/audio/speech", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        if len(r.read()) == 0:
            raise RuntimeError("empty audio")


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--stt-model")
    ap.add_argument("--wav")
    ap.add_argument("--stt", type=int, default=0)
    ap.add_argument("--tts-model")
    ap.add_argument("--voice", default="af_heart")
    ap.add_argument("--tts", type=int, default=0)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--temperature", type=float, default=0.0,
                    help="sent with each transcription (> 0: one temperature, no fallback)")
    ap.add_argument("--deadline", type=float, default=0.0,
                    help="stop starting requests after this many seconds (0: none)")
    a = ap.parse_args()
    wav = open(a.wav, "rb").read() if a.stt else b""
    jobs = [("stt", i) for i in range(a.stt)] + [("tts", i) for i in range(a.tts)]
    random.Random(1).shuffle(jobs)
    lat = {"stt": [], "tts": []}
    errors = {"stt": 0, "tts": 0}
    lock = threading.Lock()
    t0 = time.monotonic()

    def worker():
        while True:
            with lock:
                if not jobs or (a.deadline and time.monotonic() - t0 > a.deadline):
                    return
                kind, i = jobs.pop()
            start = time.monotonic()
            try:
                if kind == "stt":
                    transcribe(a.url, a.stt_model, wav, a.temperature)
                else:
                    speak(a.url, a.tts_model, a.voice, TEXTS[i % len(TEXTS)])
                ok = True
            except Exception as e:  # noqa: BLE001 - report and count every failure
                print("%s %d failed: %s" % (kind, i, e))
                ok = False
            dt = time.monotonic() - start
            with lock:
                if ok:
                    lat[kind].append(dt)
                else:
                    errors[kind] += 1

    threads = [threading.Thread(target=worker) for _ in range(a.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    for kind in ("stt", "tts"):
        xs = lat[kind]
        if xs or errors[kind]:
            print("%s: %d ok, %d failed, latency p50 %.2f s, p95 %.2f s, p99 %.2f s" % (
                kind, len(xs), errors[kind], pct(xs, 50), pct(xs, 95), pct(xs, 99)))
    n = len(lat["stt"]) + len(lat["tts"])
    if jobs:
        print("deadline: %d requests not started" % len(jobs))
    print("all: %d requests in %.1f s, %.2f requests/s, concurrency %d" % (n, wall, n / wall,
                                                                          a.concurrency))
    return 1 if errors["stt"] or errors["tts"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
