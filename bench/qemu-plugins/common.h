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

/* Writes one formatted report line through QEMU's plugin log. */
#define TCGKIT_OUT(...)                                   \
    do {                                                  \
        char line_[160];                                  \
        snprintf(line_, sizeof line_, __VA_ARGS__);       \
        qemu_plugin_outs(line_);                          \
    } while (0)

#endif /* TCGKIT_PLUGIN_COMMON_H */
