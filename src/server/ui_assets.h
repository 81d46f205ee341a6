/* The web page `choir serve` shows at `/`: the files under web/, compiled into the binary by
 * tools/embed_assets.sh (which writes ui_assets.c), so the server needs no
 * files on disk and no build step beyond the C compiler. */
#ifndef CHOIR_SERVER_UI_ASSETS_H
#define CHOIR_SERVER_UI_ASSETS_H

#include <stddef.h>

/* Looks up the asset for a request path: "/", "/ui" and "/ui/" give
 * index.html, "/ui/NAME" gives web/NAME. On success returns 0 and sets *data
 * (static storage, valid for the life of the process; NUL-terminated past
 * *len), *len (bytes) and *mime (a Content-Type value, static). Returns
 * CHOIR_ENOTFOUND for any other path, CHOIR_EINVAL when an argument is NULL;
 * the outputs are then untouched. Thread-safe: it only reads constants. */
int choir_ui_asset(const char *path, const unsigned char **data, size_t *len, const char **mime);

#endif
