/* `choir pull REPO`: downloads a model repository from the Hugging Face Hub
 * into a models directory, resumably and with checksums (src/io/hub.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>

#include "choir/hub.h"
#include "cli/cli.h"
#include "cli/opt.h"

int choir_cmd_pull(int argc, char **argv)
{
    const char *repo = NULL, *to = NULL;
    choir_hub_params p = {0};
    int json = 0, quiet = 0;
    int n_repos = 0;
    const cli_opt flags[] = {
        {"--revision", CLI_STRING, &p.revision, 0, 0, "R", "branch, tag or commit (default main)"},
        {"--to", CLI_STRING, &to, 0, 0, "DIR", "destination directory"},
        {"--endpoint", CLI_STRING, &p.endpoint, 0, 0, "URL", "Hub address (default $HF_ENDPOINT or https://huggingface.co)"},
        {"--json", CLI_FLAG, &json, 0, 0, NULL, "print a JSON summary on stdout"},
        {"--quiet", CLI_FLAG, &quiet, 0, 0, NULL, "no progress bar"},
    };
    const cli_spec spec = {
        .cmd = "pull",
        .synopsis = "usage: choir pull REPO [--revision R] [--to DIR] [--endpoint URL] [--json] [--quiet]\n"
                    "\n"
                    "Downloads the Hugging Face Hub repository REPO (owner/name) into DIR\n"
                    "(default: models/NAME). Files already there and intact are kept; an\n"
                    "interrupted download resumes; LFS files are checked against their SHA-256.\n"
                    "Set HF_TOKEN for gated or private repositories.\n\n",
        .opts = flags,
        .n_opts = (int)(sizeof flags / sizeof flags[0]),
        .positional = &repo,
        .max_positional = 1,
        .n_positional = &n_repos,
        .positional_what = "repository",
    };
    int parsed = cli_parse(&spec, argc, argv);
    if (parsed >= 0) return parsed;
    if (!repo) {
        fprintf(stderr, "choir pull: no repository given (owner/name)\n");
        cli_usage(&spec, stderr);
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
