/*
 * Counts executed translation blocks and the instructions they hold, with
 * two inline adds per block. Report: `total: bbs: N, insns: N`, the line the
 * tcgkit `bb` plugin prints. Block boundaries are each translator's choice,
 * so only the instruction total is expected to match tcgkit's.
 */
#include "common.h"

TCGKIT_DECLARE_PLUGIN_VERSION;

static uint64_t blocks;
static uint64_t insns;

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    (void)id;
    qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64,
                                             &blocks, 1);
    qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64,
                                             &insns,
                                             qemu_plugin_tb_n_insns(tb));
}

static void report(qemu_plugin_id_t id, void *userdata)
{
    (void)id;
    (void)userdata;
    TCGKIT_OUT("total: bbs: %" PRIu64 ", insns: %" PRIu64 "\n", blocks, insns);
}

TCGKIT_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id,
                                             const qemu_info_t *info,
                                             int argc, char **argv)
{
    (void)info;
    if (argc > 0) {
        return tcgkit_unknown_arg("tb", argv[0]);
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_atexit_cb(id, report, NULL);
    return 0;
}
