/*
 * Plugins that must be refused, one per -D switch:
 *   BAD_VERSION     declares API version 99
 *   NO_VERSION      declares no qemu_plugin_version
 *   NO_INSTALL      has no qemu_plugin_install
 *   MISSING_SYMBOL  calls a qemu_plugin_* function no host provides
 *   FAIL_INSTALL    returns an error from qemu_plugin_install
 * Without a switch it is a plugin that installs and prints "bad: ok".
 */
#include "qemu-plugin.h"

#ifndef NO_VERSION
#ifdef BAD_VERSION
QEMU_PLUGIN_EXPORT int qemu_plugin_version = 99;
#else
QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;
#endif
#endif

#ifdef MISSING_SYMBOL
void qemu_plugin_no_such_function(void);
#endif

#ifndef NO_INSTALL
QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc,
                                           char **argv)
{
    (void)id, (void)info, (void)argc, (void)argv;
#ifdef MISSING_SYMBOL
    qemu_plugin_no_such_function();
#endif
#ifdef FAIL_INSTALL
    return 3;
#endif
    qemu_plugin_outs("bad: ok\n");
    return 0;
}
#else
QEMU_PLUGIN_EXPORT int not_a_plugin(void)
{
    return 0;
}
#endif
