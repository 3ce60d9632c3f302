/*
 * Resets itself from inside a block execution callback every `every=N`
 * guest instructions (0: never), registering everything again in the
 * reset's completion, to measure what one qemu_plugin_reset costs (the
 * flush of the translated code and the re-translation after it). Counts
 * instructions with an inline add per instruction (`inline=true`, the
 * default) or a call per instruction (`inline=false`), and blocks with the
 * execution callback. The tcgkit counterpart is the bundled `reset` plugin;
 * both print the same report lines:
 *
 *   resets: R
 *   total insns: N
 *   blocks executed: B
 *   blocks translated: T
 *   blocks cached at reset: mean M, max X
 *
 * The trigger counts instructions, not blocks (block boundaries are each
 * translator's choice), so both emulators reset equally often on the same
 * program. The workloads are single-threaded, so plain globals are exact.
 */
#include <stdlib.h>

#include "common.h"

TCGKIT_DECLARE_PLUGIN_VERSION;

static qemu_plugin_id_t self_id;
static uint64_t every;
static int use_inline = 1;

static uint64_t insn_count;
static uint64_t block_count;
static uint64_t next_reset;
/* QEMU ignores a reset requested while one is pending: do not ask twice. */
static int reset_pending;
static uint64_t resets;
static uint64_t translated;
static uint64_t translated_since_reset;
static uint64_t cached_at_resets;
static uint64_t max_cached_at_reset;

static void register_callbacks(qemu_plugin_id_t id);

static void on_reset_done(qemu_plugin_id_t id)
{
    cached_at_resets += translated_since_reset;
    if (translated_since_reset > max_cached_at_reset) {
        max_cached_at_reset = translated_since_reset;
    }
    translated_since_reset = 0;
    resets++;
    reset_pending = 0;
    register_callbacks(id);
}

static void on_block(unsigned int vcpu_index, void *userdata)
{
    (void)vcpu_index;
    (void)userdata;
    block_count++;
    /* every=0 makes the same check with a threshold never reached: the
     * baseline a reset's cost is measured against. */
    if (insn_count < next_reset || every == 0 || reset_pending) {
        return;
    }
    next_reset = (insn_count / every + 1) * every;
    reset_pending = 1;
    qemu_plugin_reset(self_id, on_reset_done);
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    (void)id;
    translated++;
    translated_since_reset++;
    qemu_plugin_register_vcpu_tb_exec_cb(tb, on_block, QEMU_PLUGIN_CB_NO_REGS,
                                         NULL);
    tcgkit_count_insns(tb, use_inline, &insn_count);
}

static void report(qemu_plugin_id_t id, void *userdata)
{
    (void)id;
    (void)userdata;
    double mean = resets ? (double)cached_at_resets / (double)resets : 0.0;
    TCGKIT_OUT("resets: %" PRIu64 "\n", resets);
    TCGKIT_OUT("total insns: %" PRIu64 "\n", insn_count);
    TCGKIT_OUT("blocks executed: %" PRIu64 "\n", block_count);
    TCGKIT_OUT("blocks translated: %" PRIu64 "\n", translated);
    TCGKIT_OUT("blocks cached at reset: mean %.1f, max %" PRIu64 "\n", mean,
               max_cached_at_reset);
}

/* A reset drops every callback, atexit included: all of it comes back here. */
static void register_callbacks(qemu_plugin_id_t id)
{
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_atexit_cb(id, report, NULL);
}

/* Parses `every=N`: 1 when `arg` is that key with a valid number, 0 when the
 * key differs, -1 when the number is invalid. */
static int every_arg(const char *arg)
{
    static const char key[] = "every=";
    if (strncmp(arg, key, sizeof key - 1) != 0) {
        return 0;
    }
    const char *v = arg + sizeof key - 1;
    char *end = NULL;
    unsigned long long n = strtoull(v, &end, 0);
    if (*v == '\0' || *v == '-' || end == NULL || *end != '\0') {
        fprintf(stderr, "tcgkit reset plugin: bad number in `%s`\n", arg);
        return -1;
    }
    every = n;
    return 1;
}

TCGKIT_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id,
                                             const qemu_info_t *info,
                                             int argc, char **argv)
{
    (void)info;
    int have_every = 0;
    for (int i = 0; i < argc; i++) {
        int r = every_arg(argv[i]);
        if (r == 0) {
            r = tcgkit_bool_arg(argv[i], "inline", &use_inline);
        } else if (r > 0) {
            have_every = 1;
        }
        if (r < 0) {
            return -1;
        }
        if (r == 0) {
            return tcgkit_unknown_arg("reset", argv[i]);
        }
    }
    if (!have_every) {
        fprintf(stderr, "tcgkit reset plugin: missing every=N (instructions "
                        "between resets, 0 never resets)\n");
        return -1;
    }
    self_id = id;
    next_reset = every ? every : UINT64_MAX;
    register_callbacks(id);
    return 0;
}
