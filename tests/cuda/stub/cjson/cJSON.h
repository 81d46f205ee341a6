/* Stand-in for libcjson's header in the standalone GPU-machine build: choir's
 * quant.h names the type, and nothing built there parses JSON. */
#ifndef CHOIR_STUB_CJSON_H
#define CHOIR_STUB_CJSON_H
typedef struct cJSON cJSON;
#endif
