//! `cargo xtask qemu-plugins`: QEMU 7.2's own TCG plugins, built from
//! Debian's `qemu` source package, for the differential tests in
//! crates/cli/tests/qemu_plugins.rs (each plugin run under qemu-riscv64
//! and under `tcgkit run`, the logs compared).
//!
//! The source comes from `$TCGKIT_QEMU_SRC` when that names an unpacked
//! QEMU 7.2 tree, else from `target/qemu-src/`: `apt-get source
//! --download-only qemu` (apt checks the files against the signed archive
//! index) unpacked by `dpkg-source -x` (which checks them against the .dsc
//! and applies Debian's patches, the stable-release diffs among them).
//! Nothing of QEMU is committed; the built plugins live in
//! `target/qemu-plugins-7.2/`:
//!
//! - `libNAME.so` for the plugins of `tests/plugin/` (bb, empty, insn,
//!   mem, syscall) and of `contrib/plugins/` (cache, drcov, execlog,
//!   hotblocks, hotpages, howvec, hwprofile, lockstep), each compiled as
//!   QEMU's build does (`-O2 -g -Wall -fPIC`, glib's cflags,
//!   `-I include/qemu`) and linked `-shared` with `-lglib-2.0`, as
//!   tests/plugin/meson.build links them (its `glib` dependency);
//! - `makefile/libNAME.so` for the contrib plugins linked exactly as
//!   contrib/plugins/Makefile links them: without glib, whose symbols
//!   QEMU's executable provides when the plugin is loaded.
//!
//! A plugin that does not compile is skipped with the compiler's message;
//! the manifest records what was built, so an unchanged build is reused at
//! once (`--force` rebuilds).

use crate::realworld::{self, Tool, ensure_tools};
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Bumped whenever the build recipe below changes, so cached builds are redone.
const RECIPE: u32 = 1;

/// An unpacked QEMU 7.2 tree to use instead of fetching one.
const SOURCE_ENV: &str = "TCGKIT_QEMU_SRC";

/// The Debian source package.
const SOURCE_PACKAGE: &str = "qemu";

/// The plugins, by their source file in the QEMU tree.
const PLUGINS: &[Plugin] = &[
    Plugin::tests("bb"),
    Plugin::tests("empty"),
    Plugin::tests("insn"),
    Plugin::tests("mem"),
    Plugin::tests("syscall"),
    Plugin::contrib("cache"),
    Plugin::contrib("drcov"),
    Plugin::contrib("execlog"),
    Plugin::contrib("hotblocks"),
    Plugin::contrib("hotpages"),
    Plugin::contrib("howvec"),
    Plugin::contrib("hwprofile"),
    Plugin::contrib("lockstep"),
];

struct Plugin {
    name: &'static str,
    /// Built by contrib/plugins/Makefile (else by tests/plugin/meson.build).
    contrib: bool,
}

impl Plugin {
    const fn tests(name: &'static str) -> Self {
        Plugin {
            name,
            contrib: false,
        }
    }

    const fn contrib(name: &'static str) -> Self {
        Plugin {
            name,
            contrib: true,
        }
    }

    fn source(&self, tree: &Path) -> PathBuf {
        let dir = if self.contrib {
            "contrib/plugins"
        } else {
            "tests/plugin"
        };
        tree.join(dir).join(format!("{}.c", self.name))
    }

    fn library(&self) -> String {
        format!("lib{}.so", self.name)
    }
}

/// Where the source and the plugins live.
struct Layout {
    /// `target/qemu-src`: the download and the unpacked tree.
    src: PathBuf,
    /// `target/qemu-plugins-7.2`: the plugins and the manifest.
    out: PathBuf,
}

impl Layout {
    fn new(root: &Path) -> Self {
        let target = crate::target_dir(root);
        Layout {
            src: target.join("qemu-src"),
            out: target.join("qemu-plugins-7.2"),
        }
    }

    fn manifest(&self) -> PathBuf {
        self.out.join("manifest.json")
    }

    fn makefile_dir(&self) -> PathBuf {
        self.out.join("makefile")
    }

    /// The fetched tree (`dpkg-source -x` target).
    fn fetched_tree(&self) -> PathBuf {
        self.src.join("qemu")
    }

    fn download(&self) -> PathBuf {
        self.src.join("download")
    }

    /// The manifest, when it is of the current recipe, was built from the
    /// tree `$TCGKIT_QEMU_SRC` names (if set), and everything it lists as
    /// built is there.
    fn current(&self) -> Option<serde_json::Value> {
        let text = std::fs::read_to_string(self.manifest()).ok()?;
        let manifest = serde_json::from_str::<serde_json::Value>(&text).ok()?;
        if manifest["recipe"] != RECIPE {
            return None;
        }
        if let Some(tree) = std::env::var_os(SOURCE_ENV)
            && manifest["source"]["tree"].as_str() != Some(&*Path::new(&tree).to_string_lossy())
        {
            return None;
        }
        let all_there = manifest["built"].as_array()?.iter().all(|entry| {
            entry
                .as_str()
                .is_some_and(|rel| self.out.join(rel).is_file())
        });
        all_there.then_some(manifest)
    }
}

/// `cargo xtask qemu-plugins [--force]`.
pub fn run(root: &Path, args: &[String]) -> Result<()> {
    let mut force = false;
    for arg in args {
        match arg.as_str() {
            "--force" => force = true,
            other => {
                bail!("qemu-plugins: unknown argument `{other}` (usage: qemu-plugins [--force])")
            }
        }
    }
    build(root, force)
}

/// Called by `cargo xtask test` before the test suite: under CI the
/// plugins must be built (the differential tests require them); locally
/// they are built when the source is at hand (`$TCGKIT_QEMU_SRC`, or a
/// tree fetched before) and glib's headers are installed, since that takes
/// seconds; otherwise the tests skip, and this says how to build them.
pub fn prepare_for_tests(root: &Path) -> Result<()> {
    if std::env::var("CI").as_deref() == Ok("true") {
        return build(root, false);
    }
    let layout = Layout::new(root);
    if layout.current().is_some() {
        return Ok(());
    }
    let source_at_hand =
        std::env::var_os(SOURCE_ENV).is_some() || tree_version(&layout.fetched_tree()).is_ok();
    if source_at_hand && glib_available() && realworld::on_path("gcc") {
        return build(root, false);
    }
    println!(
        "qemu-plugins: QEMU's plugins not built; run `cargo xtask qemu-plugins` to test them too"
    );
    Ok(())
}

fn build(root: &Path, force: bool) -> Result<()> {
    let layout = Layout::new(root);
    if !force && let Some(manifest) = layout.current() {
        println!(
            "qemu-plugins: up to date in {} (qemu {})",
            layout.out.display(),
            manifest["source"]["version"].as_str().unwrap_or("?")
        );
        return Ok(());
    }
    let started = std::time::Instant::now();
    ensure_tools(&[
        Tool::new("gcc", &["gcc"]),
        Tool::new("pkg-config", &["pkg-config"]),
    ])?;
    if !glib_available() {
        // libglib2.0-dev has no command of its own; one of its
        // dependencies' (libglib2.0-dev-bin) stands in for it.
        ensure_tools(&[Tool::new("glib-mkenums", &["libglib2.0-dev"])])?;
        if !glib_available() {
            bail!(
                "pkg-config cannot find glib-2.0; install it with `sudo apt-get install libglib2.0-dev`"
            );
        }
    }
    let (tree, version) = source_tree(&layout)?;
    // A stale manifest must never vouch for a half-rebuilt set.
    let _ = std::fs::remove_file(layout.manifest());
    for dir in [&layout.out, &layout.makefile_dir()] {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let glib_cflags = pkg_config(&["--cflags", "glib-2.0"])?;
    let glib_libs = pkg_config(&["--libs", "glib-2.0"])?;
    let include = tree.join("include").join("qemu");
    let mut built = Vec::new();
    let mut skipped = Vec::new();
    for plugin in PLUGINS {
        let source = plugin.source(&tree);
        let library = plugin.library();
        let object = layout.out.join(format!("{}.o", plugin.name));
        let compiled = compile(&source, &object, &glib_cflags, &include);
        let result = compiled.and_then(|()| {
            link(&object, &layout.out.join(&library), &library, &glib_libs)?;
            built.push(library.clone());
            if plugin.contrib {
                // As contrib/plugins/Makefile links: no LDLIBS at all.
                let rel = format!("makefile/{library}");
                link(&object, &layout.out.join(&rel), &library, &[])?;
                built.push(rel);
            }
            Ok(())
        });
        let _ = std::fs::remove_file(&object);
        if let Err(e) = result {
            println!("qemu-plugins: skipped {}: {e:#}", plugin.name);
            skipped.push(serde_json::json!({ "plugin": plugin.name, "reason": format!("{e:#}") }));
        }
    }
    if built.is_empty() {
        bail!(
            "qemu-plugins: no plugin could be built from {}",
            tree.display()
        );
    }
    let manifest = serde_json::json!({
        "recipe": RECIPE,
        "source": {
            "tree": tree.to_string_lossy(),
            "version": version,
        },
        "built": built,
        "skipped": skipped,
    });
    std::fs::write(layout.manifest(), serde_json::to_string_pretty(&manifest)?)
        .context("writing the qemu-plugins manifest")?;
    println!(
        "qemu-plugins: built {} of {} plugins from qemu {version} into {} in {:.1} s",
        PLUGINS.len() - skipped.len(),
        PLUGINS.len(),
        layout.out.display(),
        started.elapsed().as_secs_f64()
    );
    warn_on_version_mismatch(&version);
    Ok(())
}

/// The QEMU tree to build from and its Debian version: `$TCGKIT_QEMU_SRC`,
/// or the tree fetched into `target/qemu-src/` (fetched now if missing).
fn source_tree(layout: &Layout) -> Result<(PathBuf, String)> {
    if let Some(tree) = std::env::var_os(SOURCE_ENV) {
        let tree = PathBuf::from(tree);
        let version = tree_version(&tree)
            .with_context(|| format!("${SOURCE_ENV}={} is not a QEMU 7.2 tree", tree.display()))?;
        println!("qemu-plugins: using {} (qemu {version})", tree.display());
        return Ok((tree, version));
    }
    let tree = layout.fetched_tree();
    if let Ok(version) = tree_version(&tree) {
        return Ok((tree, version));
    }
    fetch(layout)?;
    let version = tree_version(&tree).with_context(|| {
        format!(
            "apt-get source {SOURCE_PACKAGE} did not give a QEMU 7.2 tree in {}",
            tree.display()
        )
    })?;
    Ok((tree, version))
}

/// The version of an unpacked QEMU tree (Debian's, from debian/changelog,
/// when it has one), if it is a 7.2 tree holding the plugin header.
fn tree_version(tree: &Path) -> Result<String> {
    let header = tree.join("include/qemu/qemu-plugin.h");
    if !header.is_file() {
        bail!("{} is missing", header.display());
    }
    let upstream = std::fs::read_to_string(tree.join("VERSION"))
        .with_context(|| format!("reading {}/VERSION", tree.display()))?;
    let upstream = upstream.trim();
    if !upstream.starts_with("7.2") {
        bail!("{} is QEMU {upstream}, not 7.2", tree.display());
    }
    let debian = std::fs::read_to_string(tree.join("debian/changelog"))
        .ok()
        .and_then(|log| {
            let first = log.lines().next()?;
            let open = first.find('(')?;
            let close = first.find(')')?;
            first.get(open + 1..close).map(str::to_owned)
        });
    Ok(debian.unwrap_or_else(|| upstream.to_owned()))
}

/// `apt-get source --download-only qemu` into `download/` (kept, so a
/// re-extraction needs no network), then `dpkg-source -x` into `qemu/`.
fn fetch(layout: &Layout) -> Result<()> {
    ensure_tools(&[
        Tool::new("apt-get", &[]),
        Tool::new("dpkg-source", &["dpkg-dev"]),
        Tool::new("xz", &["xz-utils"]),
    ])?;
    let download = layout.download();
    let dsc = match realworld::find_dsc(&download)? {
        Some(dsc) => dsc,
        None => {
            realworld::recreate_dir(&download)?;
            println!("qemu-plugins: fetching Debian's {SOURCE_PACKAGE} source package");
            realworld::apt_source(&download, SOURCE_PACKAGE)?;
            realworld::find_dsc(&download)?.with_context(|| {
                format!(
                    "apt-get source {SOURCE_PACKAGE} left no .dsc in {}",
                    download.display()
                )
            })?
        }
    };
    let tree = layout.fetched_tree();
    println!("qemu-plugins: unpacking {}", dsc.display());
    // dpkg-source checks every file against the .dsc's checksums first.
    realworld::unpack(&dsc, &download, &tree).inspect_err(|_| {
        // A corrupted download is fetched again next time.
        let _ = std::fs::remove_dir_all(&download);
    })
}

fn glib_available() -> bool {
    Command::new("pkg-config")
        .args(["--exists", "glib-2.0"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `pkg-config ARGS`, split into words.
fn pkg_config(args: &[&str]) -> Result<Vec<String>> {
    let out = Command::new("pkg-config")
        .args(args)
        .output()
        .context("running pkg-config")?;
    if !out.status.success() {
        bail!(
            "pkg-config {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect())
}

/// Compiles one plugin as QEMU's build does (meson's default
/// `debugoptimized` for tests/plugin, `QEMU_CFLAGS`' -O2 -g for contrib).
fn compile(source: &Path, object: &Path, glib_cflags: &[String], include: &Path) -> Result<()> {
    let out = Command::new("gcc")
        .args(["-O2", "-g", "-Wall", "-fPIC"])
        .args(glib_cflags)
        .arg("-I")
        .arg(include)
        .arg("-c")
        .arg("-o")
        .arg(object)
        .arg(source)
        .output()
        .context("running gcc")?;
    if !out.status.success() {
        bail!(
            "gcc on {}:\n{}",
            source.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

fn link(object: &Path, library: &Path, soname: &str, libs: &[String]) -> Result<()> {
    let out = Command::new("gcc")
        .arg("-shared")
        .arg(format!("-Wl,-soname,{soname}"))
        .arg("-o")
        .arg(library)
        .arg(object)
        .args(libs)
        .output()
        .context("running gcc to link")?;
    if !out.status.success() {
        bail!(
            "linking {} failed:\n{}",
            library.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// The tests compare with the installed qemu-riscv64: say so when it is
/// not the version the plugins were built from (the API is the same across
/// 7.2's point releases, but the plugin sources may differ).
fn warn_on_version_mismatch(source_version: &str) {
    let Ok(out) = Command::new("dpkg-query")
        .args(["-W", "-f=${Version}", "qemu-user"])
        .output()
    else {
        return;
    };
    let installed = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() || installed.is_empty() {
        return;
    }
    // A binNMU (`+bN`) rebuilds the same source.
    let binary_source = match installed.rsplit_once("+b") {
        Some((base, n)) if n.chars().all(|c| c.is_ascii_digit()) => base,
        _ => installed.as_str(),
    };
    if binary_source != source_version {
        println!(
            "qemu-plugins: note: qemu-user {installed} is installed, the plugins are from qemu {source_version}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_is_recognised_by_its_version_and_header() {
        let dir = std::env::temp_dir().join(format!("tcgkit-qemu-tree-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("include/qemu")).unwrap();
        std::fs::create_dir_all(dir.join("debian")).unwrap();
        std::fs::write(dir.join("VERSION"), "7.2.22\n").unwrap();
        assert!(tree_version(&dir).is_err(), "no header yet");
        std::fs::write(dir.join("include/qemu/qemu-plugin.h"), "").unwrap();
        assert_eq!(tree_version(&dir).unwrap(), "7.2.22");
        std::fs::write(
            dir.join("debian/changelog"),
            "qemu (1:7.2+dfsg-7+deb12u18) bookworm; urgency=medium\n",
        )
        .unwrap();
        assert_eq!(tree_version(&dir).unwrap(), "1:7.2+dfsg-7+deb12u18");
        std::fs::write(dir.join("VERSION"), "9.0.0\n").unwrap();
        assert!(tree_version(&dir).is_err(), "not 7.2");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn every_plugin_has_a_distinct_library() {
        let mut names: Vec<String> = PLUGINS.iter().map(Plugin::library).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), PLUGINS.len());
        assert_eq!(PLUGINS.iter().filter(|p| !p.contrib).count(), 5);
    }
}
