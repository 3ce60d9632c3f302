/*
 * Counts executed guest instructions, either with an inline add emitted into
 * the translated code (`inline=true`, the default) or with a call per
 * instruction (`inline=false`). Report: `total insns: N`, the same line the
 * tcgkit `insn` plugin prints, so the harness compares the two directly.
 *
 * The workloads are single-threaded, so one shared counter is exact. With
 * `per_vcpu=true` the call counts into the executing vCPU's entry of an
 * array instead, the work tcgkit's `insn` plugin does (it counts per vCPU).
 */
#include "common.h"

TCGKIT_DECLARE_PLUGIN_VERSION;

static uint64_t insn_count;
static int use_inline = 1;
static int per_vcpu;

/* vCPUs counted apart; the workloads use one. */
#define MAX_VCPUS 64
static uint64_t vcpu_counts[MAX_VCPUS];

static void count_vcpu_insn(unsigned int vcpu_index, void *counts)
{
    if (vcpu_index < MAX_VCPUS) {
        ((uint64_t *)counts)[vcpu_index]++;
    }
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    (void)id;
    if (per_vcpu && !use_inline) {
        tcgkit_call_before_insns(tb, count_vcpu_insn, vcpu_counts);
        return;
    }
    tcgkit_count_insns(tb, use_inline, &insn_count);
}

static void report(qemu_plugin_id_t id, void *userdata)
{
    (void)id;
    (void)userdata;
    uint64_t total = insn_count;
    for (int i = 0; i < MAX_VCPUS; i++) {
        total += vcpu_counts[i];
    }
    TCGKIT_OUT("total insns: %" PRIu64 "\n", total);
}

TCGKIT_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id,
                                             const qemu_info_t *info,
                                             int argc, char **argv)
{
    (void)info;
    for (int i = 0; i < argc; i++) {
        int r = tcgkit_bool_arg(argv[i], "inline", &use_inline);
        if (r == 0) {
            r = tcgkit_bool_arg(argv[i], "per_vcpu", &per_vcpu);
        }
        if (r < 0) {
            return -1;
        }
        if (r == 0) {
            return tcgkit_unknown_arg("insn", argv[i]);
        }
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_atexit_cb(id, report, NULL);
    return 0;
}
