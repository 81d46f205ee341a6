/* choir-dev: the developer tools, a program apart from `choir` because they
 * reach into model internals (weight layouts, decoding rules) to measure and
 * compare them. `choir bench ...` and `choir dev ...` start this program with
 * the same arguments. Each command returns the exit code: 0 success, 1 failure
 * of the work, 2 bad usage; argv[0] is its own name. */
#ifndef CHOIR_CLI_DEV_H
#define CHOIR_CLI_DEV_H

/* `bench TARGET ...` (cmd_bench.c) */
int choir_cmd_bench(int argc, char **argv);
/* `dev weights`, `dev parity whisper|kokoro|mossformer2|vibevoice|sam-audio` */
int choir_cmd_dev_weights(int argc, char **argv);
int choir_cmd_parity_whisper(int argc, char **argv);
int choir_cmd_parity_kokoro(int argc, char **argv);
int choir_cmd_parity_mossformer2(int argc, char **argv);
int choir_cmd_parity_sam_audio(int argc, char **argv);
int choir_cmd_parity_vibevoice(int argc, char **argv);

/* `bench whisper|kokoro|sts|vad|quant|engine|vibevoice|sam-audio` (argv[0] is the target). */
int choir_bench_whisper(int argc, char **argv);
int choir_bench_kokoro(int argc, char **argv);
int choir_bench_sts(int argc, char **argv);
int choir_bench_sam_audio(int argc, char **argv);
int choir_bench_vad(int argc, char **argv);
int choir_bench_quant(int argc, char **argv);
int choir_bench_engine(int argc, char **argv);
int choir_bench_vibevoice(int argc, char **argv);

#endif
