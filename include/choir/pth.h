/* choir/pth.h: reading PyTorch checkpoints (torch.save zip archives) without
 * Python and without running anything.
 *
 * The archive is memory-mapped; its pickle is read by a restricted unpickler
 * that knows only what torch.save writes for tensors inside nested dicts (and
 * lists/tuples). Any other global or opcode (os.system, arbitrary classes, ...)
 * is refused with an error naming it, so a hostile file can only be rejected.
 * Tensors come back as the same choir_st_tensor the safetensors reader gives,
 * so loaders treat both alike. A contiguous tensor whose storage is stored
 * uncompressed points into the mapping; a non-contiguous view (a transpose) or
 * a compressed entry is materialized once, row-major, at open.
 *
 * Names are the dict key path joined with '.': {"bert": {"module.x.weight": T}}
 * gives "bert.module.x.weight"; list/tuple members and integer keys use their
 * decimal index; a file that holds one bare tensor gives one tensor named "".
 * With CHOIR_PTH_NORMALIZE, a top-level "state_dict" or "model" dict is used as
 * the root (the rest, such as optimizer state, is skipped) and a "module."
 * prefix is removed from every key, giving "bert.x.weight" above: the names
 * published checkpoints use without their DataParallel wrapper. Legacy (pre-1.6,
 * non-zip) torch files are refused as unsupported. */
#ifndef CHOIR_PTH_H
#define CHOIR_PTH_H

#include <stddef.h>

#include "choir/error.h"
#include "choir/safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct choir_pth choir_pth;

#define CHOIR_PTH_NORMALIZE 1u

/* Opens `path` with names exactly as the key path. NULL (and err naming the
 * file and the problem) on failure. */
choir_pth *choir_pth_open(const char *path, choir_err *err);
/* As choir_pth_open, with CHOIR_PTH_* flags. */
choir_pth *choir_pth_open_flags(const char *path, unsigned flags, choir_err *err);
/* Reads an archive held in memory; `data` must stay valid and unchanged until
 * choir_pth_close. `label` names it in errors (NULL: "<memory>"). */
choir_pth *choir_pth_open_memory(const void *data, size_t len, unsigned flags, const char *label,
                                 choir_err *err);
/* Unmaps and frees everything; tensors from this handle become invalid. NULL is a no-op. */
void choir_pth_close(choir_pth *pth);

int choir_pth_count(const choir_pth *pth);
/* The i-th tensor in pickle (dict insertion) order; NULL when out of range.
 * Valid until choir_pth_close. */
const choir_st_tensor *choir_pth_at(const choir_pth *pth, int i);
/* The tensor named `name`, or NULL. */
const choir_st_tensor *choir_pth_find(const choir_pth *pth, const char *name);

#ifdef __cplusplus
}
#endif
#endif
