//! Exports the host side of the QEMU plugin ABI from executables: a plugin
//! `.so` resolves its `qemu_plugin_*` calls against the process's global
//! symbols, and Rust executables export none by default.

fn main() {
    let flag = "-Wl,--export-dynamic-symbol=qemu_plugin_*";
    // This package's own tests and examples load plugins.
    println!("cargo:rustc-link-arg-tests={flag}");

    // Dependents' build scripts read it as DEP_TCGKIT_QEMU_PLUGIN_EXPORTS.
    println!("cargo:exports={flag}");
    println!("cargo:rerun-if-changed=build.rs");
}
