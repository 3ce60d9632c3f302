//! Registry costs: open + parse + close of every committed fixture
//! assembly through `ImageRegistry` (load, resolve references, notify an
//! observer, unload), and loading then unloading a whole reference closure,
//! for the tiny lifecycle fixtures and for the Mono class library assembly
//! with the most references when Mono is installed. (`image_storage`
//! measures the bare `Image` readers.)

// criterion_group! generates an undocumented function; this is a bench binary, not API.
#![allow(missing_docs)]

use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tcgkit_image_core::{Image, ImageRegistry, LifecycleObserver, LoadedImage};

const MONO_DIR: &str = "/usr/lib/mono/4.5";

fn fixtures_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/assemblies")
}

/// Every `.dll`/`.exe` under `dir`, recursively, sorted.
fn assemblies(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for path in entries.filter_map(Result::ok).map(|e| e.path()) {
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "dll" || e == "exe") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// Counts events, reading what an unload event writer would read.
struct CountingObserver(usize);

impl LifecycleObserver for CountingObserver {
    fn loaded(&mut self, image: &LoadedImage<'_>) {
        self.0 += image.references().len();
    }

    fn unloaded(&mut self, image: &LoadedImage<'_>) {
        self.0 += image.image().name().len() + usize::from(image.image().mvid().is_some());
    }
}

/// Loads `root` (and, with a search directory, its closure), closes it.
fn load_and_close(search: Option<&Path>, root: &Path) -> usize {
    let mut registry = ImageRegistry::new();
    if let Some(dir) = search {
        registry.add_search_path(dir);
    }
    registry.add_observer(CountingObserver(0));
    let handle = match registry.load(root) {
        Ok(handle) => handle,
        Err(e) => panic!("{e}"),
    };
    let loaded = registry.len();
    if let Err(e) = registry.close(handle) {
        panic!("{e}");
    }
    loaded
}

fn bench_open_parse_close(c: &mut Criterion) {
    let mut group = c.benchmark_group("registry/load_close");
    for path in assemblies(&fixtures_root()) {
        let label = path
            .strip_prefix(fixtures_root())
            .unwrap_or(&path)
            .display()
            .to_string();
        group.bench_function(label, |b| b.iter(|| load_and_close(None, black_box(&path))));
    }
    group.finish();
}

/// The assembly in `dir` with the most AssemblyRefs.
fn most_referencing(dir: &Path) -> Option<PathBuf> {
    let files = std::fs::read_dir(dir).ok()?;
    files
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "dll"))
        .filter_map(|p| {
            let refs = Image::open(&p).ok()?.assembly_refs().ok()?.len();
            Some((refs, p))
        })
        .max()
        .map(|(_, p)| p)
}

fn bench_closure(c: &mut Criterion) {
    let mut group = c.benchmark_group("registry/load_closure");
    let lifecycle = fixtures_root().join("lifecycle");
    let root = lifecycle.join("Root.dll");
    group.bench_function("lifecycle/Root.dll", |b| {
        b.iter(|| load_and_close(Some(&lifecycle), &root))
    });

    let mono = Path::new(MONO_DIR);
    match most_referencing(mono) {
        Some(root) => {
            let label = format!(
                "mono/{}",
                root.file_name().unwrap_or_default().to_string_lossy()
            );
            let loaded = load_and_close(Some(mono), &root);
            eprintln!("{label}: closure of {loaded} images");
            group.bench_function(label, |b| b.iter(|| load_and_close(Some(mono), &root)));
        }
        None => eprintln!("skipping the Mono closure bench: no assemblies in {MONO_DIR}"),
    }
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_open_parse_close, bench_closure
}
criterion_main!(benches);
