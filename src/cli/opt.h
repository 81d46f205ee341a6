/* The commands' option parser: a command describes its flags in a table
 * (name, kind, where the value goes, bounds, usage text) and gets parsing,
 * range checks, messages and the usage's option lines from it. Numbers and
 * sizes are read by choir/parse.h, engine flags (when the command takes them)
 * by choir_engine_apply_option, so a flag means the same in every command. */
#ifndef CHOIR_CLI_OPT_H
#define CHOIR_CLI_OPT_H

#include <stdio.h>

#include "choir/engine.h"

typedef enum cli_kind {
    CLI_FLAG,   /* no value: *(int *)dest = 1 */
    CLI_STRING, /* *(const char **)dest = the value (borrowed from argv) */
    CLI_INT,    /* a whole number in [lo, hi]: *(int *)dest */
    CLI_FLOAT,  /* a number in [lo, hi]: *(float *)dest */
    CLI_DOUBLE, /* a number in [lo, hi]: *(double *)dest */
    CLI_SIZE,   /* bytes (choir_parse_size), > 0: *(int64_t *)dest */
    CLI_U64,    /* a whole number, decimal or 0x hex, 0..2^64-1 (seeds): *(uint64_t *)dest */
    CLI_LIST,   /* repeatable: each value appended to *(cli_list *)dest */
    CLI_CHOICE, /* one of the words of `arg` ("cpu|cuda"): *(int *)dest = its index */
    CLI_ENGINE, /* one engine flag (its parser, bounds and message) applied at once to
                   *(choir_engine_params *)dest, for a command that takes only some */
} cli_kind;

/* The values of a repeatable flag, in order; `items` has room for `cap`. */
typedef struct cli_list {
    const char **items;
    int cap;
    int n;
} cli_list;

typedef struct cli_opt {
    const char *name; /* "--threshold" */
    cli_kind kind;
    void *dest;
    double lo, hi;    /* CLI_INT, CLI_FLOAT, CLI_DOUBLE; -INFINITY, INFINITY: any number
                         (a value a model bounds itself, such as a chunk length) */
    const char *arg;  /* the value's placeholder in the usage ("T"); NULL for a flag;
                         CLI_CHOICE: the words, '|' between them */
    const char *help; /* one usage line; "\n" starts an indented continuation line */
} cli_opt;

typedef struct cli_spec {
    const char *cmd;        /* "vad": messages say "choir vad: ..." */
    const char *synopsis;   /* usage text above the option lines, ends with "\n" */
    const cli_opt *opts;
    int n_opts;
    /* Arguments that are not options (a lone "-" counts as one): up to
     * max_positional of them are stored in positional[]; NULL takes none. */
    const char **positional;
    int max_positional;
    int *n_positional;
    const char *positional_what; /* "input file": names them in messages */
    /* When set, flags of the engine's table are taken too, into this: each
     * checked where it stands, all applied after the last argument, --profile
     * first whatever its place (so a profile never undoes another flag). */
    choir_engine_params *engine;
} cli_spec;

/* Parses argv[1..argc). Returns -1 when the command should go on, else the
 * exit code it should return: 0 after --help / -h (usage on stdout), 2 after
 * a bad or unknown option (message, and for an unknown one the usage, on
 * stderr). */
int cli_parse(const cli_spec *s, int argc, char **argv);
/* Writes the synopsis and one line per option (and the engine's options). */
void cli_usage(const cli_spec *s, FILE *f);

/* Reads a list flag's value ("1,8,32"): 1..cap comma-separated numbers,
 * each read by choir_parse_number within [lo, hi] (whole when asked), into
 * out[]. Returns the count, or -1 for an empty item, more than cap items or
 * an item that is not such a number (the command says so in its words). */
int cli_parse_numbers(const char *s, double lo, double hi, int whole, double *out, int cap);
/* The same for whole numbers into an int array (lo, hi within int). */
int cli_parse_ints(const char *s, int lo, int hi, int *out, int cap);

#endif
