/* Stand-in for libcjson's header in the standalone GPU-machine build: choir's
 * quant.h names the type, and the SAM-Audio adapter and job code reached by
 * that build's engine case (a model probe, JSON anchors) call the few
 * functions declared here. Nothing built there parses JSON: the functions
 * (tests/cuda/stub/sam_engine_stubs.c) find nothing. */
#ifndef CHOIR_STUB_CJSON_H
#define CHOIR_STUB_CJSON_H
typedef struct cJSON {
    struct cJSON *next, *prev, *child;
    int type;
    char *valuestring;
    int valueint;
    double valuedouble;
    char *string;
} cJSON;

cJSON *cJSON_GetObjectItemCaseSensitive(const cJSON *object, const char *key);
cJSON *cJSON_GetArrayItem(const cJSON *array, int index);
int cJSON_GetArraySize(const cJSON *array);
int cJSON_IsString(const cJSON *item);
int cJSON_IsNumber(const cJSON *item);
int cJSON_IsArray(const cJSON *item);
void cJSON_Delete(cJSON *item);
#define cJSON_ArrayForEach(element, array) \
    for (element = (array) != NULL ? (array)->child : NULL; element != NULL; element = element->next)
#endif
