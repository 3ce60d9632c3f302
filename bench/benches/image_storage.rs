//! Does memory-mapping pay when opening an image? Compares `Image::open`
//! (mmap) with reading the whole file and parsing it (`Image::from_bytes`),
//! for a large assembly, reading just its identity; and measures
//! open + parse + drop of each committed fixture.

// criterion_group! generates an undocumented function; this is a bench binary, not API.
#![allow(missing_docs)]

use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use std::path::{Path, PathBuf};
use tcgkit_image_core::Image;

/// A large real assembly; the mmap/read comparison is skipped without it.
const LARGE: &str = "/usr/lib/mono/4.5/mscorlib.dll";

fn identity(img: &Image) -> usize {
    img.assembly_name().map_or(0, |a| a.name.len()) + img.mvid().map_or(0, |g| usize::from(g.0[0]))
}

fn storage(c: &mut Criterion) {
    let large = Path::new(LARGE);
    if !large.exists() {
        eprintln!(
            "image_storage: {LARGE} missing (apt-get install mono-runtime); skipping mmap vs read"
        );
        return;
    }
    let mut g = c.benchmark_group("open_identity_mscorlib");
    g.bench_function("mmap", |b| {
        b.iter(|| {
            let img = Image::open(black_box(large)).expect("mscorlib opens");
            black_box(identity(&img))
        })
    });
    g.bench_function("read", |b| {
        b.iter(|| {
            let bytes = std::fs::read(black_box(large)).expect("mscorlib reads");
            let img = Image::from_bytes(bytes).expect("mscorlib parses");
            black_box(identity(&img))
        })
    });
    g.finish();
}

fn fixtures(c: &mut Criterion) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures");
    let files = [
        "assemblies/cert-sync.exe",
        "assemblies/I18N.dll",
        "assemblies/I18N.West.dll",
        "assemblies/Mono.Security.dll",
        "assemblies/ClrLoader.dll",
        "elf/tiny",
    ];
    let mut g = c.benchmark_group("open_parse_drop");
    for f in files {
        let path = dir.join(f);
        g.bench_function(f, |b| {
            b.iter(|| {
                let img = Image::open(black_box(&path)).expect("fixture opens");
                let refs = img.assembly_refs().expect("refs parse").len();
                black_box(identity(&img) + refs)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, storage, fixtures);
criterion_main!(benches);
