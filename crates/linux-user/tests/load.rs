//! Loading: the initial stack and auxiliary vector read back from guest
//! memory, and clear errors (never panics) for files that cannot run.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use tcgkit_linux_user::{GuestExit, LoadError, Options, Process, ProgramLayout, abi::auxv::*};
use tcgkit_tcg_core::GuestMemory;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/guests")
        .join(name)
}

fn word(mem: &mut GuestMemory, addr: u64) -> u64 {
    mem.load(addr, 8).expect("stack word is readable")
}

fn cstr(mem: &mut GuestMemory, addr: u64) -> String {
    String::from_utf8(mem.read_cstr(addr, 4096).expect("string is readable")).expect("utf-8")
}

fn os(items: &[&str]) -> Vec<OsString> {
    items.iter().map(OsString::from).collect()
}

#[test]
fn stack_holds_argc_argv_envp_and_auxv_like_linux() {
    let path = fixture("integer");
    let args = os(&["integer", "-v", "two words", ""]);
    let env = os(&["A=1", "TCGKIT=yes"]);
    let mut process = Process::load(&path, &args, &env).expect("load");
    let sp = process.initial_stack_pointer();
    assert_eq!(sp % 16, 0, "sp is 16-byte aligned");
    assert_eq!(process.cpu().x(2), sp);
    let entry_pc = process.cpu().pc();
    let mem = process.memory();

    assert_eq!(word(mem, sp), 4, "argc");
    let mut at = sp + 8;
    for expected in ["integer", "-v", "two words", ""] {
        let ptr = word(mem, at);
        assert_eq!(cstr(mem, ptr), expected);
        at += 8;
    }
    assert_eq!(word(mem, at), 0, "argv ends with NULL");
    at += 8;
    for expected in ["A=1", "TCGKIT=yes"] {
        let ptr = word(mem, at);
        assert_eq!(cstr(mem, ptr), expected);
        at += 8;
    }
    assert_eq!(word(mem, at), 0, "envp ends with NULL");
    at += 8;

    let mut auxv = Vec::new();
    loop {
        let (key, value) = (word(mem, at), word(mem, at + 8));
        at += 16;
        if key == AT_NULL {
            break;
        }
        auxv.push((key, value));
        assert!(auxv.len() < 64, "auxv is terminated");
    }
    let keys: Vec<u64> = auxv.iter().map(|p| p.0).collect();
    assert_eq!(
        keys,
        [
            AT_PHDR, AT_PHENT, AT_PHNUM, AT_PAGESZ, AT_BASE, AT_FLAGS, AT_ENTRY, AT_UID, AT_EUID,
            AT_GID, AT_EGID, AT_HWCAP, AT_CLKTCK, AT_RANDOM, AT_SECURE, AT_EXECFN
        ],
        "qemu-riscv64's order"
    );
    let get = |k: u64| {
        auxv.iter()
            .find(|p| p.0 == k)
            .map(|p| p.1)
            .expect("key present")
    };
    assert_eq!(get(AT_PAGESZ), 4096);
    assert_eq!(get(AT_PHENT), 56);
    assert_eq!(get(AT_HWCAP), 0x112d, "IMAFDC");
    assert_eq!(get(AT_CLKTCK), 100);
    assert_eq!(get(AT_BASE), 0);
    assert_eq!(get(AT_ENTRY), entry_pc);
    assert_eq!(
        cstr(mem, get(AT_EXECFN)),
        path.to_str().expect("utf-8 path")
    );
    // AT_PHDR points at the program headers: the first PT_LOAD is among them.
    let phdr = get(AT_PHDR);
    let types: Vec<u64> = (0..get(AT_PHNUM))
        .map(|i| mem.load(phdr + i * 56, 4).expect("phdr"))
        .collect();
    assert!(
        types.contains(&1),
        "PT_LOAD visible through AT_PHDR: {types:?}"
    );
    // AT_RANDOM: 16 readable bytes on the stack, above the tables.
    let random = get(AT_RANDOM);
    assert!(random > at);
    let mut bytes = [0u8; 16];
    mem.read(random, &mut bytes).expect("random bytes");
    // Strings sit above the tables, below the stack top.
    assert!(word(mem, sp + 8) > random);
}

#[test]
fn entry_point_and_segments_are_mapped_with_their_permissions() {
    let mut process = Process::load(&fixture("faults"), &os(&["faults"]), &[]).expect("load");
    let pc = process.cpu().pc();
    let mem = process.memory();
    let perms = mem.perms(pc).expect("entry is mapped");
    assert!(perms.contains(tcgkit_tcg_core::Perms::EXEC));
    assert!(
        !perms.contains(tcgkit_tcg_core::Perms::WRITE),
        "text is not writable"
    );
    assert!(mem.store(pc, 4, 0).is_err());
    // Nothing is mapped at page zero: a NULL access faults.
    assert!(mem.load(0, 8).is_err());
}

#[test]
fn exit_statuses_and_fatal_signals() {
    let run = |arg: &str| {
        let mut p = Process::load(&fixture("faults"), &os(&["faults", arg]), &[]).expect("load");
        p.run()
    };
    assert_eq!(run("exit=42"), GuestExit::Exited(42));
    assert_eq!(
        run("exit=300"),
        GuestExit::Exited(44),
        "status is taken modulo 256"
    );
    let segv = run("segv");
    assert_eq!(segv.shell_status(), 139);
    assert_eq!(
        segv.uncaught_signal_message("tcgkit").as_deref(),
        Some("tcgkit: uncaught target signal 11 (Segmentation fault) - core dumped")
    );
    assert_eq!(run("ill").shell_status(), 132);
    assert_eq!(run("ebreak").shell_status(), 133);
    assert_eq!(run("abort").shell_status(), 134);
    assert_eq!(run("misaligned-amo").shell_status(), 135);
}

#[test]
fn shared_file_mapping_is_coherent_and_written_back_at_exit() {
    // The guest checks coherence itself (its exit status names the first
    // failed check) and leaves its last store in the mapping at exit.
    let file = std::env::temp_dir().join(format!("tcgkit-sharedmap-{}", std::process::id()));
    let args = [OsString::from("sharedmap"), file.clone().into_os_string()];
    let mut process = Process::load(&fixture("sharedmap"), &args, &[]).expect("load");
    assert_eq!(process.run(), GuestExit::Exited(0));
    let data = std::fs::read(&file).expect("the guest's file");
    let _ = std::fs::remove_file(&file);
    assert_eq!(data.len(), 3 * 4096);
    // "via pwrite", then the store of 'V' written back by munmap.
    assert_eq!(&data[..10], b"Via pwrite");
    assert_eq!(&data[4096..4096 + 19], b"through the mapping");
    assert_eq!(&data[4096 + 32..4096 + 50], b"stored before exit");
    assert!(data[2 * 4096..].iter().all(|&b| b == 0), "regrown tail");
}

#[test]
fn files_that_cannot_run_get_clear_errors() {
    let dir = std::env::temp_dir().join(format!("tcgkit-load-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let write = |name: &str, bytes: &[u8]| {
        let p = dir.join(name);
        std::fs::write(&p, bytes).expect("write");
        p
    };
    let args = os(&["x"]);

    let missing = Process::load(&dir.join("missing"), &args, &[]).expect_err("missing file");
    assert!(matches!(missing, LoadError::Image(_)), "{missing}");

    let text = write("text", b"#!/bin/sh\necho hi\n");
    assert!(Process::load(&text, &args, &[]).is_err());

    let original = std::fs::read(fixture("faults")).expect("fixture");
    let mut x86 = original.clone();
    x86[18] = 62; // e_machine = EM_X86_64
    x86[19] = 0;
    let err = Process::load(&write("x86", &x86), &args, &[]).expect_err("wrong machine");
    assert!(
        matches!(err, LoadError::WrongArchitecture { machine: 62 }),
        "{err}"
    );

    let truncated = write("truncated", &original[..300]);
    let err = Process::load(&truncated, &args, &[]).expect_err("truncated");
    assert!(!err.to_string().is_empty());

    // Arbitrary corruption of the ELF and program headers: an error or a
    // loadable image, never a panic (TCGKIT_FUZZ_ROUNDS to run longer).
    const DEFAULT_ROUNDS: u64 = 300;
    let rounds = std::env::var("TCGKIT_FUZZ_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok());
    let rounds: u64 = rounds.unwrap_or(DEFAULT_ROUNDS);
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for round in 0..rounds {
        let mut bytes = original.clone();
        for _ in 0..1 + round % 8 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let at = (seed % 512) as usize;
            bytes[at] = (seed >> 32) as u8;
        }
        let p = write("fuzz", &bytes);
        let _ = Process::load(&p, &args, &[]);
    }

    let huge_args = vec![OsString::from("a".repeat(1 << 20)); 4];
    let err = Process::load(&fixture("faults"), &huge_args, &[]).expect_err("too large");
    assert!(matches!(err, LoadError::ArgumentsTooLarge { .. }), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Each syscall number with its return value (`None` until it returns).
type SyscallLog = std::sync::Arc<std::sync::Mutex<Vec<(u64, Option<u64>)>>>;

/// Records what the observer hook sees.
struct Recorder(SyscallLog);

impl tcgkit_linux_user::SyscallObserver for Recorder {
    fn on_syscall(&mut self, number: u64, _args: &[u64; 6]) {
        self.0.lock().expect("lock").push((number, None));
    }
    fn on_syscall_return(&mut self, number: u64, ret: u64) {
        let mut log = self.0.lock().expect("lock");
        let last = log.last_mut().expect("a call precedes its return");
        assert_eq!(last.0, number);
        last.1 = Some(ret);
    }
}

#[test]
fn syscall_observer_sees_every_call_and_return() {
    let log = SyscallLog::default();
    let mut process =
        Process::load(&fixture("faults"), &os(&["faults", "exit=5"]), &[]).expect("load");
    process.set_syscall_observer(Box::new(Recorder(log.clone())));
    assert_eq!(process.run(), GuestExit::Exited(5));
    let log = log.lock().expect("lock");
    let brk = tcgkit_linux_user::abi::nr::BRK;
    let exit_group = tcgkit_linux_user::abi::nr::EXIT_GROUP;
    assert_eq!(
        log.first().map(|e| e.0),
        Some(brk),
        "glibc starts with brk(NULL)"
    );
    assert_eq!(
        log.last(),
        Some(&(exit_group, None)),
        "exit_group never returns"
    );
    let write = tcgkit_linux_user::abi::nr::WRITE;
    assert!(
        log.contains(&(write, Some(15))),
        "write of \"faults: exit=5\\n\": {log:?}"
    );
    assert!(
        log[..log.len() - 1].iter().all(|e| e.1.is_some()),
        "every other call returned"
    );
    assert!(process.engine().stats().insns_executed > 1000);
}

#[test]
fn guest_signal_handlers_run_and_reset() {
    // The fixture's handlers run for raise/kill and caught faults; its last
    // SIGUSR1 finds the handler reset by SA_RESETHAND and kills it.
    let mut process = Process::load(&fixture("signals"), &os(&["signals"]), &[]).expect("load");
    assert_eq!(
        process.run(),
        GuestExit::Signaled(tcgkit_linux_user::Signal::USR1)
    );
}

/// The executable segments' bounds and the entry, read with `object`
/// (not through image-core, which the loader uses), as QEMU computes its
/// plugins' `start_code`/`end_code`: lowest address of an executable
/// segment, end of the file bytes of the highest; shifted by `bias`.
fn expected_layout(path: &Path, bias: u64) -> ProgramLayout {
    use object::read::elf::{ElfFile64, FileHeader, ProgramHeader};
    let bytes = std::fs::read(path).expect("fixture");
    let elf = ElfFile64::<object::Endianness>::parse(&*bytes).expect("an ELF64 file");
    let endian = elf.endian();
    let (mut start_code, mut end_code) = (u64::MAX, 0);
    for ph in elf.elf_program_headers() {
        if ph.p_type(endian) == object::elf::PT_LOAD && ph.p_flags(endian) & object::elf::PF_X != 0
        {
            let vaddr = ph.p_vaddr(endian) + bias;
            start_code = start_code.min(vaddr);
            end_code = end_code.max(vaddr + ph.p_filesz(endian));
        }
    }
    ProgramLayout {
        start_code,
        end_code,
        entry: elf.elf_header().e_entry(endian) + bias,
    }
}

#[test]
fn layout_reports_the_code_segment_and_entry_as_qemu_does() {
    for name in ["integer", "malloc", "float", "signals"] {
        let path = fixture(name);
        let process = Process::load(&path, &os(&[name]), &[]).expect("load");
        let layout = process.layout();
        assert_eq!(
            layout.entry,
            process.cpu().pc(),
            "{name}: the entry is where it starts"
        );
        // Static executables load at their link address; a static-pie at a bias.
        let bias = layout.entry - expected_layout(&path, 0).entry;
        assert_eq!(layout, expected_layout(&path, bias), "{name}");
        assert!(
            layout.start_code <= layout.entry && layout.entry < layout.end_code,
            "{name}: {layout:x?}"
        );
    }
}

/// The auxiliary vector at `sp` (after argc, argv and envp) as pairs.
fn auxv_at(mem: &mut GuestMemory, sp: u64) -> Vec<(u64, u64)> {
    let argc = word(mem, sp);
    let mut at = sp + 8 * (argc + 2);
    while word(mem, at) != 0 {
        at += 8;
    }
    at += 8;
    let mut auxv = Vec::new();
    while word(mem, at) != AT_NULL && auxv.len() < 64 {
        auxv.push((word(mem, at), word(mem, at + 8)));
        at += 16;
    }
    auxv
}

/// A prefix directory whose `/lib/ld-linux-riscv64-lp64d.so.1` is `interpreter`.
fn prefix_with_interpreter(name: &str, interpreter: &Path) -> PathBuf {
    let root = std::env::temp_dir().join(format!("tcgkit-{name}-{}", std::process::id()));
    std::fs::create_dir_all(root.join("lib")).expect("make prefix");
    std::fs::copy(interpreter, root.join("lib/ld-linux-riscv64-lp64d.so.1"))
        .expect("copy interpreter");
    root
}

#[test]
fn dynamic_programs_start_in_their_interpreter_with_linux_auxv() {
    let sysroot = Path::new("/usr/riscv64-linux-gnu");
    if !sysroot.join("lib/libc.so.6").exists() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI installs the sysroot"
        );
        eprintln!("no riscv64 sysroot: skipped");
        return;
    }
    let path = fixture("dynamic/integer");
    let image = tcgkit_image_core::Image::open(&path).expect("open");
    let main_entry = image.elf().expect("elf").entry;
    let options = Options::default().with_prefix(Some(sysroot.to_path_buf()));
    let mut process =
        Process::from_image_with_options(&image, &path, &os(&["integer"]), &[], options.clone())
            .expect("load");
    let pc = process.cpu().pc();
    let sp = process.initial_stack_pointer();
    let layout = process.layout();
    let mem = process.memory();
    let auxv = auxv_at(mem, sp);
    let get = |k: u64| auxv.iter().find(|p| p.0 == k).map(|p| p.1).expect("key");
    let base = get(AT_BASE);
    assert!(base != 0 && base % 4096 == 0, "AT_BASE {base:#x}");
    assert_eq!(mem.load(base, 4).expect("interpreter header"), 0x464c_457f);
    let interp = tcgkit_image_core::Image::open(&sysroot.join("lib/ld-linux-riscv64-lp64d.so.1"))
        .expect("open ld.so");
    assert_eq!(
        pc,
        base + interp.elf().expect("elf").entry,
        "starts in ld.so"
    );
    // The main program (a PIE) is placed with a bias; AT_ENTRY is its
    // entry, while the layout plugins see says where execution starts
    // (QEMU's entry_code is the interpreter's too).
    assert_eq!(layout.entry, pc);
    assert_ne!(get(AT_ENTRY), pc);
    let bias = get(AT_ENTRY) - main_entry;
    assert!(bias != 0 && bias.is_multiple_of(4096), "bias {bias:#x}");
    assert!(layout.start_code >= bias && layout.start_code < base);
    let phdr = get(AT_PHDR);
    assert_eq!(phdr, bias + image.elf().expect("elf").phoff);
    assert_eq!(mem.load(phdr, 4).expect("phdr"), 6, "PT_PHDR comes first");
    let mut process =
        Process::from_image_with_options(&image, &path, &os(&["integer"]), &[], options)
            .expect("load");
    assert_eq!(process.run(), GuestExit::Exited(0));
}

#[test]
fn bad_interpreters_get_clear_errors() {
    let guest = fixture("dynamic/faults");
    let args = os(&["faults"]);
    // An interpreter that asks for an interpreter itself.
    let root = prefix_with_interpreter("dyn-interp", &guest);
    let image = tcgkit_image_core::Image::open(&guest).expect("open");
    let options = Options::default().with_prefix(Some(root.clone()));
    let err =
        Process::from_image_with_options(&image, &guest, &args, &[], options).expect_err("refused");
    assert!(
        matches!(&err, LoadError::Interpreter { path, source }
            if path == "/lib/ld-linux-riscv64-lp64d.so.1"
                && matches!(**source, LoadError::InterpreterIsDynamic)),
        "{err:?}"
    );
    std::fs::remove_dir_all(&root).expect("clean up");
    // An interpreter for another machine (this test binary).
    let host = std::env::current_exe().expect("test binary");
    let root = prefix_with_interpreter("host-interp", &host);
    let options = Options::default().with_prefix(Some(root.clone()));
    let err =
        Process::from_image_with_options(&image, &guest, &args, &[], options).expect_err("refused");
    let text = err.to_string();
    assert!(
        text.starts_with("cannot load the program interpreter /lib/ld-linux-riscv64-lp64d.so.1: ")
            && text.contains("not a 64-bit little-endian RISC-V executable"),
        "{text}"
    );
    std::fs::remove_dir_all(&root).expect("clean up");
}
