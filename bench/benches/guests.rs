//! Guest instructions per second on each bundled guest program, run whole
//! through linux-user (load, stack set-up, syscalls, exit) on the riscv
//! frontend, as `tcgkit run` does.
//!
//! `cargo bench -p tcgkit-bench --bench guests`

// `criterion_group!` defines an undocumented public function.
#![allow(missing_docs)]

use std::ffi::OsString;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tcgkit_linux_user::{GuestExit, Process};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/guests")
        .join(name)
}

/// Runs `guest` once with its stdout sent to /dev/null (criterion reports on
/// our stdout, so it is restored afterwards); returns the guest
/// instructions executed.
fn run_quietly(guest: &Path, null: &std::fs::File, saved: &std::os::fd::OwnedFd) -> u64 {
    let argv = [guest.as_os_str().to_owned()];
    let env = [OsString::from("LC_ALL=C")];
    let mut process = Process::load(guest, &argv, &env).expect("load the fixture");
    rustix::stdio::dup2_stdout(null.as_fd()).expect("redirect stdout");
    let end = process.run();
    rustix::stdio::dup2_stdout(saved.as_fd()).expect("restore stdout");
    assert_eq!(end, GuestExit::Exited(0), "{}", guest.display());
    process.engine().stats().insns_executed
}

fn guests(c: &mut Criterion) {
    let null = std::fs::File::create("/dev/null").expect("/dev/null");
    let saved = rustix::io::dup(rustix::stdio::stdout()).expect("dup stdout");
    let mut group = c.benchmark_group("guest_insns_per_second");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(4));
    group.warm_up_time(Duration::from_millis(500));
    for name in ["integer", "float", "malloc"] {
        let guest = fixture(name);
        if !guest.exists() {
            eprintln!("skipping {name}: {} is missing", guest.display());
            continue;
        }
        let insns = run_quietly(&guest, &null, &saved);
        group.throughput(Throughput::Elements(insns));
        group.bench_function(name, |b| b.iter(|| run_quietly(&guest, &null, &saved)));
    }
    group.finish();
}

criterion_group!(benches, guests);
criterion_main!(benches);
