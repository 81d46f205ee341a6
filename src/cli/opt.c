/* The commands' option parser (opt.h). */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "choir/parse.h"
#include "cli/opt.h"

int cli_parse_numbers(const char *s, double lo, double hi, int whole, double *out, int cap)
{
    if (!s)
        return -1;
    int n = 0;
    for (const char *p = s;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[64];
        double v = 0;
        if (n == cap || len == 0 || len >= sizeof item)
            return -1;
        memcpy(item, p, len);
        item[len] = 0;
        if (choir_parse_number(item, lo, hi, whole, &v) < 0)
            return -1;
        out[n++] = v;
        if (!comma)
            return n;
        p = comma + 1;
    }
}

int cli_parse_ints(const char *s, int lo, int hi, int *out, int cap)
{
    double v[64];
    int n = cli_parse_numbers(s, lo, hi, 1, v, cap < 64 ? cap : 64);
    for (int i = 0; i < n; i++)
        out[i] = (int)v[i];
    return n;
}

void cli_usage(const cli_spec *s, FILE *f)
{
    fputs(s->synopsis, f);
    for (int i = 0; i < s->n_opts; i++) {
        const cli_opt *o = &s->opts[i];
        char flag[64];
        snprintf(flag, sizeof flag, "%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
        fprintf(f, "  %-20s", flag);
        if (strlen(flag) > 20)
            fprintf(f, "\n  %-20s", "");
        for (const char *h = o->help; *h;) {
            const char *nl = strchr(h, '\n');
            size_t n = nl ? (size_t)(nl - h) : strlen(h);
            fprintf(f, " %.*s\n", (int)n, h);
            h += n;
            if (*h == '\n' && *++h)
                fprintf(f, "  %-20s", "");
        }
    }
    if (s->engine)
        fprintf(f, "\nengine options (the profile's values unless given; --profile applies first):\n%s",
                choir_engine_options_help());
}

static int bad_value(const cli_spec *s, const cli_opt *o, const char *v)
{
    if (o->kind == CLI_SIZE)
        fprintf(stderr, "choir %s: %s needs a size like 512M or 8G, got '%s'\n", s->cmd, o->name, v ? v : "");
    else if (o->kind == CLI_U64)
        fprintf(stderr, "choir %s: %s needs a whole number, got '%s'\n", s->cmd, o->name, v ? v : "");
    else if (o->kind == CLI_CHOICE) {
        /* "--backend is cpu or cuda, got 'tpu'" */
        int words = 1;
        for (const char *w = o->arg; *w; w++)
            words += *w == '|';
        fprintf(stderr, "choir %s: %s is ", s->cmd, o->name);
        const char *w = o->arg;
        for (int k = 0; k < words; k++) {
            size_t n = strcspn(w, "|");
            fprintf(stderr, "%s%.*s", k == 0 ? "" : k == words - 1 ? " or " : ", ", (int)n, w);
            w += w[n] ? n + 1 : n;
        }
        fprintf(stderr, ", got '%s'\n", v ? v : "");
    } else if (isinf(o->lo) && isinf(o->hi))
        fprintf(stderr, "choir %s: %s needs a number, got '%s'\n", s->cmd, o->name, v ? v : "");
    else
        fprintf(stderr, "choir %s: %s needs %s in [%.10g, %.10g], got '%s'\n", s->cmd, o->name,
                o->kind == CLI_INT ? "a whole number" : "a number", o->lo, o->hi, v ? v : "");
    return 2;
}

/* Stores `v` for `o`; returns -1 (done) or an exit code. */
static int apply(const cli_spec *s, const cli_opt *o, const char *v)
{
    double x = 0;
    int64_t bytes = 0;
    switch (o->kind) {
    case CLI_FLAG:
        *(int *)o->dest = 1;
        return -1;
    case CLI_STRING:
        *(const char **)o->dest = v;
        return -1;
    case CLI_LIST: {
        cli_list *l = o->dest;
        if (l->n >= l->cap) {
            fprintf(stderr, "choir %s: %s at most %d times\n", s->cmd, o->name, l->cap);
            return 2;
        }
        l->items[l->n++] = v;
        return -1;
    }
    case CLI_SIZE:
        if (choir_parse_size(v, &bytes) < 0 || bytes <= 0)
            return bad_value(s, o, v);
        *(int64_t *)o->dest = bytes;
        return -1;
    case CLI_CHOICE: {
        int k = 0;
        for (const char *w = o->arg; *w; k++) {
            size_t n = strcspn(w, "|");
            if (strlen(v) == n && strncmp(w, v, n) == 0) {
                *(int *)o->dest = k;
                return -1;
            }
            w += w[n] ? n + 1 : n;
        }
        return bad_value(s, o, v);
    }
    case CLI_ENGINE: {
        choir_err err = {0};
        if (choir_engine_apply_option(o->dest, o->name, v, &err) > 0)
            return -1;
        fprintf(stderr, "choir %s: %s\n", s->cmd, err.msg[0] ? err.msg : "not an engine option");
        return 2;
    }
    case CLI_U64:
        if (choir_parse_u64(v, (uint64_t *)o->dest) < 0)
            return bad_value(s, o, v);
        return -1;
    case CLI_INT:
    case CLI_FLOAT:
    case CLI_DOUBLE:
        if (choir_parse_number(v, o->lo, o->hi, o->kind == CLI_INT, &x) < 0)
            return bad_value(s, o, v);
        if (o->kind == CLI_INT)
            *(int *)o->dest = (int)x;
        else if (o->kind == CLI_FLOAT)
            *(float *)o->dest = (float)x;
        else
            *(double *)o->dest = x;
        return -1;
    }
    return -1;
}

/* Engine flags are checked as they come and applied once the command line
 * is read, --profile first whatever its place: a profile replaces the
 * engine's fields with its defaults, which must not undo a flag given before
 * it. */
enum { MAX_ENGINE_FLAGS = 64 };

static int apply_engine_flags(const cli_spec *s, const char *const (*flags)[2], int n, const char *profile)
{
    choir_err err = {0};
    if (profile && choir_engine_apply_option(s->engine, "profile", profile, &err) < 0) {
        fprintf(stderr, "choir %s: %s\n", s->cmd, err.msg);
        return 2;
    }
    for (int i = 0; i < n; i++)
        if (choir_engine_apply_option(s->engine, flags[i][0], flags[i][1], &err) < 0) {
            fprintf(stderr, "choir %s: %s\n", s->cmd, err.msg);
            return 2;
        }
    return -1;
}

int cli_parse(const cli_spec *s, int argc, char **argv)
{
    if (s->n_positional)
        *s->n_positional = 0;
    const char *engine_flags[MAX_ENGINE_FLAGS][2];
    const char *profile = NULL;
    int n_engine = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            cli_usage(s, stdout);
            return 0;
        }
        if (a[0] != '-' || !a[1]) {
            if (!s->positional || *s->n_positional >= s->max_positional) {
                fprintf(stderr, "choir %s: unexpected argument '%s'%s%s%s\n", s->cmd, a,
                        s->positional_what ? " (one " : "", s->positional_what ? s->positional_what : "",
                        s->positional_what ? " only)" : "");
                return 2;
            }
            s->positional[(*s->n_positional)++] = a;
            continue;
        }
        const cli_opt *o = NULL;
        for (int k = 0; k < s->n_opts && !o; k++)
            if (strcmp(a, s->opts[k].name) == 0)
                o = &s->opts[k];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (o) {
            if (o->kind != CLI_FLAG) {
                if (!v) {
                    fprintf(stderr, "choir %s: %s needs a value\n", s->cmd, a);
                    return 2;
                }
                i++;
            }
            int rc = apply(s, o, v);
            if (rc >= 0)
                return rc;
            continue;
        }
        if (s->engine && v && strncmp(a, "--", 2) == 0) {
            choir_err err = {0};
            choir_engine_params scratch = choir_engine_default_params(CHOIR_PROFILE_DEFAULT);
            int applied = choir_engine_apply_option(&scratch, a, v, &err);
            if (applied < 0) {
                fprintf(stderr, "choir %s: %s\n", s->cmd, err.msg);
                return 2;
            }
            if (applied > 0) {
                i++;
                if (strcmp(a, "--profile") == 0) {
                    profile = v;
                } else if (n_engine == MAX_ENGINE_FLAGS) {
                    fprintf(stderr, "choir %s: more than %d engine flags\n", s->cmd, MAX_ENGINE_FLAGS);
                    return 2;
                } else {
                    engine_flags[n_engine][0] = a;
                    engine_flags[n_engine++][1] = v;
                }
                continue;
            }
        }
        fprintf(stderr, "choir %s: unknown or incomplete option '%s'\n", s->cmd, a);
        cli_usage(s, stderr);
        return 2;
    }
    return s->engine ? apply_engine_flags(s, (const char *const (*)[2])engine_flags, n_engine, profile) : -1;
}
