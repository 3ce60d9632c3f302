//! `cargo xtask corpus-images [DIR...]`: open every assembly under the given
//! directories (default /usr/lib/mono) with image-core and compare what it
//! reads with what `monodis` (Debian mono-utils) prints for the same file.
//!
//! Compared: Module name and MVID, assembly name and version, and the
//! AssemblyRefs (name and version, in table order).

use anyhow::{Context, Result, bail};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use tcgkit_image_core::Image;

/// The default corpus: Debian's Mono class libraries and tools.
pub const MONO_DIR: &str = "/usr/lib/mono";

/// What one tool says about one file.
#[derive(Debug, PartialEq, Eq)]
struct Facts {
    module: String,
    mvid: String,
    /// (name, version) of the Assembly row, if any.
    assembly: Option<(String, String)>,
    /// (name, version) of each AssemblyRef row.
    refs: Vec<(String, String)>,
}

/// Whether `monodis` can be run.
pub fn monodis_available() -> bool {
    Command::new("monodis").arg("--help").output().is_ok()
}

/// Install Debian's Mono when `monodis` is missing and we are root.
fn ensure_monodis() -> Result<()> {
    if monodis_available() {
        return Ok(());
    }
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout == b"0\n")
        .unwrap_or(false);
    if !root {
        bail!(
            "monodis not found: install Debian's mono-runtime and mono-utils (as root: apt-get install mono-runtime mono-utils)"
        );
    }
    eprintln!("corpus-images: installing mono-runtime and mono-utils");
    let ok = Command::new("apt-get")
        .args([
            "install",
            "-y",
            "-q",
            "--no-install-recommends",
            "mono-runtime",
            "mono-utils",
        ])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .context("running apt-get")?
        .success();
    if !ok || !monodis_available() {
        bail!("could not install mono-utils (monodis)");
    }
    Ok(())
}

/// Run the comparison; an error if any file disagrees.
pub fn run(dirs: &[String]) -> Result<()> {
    ensure_monodis()?;
    let dirs: Vec<PathBuf> = if dirs.is_empty() {
        vec![PathBuf::from(MONO_DIR)]
    } else {
        dirs.iter().map(PathBuf::from).collect()
    };
    let mut files = BTreeSet::new();
    for d in &dirs {
        collect(d, &mut files).with_context(|| format!("listing {}", d.display()))?;
    }
    if files.is_empty() {
        bail!("no *.dll or *.exe under {dirs:?}");
    }
    let mut agree = 0;
    for f in &files {
        match compare(f) {
            Ok(()) => agree += 1,
            Err(why) => println!("DISAGREE {}: {why:#}", f.display()),
        }
    }
    println!("corpus-images: {agree}/{} agree", files.len());
    if agree != files.len() {
        bail!(
            "{} of {} images disagree with monodis",
            files.len() - agree,
            files.len()
        );
    }
    Ok(())
}

/// Every *.dll / *.exe under `dir`, symlinks resolved so each file counts once.
fn collect(dir: &Path, out: &mut BTreeSet<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect(&path, out)?;
        } else if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("dll") || e.eq_ignore_ascii_case("exe"))
            && let Ok(real) = path.canonicalize()
        {
            out.insert(real);
        }
    }
    Ok(())
}

fn compare(path: &Path) -> Result<()> {
    let theirs = monodis(path);
    let ours = ours(path);
    match (ours, theirs) {
        (Ok(a), Ok(b)) if a == b => Ok(()),
        (Ok(a), Ok(b)) => {
            let mut why = Vec::new();
            if a.module != b.module {
                why.push(format!(
                    "module name ours={:?} monodis={:?}",
                    a.module, b.module
                ));
            }
            if a.mvid != b.mvid {
                why.push(format!("MVID ours={} monodis={}", a.mvid, b.mvid));
            }
            if a.assembly != b.assembly {
                why.push(format!(
                    "assembly ours={:?} monodis={:?}",
                    a.assembly, b.assembly
                ));
            }
            if a.refs != b.refs {
                why.push(format!(
                    "AssemblyRefs ours={:?} monodis={:?}",
                    a.refs, b.refs
                ));
            }
            bail!("{}", why.join("; "))
        }
        // Both refusing a file (e.g. a native DLL) is agreement.
        (Err(_), Err(_)) => Ok(()),
        (Ok(_), Err(e)) => bail!("monodis failed but image-core read it: {e:#}"),
        (Err(e), Ok(_)) => bail!("image-core failed but monodis read it: {e}"),
    }
}

fn ours(path: &Path) -> Result<Facts, tcgkit_image_core::ImageError> {
    let img = Image::open(path)?;
    let version = |v: tcgkit_image_core::Version| v.to_string();
    Ok(Facts {
        module: img.module_name().unwrap_or_default().to_owned(),
        mvid: img.mvid().map(|g| g.to_string()).unwrap_or_default(),
        assembly: img
            .assembly_name()
            .map(|a| (a.name.clone(), version(a.version))),
        refs: img
            .assembly_refs()?
            .into_iter()
            .map(|r| (r.name, version(r.version)))
            .collect(),
    })
}

fn monodis_output(path: &Path, what: &str) -> Result<String> {
    let out = Command::new("monodis")
        .arg(what)
        .arg(path)
        .output()
        .context("running monodis")?;
    if !out.status.success() {
        bail!(
            "monodis {what} exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn monodis(path: &Path) -> Result<Facts> {
    parse_monodis(
        &monodis_output(path, "--module")?,
        &monodis_output(path, "--assembly")?,
        &monodis_output(path, "--assemblyref")?,
    )
}

/// Read the facts out of `monodis --module`, `--assembly` and `--assemblyref` output.
fn parse_monodis(module: &str, asm: &str, refs_text: &str) -> Result<Facts> {
    // "1: NAME GUIDINDEX {MVID}"
    let row = module
        .lines()
        .find_map(|l| l.strip_prefix("1: "))
        .context("monodis --module printed no row 1")?;
    let mut parts = row.rsplitn(3, ' ');
    let mvid = parts
        .next()
        .unwrap_or_default()
        .trim_matches(['{', '}'])
        .to_ascii_lowercase();
    let name = parts.nth(1).unwrap_or_default().to_owned();

    let field = |key: &str| {
        asm.lines()
            .find_map(|l| l.strip_prefix(key))
            .map(|v| v.trim().to_owned())
    };
    let assembly = field("Name:").map(|n| (n, field("Version:").unwrap_or_default()));

    // "N: Version=a.b.c.d" then "\tName=X"
    let mut refs = Vec::new();
    let mut version = None;
    for l in refs_text.lines() {
        if let Some((_, v)) = l.split_once(": Version=") {
            version = Some(v.trim().to_owned());
        } else if let Some(n) = l.trim_start().strip_prefix("Name=") {
            refs.push((n.to_owned(), version.take().unwrap_or_default()));
        }
    }
    Ok(Facts {
        module: name,
        mvid,
        assembly,
        refs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_monodis_output() {
        let module =
            "Module Table (1..1)\n1: cert-sync.exe 1 {10EAC2E8-7BFE-4EED-9DC4-AC224A8098AD}\n";
        let asm = "Assembly Table\nName:          cert-sync\nHash Algoritm: 0x00008004\nVersion:       6.8.0.105\nCulture:       \n";
        let refs = "AssemblyRef Table\n1: Version=4.0.0.0\n\tName=mscorlib\n\tFlags=0x00000000\n2: Version=4.0.0.0\n\tName=Mono.Security\n";
        let f = parse_monodis(module, asm, refs).unwrap();
        assert_eq!(f.module, "cert-sync.exe");
        assert_eq!(f.mvid, "10eac2e8-7bfe-4eed-9dc4-ac224a8098ad");
        assert_eq!(f.assembly, Some(("cert-sync".into(), "6.8.0.105".into())));
        assert_eq!(
            f.refs,
            [
                ("mscorlib".into(), "4.0.0.0".into()),
                ("Mono.Security".into(), "4.0.0.0".into())
            ]
        );
        // A module without an Assembly row, and no refs.
        let f = parse_monodis(module, "Assembly Table\n", "AssemblyRef Table\n").unwrap();
        assert_eq!((f.assembly, f.refs.len()), (None, 0));
        assert!(parse_monodis("Module Table (1..0)\n", "", "").is_err());
    }

    #[test]
    fn agrees_on_a_committed_fixture() {
        if !monodis_available() {
            eprintln!("monodis not installed; skipping");
            return;
        }
        let f = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/assemblies/I18N.West.dll");
        compare(&f).unwrap();
        // A different file's facts must not agree.
        let a = ours(&f).unwrap();
        let b = monodis(&f.with_file_name("I18N.dll")).unwrap();
        assert_ne!(a, b);
    }
}
