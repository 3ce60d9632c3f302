/*
 * One plugin, built against every API version (-DQEMU_PLUGIN_VERSION=N),
 * using what each version offers, so that a host answering each version's
 * signatures gives the same counts whatever the version:
 *   v1:  raw-pointer inline adds, insn_data as a pointer
 *   v2+: scoreboards and per-vCPU inline adds, register reads
 *   v3+: insn_data copying, conditional callbacks, inline stores
 *   v4+: memory reads and access values
 *   v6+: read_register returning bool
 *   v7:  user data on every callback instead of the plugin id
 * Prints one line at exit (see at_exit).
 */
#include <stdio.h>
#include <string.h>

#include "qemu-plugin.h"

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

/* What v7 callbacks must get back. */
static char magic;
#define MAGIC ((void *)&magic)

static qemu_plugin_id_t me;
static uint64_t insns_cb, tbs, loads, stores, bytes_sum, values, hits, bad_udata, syscalls;
static uint64_t sp_at_entry, argc_in_memory, sp_at_init;
static int entry_seen;

#if QEMU_PLUGIN_VERSION >= 2
struct counts {
    uint64_t insns;
    uint64_t ticks;
};
static struct qemu_plugin_scoreboard *board;
#define ENTRY(member) qemu_plugin_scoreboard_u64_in_struct(board, struct counts, member)
static struct qemu_plugin_register *sp_reg;
#else
static uint64_t insns_inline;
#endif

#if QEMU_PLUGIN_VERSION >= 7
#define CHECK_UDATA(u) (bad_udata += (u) != MAGIC)
#else
#define CHECK_UDATA(u) ((void)(u))
#endif

static void insn_exec(unsigned int vcpu, void *udata)
{
    (void)vcpu;
    (void)udata;
    insns_cb++;
}

static void tb_exec(unsigned int vcpu, void *udata)
{
    (void)vcpu;
    (void)udata;
    tbs++;
}

#if QEMU_PLUGIN_VERSION >= 3
static void every_hundred(unsigned int vcpu, void *udata)
{
    (void)udata;
    hits++;
    qemu_plugin_u64_set(ENTRY(ticks), vcpu, 0);
}
#endif

static void mem_access(unsigned int vcpu, qemu_plugin_meminfo_t info, uint64_t vaddr, void *udata)
{
    (void)vcpu;
    (void)vaddr;
    (void)udata;
    if (qemu_plugin_mem_is_store(info)) {
        stores++;
    } else {
        loads++;
    }
#if QEMU_PLUGIN_VERSION >= 4
    qemu_plugin_mem_value v = qemu_plugin_mem_get_value(info);
    values = values * 31 + v.data.u64 + v.type;
    if (qemu_plugin_mem_is_store(info)) {
        /* After a store, memory holds what the access reports. */
        unsigned size = 1u << qemu_plugin_mem_size_shift(info);
        extern GByteArray *g_byte_array_new(void);
        extern uint8_t *g_byte_array_free(GByteArray *, int);
        GByteArray *mem = g_byte_array_new();
        struct {
            uint8_t *data;
            unsigned len;
        } view;
        uint64_t stored = 0;
        if (qemu_plugin_read_memory_vaddr(vaddr, mem, size)) {
            memcpy(&view, mem, sizeof view);
            memcpy(&stored, view.data, size < 8 ? size : 8);
        }
        uint64_t mask = size >= 8 ? ~0ull : (1ull << (8 * size)) - 1;
        bad_udata += (stored & mask) != (v.data.u64 & mask) || (unsigned)v.type != (size == 1   ? 0
                                                                                     : size == 2 ? 1
                                                                                     : size == 4 ? 2
                                                                                                 : 3);
        g_byte_array_free(mem, 1);
    }
#endif
}

/* At the program's first instruction: sp, and argc where sp points. */
static void at_entry(unsigned int vcpu, void *udata)
{
    (void)vcpu;
    (void)udata;
    if (entry_seen++) {
        return;
    }
#if QEMU_PLUGIN_VERSION >= 2
    struct {
        uint8_t *data;
        unsigned len;
    } buf;
    /* A GByteArray of the host's glib, as a plugin would make it. */
    extern GByteArray *g_byte_array_new(void);
    extern uint8_t *g_byte_array_free(GByteArray *, int);
    GByteArray *regs = g_byte_array_new();
#if QEMU_PLUGIN_VERSION >= 6
    int ok = qemu_plugin_read_register(sp_reg, regs);
#else
    int ok = qemu_plugin_read_register(sp_reg, regs) == 8;
#endif
    memcpy(&buf, regs, sizeof buf);
    if (ok && buf.len == 8) {
        memcpy(&sp_at_entry, buf.data, 8);
    }
#if QEMU_PLUGIN_VERSION >= 4
    GByteArray *mem = g_byte_array_new();
    if (qemu_plugin_read_memory_vaddr(sp_at_entry, mem, 8)) {
        memcpy(&buf, mem, sizeof buf);
        memcpy(&argc_in_memory, buf.data, 8);
    }
    g_byte_array_free(mem, 1);
#endif
    g_byte_array_free(regs, 1);
#endif
}

#if QEMU_PLUGIN_VERSION >= 7
static void tb_trans(struct qemu_plugin_tb *tb, void *udata)
#else
static void tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
#endif
{
#if QEMU_PLUGIN_VERSION >= 7
    CHECK_UDATA(udata);
#else
    (void)id;
#endif
    size_t n = qemu_plugin_tb_n_insns(tb);
    qemu_plugin_register_vcpu_tb_exec_cb(tb, tb_exec, QEMU_PLUGIN_CB_NO_REGS, NULL);
#if QEMU_PLUGIN_VERSION >= 3
    qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu(tb, QEMU_PLUGIN_INLINE_ADD_U64, ENTRY(ticks),
                                                      1);
    qemu_plugin_register_vcpu_tb_exec_cond_cb(tb, every_hundred, QEMU_PLUGIN_CB_NO_REGS,
                                              QEMU_PLUGIN_COND_EQ, ENTRY(ticks), 100, NULL);
#endif
    for (size_t i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        size_t size = qemu_plugin_insn_size(insn);
        uint8_t code[8] = {0};
#if QEMU_PLUGIN_VERSION >= 3
        if (qemu_plugin_insn_data(insn, code, sizeof code) != size) {
            bad_udata++;
        }
#else
        memcpy(code, qemu_plugin_insn_data(insn), size);
#endif
        for (size_t b = 0; b < size; b++) {
            bytes_sum = bytes_sum * 257 + code[b];
        }
        qemu_plugin_register_vcpu_insn_exec_cb(insn, insn_exec, QEMU_PLUGIN_CB_NO_REGS, NULL);
#if QEMU_PLUGIN_VERSION >= 2
        qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu(insn, QEMU_PLUGIN_INLINE_ADD_U64,
                                                            ENTRY(insns), 1);
#else
        qemu_plugin_register_vcpu_insn_exec_inline(insn, QEMU_PLUGIN_INLINE_ADD_U64, &insns_inline,
                                                   1);
#endif
        qemu_plugin_register_vcpu_mem_cb(insn, mem_access, QEMU_PLUGIN_CB_NO_REGS,
                                         QEMU_PLUGIN_MEM_RW, NULL);
        if (qemu_plugin_insn_vaddr(insn) == qemu_plugin_entry_code()) {
            qemu_plugin_register_vcpu_insn_exec_cb(insn, at_entry, QEMU_PLUGIN_CB_R_REGS, NULL);
        }
    }
}

#if QEMU_PLUGIN_VERSION >= 7
static void on_syscall(unsigned int vcpu, int64_t num, uint64_t a1, uint64_t a2, uint64_t a3,
                       uint64_t a4, uint64_t a5, uint64_t a6, uint64_t a7, uint64_t a8,
                       void *udata)
{
    CHECK_UDATA(udata);
#else
static void on_syscall(qemu_plugin_id_t id, unsigned int vcpu, int64_t num, uint64_t a1,
                       uint64_t a2, uint64_t a3, uint64_t a4, uint64_t a5, uint64_t a6,
                       uint64_t a7, uint64_t a8)
{
    bad_udata += id != me;
#endif
    (void)vcpu, (void)num, (void)a1, (void)a2, (void)a3, (void)a4, (void)a5, (void)a6, (void)a7;
    (void)a8;
    syscalls++;
}

#if QEMU_PLUGIN_VERSION >= 7
static void vcpu_init(unsigned int vcpu, void *udata)
{
    CHECK_UDATA(udata);
#else
static void vcpu_init(qemu_plugin_id_t id, unsigned int vcpu)
{
    bad_udata += id != me;
#endif
    (void)vcpu;
#if QEMU_PLUGIN_VERSION >= 2
    GArray *regs = qemu_plugin_get_registers();
    struct {
        qemu_plugin_reg_descriptor *data;
        unsigned len;
    } view;
    memcpy(&view, regs, sizeof view);
    for (unsigned i = 0; i < view.len; i++) {
        if (strcmp(view.data[i].name, "sp") == 0) {
            sp_reg = view.data[i].handle;
        }
    }
    extern char *g_array_free(GArray *, int);
    g_array_free(regs, 1);
    /* QEMU lets vcpu_init read registers too. */
    extern GByteArray *g_byte_array_new(void);
    extern uint8_t *g_byte_array_free(GByteArray *, int);
    GByteArray *value = g_byte_array_new();
    if (qemu_plugin_read_register(sp_reg, value)) {
        struct {
            uint8_t *data;
            unsigned len;
        } bytes;
        memcpy(&bytes, value, sizeof bytes);
        if (bytes.len == 8) {
            memcpy(&sp_at_init, bytes.data, 8);
        }
    }
    g_byte_array_free(value, 1);
#endif
}

#if QEMU_PLUGIN_VERSION >= 7
static void at_exit(void *udata)
{
    CHECK_UDATA(udata);
#else
static void at_exit(qemu_plugin_id_t id, void *udata)
{
    (void)udata;
    bad_udata += id != me;
#endif
#if QEMU_PLUGIN_VERSION >= 2
    uint64_t insns_inline = qemu_plugin_u64_sum(ENTRY(insns));
#endif
    char line[512];
    snprintf(line, sizeof line,
             "versions v%d: insns_cb %lu insns_inline %lu tbs %lu loads %lu stores %lu bytes %lu "
             "values %lu hits %lu syscalls %lu sp 0x%lx init_sp 0x%lx argc %lu bad %lu\n",
             QEMU_PLUGIN_VERSION, (unsigned long)insns_cb, (unsigned long)insns_inline,
             (unsigned long)tbs, (unsigned long)loads, (unsigned long)stores,
             (unsigned long)bytes_sum, (unsigned long)values, (unsigned long)hits,
             (unsigned long)syscalls, (unsigned long)sp_at_entry, (unsigned long)sp_at_init,
             (unsigned long)argc_in_memory,
             (unsigned long)bad_udata);
    qemu_plugin_outs(line);
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc,
                                           char **argv)
{
    (void)argv;
    if (argc != 0 || info->version.cur != QEMU_PLUGIN_VERSION || info->system_emulation) {
        return 1;
    }
    me = id;
#if QEMU_PLUGIN_VERSION >= 2
    board = qemu_plugin_scoreboard_new(sizeof(struct counts));
#endif
#if QEMU_PLUGIN_VERSION >= 7
    qemu_plugin_register_vcpu_init_cb(id, vcpu_init, MAGIC);
    qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans, MAGIC);
    qemu_plugin_register_vcpu_syscall_cb(id, on_syscall, MAGIC);
#else
    qemu_plugin_register_vcpu_init_cb(id, vcpu_init);
    qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
    qemu_plugin_register_vcpu_syscall_cb(id, on_syscall);
#endif
    qemu_plugin_register_atexit_cb(id, at_exit, MAGIC);
    return 0;
}
