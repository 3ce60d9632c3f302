/*
 * The comparison plugins use QEMU's TCG plugin API version 1 (QEMU 7.2's,
 * which Debian's qemu-riscv64 loads), as the project's own declaration of
 * the API (crates/qemu-plugin/include/qemu-plugin.h, written from QEMU's
 * documentation; Debian ships no plugin header) declares it. The symbols
 * resolve against the emulator executable at load time: qemu-riscv64, or
 * tcgkit, which loads the same files.
 */
#ifndef TCGKIT_QEMU_PLUGIN_H
#define TCGKIT_QEMU_PLUGIN_H

#define QEMU_PLUGIN_VERSION 1
#include "../../crates/qemu-plugin/include/qemu-plugin.h"

#define TCGKIT_PLUGIN_EXPORT QEMU_PLUGIN_EXPORT
/* The API version these plugins were written against. */
#define TCGKIT_QEMU_PLUGIN_API_VERSION QEMU_PLUGIN_VERSION

#endif /* TCGKIT_QEMU_PLUGIN_H */
