/*
 * Counts guest memory accesses with a memory callback on every instruction,
 * split into loads and stores. Report: `loads: N`, `stores: N` and
 * `total accesses: N`, the lines the tcgkit `mem` plugin prints.
 */
#include "common.h"

TCGKIT_DECLARE_PLUGIN_VERSION;

static uint64_t loads;
static uint64_t stores;

static void on_access(unsigned int vcpu_index, qemu_plugin_meminfo_t info,
                      uint64_t vaddr, void *userdata)
{
    (void)vcpu_index;
    (void)vaddr;
    (void)userdata;
    if (qemu_plugin_mem_is_store(info)) {
        stores++;
    } else {
        loads++;
    }
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    (void)id;
    size_t n = qemu_plugin_tb_n_insns(tb);
    for (size_t i = 0; i < n; i++) {
        qemu_plugin_register_vcpu_mem_cb(qemu_plugin_tb_get_insn(tb, i),
                                         on_access, QEMU_PLUGIN_CB_NO_REGS,
                                         QEMU_PLUGIN_MEM_RW, NULL);
    }
}

static void report(qemu_plugin_id_t id, void *userdata)
{
    (void)id;
    (void)userdata;
    TCGKIT_OUT("loads: %" PRIu64 "\n", loads);
    TCGKIT_OUT("stores: %" PRIu64 "\n", stores);
    TCGKIT_OUT("total accesses: %" PRIu64 "\n", loads + stores);
}

TCGKIT_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id,
                                             const qemu_info_t *info,
                                             int argc, char **argv)
{
    (void)info;
    if (argc > 0) {
        return tcgkit_unknown_arg("mem", argv[0]);
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_atexit_cb(id, report, NULL);
    return 0;
}
