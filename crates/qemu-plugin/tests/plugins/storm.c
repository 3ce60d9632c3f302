/*
 * The seed scenario of QEMU's plugin reset bug, as a C plugin: every
 * instruction gets an execution callback and every load a memory callback,
 * both carrying a pointer into the current registration's state; the
 * execution callback of every N-th load calls qemu_plugin_reset, whose
 * completion frees that state and registers everything again with new
 * state. A callback of the old registration after the completion would
 * read freed memory (valgrind reports it) and is counted as stale.
 *
 * Arguments: every=N (0: never reset); uninstall=on uninstalls instead,
 * once, at the N-th load (the completion prints "storm: uninstalled after
 * L loads", and a callback arriving after it prints "storm: STALE").
 * Prints at exit (not after an uninstall, which drops atexit too):
 *   storm: insns I loads L resets R stale S
 * where I and L are counted across registrations.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qemu-plugin.h"

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

/* One registration's state: callbacks point into it. */
struct generation {
    unsigned long serial;
    int live;
};

static qemu_plugin_id_t plugin_id;
static unsigned long every;
static struct generation *current;
static unsigned long serials;
static int reset_pending, uninstall_mode, gone;
static unsigned long insns, loads, resets, stale, load_execs;

static void tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);
static void at_exit(qemu_plugin_id_t id, void *udata);

static struct generation *new_generation(void)
{
    struct generation *g = malloc(sizeof *g);
    g->serial = ++serials;
    g->live = 1;
    return g;
}

static void check(struct generation *g)
{
    if (gone) {
        if (stale++ == 0) {
            qemu_plugin_outs("storm: STALE\n");
        }
        return;
    }
    /* A freed generation is read here: valgrind names the bug. */
    if (g != current || !g->live) {
        stale++;
    }
}

static void uninstall_done(qemu_plugin_id_t id)
{
    (void)id;
    char line[96];
    snprintf(line, sizeof line, "storm: uninstalled after %lu loads\n", loads);
    qemu_plugin_outs(line);
    free(current);
    current = NULL;
    gone = 1;
}

static void reset_done(qemu_plugin_id_t id)
{
    struct generation *old = current;
    old->live = 0;
    free(old);
    current = new_generation();
    reset_pending = 0;
    /* A reset unregisters every callback, atexit's too (as QEMU's does). */
    qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
    qemu_plugin_register_atexit_cb(id, at_exit, NULL);
}

static void insn_exec(unsigned int vcpu, void *udata)
{
    (void)vcpu;
    check(udata);
    insns++;
}

static void load_exec(unsigned int vcpu, void *udata)
{
    insn_exec(vcpu, udata);
    load_execs++;
    if (every && load_execs % every == 0 && !reset_pending) {
        reset_pending = 1;
        if (uninstall_mode) {
            qemu_plugin_uninstall(plugin_id, uninstall_done);
            return;
        }
        resets++;
        qemu_plugin_reset(plugin_id, reset_done);
    }
}

static void mem_access(unsigned int vcpu, qemu_plugin_meminfo_t info, uint64_t vaddr, void *udata)
{
    (void)vcpu;
    (void)vaddr;
    check(udata);
    if (!qemu_plugin_mem_is_store(info)) {
        loads++;
    }
}

/* RV64GC loads (LOAD, LOAD-FP and their compressed forms). */
static int is_load(struct qemu_plugin_insn *insn)
{
    const unsigned char *b = qemu_plugin_insn_data(insn);
    unsigned raw = b[0] | (b[1] << 8);
    if (qemu_plugin_insn_size(insn) == 4) {
        unsigned opcode = raw & 0x7f;
        return opcode == 0x03 || opcode == 0x07;
    }
    unsigned quadrant = raw & 3, funct3 = raw >> 13;
    return (quadrant == 0 || quadrant == 2) && funct3 >= 1 && funct3 <= 3;
}

static void tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    (void)id;
    size_t n = qemu_plugin_tb_n_insns(tb);
    for (size_t i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        if (is_load(insn)) {
            qemu_plugin_register_vcpu_insn_exec_cb(insn, load_exec, QEMU_PLUGIN_CB_NO_REGS,
                                                   current);
            /* RW, not R: QEMU 7.2 never calls a callback registered for
             * QEMU_PLUGIN_MEM_R alone (seen under qemu-riscv64 7.2; tcgkit
             * does), and this plugin's counts are compared with it. */
            qemu_plugin_register_vcpu_mem_cb(insn, mem_access, QEMU_PLUGIN_CB_NO_REGS,
                                             QEMU_PLUGIN_MEM_RW, current);
        } else {
            qemu_plugin_register_vcpu_insn_exec_cb(insn, insn_exec, QEMU_PLUGIN_CB_NO_REGS,
                                                   current);
        }
    }
}

static void at_exit(qemu_plugin_id_t id, void *udata)
{
    (void)id;
    (void)udata;
    char line[160];
    snprintf(line, sizeof line, "storm: insns %lu loads %lu resets %lu stale %lu\n", insns, loads,
             resets, stale);
    qemu_plugin_outs(line);
    free(current);
    current = NULL;
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc,
                                           char **argv)
{
    (void)info;
    for (int i = 0; i < argc; i++) {
        if (strncmp(argv[i], "every=", 6) == 0) {
            every = strtoul(argv[i] + 6, NULL, 10);
        } else if (strcmp(argv[i], "uninstall=on") == 0) {
            uninstall_mode = 1;
        } else {
            fprintf(stderr, "storm: unknown argument %s\n", argv[i]);
            return -1;
        }
    }
    plugin_id = id;
    current = new_generation();
    qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
    qemu_plugin_register_atexit_cb(id, at_exit, NULL);
    return 0;
}
