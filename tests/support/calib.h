/* The engine-calibration check every model adapter's test makes (issue #21
 * part 2): through a real engine, each batch's measured arena peak is within
 * the arena it was admitted with, and a wrong estimate is corrected from
 * those peaks after a few batches.
 *
 * The adapter runs with its estimate scaled (ops wrapped: estimate times a
 * factor, from the loaded model's sizes even before the engine has loaded
 * it; run_batch recording each batch's arena capacity, high-water mark
 * and return code). Two runs, each on an engine of its own (a fresh
 * calibration factor), submitting one job at a time so every batch is one
 * request:
 *  - four times too large: every batch succeeds with a peak > 0 inside its
 *    arena, and the arena shrinks batch by batch (by a quarter over six);
 *  - too small (a third of the peak the first run measured): the first batch
 *    overflows, is retried with the room its arena showed it lacked (at
 *    least doubled; once or twice here) and the rest then hold.
 * Not thread-safe (one wrapped adapter at a time; tests are single-threaded
 * callers of the engine). */
#ifndef CHOIR_TESTS_CALIB_H
#define CHOIR_TESTS_CALIB_H

#include <stddef.h>

#include "choir/engine.h"
#include "choir/model.h"

#define TU_CAL_MAX 32

/* What one run recorded, batch by batch (retries included). */
typedef struct tu_cal_run {
    int batches;
    size_t cap[TU_CAL_MAX];  /* the arena the engine passed (its reservation) */
    size_t peak[TU_CAL_MAX]; /* the arena's high-water mark after the batch */
    int rc[TU_CAL_MAX];      /* run_batch's return */
    int status[TU_CAL_MAX];  /* each job's final status, in submission order */
} tu_cal_run;

/* Runs `rounds` copies of `job`, one at a time, through an engine (4 GiB
 * budget) serving `dir` with `ops` whose estimate is `scale` times its own,
 * and records every batch into *out. Each job must finish, every one with
 * the same status and none for want of memory (a model test checks outputs
 * itself: untrained weights may fail every request as malformed). */
void tu_cal_run_scaled(const choir_model_ops *ops, const char *dir, const choir_job *job,
                       double scale, int rounds, tu_cal_run *out);
/* The same, but a job may fail for want of memory (a model whose overflow
 * the arena did not see gets three doublings of its room: 8x at most); each
 * job's status is in out->status. */
void tu_cal_run_scaled_any(const choir_model_ops *ops, const char *dir, const choir_job *job,
                           double scale, int rounds, tu_cal_run *out);

/* Both runs with their checks (cmocka asserts), printing each batch's arena
 * and peak under `name`. Returns the first batch's measured peak. */
size_t tu_cal_check(const char *name, const choir_model_ops *ops, const char *dir,
                    const choir_job *job);

#endif
