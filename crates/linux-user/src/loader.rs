//! Loading an RV64 ELF executable (and, for a dynamically linked one, its
//! program interpreter) into guest memory and building the initial stack
//! exactly the way Linux lays it out for RV64.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;

use tcgkit_image_core::{ElfClass, ElfInfo, Image, Linkage};
use tcgkit_tcg_core::{GuestMemory, PAGE_SIZE, Perms};

use crate::abi::auxv::*;
use crate::abi::{CLOCK_TICKS, HWCAP_RV64GC};
use crate::error::LoadError;
use crate::mm::{
    self, ADDRESS_SPACE_END, MAX_MAPPED_BYTES, MMAP_BASE, STACK_BOTTOM, STACK_SIZE, STACK_TOP,
    TASK_UNMAPPED_BASE, page_down, page_up,
};

/// `EM_RISCV`.
const EM_RISCV: u16 = 243;
/// `ET_EXEC` and `ET_DYN`.
const ET_EXEC: u16 = 2;
const ET_DYN: u16 = 3;
/// Where a position-independent main program is placed (Linux's
/// `ELF_ET_DYN_BASE` for 64-bit is 2/3 of the address space; qemu picks a
/// free spot; any free spot works).
const PIE_BASE: u64 = 0x2a_aaaa_a000;

/// Where an image goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Placement {
    /// The main program: `ET_EXEC` at its own addresses, `ET_DYN` at
    /// [`PIE_BASE`], below the stack and mmap area.
    Program,
    /// The program interpreter (ld.so): at the first free spot of the mmap
    /// area, as Linux maps it with `mmap`.
    Interpreter,
}

/// What the loader placed in memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LoadedImage {
    /// Entry point (load bias applied).
    pub(crate) entry: u64,
    /// Address of the program headers in guest memory (`AT_PHDR`).
    pub(crate) phdr: u64,
    /// `AT_PHNUM`.
    pub(crate) phnum: u64,
    /// `AT_PHENT`.
    pub(crate) phent: u64,
    /// End of the highest segment (the heap starts at the next page).
    pub(crate) end: u64,
    /// Lowest address of an executable segment and the end of the file
    /// bytes of the highest one (QEMU's `start_code`/`end_code`).
    pub(crate) start_code: u64,
    pub(crate) end_code: u64,
    /// What was added to the file's addresses (0 for `ET_EXEC`).
    pub(crate) bias: u64,
    /// The lowest and one past the highest mapped address (page-aligned).
    pub(crate) mapped: (u64, u64),
    /// Where the program interpreter was loaded (`AT_BASE`; 0 without one).
    pub(crate) interpreter_base: u64,
    /// The executable segments' page ranges.
    pub(crate) exec_ranges: Vec<(u64, u64)>,
}

/// Maps the `PT_LOAD` segments of `image` into `mem`, placed as `placement` says.
pub(crate) fn load_image(
    image: &Image,
    mem: &mut GuestMemory,
    placement: Placement,
) -> Result<LoadedImage, LoadError> {
    let elf = image.elf().ok_or(LoadError::NotElf)?;
    check_header(elf, placement)?;
    let (bias, limit) = match (placement, elf.elf_type) {
        (Placement::Program, ET_DYN) => (PIE_BASE, TASK_UNMAPPED_BASE),
        (Placement::Program, _) => (0, TASK_UNMAPPED_BASE),
        (Placement::Interpreter, ET_DYN) => (interpreter_bias(elf, mem)?, ADDRESS_SPACE_END),
        (Placement::Interpreter, _) => (0, TASK_UNMAPPED_BASE),
    };
    let file = image.bytes();
    let mut end = 0u64;
    let (mut start_code, mut end_code) = (u64::MAX, 0u64);
    let mut total = 0u64;
    let mut previous_end_page = 0u64;
    let mut lowest = u64::MAX;
    let mut exec_ranges = Vec::new();
    for seg in &elf.segments {
        if seg.memsz == 0 {
            continue;
        }
        let bad = |what: &str| LoadError::BadSegment {
            vaddr: seg.vaddr,
            what: what.to_string(),
        };
        if seg.filesz > seg.memsz {
            return Err(bad("file size exceeds memory size"));
        }
        if seg.vaddr % PAGE_SIZE != seg.offset % PAGE_SIZE {
            return Err(bad("address and file offset disagree modulo the page size"));
        }
        let vaddr = seg
            .vaddr
            .checked_add(bias)
            .ok_or_else(|| bad("address overflows"))?;
        let seg_end = vaddr
            .checked_add(seg.memsz)
            .ok_or_else(|| bad("size overflows"))?;
        let start = page_down(vaddr);
        let stop = page_up(seg_end).ok_or_else(|| bad("size overflows"))?;
        if stop > limit {
            return Err(bad(if limit == TASK_UNMAPPED_BASE {
                "segment reaches the stack and mmap area"
            } else {
                "segment lies outside the address space"
            }));
        }
        total = total.saturating_add(stop - start);
        if total > MAX_MAPPED_BYTES {
            return Err(bad("segments are larger than the guest memory limit"));
        }
        if start < previous_end_page {
            return Err(bad("segments overlap or are not in ascending order"));
        }
        let perms = segment_perms(seg.flags.read, seg.flags.write, seg.flags.execute);
        mem.map(start, stop - start, perms)
            .map_err(|e| bad(&format!("cannot map: {e}")))?;
        // Like Linux, map whole file pages: bytes between the page start and
        // the segment start come from the file too (e.g. the ELF header).
        let lead = vaddr - start;
        let file_start = seg.offset - lead;
        let file_len = seg.filesz + lead;
        let file_end = file_start
            .checked_add(file_len)
            .ok_or_else(|| bad("file range overflows"))?;
        let data = usize::try_from(file_start)
            .ok()
            .zip(usize::try_from(file_end).ok())
            .and_then(|(a, b)| file.get(a..b))
            .ok_or_else(|| bad("file data lies outside the file"))?;
        mem.write_initial(start, data)
            .map_err(|e| bad(&format!("cannot write: {e}")))?;
        previous_end_page = stop;
        lowest = lowest.min(start);
        end = end.max(seg_end);
        if seg.flags.execute {
            exec_ranges.push((start, stop));
            start_code = start_code.min(vaddr);
            // vaddr + filesz <= seg_end, checked above.
            end_code = end_code.max(vaddr + seg.filesz);
        }
    }
    if end == 0 {
        return Err(LoadError::NoSegments);
    }
    let entry = elf.entry.wrapping_add(bias);
    if !mem.perms(entry).is_some_and(|p| p.contains(Perms::EXEC)) {
        return Err(LoadError::BadEntry { entry });
    }
    Ok(LoadedImage {
        entry,
        phdr: phdr_address(elf).map_or(0, |a| a.wrapping_add(bias)),
        phnum: u64::from(elf.phnum),
        phent: u64::from(elf.phentsize),
        end,
        // The entry is in an executable segment, so there is one.
        start_code,
        end_code,
        bias,
        // `end` > 0, so some segment was mapped and `lowest` is real.
        mapped: (lowest, page_up(end).unwrap_or(end)),
        interpreter_base: 0,
        exec_ranges,
    })
}

fn check_header(elf: &ElfInfo, placement: Placement) -> Result<(), LoadError> {
    if elf.class != ElfClass::Elf64 || !elf.little_endian || elf.machine != EM_RISCV {
        return Err(LoadError::WrongArchitecture {
            machine: elf.machine,
        });
    }
    match (placement, elf.elf_type, elf.linkage) {
        // Linux refuses an interpreter that asks for one itself.
        (Placement::Interpreter, _, Linkage::Dynamic) => Err(LoadError::InterpreterIsDynamic),
        (_, ET_EXEC | ET_DYN, _) => Ok(()),
        (_, other, _) => Err(LoadError::NotExecutable { elf_type: other }),
    }
}

/// A free spot in the mmap area for the interpreter's whole span (its
/// segments keep their distances, so they are placed as one block).
fn interpreter_bias(elf: &ElfInfo, mem: &GuestMemory) -> Result<u64, LoadError> {
    let loads = elf.segments.iter().filter(|s| s.memsz > 0);
    let low = loads.clone().map(|s| page_down(s.vaddr)).min();
    let high = loads
        .map(|s| s.vaddr.checked_add(s.memsz).and_then(page_up))
        .try_fold(0u64, |top, end| end.map(|e| top.max(e)));
    let (Some(low), Some(high)) = (low, high) else {
        return Err(LoadError::NoSegments);
    };
    let span = high - low;
    if span > MAX_MAPPED_BYTES {
        return Err(LoadError::BadSegment {
            vaddr: low,
            what: "segments are larger than the guest memory limit".to_string(),
        });
    }
    let at = mem
        .find_free(span, MMAP_BASE, ADDRESS_SPACE_END)
        .ok_or_else(|| LoadError::BadSegment {
            vaddr: low,
            what: "no room in the address space".to_string(),
        })?;
    Ok(at.wrapping_sub(low))
}

/// Where the program headers are in memory: inside the segment that maps
/// their file offset (Linux computes `AT_PHDR` the same way).
fn phdr_address(elf: &ElfInfo) -> Option<u64> {
    elf.segments.iter().find_map(|seg| {
        let inside = elf.phoff >= seg.offset && elf.phoff - seg.offset < seg.filesz;
        inside.then(|| seg.vaddr.wrapping_add(elf.phoff - seg.offset))
    })
}

fn segment_perms(read: bool, write: bool, execute: bool) -> Perms {
    let mut perms = Perms::NONE;
    if read || write {
        perms = perms | Perms::READ;
    }
    if write {
        perms = perms | Perms::WRITE;
    }
    if execute {
        perms = perms | Perms::EXEC;
    }
    perms
}

/// Identity values the auxiliary vector reports.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Credentials {
    pub(crate) uid: u32,
    pub(crate) euid: u32,
    pub(crate) gid: u32,
    pub(crate) egid: u32,
}

/// Maps the stack and writes argc, argv, envp, auxv and the strings the way
/// Linux does for RV64; returns the initial stack pointer.
///
/// Layout from the top: a zero word, the executable name (`AT_EXECFN`), the
/// argument and environment strings, 16 random bytes (`AT_RANDOM`), then,
/// 16-byte aligned at `sp`: argc, argv[], NULL, envp[], NULL, auxv pairs.
pub(crate) fn build_stack(
    mem: &mut GuestMemory,
    loaded: &LoadedImage,
    execfn: &[u8],
    args: &[OsString],
    env: &[OsString],
    random: [u8; 16],
    creds: Credentials,
) -> Result<u64, LoadError> {
    // A PROT_NONE guard page below the stack, like qemu.
    mem.map(TASK_UNMAPPED_BASE, PAGE_SIZE, Perms::NONE)
        .map_err(|e| LoadError::Stack(e.to_string()))?;
    mem.map(STACK_BOTTOM, STACK_SIZE, Perms::READ | Perms::WRITE)
        .map_err(|e| LoadError::Stack(e.to_string()))?;
    crate::sigframe::map_trampoline(mem).map_err(|e| LoadError::Stack(e.to_string()))?;

    let strings: usize =
        args.iter().chain(env).map(|s| s.len() + 1).sum::<usize>() + execfn.len() + 1;
    let words = 1 + args.len() + 1 + env.len() + 1 + 2 * 18;
    // Linux refuses arguments larger than a quarter of the stack (E2BIG).
    let needed = strings as u64 + 8 * words as u64 + 64;
    if needed > STACK_SIZE / 4 {
        return Err(LoadError::ArgumentsTooLarge { bytes: needed });
    }
    let fail = |e: tcgkit_tcg_core::MemFault| LoadError::Stack(e.to_string());

    let mut p = STACK_TOP - 8;
    mem.write_initial(p, &[0; 8]).map_err(fail)?;
    p -= execfn.len() as u64 + 1;
    let execfn_addr = p;
    write_cstr(mem, p, execfn).map_err(fail)?;

    let total: u64 = args.iter().chain(env).map(|s| s.len() as u64 + 1).sum();
    p -= total;
    let mut cursor = p;
    let mut pointers = Vec::with_capacity(args.len() + env.len());
    for s in args.iter().chain(env) {
        pointers.push(cursor);
        write_cstr(mem, cursor, s.as_bytes()).map_err(fail)?;
        cursor += s.len() as u64 + 1;
    }
    let (arg_ptrs, env_ptrs) = pointers.split_at(args.len());

    p &= !15;
    p -= 16;
    let random_addr = p;
    mem.write_initial(p, &random).map_err(fail)?;

    let auxv: [(u64, u64); 17] = [
        (AT_PHDR, loaded.phdr),
        (AT_PHENT, loaded.phent),
        (AT_PHNUM, loaded.phnum),
        (AT_PAGESZ, PAGE_SIZE),
        (AT_BASE, loaded.interpreter_base),
        (AT_FLAGS, 0),
        (AT_ENTRY, loaded.entry),
        (AT_UID, u64::from(creds.uid)),
        (AT_EUID, u64::from(creds.euid)),
        (AT_GID, u64::from(creds.gid)),
        (AT_EGID, u64::from(creds.egid)),
        (AT_HWCAP, HWCAP_RV64GC),
        (AT_CLKTCK, CLOCK_TICKS),
        (AT_RANDOM, random_addr),
        (AT_SECURE, 0),
        (AT_EXECFN, execfn_addr),
        (AT_NULL, 0),
    ];
    let mut table: Vec<u64> = Vec::with_capacity(words);
    table.push(args.len() as u64);
    table.extend_from_slice(arg_ptrs);
    table.push(0);
    table.extend_from_slice(env_ptrs);
    table.push(0);
    for (key, value) in auxv {
        table.push(key);
        table.push(value);
    }
    let sp = (p - 8 * table.len() as u64) & !15;
    let bytes: Vec<u8> = table.iter().flat_map(|w| w.to_le_bytes()).collect();
    mem.write_initial(sp, &bytes).map_err(fail)?;
    Ok(sp)
}

fn write_cstr(mem: &mut GuestMemory, addr: u64, s: &[u8]) -> Result<(), tcgkit_tcg_core::MemFault> {
    mem.write_initial(addr, s)?;
    mem.write_initial(addr + s.len() as u64, &[0])
}

/// The first address above every segment's page, where brk starts.
pub(crate) fn heap_start(loaded: &LoadedImage) -> u64 {
    mm::page_up(loaded.end).unwrap_or(loaded.end)
}
