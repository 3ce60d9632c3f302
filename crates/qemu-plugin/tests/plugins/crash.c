/* Crashes in its own code: at the N-th translated block (after=N, default
 * 10), a store through a null pointer (or abort() with how=abort). */
#include <stdlib.h>
#include <string.h>

#include "qemu-plugin.h"

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

static unsigned long after = 10, seen;
static int use_abort;
static volatile int *nowhere;

static void tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    (void)id, (void)tb;
    if (++seen == after) {
        if (use_abort) {
            abort();
        }
        *nowhere = 1;
    }
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc,
                                           char **argv)
{
    (void)info;
    for (int i = 0; i < argc; i++) {
        if (strncmp(argv[i], "after=", 6) == 0) {
            after = strtoul(argv[i] + 6, NULL, 10);
        } else if (strcmp(argv[i], "how=abort") == 0) {
            use_abort = 1;
        }
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
    return 0;
}
