/* Helpers shared by the tcgkit comparison plugins (argument parsing, output). */
#ifndef TCGKIT_PLUGIN_COMMON_H
#define TCGKIT_PLUGIN_COMMON_H

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "tcgkit-qemu-plugin.h"

/* QEMU refuses a plugin that does not declare the API version it targets. */
#define TCGKIT_DECLARE_PLUGIN_VERSION \
    TCGKIT_PLUGIN_EXPORT int qemu_plugin_version = TCGKIT_QEMU_PLUGIN_API_VERSION

/*
 * Parses `key=value` where value is a boolean spelled like QEMU's own
 * plugins accept it. Returns 1 when `arg` is `key=...` with a valid value
 * (stored in *out), 0 when the key differs, -1 when the value is invalid.
 */
static inline int tcgkit_bool_arg(const char *arg, const char *key, int *out)
{
    size_t n = strlen(key);
    if (strncmp(arg, key, n) != 0 || arg[n] != '=') {
        return 0;
    }
    const char *v = arg + n + 1;
    if (!strcmp(v, "true") || !strcmp(v, "on") || !strcmp(v, "yes")) {
        *out = 1;
        return 1;
    }
    if (!strcmp(v, "false") || !strcmp(v, "off") || !strcmp(v, "no")) {
        *out = 0;
        return 1;
    }
    fprintf(stderr, "tcgkit plugin: bad boolean in `%s`\n", arg);
    return -1;
}

/* Reports an argument no plugin understands; the plugin then fails to load. */
static inline int tcgkit_unknown_arg(const char *plugin, const char *arg)
{
    fprintf(stderr, "tcgkit %s plugin: unknown argument `%s`\n", plugin, arg);
    return -1;
}

/* The counting callback of tcgkit_count_insns: one more in *counter. */
static inline void tcgkit_count_insn(unsigned int vcpu_index, void *counter)
{
    (void)vcpu_index;
    (*(uint64_t *)counter)++;
}

/* Calls `cb` with `userdata` before every instruction of `tb` executes. */
static inline void tcgkit_call_before_insns(struct qemu_plugin_tb *tb,
                                            qemu_plugin_vcpu_udata_cb_t cb,
                                            void *userdata)
{
    size_t n = qemu_plugin_tb_n_insns(tb);
    for (size_t i = 0; i < n; i++) {
        qemu_plugin_register_vcpu_insn_exec_cb(
            qemu_plugin_tb_get_insn(tb, i), cb, QEMU_PLUGIN_CB_NO_REGS, userdata);
    }
}

/*
 * Counts every instruction of `tb` into *counter when it executes: with an
 * inline add emitted into the translated code, or with a call per
 * instruction.
 */
static inline void tcgkit_count_insns(struct qemu_plugin_tb *tb, int use_inline,
                                      uint64_t *counter)
{
    if (!use_inline) {
        tcgkit_call_before_insns(tb, tcgkit_count_insn, counter);
        return;
    }
    size_t n = qemu_plugin_tb_n_insns(tb);
    for (size_t i = 0; i < n; i++) {
        qemu_plugin_register_vcpu_insn_exec_inline(
            qemu_plugin_tb_get_insn(tb, i), QEMU_PLUGIN_INLINE_ADD_U64, counter, 1);
    }
}

/* Writes one formatted report line through QEMU's plugin log. */
#define TCGKIT_OUT(...)                                   \
    do {                                                  \
        char line_[160];                                  \
        snprintf(line_, sizeof line_, __VA_ARGS__);       \
        qemu_plugin_outs(line_);                          \
    } while (0)

#endif /* TCGKIT_PLUGIN_COMMON_H */
