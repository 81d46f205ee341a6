/* choir/log.h: leveled logging with a callback.
 *
 * By default messages at CHOIR_LOG_INFO and above go to stderr. A program (the
 * server, a test) may install its own callback. The callback and the level are
 * process-wide; set them before starting threads. */
#ifndef CHOIR_LOG_H
#define CHOIR_LOG_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum choir_log_level {
    CHOIR_LOG_DEBUG = 0,
    CHOIR_LOG_INFO = 1,
    CHOIR_LOG_WARN = 2,
    CHOIR_LOG_ERROR = 3,
    CHOIR_LOG_NONE = 4
} choir_log_level;

/* Receives one formatted message, without a trailing newline. May be called from
 * any thread; it must be thread-safe. */
typedef void (*choir_log_fn)(choir_log_level level, const char *msg, void *user);

/* Installs `fn` (NULL restores the stderr default). */
void choir_log_set_callback(choir_log_fn fn, void *user);
/* Messages below `level` are dropped before formatting. */
void choir_log_set_level(choir_log_level level);
choir_log_level choir_log_get_level(void);

void choir_log(choir_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define CHOIR_LOGD(...) choir_log(CHOIR_LOG_DEBUG, __VA_ARGS__)
#define CHOIR_LOGI(...) choir_log(CHOIR_LOG_INFO, __VA_ARGS__)
#define CHOIR_LOGW(...) choir_log(CHOIR_LOG_WARN, __VA_ARGS__)
#define CHOIR_LOGE(...) choir_log(CHOIR_LOG_ERROR, __VA_ARGS__)

#ifdef __cplusplus
}
#endif
#endif
