/* Status codes and error messages. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "choir/error.h"

const char *choir_strerror(int status) {
    switch (status) {
    case CHOIR_OK: return "ok";
    case CHOIR_EINVAL: return "invalid argument";
    case CHOIR_ENOMEM: return "out of memory";
    case CHOIR_EIO: return "input/output error";
    case CHOIR_EFORMAT: return "corrupt or truncated data";
    case CHOIR_EUNSUPPORTED: return "unsupported";
    case CHOIR_ENOTFOUND: return "not found";
    case CHOIR_ESHAPE: return "wrong shape or type";
    case CHOIR_ETOOBIG: return "too large";
    case CHOIR_EBUSY: return "busy, try again later";
    case CHOIR_ETIMEDOUT: return "timed out";
    case CHOIR_ECANCELED: return "cancelled";
    case CHOIR_EINTERNAL: return "internal error";
    default: return "unknown error";
    }
}

int choir_err_set(choir_err *err, int code, const char *fmt, ...) {
    if (!err) return code;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return code;
}

int choir_err_prefix(choir_err *err, const char *fmt, ...) {
    if (!err) return CHOIR_EINTERNAL;
    char prefix[CHOIR_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    char old[CHOIR_ERR_MSG_MAX];
    memcpy(old, err->msg, sizeof old);
    old[sizeof old - 1] = '\0';
    snprintf(err->msg, sizeof err->msg, "%s: %s", prefix, old[0] ? old : choir_strerror(err->code));
    return err->code;
}

void choir_err_clear(choir_err *err) {
    if (!err) return;
    err->code = CHOIR_OK;
    err->msg[0] = '\0';
}
