/* choir/error.h: status codes and error messages.
 *
 * Library functions return an int status: 0 (CHOIR_OK) on success, a negative
 * CHOIR_E* code on failure. Functions that can fail for a reason worth telling a
 * person take a `choir_err *err` as their last argument and fill it in; passing
 * NULL is allowed and drops the message. Constructors return NULL on failure and
 * fill `err`. */
#ifndef CHOIR_ERROR_H
#define CHOIR_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum choir_status {
    CHOIR_OK = 0,
    CHOIR_EINVAL = -1,       /* an argument is out of range or malformed */
    CHOIR_ENOMEM = -2,       /* an allocation failed */
    CHOIR_EIO = -3,          /* reading or writing a file or socket failed */
    CHOIR_EFORMAT = -4,      /* a file or stream is corrupt or truncated */
    CHOIR_EUNSUPPORTED = -5, /* well-formed, but something choir does not handle */
    CHOIR_ENOTFOUND = -6,    /* a file, tensor, model or key is missing */
    CHOIR_ESHAPE = -7,       /* a tensor's shape or dtype is not what was expected */
    CHOIR_ETOOBIG = -8,      /* a size limit was exceeded */
    CHOIR_EBUSY = -9,        /* refused for load or memory; retry later */
    CHOIR_ETIMEDOUT = -10,   /* a deadline passed */
    CHOIR_ECANCELED = -11,   /* the caller cancelled */
    CHOIR_EINTERNAL = -12    /* a bug: an invariant did not hold */
} choir_status;

/* A static, human-readable name for a status code ("invalid argument", ...).
 * Never NULL; unknown codes give "unknown error". */
const char *choir_strerror(int status);

#define CHOIR_ERR_MSG_MAX 512

/* The message that goes with a failed call. `code` is the status returned. */
typedef struct choir_err {
    int code;
    char msg[CHOIR_ERR_MSG_MAX];
} choir_err;

/* Fills `err` (when not NULL) with `code` and a printf-style message, and
 * returns `code`, so that `return choir_err_set(err, CHOIR_EFORMAT, "...")` reads
 * well. */
int choir_err_set(choir_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefixes the message already in `err` with more context ("model.safetensors: ...").
 * Returns err->code (or CHOIR_EINTERNAL when err is NULL). */
int choir_err_prefix(choir_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Resets `err` to CHOIR_OK and an empty message. NULL is a no-op. */
void choir_err_clear(choir_err *err);

#ifdef __cplusplus
}
#endif
#endif
