//! Loading QEMU plugins: bad plugins get clear errors.

#[test]
fn a_missing_file_is_a_clear_error() {
    let host = tcgkit_plugin_api::PluginHost::new(
        tcgkit_plugin_api::GuestInfo::user("riscv64", 1),
        Box::new(std::io::sink()),
    );
    let err = tcgkit_qemu_plugin::install(&host, std::path::Path::new("/nonexistent/libx.so"), &[])
        .expect_err("refused");
    assert_eq!(
        err.to_string(),
        "cannot load plugin /nonexistent/libx.so: no such file"
    );
}
