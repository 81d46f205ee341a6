/* The `choir` command's subcommands. Each lives in its own cmd_*.c file and
 * returns the process exit code: 0 success, 1 failure of the work, 2 bad usage.
 * argv[0] is the subcommand's own name. */
#ifndef CHOIR_CLI_H
#define CHOIR_CLI_H

#include "choir/audio.h"
#include "choir/error.h"

int choir_cmd_info(int argc, char **argv);
int choir_cmd_tts(int argc, char **argv);
int choir_cmd_stt(int argc, char **argv);
int choir_cmd_vad(int argc, char **argv);
int choir_cmd_sts(int argc, char **argv);
int choir_cmd_sep(int argc, char **argv);
int choir_cmd_convert(int argc, char **argv);
int choir_cmd_serve(int argc, char **argv);
int choir_cmd_stats(int argc, char **argv);
int choir_cmd_pull(int argc, char **argv);
int choir_cmd_worker(int argc, char **argv);
int choir_cmd_submit(int argc, char **argv);
int choir_cmd_jobs(int argc, char **argv);
/* `choir bench ...` and `choir dev ...` run the developer tools, a program of
 * their own (choir-dev, src/cli/dev/), found next to this one or at $CHOIR_DEV:
 * argv[0] is "bench" or "dev". Returns only when it cannot be started (2). */
int choir_cmd_dev_tools(int argc, char **argv);

/* `choir stt` on a VibeVoice-ASR folder (cmd_stt_vibevoice.c). */
typedef struct choir_stt_vibevoice_args {
    const char *model_dir, *tokenizer, *format, *output_dir, *context;
    const char *const *files;
    int n_files;
    int max_new_tokens;   /* 0: the default */
    double max_audio_s;   /* 0: the default */
    int stream;           /* print the text to stderr as it is decoded */
} choir_stt_vibevoice_args;
int choir_stt_vibevoice(const choir_stt_vibevoice_args *a);

/* Decodes `path` as choir_audio_decode_file does, or standard input (read
 * whole, up to 2 GiB) when path is "-". */
int choir_cli_decode(const char *path, const choir_decode_opts *opts, choir_audio *out, choir_err *err);
/* Copies standard input into a new temporary file ($TMPDIR or /tmp) and
 * writes its name to path (cap bytes); the caller removes it. On failure path
 * is "" unless the file exists (then remove it too). 0 or a negative code. */
int choir_cli_spool_stdin(char *path, size_t cap, choir_err *err);
/* The audio format name a file name asks for by its extension (".mp3" ->
 * "mp3", ".ogg"/".opus" -> "opus", ".raw"/".pcm" -> "pcm", ...), or NULL. */
const char *choir_cli_format_from_path(const char *path);
/* Creates folder `dir` and its parents as needed (mkdir -p). 0 or CHOIR_EIO. */
int choir_cli_make_dirs(const char *dir, choir_err *err);

#endif
