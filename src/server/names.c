/* OpenAI's names on choir's models and voices.
 *
 * A client written for OpenAI asks for "tts-1" or "whisper-1" and for voices
 * such as "alloy". Model names resolve in this order: a registered model id;
 * an alias given with choir_server_add_alias (`--alias NAME=MODEL`); one of
 * OpenAI's model names, which stands for the first registered model that does
 * its task (models register in sorted order, so the choice is stable). Voice
 * names resolve against the voices in the model directory's voices/ folder
 * (NAME.bin, NAME.pt or NAME.safetensors, as the Kokoro adapter reads them):
 * the model's own name, an alias from choir_server_add_voice_alias, or one of
 * OpenAI's voice names through a table of Kokoro voices of a similar kind. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "choir/alloc.h"
#include "server/server_internal.h"

/* OpenAI's model names and the task each stands for. */
static const struct {
    const char *name;
    choir_task task;
} openai_models[] = {
    {"tts-1", CHOIR_TASK_TTS},
    {"tts-1-hd", CHOIR_TASK_TTS},
    {"gpt-4o-mini-tts", CHOIR_TASK_TTS},
    {"whisper-1", CHOIR_TASK_STT},
    {"gpt-4o-transcribe", CHOIR_TASK_STT},
    {"gpt-4o-mini-transcribe", CHOIR_TASK_STT},
};

/* OpenAI's voices, each with Kokoro voices of a similar kind (tried in
 * order), and the kind of voice to fall back to ('f' or 'm', the second
 * letter of Kokoro's names: af_, bf_, am_, bm_) when none of them is there. */
static const struct {
    const char *name;
    const char *candidates[3];
    char fallback;
} openai_voices[] = {
    {"alloy", {"af_alloy", "af_heart", NULL}, 'f'},
    {"ash", {"am_michael", "am_adam", NULL}, 'm'},
    {"ballad", {"bm_lewis", "bm_george", NULL}, 'm'},
    {"coral", {"af_heart", "af_bella", NULL}, 'f'},
    {"echo", {"am_echo", "am_adam", NULL}, 'm'},
    {"fable", {"bm_fable", "bm_george", NULL}, 'm'},
    {"onyx", {"am_onyx", "am_adam", NULL}, 'm'},
    {"nova", {"af_nova", "af_heart", NULL}, 'f'},
    {"sage", {"af_sarah", "af_heart", NULL}, 'f'},
    {"shimmer", {"af_bella", "af_heart", NULL}, 'f'},
    {"verse", {"am_puck", "am_adam", NULL}, 'm'},
    {"marin", {"af_kore", "af_heart", NULL}, 'f'},
    {"cedar", {"am_liam", "am_adam", NULL}, 'm'},
};

static int add_pair(srv_name_pair **pairs, int *n, int *cap, const char *name, const char *target, choir_err *err)
{
    if (!name || !*name || !target || !*target || strlen(name) >= SRV_MODEL_ID_MAX ||
        strlen(target) >= SRV_MODEL_ID_MAX)
        return choir_err_set(err, CHOIR_EINVAL, "alias \"%s\": name and target must be 1-%d characters",
                             name ? name : "", SRV_MODEL_ID_MAX - 1);
    for (int i = 0; i < *n; i++)
        if (strcmp((*pairs)[i].name, name) == 0) {
            snprintf((*pairs)[i].target, sizeof (*pairs)[i].target, "%s", target);
            return 0;
        }
    if (*n == *cap) {
        int ncap = *cap ? 2 * *cap : 8;
        srv_name_pair *grown = choir_realloc(*pairs, (size_t)ncap * sizeof *grown);
        if (!grown)
            return choir_err_set(err, CHOIR_ENOMEM, "out of memory");
        *pairs = grown;
        *cap = ncap;
    }
    srv_name_pair *p = &(*pairs)[(*n)++];
    snprintf(p->name, sizeof p->name, "%s", name);
    snprintf(p->target, sizeof p->target, "%s", target);
    return 0;
}

int choir_server_add_alias(choir_server *s, const char *name, const char *model_id, choir_err *err)
{
    pthread_mutex_lock(&s->lock);
    int rc = add_pair(&s->model_aliases, &s->n_model_aliases, &s->cap_model_aliases, name, model_id, err);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int choir_server_add_voice_alias(choir_server *s, const char *name, const char *voice, choir_err *err)
{
    pthread_mutex_lock(&s->lock);
    int rc = add_pair(&s->voice_aliases, &s->n_voice_aliases, &s->cap_voice_aliases, name, voice, err);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* The model an alias (--alias) names, into target; 1 when `name` is one. */
static int alias_target(choir_server *s, const char *name, char *target, size_t cap)
{
    int found = 0;
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < s->n_model_aliases && !found; i++)
        if (strcmp(s->model_aliases[i].name, name) == 0) {
            snprintf(target, cap, "%s", s->model_aliases[i].target);
            found = 1;
        }
    pthread_mutex_unlock(&s->lock);
    return found;
}

int srv_model_resolve(choir_server *s, const char *name, srv_model *out)
{
    if (srv_model_find(s, name, out) == 0)
        return 0;
    char target[SRV_MODEL_ID_MAX];
    if (alias_target(s, name, target, sizeof target))
        return srv_model_find(s, target, out);
    for (size_t i = 0; i < sizeof openai_models / sizeof openai_models[0]; i++)
        if (strcmp(openai_models[i].name, name) == 0)
            return srv_model_first(s, openai_models[i].task, out);
    return CHOIR_ENOTFOUND;
}

void srv_model_aliases_json(choir_server *s, const srv_model *m, cJSON *o)
{
    cJSON *names = cJSON_CreateArray();
    if (!names)
        return;
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < s->n_model_aliases; i++)
        if (strcmp(s->model_aliases[i].target, m->id) == 0)
            cJSON_AddItemToArray(names, cJSON_CreateString(s->model_aliases[i].name));
    pthread_mutex_unlock(&s->lock);
    /* OpenAI's names that reach m by default: not taken by an alias or a model */
    for (size_t i = 0; i < sizeof openai_models / sizeof openai_models[0]; i++) {
        char target[SRV_MODEL_ID_MAX];
        srv_model first;
        if (!alias_target(s, openai_models[i].name, target, sizeof target) &&
            srv_model_find(s, openai_models[i].name, NULL) < 0 &&
            srv_model_first(s, openai_models[i].task, &first) == 0 && strcmp(first.id, m->id) == 0)
            cJSON_AddItemToArray(names, cJSON_CreateString(openai_models[i].name));
    }
    cJSON_AddItemToObject(o, "aliases", names);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The extensions choir_kokoro_voice_load looks for, in its order. */
static const char *const voice_exts[] = {".bin", ".pt", ".safetensors"};

int srv_voices_list(const char *model_dir, srv_voices *out)
{
    memset(out, 0, sizeof *out);
    char path[SRV_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/voices", model_dir);
    DIR *d = opendir(path);
    if (!d)
        return 0;
    int cap = 0, rc = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name), stem = 0;
        if (de->d_name[0] == '.')
            continue;
        for (size_t e = 0; e < sizeof voice_exts / sizeof voice_exts[0]; e++) {
            size_t el = strlen(voice_exts[e]);
            if (len > el && strcmp(de->d_name + len - el, voice_exts[e]) == 0)
                stem = len - el;
        }
        if (stem == 0 || stem >= SRV_MODEL_ID_MAX)
            continue;
        if (out->n == cap) {
            int ncap = cap ? 2 * cap : 32;
            char **grown = choir_realloc(out->names, (size_t)ncap * sizeof *grown);
            if (!grown) {
                rc = CHOIR_ENOMEM;
                break;
            }
            out->names = grown;
            cap = ncap;
        }
        char *name = choir_alloc(CHOIR_MEM_IO, stem + 1);
        if (!name) {
            rc = CHOIR_ENOMEM;
            break;
        }
        memcpy(name, de->d_name, stem);
        name[stem] = 0;
        out->names[out->n++] = name;
    }
    closedir(d);
    if (out->n > 1)
        qsort(out->names, (size_t)out->n, sizeof *out->names, cmp_str);
    /* the same voice in two formats is one voice */
    int w = 0;
    for (int i = 0; i < out->n; i++) {
        if (w > 0 && strcmp(out->names[w - 1], out->names[i]) == 0)
            choir_free(out->names[i]);
        else
            out->names[w++] = out->names[i];
    }
    out->n = w;
    if (rc < 0)
        srv_voices_free(out);
    return rc;
}

void srv_voices_free(srv_voices *v)
{
    for (int i = 0; v && i < v->n; i++)
        choir_free(v->names[i]);
    if (v) {
        choir_free(v->names);
        memset(v, 0, sizeof *v);
    }
}

int srv_voices_has(const srv_voices *v, const char *name)
{
    for (int i = 0; i < v->n; i++)
        if (strcmp(v->names[i], name) == 0)
            return 1;
    return 0;
}

/* What OpenAI voice `name` becomes among the model's voices `v`, or NULL. */
static const char *openai_voice(const srv_voices *v, const char *name)
{
    for (size_t i = 0; i < sizeof openai_voices / sizeof openai_voices[0]; i++) {
        if (strcmp(openai_voices[i].name, name) != 0)
            continue;
        for (int k = 0; k < 3 && openai_voices[i].candidates[k]; k++)
            if (srv_voices_has(v, openai_voices[i].candidates[k]))
                return openai_voices[i].candidates[k];
        for (int k = 0; k < v->n; k++)
            if (strlen(v->names[k]) > 2 && v->names[k][1] == openai_voices[i].fallback && v->names[k][2] == '_')
                return v->names[k];
        return v->n ? v->names[0] : NULL;
    }
    return NULL;
}

const char *srv_voice_alias(choir_server *s, const srv_voices *v, const char *name, char *buf, size_t cap)
{
    const char *found = NULL;
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < s->n_voice_aliases; i++)
        if (strcmp(s->voice_aliases[i].name, name) == 0) {
            snprintf(buf, cap, "%s", s->voice_aliases[i].target);
            found = buf;
        }
    pthread_mutex_unlock(&s->lock);
    if (!found)
        found = openai_voice(v, name);
    return found;
}

/* One term of a mix ("af_heart(2)" or "af_heart") without its weight. */
static size_t term_name(const char *term, size_t len)
{
    const char *paren = memchr(term, '(', len);
    return paren ? (size_t)(paren - term) : len;
}

int srv_voice_resolve(choir_server *s, const srv_voices *v, const char *voice, char *out, size_t cap, char *msg,
                      size_t msg_cap)
{
    snprintf(out, cap, "%s", voice);
    if (v->n == 0 || srv_voices_has(v, voice))
        return 0;
    char alias[SRV_MODEL_ID_MAX];
    const char *mapped = srv_voice_alias(s, v, voice, alias, sizeof alias);
    if (mapped) {
        snprintf(out, cap, "%s", mapped);
        return 0;
    }
    /* A mix ("af_heart(2)+am_adam", "a,b"): each of its names must be the model's. */
    const char *p = voice;
    while (*p) {
        size_t len = strcspn(p, "+,");
        size_t name_len = term_name(p, len);
        char name[SRV_MODEL_ID_MAX];
        int ok = name_len > 0 && name_len < sizeof name;
        if (ok) {
            memcpy(name, p, name_len);
            name[name_len] = 0;
            ok = srv_voices_has(v, name);
        }
        if (!ok) {
            size_t w = (size_t)snprintf(msg, msg_cap, "unknown voice \"%.*s\"; this model's voices are",
                                        (int)(name_len < 64 ? name_len : 64), p);
            for (int i = 0; i < v->n && w < msg_cap; i++)
                w += (size_t)snprintf(msg + w, msg_cap - w, "%s %s", i ? "," : "", v->names[i]);
            if (w < msg_cap)
                snprintf(msg + w, msg_cap - w, " (and OpenAI's voice names, which map to them)");
            return CHOIR_ENOTFOUND;
        }
        p += len;
        if (*p)
            p++;
    }
    return 0;
}

static cJSON *voices_of(choir_server *s, const srv_model *m, cJSON *data, int with_aliases)
{
    srv_voices v;
    if (srv_voices_list(m->dir, &v) < 0)
        return NULL;
    for (int i = 0; i < v.n; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "id", v.names[i]);
        cJSON_AddStringToObject(o, "object", "voice");
        cJSON_AddStringToObject(o, "model", m->id);
        cJSON_AddItemToArray(data, o);
    }
    for (size_t i = 0; with_aliases && v.n && i < sizeof openai_voices / sizeof openai_voices[0]; i++) {
        char buf[SRV_MODEL_ID_MAX];
        const char *to = srv_voice_alias(s, &v, openai_voices[i].name, buf, sizeof buf);
        if (!to || srv_voices_has(&v, openai_voices[i].name))
            continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "id", openai_voices[i].name);
        cJSON_AddStringToObject(o, "object", "voice");
        cJSON_AddStringToObject(o, "model", m->id);
        cJSON_AddStringToObject(o, "alias_of", to);
        cJSON_AddItemToArray(data, o);
    }
    srv_voices_free(&v);
    return data;
}

void srv_model_voices_json(choir_server *s, const srv_model *m, cJSON *o)
{
    (void)s;
    if (!(m->tasks & CHOIR_TASK_BIT(CHOIR_TASK_TTS)))
        return;
    srv_voices v;
    if (srv_voices_list(m->dir, &v) < 0)
        return;
    cJSON *names = cJSON_AddArrayToObject(o, "voices");
    for (int i = 0; names && i < v.n; i++)
        cJSON_AddItemToArray(names, cJSON_CreateString(v.names[i]));
    srv_voices_free(&v);
}

enum MHD_Result srv_handle_voices(choir_server *s, struct MHD_Connection *c)
{
    const char *want = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "model");
    srv_model only;
    if (want && *want && srv_model_resolve(s, want, &only) < 0)
        return srv_reply_error(s, c, 404, "model", "model_not_found", "the model \"%.128s\" does not exist", want);
    int n = 0;
    srv_model *models = srv_models_list(s, &n);
    if (n < 0)
        return srv_reply_error(s, c, 500, NULL, NULL, "out of memory");
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(root, "data");
    for (int i = 0; i < n; i++) {
        const srv_model *m = &models[i];
        if (!(m->tasks & CHOIR_TASK_BIT(CHOIR_TASK_TTS)))
            continue;
        if (want && *want && strcmp(m->id, only.id) != 0)
            continue;
        voices_of(s, m, data, 1);
    }
    choir_free(models);
    return srv_reply_json(s, c, 200, root);
}
