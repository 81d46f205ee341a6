/* /v1/models: list, show, register (POST) and withdraw (DELETE) models. */
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "choir/alloc.h"
#include "server/server_internal.h"

static cJSON *model_json(const srv_model *m)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "id", m->id);
    cJSON_AddStringToObject(o, "object", "model");
    cJSON_AddNumberToObject(o, "created", (double)m->created);
    cJSON_AddStringToObject(o, "owned_by", "choir");
    cJSON_AddStringToObject(o, "kind", m->kind ? m->kind : "unknown");
    cJSON *tasks = cJSON_AddArrayToObject(o, "tasks");
    for (int t = 0; t < CHOIR_TASK_COUNT; t++)
        if (m->tasks & CHOIR_TASK_BIT(t))
            cJSON_AddItemToArray(tasks, cJSON_CreateString(choir_task_name((choir_task)t)));
    return o;
}

/* Adds where the engine has the model, "replicas" and "devices" (["gpu0",
 * ...]), and its "status": "loaded", "not_loaded" (it loads on first use), or
 * "failed" with the "error" of its last load (no server path in it) until a
 * load succeeds. */
static void add_state(choir_server *s, const srv_model *m, cJSON *o)
{
    choir_engine_device dev[1 + CHOIR_ENGINE_MAX_GPUS];
    int n_dev = choir_engine_devices(s->engine, dev, 1 + CHOIR_ENGINE_MAX_GPUS);
    cJSON_AddNumberToObject(o, "replicas", m->replicas);
    cJSON *devs = cJSON_AddArrayToObject(o, "devices");
    for (int d = 0; devs && d < n_dev && d <= CHOIR_ENGINE_MAX_GPUS; d++)
        if (m->devices & (1u << d))
            cJSON_AddItemToArray(devs, cJSON_CreateString(dev[d].name));
    int failed = m->load_error[0] != 0;
    cJSON_AddStringToObject(o, "status", failed ? "failed" : m->replicas > 0 ? "loaded" : "not_loaded");
    if (failed) {
        char why[CHOIR_ERR_MSG_MAX];
        snprintf(why, sizeof why, "%s", m->load_error);
        srv_scrub_paths_quietly(s, why, sizeof why);
        cJSON_AddStringToObject(o, "error", why);
    }
}

/* The whole object of a model: OpenAI's fields, choir's, the names that
 * stand for it ("aliases", OpenAI's among them), its "voices" (TTS) and its
 * state in the engine. */
static cJSON *model_object(choir_server *s, const srv_model *m)
{
    cJSON *o = model_json(m);
    if (o) {
        srv_model_aliases_json(s, m, o);
        srv_model_voices_json(s, m, o);
        add_state(s, m, o);
    }
    return o;
}

static enum MHD_Result list_models(choir_server *s, struct MHD_Connection *c)
{
    int n = 0;
    srv_model *models = srv_models_list(s, &n);
    if (n < 0)
        return srv_reply_error(s, c, 500, NULL, NULL, "out of memory");
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(root, "data");
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(data, model_object(s, &models[i]));
    choir_free(models);
    return srv_reply_json(s, c, 200, root);
}

static enum MHD_Result add_model(choir_server *s, struct MHD_Connection *c, srv_conn *conn)
{
    cJSON *req = conn->body ? cJSON_ParseWithLength(conn->body, conn->len) : NULL;
    if (!cJSON_IsObject(req)) {
        cJSON_Delete(req);
        return srv_reply_error(s, c, 400, NULL, "invalid_json", "body must be a JSON object {\"path\": DIR}");
    }
    const cJSON *path = cJSON_GetObjectItemCaseSensitive(req, "path");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(req, "id");
    if (!cJSON_IsString(path) || !*path->valuestring || (id && !cJSON_IsString(id))) {
        cJSON_Delete(req);
        return srv_reply_error(s, c, 400, "path", NULL, "\"path\" (a model directory) is required; \"id\" is a string");
    }
    char dir[SRV_PATH_MAX];
    if (srv_admin_path(s, path->valuestring, dir, sizeof dir) < 0) {
        cJSON_Delete(req);
        return srv_reply_error(s, c, 403, "path", "path_not_allowed",
                               "\"path\" must be a directory inside one of the server's --models folders "
                               "(absolute, or relative to the folder)");
    }
    choir_err err = {0};
    int rc = choir_server_add_model(s, id ? id->valuestring : NULL, dir, &err);
    enum MHD_Result ret;
    srv_scrub_paths(s, err.msg, sizeof err.msg);
    if (rc == CHOIR_EINVAL && strstr(err.msg, "already registered")) {
        ret = srv_reply_error(s, c, 409, "id", "model_exists", "%s", err.msg);
    } else if (rc < 0) {
        ret = srv_reply_error(s, c, 400, "path", NULL, "%s", err.msg);
    } else {
        srv_model m;
        const char *mid = id ? id->valuestring : strrchr(dir, '/') + 1;
        if (srv_model_find(s, mid, &m) == 0)
            ret = srv_reply_json(s, c, 201, model_json(&m));
        else
            ret = srv_reply_error(s, c, 500, NULL, NULL, "model vanished while registering");
    }
    cJSON_Delete(req);
    return ret;
}

static enum MHD_Result remove_model(choir_server *s, struct MHD_Connection *c, const char *id)
{
    /* The model takes no new requests from here; its weights go once the work
     * already queued for it is done. */
    if (choir_engine_withdraw_model(s->engine, id, NULL) < 0)
        return srv_reply_error(s, c, 404, "model", "model_not_found", "no model \"%s\"", id);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", "model");
    cJSON_AddBoolToObject(o, "deleted", 1);
    return srv_reply_json(s, c, 200, o);
}

enum MHD_Result srv_handle_models(choir_server *s, struct MHD_Connection *c, const char *method, const char *url,
                                  srv_conn *conn)
{
    const char *id = strncmp(url, "/v1/models/", 11) == 0 ? url + 11 : NULL;
    if (id && !*id)
        id = NULL;
    int get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
    if (!id && get)
        return list_models(s, c);
    if (!id && strcmp(method, "POST") == 0)
        return add_model(s, c, conn);
    if (id && get) {
        srv_model m;
        if (srv_model_resolve(s, id, &m) < 0)
            return srv_reply_error(s, c, 404, "model", "model_not_found", "no model \"%s\"", id);
        return srv_reply_json(s, c, 200, model_object(s, &m));
    }
    if (id && strcmp(method, "DELETE") == 0)
        return remove_model(s, c, id);
    return srv_reply_error(s, c, 405, NULL, NULL, "%s is not allowed on %s", method, url);
}
