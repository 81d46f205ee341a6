/* `choir pull REPO`: downloads a model repository from the Hugging Face Hub
 * into a models directory, resumably and with checksums (src/io/hub.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>

#include "cli/cli.h"
#include "choir/hub.h"

static void pull_usage(FILE *f)
{
    fprintf(f, "usage: choir pull REPO [--revision R] [--to DIR] [--endpoint URL] [--json] [--quiet]\n"
               "\n"
               "Downloads the Hugging Face Hub repository REPO (owner/name) into DIR\n"
               "(default: models/NAME). Files already there and intact are kept; an\n"
               "interrupted download resumes; LFS files are checked against their SHA-256.\n"
               "\n"
               "  --revision R    branch, tag or commit (default main)\n"
               "  --to DIR        destination directory\n"
               "  --endpoint URL  Hub address (default $HF_ENDPOINT or https://huggingface.co)\n"
               "  --json          print a JSON summary on stdout\n"
               "  --quiet         no progress bar\n"
               "Set HF_TOKEN for gated or private repositories.\n");
}

int choir_cmd_pull(int argc, char **argv)
{
    const char *repo = NULL, *to = NULL;
    choir_hub_params p = {0};
    int json = 0, quiet = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            pull_usage(stdout);
            return 0;
        } else if (strcmp(a, "--json") == 0) {
            json = 1;
        } else if (strcmp(a, "--quiet") == 0) {
            quiet = 1;
        } else if ((strcmp(a, "--revision") == 0 || strcmp(a, "--to") == 0 || strcmp(a, "--endpoint") == 0) &&
                   i + 1 < argc) {
            const char *v = argv[++i];
            if (a[2] == 'r')
                p.revision = v;
            else if (a[2] == 't')
                to = v;
            else
                p.endpoint = v;
        } else if (a[0] != '-' && !repo) {
            repo = a;
        } else {
            fprintf(stderr, "choir pull: unexpected argument %s\n", a);
            pull_usage(stderr);
            return 2;
        }
    }
    if (!repo) {
        pull_usage(stderr);
        return 2;
    }
    char dest[4096];
    if (to) {
        snprintf(dest, sizeof dest, "%s", to);
    } else {
        const char *slash = strrchr(repo, '/');
        snprintf(dest, sizeof dest, "models/%s", slash ? slash + 1 : repo);
    }
    p.progress = !quiet && isatty(STDERR_FILENO);
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "choir pull: cannot initialise libcurl\n");
        return 1;
    }
    choir_hub_result res;
    choir_err err = {0};
    int rc = choir_hub_pull(repo, dest, &p, &res, &err);
    curl_global_cleanup();
    if (rc == CHOIR_EINVAL) {
        fprintf(stderr, "choir pull: %s\n", err.msg);
        return 2;
    }
    if (json)
        printf("{\"repo\":\"%s\",\"dir\":\"%s\",\"ok\":%s,\"files\":%d,\"downloaded\":%d,\"skipped\":%d,"
               "\"bytes\":%lld}\n",
               repo, dest, rc == 0 ? "true" : "false", res.files, res.downloaded, res.skipped,
               (long long)res.bytes);
    if (rc < 0) {
        fprintf(stderr, "choir pull: %s\n", err.msg);
        return 1;
    }
    if (!json && !quiet)
        fprintf(stderr, "choir pull: %s -> %s: %d files (%d downloaded, %d already there), %.1f MB transferred\n",
                repo, dest, res.files, res.downloaded, res.skipped, (double)res.bytes / 1e6);
    return 0;
}
