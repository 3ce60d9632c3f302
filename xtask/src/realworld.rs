//! `cargo xtask realworld`: real-world guest programs built from Debian
//! source packages, for the differential tests in
//! crates/cli/tests/realworld.rs and for `cargo xtask bench-vs-qemu`.
//!
//! Each program's *source* package is fetched with `apt-get source` (apt
//! checks it against the signed archive index; we check the .dsc checksums
//! again before unpacking), unpacked with `dpkg-source -x` (which applies
//! Debian's patches) and cross-compiled with `riscv64-linux-gnu-gcc -O2`.
//! Each program's objects are linked twice: `-static` into
//! `target/realworld/bin/NAME`, and dynamically (a PIE against the
//! sysroot's glibc, `ld-linux-riscv64-lp64d.so.1` as interpreter) into
//! `target/realworld/bin/dynamic/NAME`. Only glibc differs between the two:
//! the project's own code (liblua, libzstd, the sqlite amalgamation) is in
//! both executables, and no shared library of the project is built. Debian's
//! cross gcc defaults to PIE, so the one set of objects links either way.
//!
//! A build is reused while its manifest matches [`RECIPE`] and both
//! executables of every program exist; `--force` rebuilds both.

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The cross compiler every guest program is built with.
const CROSS_CC: &str = "riscv64-linux-gnu-gcc";

/// Bumped whenever a build recipe below changes, so cached builds are redone.
const RECIPE: u32 = 5;

/// The programs, by the Debian source package they come from.
const PROGRAMS: &[Program] = &[
    Program {
        binary: "lua",
        source_package: "lua5.4",
        kind: Recipe::Lua,
    },
    Program {
        binary: "zstd",
        source_package: "libzstd",
        kind: Recipe::Zstd,
    },
    Program {
        binary: "zstd-mt",
        source_package: "libzstd",
        kind: Recipe::ZstdThreads,
    },
    Program {
        binary: "sqlite3",
        source_package: "sqlite3",
        kind: Recipe::Sqlite,
    },
    Program {
        binary: "dash",
        source_package: "dash",
        kind: Recipe::Dash,
    },
];

/// Size of the generated text the compressor workloads read.
const CORPUS_BYTES: usize = 400_000;

struct Program {
    /// Name of the built executables in `bin/` and `bin/dynamic/`.
    binary: &'static str,
    /// Debian source package (`apt-get source` name).
    source_package: &'static str,
    kind: Recipe,
}

#[derive(Clone, Copy)]
enum Recipe {
    Lua,
    Zstd,
    /// zstd multithreaded, as Debian builds it (`-T`).
    ZstdThreads,
    Sqlite,
    /// Debian's /bin/sh, for scripts with pipes and child processes.
    Dash,
}

/// Where the real-world programs and their inputs live.
pub struct Layout {
    /// `target/realworld`.
    pub dir: PathBuf,
}

impl Layout {
    /// The layout under the workspace's target directory.
    pub fn new(root: &Path) -> Self {
        let target = crate::target_dir(root);
        Layout {
            dir: target.join("realworld"),
        }
    }

    /// The statically linked executables.
    fn bin(&self) -> PathBuf {
        self.dir.join("bin")
    }

    /// The dynamically linked executables (run with `-L SYSROOT`).
    fn dynamic_bin(&self) -> PathBuf {
        self.bin().join("dynamic")
    }

    fn manifest(&self) -> PathBuf {
        self.dir.join("manifest.json")
    }

    /// The statically linked executable `name`, when the whole set is built
    /// and current.
    pub fn program(&self, name: &str) -> Option<PathBuf> {
        self.is_current().then(|| self.bin().join(name))
    }

    /// The generated text file the compressor workloads read.
    pub fn corpus(&self) -> PathBuf {
        self.dir.join("inputs").join("corpus.txt")
    }

    /// True when every program is built, static and dynamic, by the current
    /// recipe.
    pub fn is_current(&self) -> bool {
        let Ok(text) = std::fs::read_to_string(self.manifest()) else {
            return false;
        };
        let Ok(manifest) = serde_json::from_str::<serde_json::Value>(&text) else {
            return false;
        };
        manifest["recipe"] == RECIPE
            && PROGRAMS.iter().all(|p| {
                self.bin().join(p.binary).is_file() && self.dynamic_bin().join(p.binary).is_file()
            })
            && self.corpus().is_file()
    }
}

/// `cargo xtask realworld [--force]`.
pub fn run(root: &Path, args: &[String]) -> Result<()> {
    let mut force = false;
    for arg in args {
        match arg.as_str() {
            "--force" => force = true,
            other => bail!("realworld: unknown argument `{other}` (usage: realworld [--force])"),
        }
    }
    build(root, force)
}

/// Called by `cargo xtask test` before the test suite: under CI the
/// programs must be built (the differential tests require them); locally
/// a missing build is only reported, and those tests skip.
pub fn prepare_for_tests(root: &Path) -> Result<()> {
    if std::env::var("CI").as_deref() == Ok("true") {
        return build(root, false);
    }
    if !Layout::new(root).is_current() {
        println!("realworld: programs not built; run `cargo xtask realworld` to test them too");
    }
    Ok(())
}

fn build(root: &Path, force: bool) -> Result<()> {
    let layout = Layout::new(root);
    if !force && layout.is_current() {
        println!("realworld: up to date in {}", layout.dir.display());
        return Ok(());
    }
    let started = std::time::Instant::now();
    ensure_tools(&[
        Tool::new("apt-get", &[]),
        Tool::new("dpkg-source", &["dpkg-dev"]),
        Tool::new("xz", &["xz-utils"]),
        Tool::new("sha256sum", &["coreutils"]),
        Tool::new(
            CROSS_CC,
            &["gcc-riscv64-linux-gnu", "libc6-dev-riscv64-cross"],
        ),
        // The sqlite amalgamation is generated on the host, by Tcl scripts.
        Tool::new("gcc", &["gcc"]),
        Tool::new("make", &["make"]),
        Tool::new("tclsh", &["tcl"]),
    ])?;
    // A stale manifest must never vouch for a half-rebuilt set.
    let _ = std::fs::remove_file(layout.manifest());
    let bin = layout.bin();
    let dynamic_bin = layout.dynamic_bin();
    std::fs::create_dir_all(&dynamic_bin)
        .with_context(|| format!("creating {}", dynamic_bin.display()))?;

    let mut manifest = Vec::new();
    for program in PROGRAMS {
        let src = fetch_source(&layout, program.source_package)?;
        let exe = bin.join(program.binary);
        let dynamic_exe = dynamic_bin.join(program.binary);
        let objects = layout.dir.join("obj").join(program.binary);
        recreate_dir(&objects)?;
        let jobs = match program.kind {
            Recipe::Lua => lua_jobs(&src.tree, &objects)?,
            Recipe::Zstd => zstd_jobs(&src.tree, &objects, false)?,
            Recipe::ZstdThreads => zstd_jobs(&src.tree, &objects, true)?,
            Recipe::Sqlite => sqlite_jobs(&src.tree, &objects)?,
            Recipe::Dash => dash_jobs(&src.tree, &objects)?,
        };
        compile_all(&jobs)?;
        link(&jobs, &exe, Linkage::Static)?;
        link(&jobs, &dynamic_exe, Linkage::Dynamic)?;
        println!(
            "realworld: built {} and {} from {} {}",
            exe.display(),
            dynamic_exe.display(),
            program.source_package,
            src.version
        );
        manifest.push(serde_json::json!({
            "binary": program.binary,
            "dynamic": format!("dynamic/{}", program.binary),
            "source_package": program.source_package,
            "version": src.version,
        }));
    }
    write_corpus(&layout.corpus())?;
    let manifest = serde_json::json!({ "recipe": RECIPE, "programs": manifest });
    std::fs::write(layout.manifest(), serde_json::to_string_pretty(&manifest)?)
        .context("writing the realworld manifest")?;
    println!(
        "realworld: done in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// A command the tasks need and the Debian packages that provide it.
pub struct Tool {
    command: &'static str,
    packages: &'static [&'static str],
}

impl Tool {
    /// `command`, installed by `packages` when missing.
    pub const fn new(command: &'static str, packages: &'static [&'static str]) -> Self {
        Tool { command, packages }
    }
}

pub(crate) fn on_path(command: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(command).is_file()))
}

pub(crate) fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.status.success() && o.stdout.trim_ascii() == b"0")
}

/// Installs the packages of every missing tool with apt-get when running as
/// root; otherwise says exactly what to install.
pub fn ensure_tools(tools: &[Tool]) -> Result<()> {
    let missing: Vec<&Tool> = tools.iter().filter(|t| !on_path(t.command)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let mut packages: Vec<&str> = missing
        .iter()
        .flat_map(|t| t.packages.iter().copied())
        .collect();
    packages.sort_unstable();
    packages.dedup();
    let names: Vec<&str> = missing.iter().map(|t| t.command).collect();
    if packages.is_empty() || !is_root() || !on_path("apt-get") {
        bail!(
            "missing {}; install them with `sudo apt-get install {}`",
            names.join(", "),
            packages.join(" ")
        );
    }
    println!(
        "installing {} (for {})",
        packages.join(" "),
        names.join(", ")
    );
    let install = || {
        Command::new("apt-get")
            .args(["install", "-y", "-q", "--no-install-recommends"])
            .args(&packages)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .context("running apt-get install")
    };
    let mut status = install()?;
    if !status.success() {
        // Usually a stale package index: refresh it once and retry.
        let _ = Command::new("apt-get").args(["update", "-q"]).status();
        status = install()?;
    }
    let still: Vec<&str> = missing
        .iter()
        .filter(|t| !on_path(t.command))
        .map(|t| t.command)
        .collect();
    if !status.success() || !still.is_empty() {
        bail!(
            "apt-get install {} failed ({status}); still missing: {}",
            packages.join(" "),
            still.join(", ")
        );
    }
    Ok(())
}

/// An unpacked source package.
struct Source {
    tree: PathBuf,
    version: String,
}

/// Downloads (once) and unpacks a Debian source package under `src/`.
fn fetch_source(layout: &Layout, package: &str) -> Result<Source> {
    let download = layout.dir.join("src").join(format!("{package}.download"));
    // A cached download is reused only if it still verifies; an interrupted
    // or corrupted one is fetched again.
    let (dsc, version) = match verified_download(&download) {
        Ok(Some(found)) => found,
        Ok(None) | Err(_) => {
            recreate_dir(&download)?;
            apt_source(&download, package)?;
            verified_download(&download)?.with_context(|| {
                format!(
                    "apt-get source {package} left no .dsc in {}",
                    download.display()
                )
            })?
        }
    };
    let tree = layout.dir.join("src").join(package);
    unpack(&dsc, &download, &tree)?;
    Ok(Source { tree, version })
}

/// `dpkg-source -x DSC TREE` in `download` (which holds the files the .dsc
/// lists), replacing whatever `tree` held.
pub(crate) fn unpack(dsc: &Path, download: &Path, tree: &Path) -> Result<()> {
    if tree.exists() {
        std::fs::remove_dir_all(tree).with_context(|| format!("removing {}", tree.display()))?;
    }
    let out = Command::new("dpkg-source")
        .arg("-x")
        .arg(dsc)
        .arg(tree)
        .current_dir(download)
        .output()
        .context("running dpkg-source")?;
    if !out.status.success() {
        bail!(
            "dpkg-source -x {} failed ({}):\n{}",
            dsc.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// The .dsc in `dir` and its version, after checking every file it lists.
fn verified_download(dir: &Path) -> Result<Option<(PathBuf, String)>> {
    let Some(dsc) = find_dsc(dir)? else {
        return Ok(None);
    };
    let text =
        std::fs::read_to_string(&dsc).with_context(|| format!("reading {}", dsc.display()))?;
    let version = dsc_field(&text, "Version")
        .with_context(|| format!("{} has no Version field", dsc.display()))?
        .to_owned();
    verify_checksums(dir, &text).with_context(|| format!("verifying {}", dsc.display()))?;
    Ok(Some((dsc, version)))
}

pub(crate) fn find_dsc(dir: &Path) -> Result<Option<PathBuf>> {
    if !dir.is_dir() {
        return Ok(None);
    }
    let mut found = None;
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "dsc") {
            found = Some(path);
        }
    }
    Ok(found)
}

/// `apt-get source --download-only`, adding a deb-src entry for this
/// system's Debian release first when none is configured and we are root.
pub(crate) fn apt_source(dir: &Path, package: &str) -> Result<()> {
    let attempt = || {
        Command::new("apt-get")
            .args(["source", "--download-only", "-q", package])
            .current_dir(dir)
            .output()
            .context("running apt-get source")
    };
    let out = attempt()?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !stderr.contains("deb-src") || !is_root() {
        bail!(
            "apt-get source {package} failed ({}):\n{stderr}",
            out.status
        );
    }
    add_deb_src()?;
    let out = attempt()?;
    if !out.status.success() {
        bail!(
            "apt-get source {package} failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// Adds `deb-src` for the running Debian release and refreshes the index.
fn add_deb_src() -> Result<()> {
    let release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    let codename = release
        .lines()
        .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
        .map(|c| c.trim_matches('"').to_owned())
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "bookworm".to_owned());
    let file = Path::new("/etc/apt/sources.list.d/tcgkit-deb-src.sources");
    println!(
        "realworld: adding {} (deb-src for {codename})",
        file.display()
    );
    let entry = format!(
        "Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: {codename} {codename}-updates\n\
         Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
    );
    std::fs::write(file, entry).with_context(|| format!("writing {}", file.display()))?;
    let status = Command::new("apt-get")
        .args(["update", "-q"])
        .stdout(Stdio::null())
        .status()
        .context("running apt-get update")?;
    if !status.success() {
        bail!("apt-get update failed ({status})");
    }
    Ok(())
}

/// The value of a single-line field of a Debian control file.
fn dsc_field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key == name).then(|| value.trim())
    })
}

/// Checks every file listed under `Checksums-Sha256` in the .dsc.
fn verify_checksums(dir: &Path, dsc: &str) -> Result<()> {
    let mut listing = String::new();
    let mut in_section = false;
    for line in dsc.lines() {
        if line.starts_with("Checksums-Sha256:") {
            in_section = true;
            continue;
        }
        if in_section {
            let Some(entry) = line.strip_prefix(' ') else {
                break;
            };
            let fields: Vec<&str> = entry.split_whitespace().collect();
            let [hash, _size, name] = fields[..] else {
                bail!("malformed checksum line `{line}`");
            };
            // Names come from the .dsc: refuse anything that is not a plain file name.
            if name.contains('/') || name.starts_with('.') {
                bail!("suspicious file name `{name}` in the .dsc");
            }
            listing.push_str(&format!("{hash}  {name}\n"));
        }
    }
    if listing.is_empty() {
        bail!("no Checksums-Sha256 entries");
    }
    let mut child = Command::new("sha256sum")
        .args(["--check", "--strict", "--quiet", "-"])
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running sha256sum")?;
    if let Some(mut stdin) = child.stdin.take() {
        use std::io::Write;
        stdin.write_all(listing.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "checksum mismatch:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

pub(crate) fn recreate_dir(dir: &Path) -> Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))
}

/// One translation unit to cross-compile.
struct Job {
    source: PathBuf,
    object: PathBuf,
    flags: Vec<String>,
}

fn c_files(dir: &Path, skip: &[&str]) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if path.extension().is_some_and(|e| e == "c") && !skip.contains(&name) {
            files.push(path);
        }
    }
    files.sort();
    if files.is_empty() {
        bail!("no C sources in {}", dir.display());
    }
    Ok(files)
}

fn jobs_for(files: Vec<PathBuf>, objects: &Path, flags: &[String]) -> Vec<Job> {
    files
        .into_iter()
        .enumerate()
        .map(|(i, source)| {
            let stem = source
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or("unit");
            Job {
                // Numbered: zstd has equally named files in different folders.
                object: objects.join(format!("{i:03}-{stem}.o")),
                source,
                flags: flags.to_vec(),
            }
        })
        .collect()
}

/// The Lua interpreter (`lua`, not `luac`), with POSIX features and without
/// dynamic module loading (no `LUA_USE_DLOPEN`, in either build: the
/// static and the dynamic executable run the same Lua code).
fn lua_jobs(tree: &Path, objects: &Path) -> Result<Vec<Job>> {
    let src = tree.join("src");
    // Debian's luaconf.h includes a header its build generates with the
    // multiarch triplet (used only in module search paths).
    let generated = objects.join("include");
    std::fs::create_dir_all(&generated)?;
    std::fs::write(
        generated.join("lua5.4-deb-multiarch.h"),
        "#define DEB_HOST_MULTIARCH \"riscv64-linux-gnu\"\n",
    )?;
    let flags = vec![
        "-DLUA_USE_POSIX".to_owned(),
        // Lua seeds its string hashes from the clock and from addresses, so
        // the instruction count would change from run to run; a fixed seed
        // makes runs (and the two emulators' plugin counts) comparable.
        "-Dluai_makeseed(L)=0x7c15u".to_owned(),
        format!("-I{}", generated.display()),
    ];
    Ok(jobs_for(c_files(&src, &["luac.c"])?, objects, &flags))
}

/// The `zstd` command-line tool with the library compiled in, without
/// legacy formats or external compressors: single-threaded (the benchmark
/// workload, whose instruction counts both emulators must agree on), or
/// with `threads` multithreaded as Debian builds it (`-T`; even by default
/// it reads and writes on threads of its own).
fn zstd_jobs(tree: &Path, objects: &Path, threads: bool) -> Result<Vec<Job>> {
    let lib = tree.join("lib");
    let mut files = Vec::new();
    for dir in ["common", "compress", "decompress", "dictBuilder"] {
        files.extend(c_files(&lib.join(dir), &[])?);
    }
    files.extend(c_files(&tree.join("programs"), &[])?);
    let mut flags = vec![
        "-DZSTD_LEGACY_SUPPORT=0".to_owned(),
        "-DBACKTRACE_ENABLE=0".to_owned(),
        format!("-I{}", lib.display()),
        format!("-I{}", lib.join("common").display()),
    ];
    if threads {
        flags.extend(["-DZSTD_MULTITHREAD".to_owned(), "-pthread".to_owned()]);
    }
    Ok(jobs_for(files, objects, &flags))
}

/// Runs `cmd` (`what`, for messages) in `dir`; fails with its output if
/// it fails.
fn run_in(dir: &Path, cmd: &mut Command, what: &str) -> Result<()> {
    let out = cmd
        .current_dir(dir)
        .output()
        .with_context(|| format!("running {what}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// dash: `configure` for the RV64 host writes config.h and `make` the
/// sources generated by host tools (builtins, nodes, syntax, signal names,
/// init); the shell's own files are the `dash_CFILES` of src/Makefile.am,
/// which carries Debian's additions. Autotools stay out of it (Debian's
/// patches touch configure.ac; its regenerated files are not needed).
fn dash_jobs(tree: &Path, objects: &Path) -> Result<Vec<Job>> {
    let run = |cmd: &mut Command, what: &str| run_in(tree, cmd, what);
    run(
        Command::new(tree.join("configure")).args([
            "--host=riscv64-linux-gnu",
            &format!("CC={CROSS_CC}"),
            "CC_FOR_BUILD=gcc",
        ]),
        "dash's configure",
    )?;
    let generated = ["builtins.c", "init.c", "nodes.c", "signames.c", "syntax.c"];
    let no_autotools = [
        "ACLOCAL=true",
        "AUTOCONF=true",
        "AUTOMAKE=true",
        "AUTOHEADER=true",
    ];
    run(
        Command::new("make")
            .args(no_autotools)
            .args(["-C", "src", "builtins.h", "nodes.h", "syntax.h", "token.h"])
            .args(["token_vars.h"])
            .args(generated),
        "make dash's generated sources",
    )?;
    let src = tree.join("src");
    let makefile = std::fs::read_to_string(src.join("Makefile.am"))
        .context("reading dash's src/Makefile.am")?;
    let mut files: Vec<PathBuf> = Vec::new();
    let mut listing = false;
    for line in makefile.lines() {
        let line = if let Some(rest) = line.strip_prefix("dash_CFILES =") {
            listing = true;
            rest
        } else {
            line
        };
        if !listing {
            continue;
        }
        let body = line.trim_end().trim_end_matches('\\');
        files.extend(body.split_whitespace().map(|f| src.join(f)));
        if !line.trim_end().ends_with('\\') {
            break;
        }
    }
    if files.is_empty() {
        bail!("no dash_CFILES in {}", src.join("Makefile.am").display());
    }
    files.extend(generated.iter().map(|f| src.join(f)));
    let flags = vec![
        "-include".to_owned(),
        tree.join("config.h").display().to_string(),
        "-DBSD=1".to_owned(),
        "-DSHELL".to_owned(),
        format!("-I{}", src.display()),
        format!("-I{}", tree.display()),
    ];
    Ok(jobs_for(files, objects, &flags))
}

/// The `sqlite3` shell: the amalgamation (`sqlite3.c`) and `shell.c` are
/// generated from the source tree on the host, then cross-compiled.
fn sqlite_jobs(tree: &Path, objects: &Path) -> Result<Vec<Job>> {
    let build = objects.join("amalgamation");
    std::fs::create_dir_all(&build)?;
    let run = |cmd: &mut Command, what: &str| run_in(&build, cmd, what);
    run(
        Command::new(tree.join("configure")).arg("--disable-tcl"),
        "sqlite's configure",
    )?;
    run(
        Command::new("make").args(["sqlite3.c", "shell.c"]),
        "make sqlite3.c shell.c",
    )?;
    let flags = vec![
        // No threads and no extension loading: a single process whose code
        // is all in the executable, static or dynamic alike.
        "-DSQLITE_THREADSAFE=0".to_owned(),
        "-DSQLITE_OMIT_LOAD_EXTENSION".to_owned(),
        format!("-I{}", build.display()),
    ];
    Ok(jobs_for(
        vec![build.join("sqlite3.c"), build.join("shell.c")],
        objects,
        &flags,
    ))
}

/// Compiles every job, as many at once as there are cores, largest first so
/// the big translation units do not finish last.
fn compile_all(jobs: &[Job]) -> Result<()> {
    let mut order: Vec<&Job> = jobs.iter().collect();
    order.sort_by_key(|j| std::cmp::Reverse(std::fs::metadata(&j.source).map_or(0, |m| m.len())));
    let next = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                while let Some(job) = order.get(next.fetch_add(1, Ordering::Relaxed)) {
                    if let Err(e) = compile(job)
                        && let Ok(mut f) = failures.lock()
                    {
                        f.push(format!("{e:#}"));
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap_or_default();
    if !failures.is_empty() {
        bail!(
            "{} compile(s) failed:\n{}",
            failures.len(),
            failures.join("\n")
        );
    }
    Ok(())
}

fn compile(job: &Job) -> Result<()> {
    let out = Command::new(CROSS_CC)
        .args(["-O2", "-c", "-w"])
        .args(&job.flags)
        .arg("-o")
        .arg(&job.object)
        .arg(&job.source)
        .output()
        .with_context(|| format!("running {CROSS_CC}"))?;
    if !out.status.success() {
        bail!(
            "{CROSS_CC} on {}:\n{}",
            job.source.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// How an executable gets glibc.
#[derive(Clone, Copy)]
enum Linkage {
    /// `-static`: glibc and libm linked in.
    Static,
    /// gcc's default, a PIE needing the sysroot's `libc.so.6` (and `libm`
    /// when used) at run time.
    Dynamic,
}

/// Links the compiled objects into `exe`; both linkages take the same
/// objects, which are PIC because Debian's gcc defaults to PIE.
fn link(jobs: &[Job], exe: &Path, linkage: Linkage) -> Result<()> {
    let mut cmd = Command::new(CROSS_CC);
    cmd.arg("-O2");
    if let Linkage::Static = linkage {
        cmd.arg("-static");
    }
    let out = cmd
        .arg("-o")
        .arg(exe)
        .args(jobs.iter().map(|j| &j.object))
        .args(["-lm", "-pthread"])
        .output()
        .with_context(|| format!("running {CROSS_CC} to link"))?;
    if !out.status.success() {
        bail!(
            "linking {} failed:\n{}",
            exe.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// Writes the compressor input: word salad with numbers from a fixed
/// pseudo-random sequence, so it compresses like text and is reproducible.
fn write_corpus(path: &Path) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, corpus(CORPUS_BYTES))
        .with_context(|| format!("writing {}", path.display()))
}

/// `len` bytes of reproducible text (the same generator as the tests').
pub fn corpus(len: usize) -> Vec<u8> {
    const WORDS: &[&str] = &[
        "alpha",
        "beta",
        "gamma",
        "delta",
        "emulator",
        "block",
        "cache",
        "flush",
        "vcpu",
        "plugin",
        "riscv",
        "translate",
    ];
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move |bound: u64| {
        // xorshift64*: tiny, fast and plenty for generating test text.
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_F491_4F6C_DD1D) % bound
    };
    let mut out = Vec::with_capacity(len + 128);
    while out.len() < len {
        let words = 3 + next(10);
        for i in 0..words {
            if i > 0 {
                out.push(b' ');
            }
            let word = WORDS
                .get(next(WORDS.len() as u64) as usize)
                .copied()
                .unwrap_or("x");
            out.extend_from_slice(word.as_bytes());
        }
        out.extend_from_slice(format!(" {}\n", next(100_000)).as_bytes());
    }
    out.truncate(len);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corpus_is_reproducible_text_of_the_requested_size() {
        let a = corpus(10_000);
        assert_eq!(a.len(), 10_000);
        assert_eq!(a, corpus(10_000));
        assert!(
            a.iter()
                .all(|b| b.is_ascii_graphic() || *b == b' ' || *b == b'\n')
        );
        assert!(a.split(|b| *b == b'\n').count() > 50);
    }

    #[test]
    fn dsc_fields_and_checksum_listing_are_read() {
        let dsc = "Format: 3.0 (quilt)\nSource: lua5.4\nVersion: 5.4.4-3+deb12u1\n\
                   Checksums-Sha256:\n abc 10 lua5.4_5.4.4.orig.tar.gz\nFiles:\n x 1 y\n";
        assert_eq!(dsc_field(dsc, "Version"), Some("5.4.4-3+deb12u1"));
        assert_eq!(dsc_field(dsc, "Maintainer"), None);
        let dir = std::env::temp_dir().join(format!("tcgkit-dsc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("lua5.4_5.4.4.orig.tar.gz"), b"0123456789").unwrap();
        // The listed hash is wrong: verification must fail.
        assert!(verify_checksums(&dir, dsc).is_err());
        let bad_name = dsc.replace("lua5.4_5.4.4.orig.tar.gz", "../etc/passwd");
        assert!(verify_checksums(&dir, &bad_name).is_err());
        let good = dsc.replace(
            "abc",
            "84d89877f0d4041efb6bf91a16f0248f2fd573e6af05c19f96bedb9f882f7882",
        );
        assert!(verify_checksums(&dir, &good).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
