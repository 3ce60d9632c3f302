//! Exports the QEMU plugin ABI from the `tcgkit` binary, so that plugin
//! shared objects it loads resolve their `qemu_plugin_*` calls (the list
//! comes from tcgkit-qemu-plugin's build script).

fn main() {
    if let Ok(flag) = std::env::var("DEP_TCGKIT_QEMU_PLUGIN_EXPORTS") {
        println!("cargo:rustc-link-arg-bins={flag}");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
