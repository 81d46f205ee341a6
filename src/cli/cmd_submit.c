/* `choir submit`: enqueues one job per input file on a Redis Stream. */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "choir/jobqueue.h"
#include "cli/cli.h"
#include "cli/opt.h"

typedef struct submit_ctx {
    choir_jobqueue *q;
    choir_jobspec spec;
    const char *out_dir;
    const char *ext;
    long queued;
} submit_ctx;

static int submit_file(submit_ctx *c, const char *path, choir_err *err) {
    /* Absolute, but symbolic links kept: the link's name names the output. */
    char abs[PATH_MAX], cwd[PATH_MAX];
    if (path[0] == '/') {
        snprintf(abs, sizeof abs, "%s", path);
    } else {
        if (!getcwd(cwd, sizeof cwd)) return choir_err_set(err, CHOIR_EIO, "cannot read the working directory");
        int n = snprintf(abs, sizeof abs, "%s/%s", cwd, path);
        if (n < 0 || (size_t)n >= sizeof abs) return choir_err_set(err, CHOIR_ETOOBIG, "path too long: %s", path);
    }
    const char *base = strrchr(abs, '/');
    base = base ? base + 1 : abs;
    const char *dot = strrchr(base, '.');
    int stem = dot && dot != base ? (int)(dot - base) : (int)strlen(base);
    if (strlen(abs) >= sizeof c->spec.input) return choir_err_set(err, CHOIR_ETOOBIG, "path too long: %s", abs);
    snprintf(c->spec.input, sizeof c->spec.input, "%s", abs);
    int n = snprintf(c->spec.output, sizeof c->spec.output, "%s/%.*s.%s", c->out_dir, stem, base, c->ext);
    if (n < 0 || (size_t)n >= sizeof c->spec.output) return choir_err_set(err, CHOIR_ETOOBIG, "output path too long");
    if (choir_jobqueue_submit(c->q, &c->spec, NULL, 0, err)) return err->code;
    c->queued++;
    return 0;
}

static int name_order(const struct dirent **a, const struct dirent **b) {
    return strcmp((*a)->d_name, (*b)->d_name);
}

static int submit_path(submit_ctx *c, const char *path, choir_err *err) {
    struct stat st;
    if (stat(path, &st) != 0) return choir_err_set(err, CHOIR_ENOTFOUND, "no such file or directory: %s", path);
    if (!S_ISDIR(st.st_mode)) return submit_file(c, path, err);
    struct dirent **names = NULL;
    int n = scandir(path, &names, NULL, name_order);
    if (n < 0) return choir_err_set(err, CHOIR_EIO, "cannot list %s", path);
    int rc = 0;
    for (int i = 0; i < n; i++) {
        char full[PATH_MAX];
        if (rc == 0 && names[i]->d_name[0] != '.') {
            snprintf(full, sizeof full, "%s/%s", path, names[i]->d_name);
            if (stat(full, &st) == 0 && S_ISREG(st.st_mode)) rc = submit_file(c, full, err);
        }
        free(names[i]); /* scandir allocates with malloc */
    }
    free(names);
    return rc;
}

int choir_cmd_submit(int argc, char **argv) {
    choir_jobqueue_params qp = choir_jobqueue_default_params();
    submit_ctx c = {0};
    const char *paths[argc > 0 ? argc : 1];
    int n_paths = 0;
    const char *task = NULL, *model = "", *options = "";
    const cli_opt flags[] = {
        {"--redis", CLI_STRING, &qp.url, 0, 0, "URL", "redis://[:password@]host[:port][/db] (default redis://127.0.0.1:6379)"},
        {"--stream", CLI_STRING, &qp.stream, 0, 0, "NAME", "the jobs stream (required)"},
        {"--group", CLI_STRING, &qp.group, 0, 0, "G", "consumer group (default choir)"},
        {"--task", CLI_STRING, &task, 0, 0, "T", "vad, stt, tts or sts (required)"},
        {"--out", CLI_STRING, &c.out_dir, 0, 0, "DIR", "where the results go (required; must exist)"},
        {"--model", CLI_STRING, &model, 0, 0, "ID", "the model id the workers serve it with (default: the task's first)"},
        {"--options", CLI_STRING, &options, 0, 0, "JSON", "task options (docs/scaling.md)"},
        {"--ext", CLI_STRING, &c.ext, 0, 0, "EXT", "the results' extension"},
    };
    const cli_spec spec = {
        .cmd = "submit",
        .synopsis = "usage: choir submit --redis URL --stream NAME --task vad|stt|tts|sts --out DIR\n"
                    "                    [--model ID] [--options JSON] [--ext EXT] PATH...\n"
                    "\n"
                    "Enqueues one job per file: each PATH is a file, or a directory whose regular\n"
                    "files (not recursing, sorted by name) are all taken. The result of\n"
                    "DIR/../name.wav goes to OUTDIR/name.EXT (EXT: json for vad/stt, wav for\n"
                    "tts/sts; for tts the inputs are text files). Paths are made absolute (links kept) so workers\n"
                    "anywhere on the same file system find them. Prints the number of jobs queued.\n",
        .opts = flags,
        .n_opts = (int)(sizeof flags / sizeof flags[0]),
        .positional = paths,
        .max_positional = argc,
        .n_positional = &n_paths,
    };
    int parsed = cli_parse(&spec, argc, argv);
    if (parsed >= 0) return parsed;
    if (!qp.stream || !task || !c.out_dir || n_paths == 0) {
        fprintf(stderr, "choir submit: --stream, --task, --out and at least one PATH are required\n");
        cli_usage(&spec, stderr);
        return 2;
    }
    char out_abs[PATH_MAX];
    if (!realpath(c.out_dir, out_abs)) {
        fprintf(stderr, "choir submit: output directory %s does not exist\n", c.out_dir);
        return 2;
    }
    c.out_dir = out_abs;
    if (!c.ext) c.ext = strcmp(task, "tts") == 0 || strcmp(task, "sts") == 0 ? "wav" : "json";
    snprintf(c.spec.task, sizeof c.spec.task, "%s", task);
    snprintf(c.spec.model, sizeof c.spec.model, "%s", model);
    snprintf(c.spec.options, sizeof c.spec.options, "%s", options);

    choir_err err = {0};
    int status = 1;
    c.q = choir_jobqueue_connect(&qp, &err);
    if (!c.q) goto fail;
    for (int i = 0; i < n_paths; i++)
        if (submit_path(&c, paths[i], &err)) goto fail;
    printf("%ld\n", c.queued);
    status = 0;
    goto done;
fail:
    fprintf(stderr, "choir submit: %s (%ld jobs queued before)\n", err.msg[0] ? err.msg : choir_strerror(err.code),
            c.queued);
done:
    choir_jobqueue_free(c.q);
    return status;
}
