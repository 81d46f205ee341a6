/* `choir pull`'s download logic (see hub.h). One curl handle per transfer,
 * files written to `<path>.part` and renamed only once complete and verified,
 * so a file under its real name is always whole. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <curl/curl.h>

#include "choir/alloc.h"
#include "choir/buf.h"
#include "choir/hub.h"

#define HUB_LISTING_MAX (16 << 20)
#define HUB_PATH_MAX 4096

typedef struct hub_file {
    const char *path;   /* borrowed from the listing's JSON */
    int64_t size;       /* -1 when the listing does not say */
    const char *sha256; /* LFS files only, else NULL */
} hub_file;

typedef struct mem_body {
    choir_buf data;
    int too_big;
} mem_body;

static size_t on_listing(char *ptr, size_t size, size_t nmemb, void *user)
{
    mem_body *b = user;
    size_t n = size * nmemb;
    if (b->data.len + n > HUB_LISTING_MAX) {
        b->too_big = 1;
        return 0;
    }
    return choir_buf_append(&b->data, ptr, n) == CHOIR_OK ? n : 0;
}

static int valid_repo(const char *repo)
{
    int slashes = 0;
    if (!repo || !*repo || repo[0] == '/' || strlen(repo) > 200)
        return 0;
    for (const char *p = repo; *p; p++) {
        if (*p == '/')
            slashes++;
        else if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                   strchr("._-", *p)))
            return 0;
    }
    return slashes <= 1 && repo[strlen(repo) - 1] != '/' && !strstr(repo, "..");
}

/* A repository path is safe when it stays inside the destination: relative,
 * no "." or ".." component, no backslash or control character. */
static int safe_path(const char *p)
{
    if (!*p || *p == '/' || strlen(p) > 1024)
        return 0;
    const char *seg = p;
    for (const char *c = p;; c++) {
        if (*c == '/' || *c == 0) {
            size_t n = (size_t)(c - seg);
            if (n == 0 || (n == 1 && seg[0] == '.') || (n == 2 && seg[0] == '.' && seg[1] == '.'))
                return 0;
            if (*c == 0)
                return 1;
            seg = c + 1;
        } else if ((unsigned char)*c < 0x20 || *c == '\\') {
            return 0;
        }
    }
}

/* Escapes each path segment for a URL, keeping the slashes. */
static int append_escaped(CURL *curl, char *url, size_t cap, const char *path)
{
    size_t len = strlen(url);
    const char *seg = path;
    for (;;) {
        const char *end = strchr(seg, '/');
        size_t n = end ? (size_t)(end - seg) : strlen(seg);
        char *e = curl_easy_escape(curl, seg, (int)n);
        if (!e)
            return -1;
        int w = snprintf(url + len, cap - len, "%s%s", e, end ? "/" : "");
        curl_free(e);
        if (w < 0 || (size_t)w >= cap - len)
            return -1;
        len += (size_t)w;
        if (!end)
            return 0;
        seg = end + 1;
    }
}

static int mkdirs_for(const char *file)
{
    char dir[HUB_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", file);
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(dir, 0755) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return 0;
}

static int64_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) ? (int64_t)st.st_size : -1;
}

typedef struct transfer {
    FILE *out;
    CURL *curl;
    int64_t offset;     /* bytes already in the .part file */
    int64_t received;
    int restarted;      /* the server ignored the Range request: started over */
    int failed_write;
    const char *name;
    int64_t total;
    int progress;
    double last_draw;
} transfer;

static void draw(transfer *t, int done)
{
    if (!t->progress)
        return;
    int64_t have = t->offset + t->received;
    int pct = t->total > 0 ? (int)(100 * have / t->total) : 0;
    int bars = pct / 4;
    fprintf(stderr, "\r  %-32.32s [%-25.*s] %3d%% %8.1f MB%s", t->name, bars, "#########################", pct,
            (double)have / 1e6, done ? "\n" : "");
}

static size_t on_file_data(char *ptr, size_t size, size_t nmemb, void *user)
{
    transfer *t = user;
    size_t n = size * nmemb;
    if (t->received == 0 && t->offset > 0 && !t->restarted) {
        long code = 0;
        curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &code);
        if (code == 200) {
            /* a whole file came back: what the .part held is dropped */
            if (ftruncate(fileno(t->out), 0) != 0 || fseek(t->out, 0, SEEK_SET) != 0) {
                t->failed_write = 1;
                return 0;
            }
            t->offset = 0;
            t->restarted = 1;
        }
    }
    if (fwrite(ptr, 1, n, t->out) != n) {
        t->failed_write = 1;
        return 0;
    }
    t->received += (int64_t)n;
    double now = (double)t->received;
    if (now - t->last_draw > 256 * 1024) {
        t->last_draw = now;
        draw(t, 0);
    }
    return n;
}

static CURL *hub_curl(const char *url, struct curl_slist *headers)
{
    CURL *c = curl_easy_init();
    if (!c)
        return NULL;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "choir-pull/1");
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
    /* a stalled transfer (under 1 KB/s for 60 s) is treated as dropped */
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    if (headers)
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    return c;
}

static int verify(const hub_file *f, const char *path, choir_err *err)
{
    int64_t have = file_size(path);
    if (f->size >= 0 && have != f->size)
        return choir_err_set(err, CHOIR_EFORMAT, "%s: %lld bytes, the listing says %lld", f->path, (long long)have,
                             (long long)f->size);
    if (f->sha256) {
        char got[65];
        int rc = choir_hub_sha256_file(path, got, err);
        if (rc < 0)
            return rc;
        if (strcmp(got, f->sha256) != 0)
            return choir_err_set(err, CHOIR_EFORMAT, "%s: SHA-256 %s, the listing says %s", f->path, got, f->sha256);
    }
    return 0;
}

static int fetch_file(const char *base_url, const hub_file *f, const char *dest, struct curl_slist *headers,
                      const choir_hub_params *p, choir_hub_result *res, choir_err *err)
{
    char final_path[HUB_PATH_MAX], part[HUB_PATH_MAX + 8], url[8192];
    snprintf(final_path, sizeof final_path, "%s/%s", dest, f->path);
    snprintf(part, sizeof part, "%s.part", final_path);
    if (file_size(final_path) >= 0 && verify(f, final_path, NULL) == 0) {
        res->skipped++;
        return 0;
    }
    if (mkdirs_for(final_path) != 0)
        return choir_err_set(err, CHOIR_EIO, "%s: cannot create its directory", final_path);
    int retries = p->retries > 0 ? p->retries : 3;
    int rc = CHOIR_EIO;
    for (int attempt = 0; attempt <= retries; attempt++) {
        int64_t offset = file_size(part);
        if (offset < 0 || (f->size >= 0 && offset > f->size))
            offset = 0;
        if (f->size >= 0 && offset == f->size && offset > 0) {
            rc = 0;
            break;
        }
        FILE *out = fopen(part, offset > 0 ? "r+b" : "wb");
        if (!out || fseek(out, (long)offset, SEEK_SET) != 0) {
            if (out)
                fclose(out);
            return choir_err_set(err, CHOIR_EIO, "%s: cannot write", part);
        }
        snprintf(url, sizeof url, "%s", base_url);
        CURL *c = hub_curl(url, headers);
        if (!c || append_escaped(c, url, sizeof url, f->path) != 0) {
            fclose(out);
            curl_easy_cleanup(c);
            return choir_err_set(err, CHOIR_ENOMEM, "%s: cannot build the request", f->path);
        }
        curl_easy_setopt(c, CURLOPT_URL, url);
        transfer t = {.out = out, .curl = c, .offset = offset, .name = f->path, .total = f->size,
                      .progress = p->progress};
        char range[64];
        if (offset > 0) {
            snprintf(range, sizeof range, "%lld-", (long long)offset);
            curl_easy_setopt(c, CURLOPT_RANGE, range);
        }
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_file_data);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
        CURLcode cc = curl_easy_perform(c);
        long code = 0;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
        curl_easy_cleanup(c);
        int closed = fclose(out) == 0;
        res->bytes += t.received;
        draw(&t, 1);
        if (t.failed_write || !closed)
            return choir_err_set(err, CHOIR_EIO, "%s: write failed (disk full?)", part);
        if (code == 404 || code == 401 || code == 403) {
            unlink(part);
            return choir_err_set(err, CHOIR_ENOTFOUND, "%s: HTTP %ld", url, code);
        }
        if (code == 416 && f->size >= 0 && offset == f->size) {
            rc = 0;
            break;
        }
        if (cc == CURLE_OK && (code == 200 || code == 206)) {
            rc = 0;
            break;
        }
        choir_err_set(err, CHOIR_EIO, "%s: %s (HTTP %ld)", f->path,
                      cc != CURLE_OK ? curl_easy_strerror(cc) : "unexpected status", code);
        if (code >= 400 && code < 500) {
            /* a client error will not change on retry; a bad range is started over */
            if (code != 416)
                return CHOIR_EIO;
            unlink(part);
        }
    }
    if (rc < 0)
        return rc;
    rc = verify(f, part, err);
    if (rc < 0) {
        unlink(part);
        return rc;
    }
    if (rename(part, final_path) != 0)
        return choir_err_set(err, CHOIR_EIO, "%s: cannot rename into place", final_path);
    res->downloaded++;
    return 0;
}

static int parse_listing(cJSON *root, hub_file **out, int *n_out, choir_err *err)
{
    const cJSON *sib = cJSON_GetObjectItemCaseSensitive(root, "siblings");
    if (!cJSON_IsArray(sib))
        return choir_err_set(err, CHOIR_EFORMAT, "repository listing has no \"siblings\" array");
    int n = cJSON_GetArraySize(sib);
    hub_file *files = choir_calloc(CHOIR_MEM_IO, (size_t)(n > 0 ? n : 1), sizeof *files);
    if (!files)
        return choir_err_set(err, CHOIR_ENOMEM, "out of memory");
    int k = 0;
    const cJSON *s;
    cJSON_ArrayForEach(s, sib)
    {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(s, "rfilename");
        if (!cJSON_IsString(name) || !safe_path(name->valuestring)) {
            choir_free(files);
            return choir_err_set(err, CHOIR_EFORMAT, "repository listing has an unsafe or missing file name: %s",
                                 cJSON_IsString(name) ? name->valuestring : "(none)");
        }
        hub_file *f = &files[k++];
        f->path = name->valuestring;
        f->size = -1;
        const cJSON *size = cJSON_GetObjectItemCaseSensitive(s, "size");
        if (cJSON_IsNumber(size) && size->valuedouble >= 0)
            f->size = (int64_t)size->valuedouble;
        const cJSON *lfs = cJSON_GetObjectItemCaseSensitive(s, "lfs");
        const cJSON *sha = lfs ? cJSON_GetObjectItemCaseSensitive(lfs, "sha256") : NULL;
        if (cJSON_IsString(sha)) {
            if (strlen(sha->valuestring) != 64) {
                choir_free(files);
                return choir_err_set(err, CHOIR_EFORMAT, "%s: malformed SHA-256 in the listing", f->path);
            }
            f->sha256 = sha->valuestring;
        }
        const cJSON *lsize = lfs ? cJSON_GetObjectItemCaseSensitive(lfs, "size") : NULL;
        if (cJSON_IsNumber(lsize) && lsize->valuedouble >= 0)
            f->size = (int64_t)lsize->valuedouble;
    }
    *out = files;
    *n_out = k;
    return 0;
}

int choir_hub_pull(const char *repo, const char *dest, const choir_hub_params *params, choir_hub_result *result,
                   choir_err *err)
{
    choir_hub_params p = params ? *params : (choir_hub_params){0};
    choir_hub_result res = {0};
    if (!valid_repo(repo))
        return choir_err_set(err, CHOIR_EINVAL, "\"%s\" is not a repository name (owner/name)", repo ? repo : "");
    if (!dest || !*dest || strlen(dest) > 2048)
        return choir_err_set(err, CHOIR_EINVAL, "bad destination directory");
    if (!p.endpoint)
        p.endpoint = getenv("HF_ENDPOINT");
    if (!p.endpoint || !*p.endpoint)
        p.endpoint = "https://huggingface.co";
    if (!p.revision)
        p.revision = "main";
    if (!p.token)
        p.token = getenv("HF_TOKEN");
    size_t eplen = strlen(p.endpoint);
    while (eplen > 0 && p.endpoint[eplen - 1] == '/')
        eplen--;

    struct curl_slist *headers = NULL;
    char auth[1024];
    if (p.token && *p.token) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", p.token);
        headers = curl_slist_append(NULL, auth);
    }
    mem_body listing = {.data = CHOIR_BUF_INIT(CHOIR_MEM_IO)};
    cJSON *root = NULL;
    hub_file *files = NULL;
    int n_files = 0, rc = 0;
    char url[8192];
    CURL *c = hub_curl("", headers);
    char *rev = c ? curl_easy_escape(c, p.revision, 0) : NULL;
    if (!rev) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "out of memory");
        goto done;
    }
    snprintf(url, sizeof url, "%.*s/api/models/%s/revision/%s?blobs=true", (int)eplen, p.endpoint, repo, rev);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_listing);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &listing);
    CURLcode cc = curl_easy_perform(c);
    long code = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    if (cc != CURLE_OK) {
        rc = choir_err_set(err, CHOIR_EIO, "%s: %s", url, listing.too_big ? "listing too large" : curl_easy_strerror(cc));
        goto done;
    }
    if (code == 401 || code == 403 || code == 404) {
        rc = choir_err_set(err, CHOIR_ENOTFOUND, "%s at revision %s: not found (HTTP %ld)", repo, p.revision, code);
        goto done;
    }
    if (code != 200) {
        rc = choir_err_set(err, CHOIR_EIO, "%s: HTTP %ld", url, code);
        goto done;
    }
    root = listing.data.data ? cJSON_ParseWithLength(listing.data.data, listing.data.len) : NULL;
    if (!root) {
        rc = choir_err_set(err, CHOIR_EFORMAT, "%s: the listing is not JSON", url);
        goto done;
    }
    rc = parse_listing(root, &files, &n_files, err);
    if (rc < 0)
        goto done;
    if (mkdir(dest, 0755) != 0 && errno != EEXIST) {
        rc = choir_err_set(err, CHOIR_EIO, "%s: cannot create", dest);
        goto done;
    }
    /* the commit the listing resolved to, so every file comes from one revision */
    const cJSON *sha = cJSON_GetObjectItemCaseSensitive(root, "sha");
    char *pinned = curl_easy_escape(c, cJSON_IsString(sha) ? sha->valuestring : p.revision, 0);
    if (!pinned) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "out of memory");
        goto done;
    }
    char base[4096];
    snprintf(base, sizeof base, "%.*s/%s/resolve/%s/", (int)eplen, p.endpoint, repo, pinned);
    curl_free(pinned);
    res.files = n_files;
    for (int i = 0; i < n_files && rc == 0; i++)
        rc = fetch_file(base, &files[i], dest, headers, &p, &res, err);
done:
    if (result)
        *result = res;
    choir_free(files);
    cJSON_Delete(root);
    choir_buf_free(&listing.data);
    curl_free(rev);
    curl_easy_cleanup(c);
    curl_slist_free_all(headers);
    return rc;
}
