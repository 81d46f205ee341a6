/* choir/hub.h: downloading a model repository from the Hugging Face Hub (or a server with
 * the same URL layout): the file list from
 *   GET {endpoint}/api/models/{repo}/revision/{revision}?blobs=true
 * and each file from
 *   GET {endpoint}/{repo}/resolve/{revision}/{path}
 * Files land in `dest` under their repository paths. A file already there with
 * the listed size (and SHA-256, for LFS files) is skipped; an interrupted
 * download continues from its `.part` file with an HTTP Range request; LFS
 * files are checked against the SHA-256 the Hub lists before they are renamed
 * into place. */
#ifndef CHOIR_HUB_H
#define CHOIR_HUB_H

#include <stddef.h>
#include <stdint.h>

#include "choir/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct choir_hub_params {
    const char *endpoint; /* NULL: $HF_ENDPOINT, else https://huggingface.co */
    const char *revision; /* NULL: "main" */
    const char *token;    /* NULL: $HF_TOKEN (sent as a Bearer token when set) */
    int progress;         /* 1: draw a progress bar on stderr */
    int retries;          /* attempts per file after a dropped transfer (0 = 3) */
} choir_hub_params;

typedef struct choir_hub_result {
    int files;            /* files in the repository */
    int downloaded;       /* files fetched (wholly or resumed) */
    int skipped;          /* files already present and verified */
    int64_t bytes;        /* bytes transferred */
} choir_hub_result;

/* Pulls `repo` ("owner/name") into directory `dest` (created). Returns 0, or
 * CHOIR_ENOTFOUND (repository or revision unknown), CHOIR_EIO (network,
 * disk), CHOIR_EFORMAT (bad listing, unsafe path, checksum or size
 * mismatch), CHOIR_EINVAL (bad arguments); err names the file. */
int choir_hub_pull(const char *repo, const char *dest, const choir_hub_params *params, choir_hub_result *result,
                   choir_err *err);

/* SHA-256 of a file as 64 lowercase hex digits in out[65]. 0 or CHOIR_EIO. */
int choir_hub_sha256_file(const char *path, char out[65], choir_err *err);

#ifdef __cplusplus
}
#endif
#endif
