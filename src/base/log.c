/* Leveled logging. The callback and level are the process's only mutable log
 * state; they are set once at start-up, read with relaxed atomics after. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>

#include "choir/log.h"

static _Atomic(choir_log_fn) g_log_fn;
static _Atomic(void *) g_log_user;
static atomic_int g_log_level = CHOIR_LOG_INFO;

void choir_log_set_callback(choir_log_fn fn, void *user) {
    atomic_store(&g_log_user, user);
    atomic_store(&g_log_fn, fn);
}

void choir_log_set_level(choir_log_level level) { atomic_store(&g_log_level, (int)level); }

choir_log_level choir_log_get_level(void) { return (choir_log_level)atomic_load(&g_log_level); }

void choir_log(choir_log_level level, const char *fmt, ...) {
    if ((int)level < atomic_load(&g_log_level)) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    choir_log_fn fn = atomic_load(&g_log_fn);
    if (fn) {
        fn(level, msg, atomic_load(&g_log_user));
        return;
    }
    static const char *names[] = {"debug", "info", "warning", "error", ""};
    fprintf(stderr, "choir: %s: %s\n", names[level <= CHOIR_LOG_NONE ? level : CHOIR_LOG_ERROR], msg);
}
