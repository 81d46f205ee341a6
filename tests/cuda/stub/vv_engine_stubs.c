/* Stand-in for adapter detection in the host emulation's build of the
 * VibeVoice GPU check (tests/cuda/fake/run_fake_vibevoice.sh): its engine
 * case passes its adapter, so model_detect.c and the other adapters it
 * lists are left out. Refuses with a message if it is ever reached. */
#include "choir/model.h"

const choir_model_ops *choir_model_detect(const char *dir, const choir_model_ops *const *extra, int n_extra,
                                          choir_err *err) {
    (void)extra, (void)n_extra;
    choir_err_set(err, CHOIR_EUNSUPPORTED, "model detection (%s): not part of this build", dir ? dir : "");
    return NULL;
}
