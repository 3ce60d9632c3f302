//! Guest memory: permissions, faults, TLB coherence, and a model-based proptest.
use std::collections::HashMap;

use proptest::prelude::*;
use tcgkit_tcg_core::*;

fn rw() -> Perms {
    Perms::READ | Perms::WRITE
}

fn fault(addr: u64, access: AccessKind, kind: MemFaultKind) -> MemFault {
    MemFault { addr, access, kind }
}

#[test]
fn mapped_memory_is_zeroed_and_little_endian() {
    let mut mem = GuestMemory::new();
    mem.map(0x1000, 10, rw()).unwrap();
    assert_eq!(mem.mapped_pages(), 1, "length rounded up to a page");
    assert_eq!(mem.load(0x1ff8, 8), Ok(0));
    mem.store(0x1000, 8, 0x1122_3344_5566_7788).unwrap();
    assert_eq!(mem.load(0x1000, 1), Ok(0x88));
    assert_eq!(mem.load(0x1000, 2), Ok(0x7788));
    assert_eq!(mem.load(0x1000, 4), Ok(0x5566_7788));
    assert_eq!(mem.load(0x1001, 4), Ok(0x4455_6677), "misaligned is fine");
    mem.store(0x1004, 2, 0xabcd_ef01).unwrap();
    assert_eq!(mem.load(0x1000, 8), Ok(0x1122_ef01_5566_7788));
    let mut buf = [0u8; 3];
    mem.read(0x1005, &mut buf).unwrap();
    assert_eq!(buf, [0xef, 0x22, 0x11]);
    assert_eq!(
        MemAccess::load(&mut mem, 0x1000, 1, true),
        Ok(0xffff_ffff_ffff_ff88)
    );
    assert_eq!(MemAccess::load(&mut mem, 0x1000, 1, false), Ok(0x88));
    assert_eq!(sign_extend(0x8000, 2), 0xffff_ffff_ffff_8000);
    assert_eq!(sign_extend(0x7fff_ffff, 4), 0x7fff_ffff);
}

#[test]
fn accesses_straddling_pages() {
    let mut mem = GuestMemory::new();
    mem.map(0x1000, 2 * PAGE_SIZE, rw()).unwrap();
    mem.store(0x1ffd, 8, 0x0102_0304_0506_0708).unwrap();
    assert_eq!(mem.load(0x1ffd, 8), Ok(0x0102_0304_0506_0708));
    assert_eq!(mem.load(0x2000, 4), Ok(0x0203_0405));
    // The second page is read-only: a straddling store writes nothing.
    mem.protect(0x2000, PAGE_SIZE, Perms::READ).unwrap();
    assert_eq!(
        mem.store(0x1ffe, 4, 0xffff_ffff),
        Err(fault(0x2000, AccessKind::Write, MemFaultKind::Protection))
    );
    assert_eq!(mem.load(0x1ffd, 8), Ok(0x0102_0304_0506_0708));
    assert_eq!(
        mem.write(0x1000, &vec![1u8; 5000]),
        Err(fault(0x2000, AccessKind::Write, MemFaultKind::Protection))
    );
    assert_eq!(mem.load(0x1000, 1), Ok(0), "nothing written");
    // Off the end of the mapping.
    assert_eq!(
        mem.load(0x2ffe, 4),
        Err(fault(0x3000, AccessKind::Read, MemFaultKind::Unmapped))
    );
    assert_eq!(
        mem.load(u64::MAX - 2, 8),
        Err(fault(
            u64::MAX - 2,
            AccessKind::Read,
            MemFaultKind::Unmapped
        ))
    );
}

#[test]
fn permissions_are_checked_per_access_kind() {
    let mut mem = GuestMemory::new();
    mem.map(0x4000, PAGE_SIZE, Perms::READ | Perms::EXEC)
        .unwrap();
    mem.map(0x5000, PAGE_SIZE, Perms::WRITE).unwrap();
    mem.map(0x6000, PAGE_SIZE, Perms::NONE).unwrap();
    let mut b = [0u8; 4];
    assert!(mem.fetch(0x4000, &mut b).is_ok());
    assert_eq!(
        mem.store(0x4000, 1, 1),
        Err(fault(0x4000, AccessKind::Write, MemFaultKind::Protection))
    );
    assert_eq!(
        mem.load(0x5000, 1),
        Err(fault(0x5000, AccessKind::Read, MemFaultKind::Protection))
    );
    assert!(mem.store(0x5000, 1, 1).is_ok());
    assert_eq!(
        mem.fetch(0x5000, &mut b),
        Err(fault(0x5000, AccessKind::Execute, MemFaultKind::Protection))
    );
    assert_eq!(
        mem.load(0x6008, 8),
        Err(fault(0x6008, AccessKind::Read, MemFaultKind::Protection))
    );
    assert_eq!(
        mem.load(0x7000, 1),
        Err(fault(0x7000, AccessKind::Read, MemFaultKind::Unmapped))
    );
    // The loader writes read-only pages, but still needs a mapping.
    mem.write_initial(0x4000, &[0xaa, 0xbb]).unwrap();
    assert_eq!(mem.load(0x4000, 2), Ok(0xbbaa));
    assert_eq!(
        mem.write_initial(0x7000, &[1]),
        Err(fault(0x7000, AccessKind::Write, MemFaultKind::Unmapped))
    );
    assert_eq!(mem.perms(0x4fff), Some(Perms::READ | Perms::EXEC));
    assert_eq!(mem.perms(0x7000), None);
    assert_eq!((Perms::READ | Perms::EXEC).to_string(), "r-x");
    assert!(!Perms::READ.contains(Perms::READ | Perms::WRITE));
    assert_eq!(
        fault(0x10, AccessKind::Read, MemFaultKind::Unmapped).to_string(),
        "Unmapped fault on Read access at 0x10"
    );
}

#[test]
fn tlb_never_serves_a_stale_mapping() {
    let mut mem = GuestMemory::new();
    mem.map(0x8000, PAGE_SIZE, rw()).unwrap();
    mem.store(0x8000, 8, 42).unwrap();
    assert_eq!(mem.load(0x8000, 8), Ok(42));
    mem.protect(0x8000, PAGE_SIZE, Perms::NONE).unwrap();
    assert!(mem.load(0x8000, 8).is_err());
    assert!(mem.store(0x8000, 8, 1).is_err());
    mem.protect(0x8000, PAGE_SIZE, Perms::READ).unwrap();
    assert_eq!(mem.load(0x8000, 8), Ok(42), "protect keeps contents");
    mem.unmap(0x8000, PAGE_SIZE).unwrap();
    assert_eq!(
        mem.load(0x8000, 8),
        Err(fault(0x8000, AccessKind::Read, MemFaultKind::Unmapped))
    );
    mem.map(0x8000, PAGE_SIZE, rw()).unwrap();
    assert_eq!(mem.load(0x8000, 8), Ok(0), "a new mapping is zero-filled");
    // Two pages aliasing in the direct-mapped TLB keep their own data.
    let alias = 0x8000 + 256 * PAGE_SIZE;
    mem.map(alias, PAGE_SIZE, rw()).unwrap();
    mem.store(alias, 8, 7).unwrap();
    mem.store(0x8000, 8, 9).unwrap();
    assert_eq!((mem.load(alias, 8), mem.load(0x8000, 8)), (Ok(7), Ok(9)));
    // Re-mapping over an existing page replaces it.
    mem.map(alias, PAGE_SIZE, Perms::READ).unwrap();
    assert_eq!(mem.load(alias, 8), Ok(0));
}

#[test]
fn tlb_drops_exactly_the_pages_a_change_touches() {
    let mut mem = GuestMemory::new();
    let page = 0x10_0000;
    // Both TLB sizes a build may use put these two pages in one entry.
    let alias = page + 4096 * PAGE_SIZE;
    mem.map(page, PAGE_SIZE, rw()).unwrap();
    mem.map(alias, PAGE_SIZE, rw()).unwrap();
    mem.store(alias, 8, 5).unwrap();
    // Unmapping the other page of the entry leaves this one served right.
    mem.unmap(page, PAGE_SIZE).unwrap();
    assert_eq!(mem.load(alias, 8), Ok(5));
    mem.protect(alias, PAGE_SIZE, Perms::NONE).unwrap();
    assert_eq!(
        mem.load(alias, 8),
        Err(fault(alias, AccessKind::Read, MemFaultKind::Protection))
    );
    // A change larger than a TLB table drops every entry it covers.
    let len = 5000 * PAGE_SIZE;
    mem.map(page, len, rw()).unwrap();
    for i in (0..5000).step_by(7) {
        mem.store(page + i * PAGE_SIZE, 4, i).unwrap();
    }
    mem.protect(page, len, Perms::READ).unwrap();
    for i in (0..5000).step_by(7) {
        assert_eq!(mem.load(page + i * PAGE_SIZE, 4), Ok(i));
        assert!(mem.store(page + i * PAGE_SIZE, 4, 0).is_err());
    }
    mem.unmap(page, len).unwrap();
    assert!(mem.load(page + 7 * PAGE_SIZE, 4).is_err());
}

#[test]
fn map_unmap_protect_errors() {
    let mut mem = GuestMemory::new();
    assert_eq!(
        mem.map(0x1001, 1, rw()),
        Err(MemError::Unaligned { addr: 0x1001 })
    );
    assert_eq!(
        mem.map(!0xfffu64, 0x2000, rw()),
        Err(MemError::Overflow {
            addr: !0xfffu64,
            len: 0x2000
        })
    );
    assert_eq!(mem.unmap(0x10, 1), Err(MemError::Unaligned { addr: 0x10 }));
    mem.map(0x1000, PAGE_SIZE, rw()).unwrap();
    mem.map(0x3000, PAGE_SIZE, rw()).unwrap();
    assert_eq!(
        mem.protect(0x1000, 3 * PAGE_SIZE, Perms::READ),
        Err(MemError::NotMapped { addr: 0x2000 })
    );
    assert_eq!(
        mem.perms(0x1000),
        Some(rw()),
        "a failed protect changes nothing"
    );
    assert!(
        MemError::NotMapped { addr: 0x2000 }
            .to_string()
            .contains("0x2000")
    );
    mem.unmap(0x0, 0x10000).unwrap();
    assert_eq!(mem.mapped_pages(), 0);
    assert_eq!(
        mem.map(0, 1 << 40, rw()),
        Err(MemError::TooLarge { len: 1 << 40 })
    );
    assert_eq!(mem.mapped_pages(), 0);
    mem.map(0x1000, 0, rw()).unwrap();
    assert_eq!(mem.mapped_pages(), 0, "empty map is a no-op");
}

#[test]
fn range_queries_and_free_space() {
    let mut mem = GuestMemory::new();
    mem.map(0x10000, 2 * PAGE_SIZE, rw()).unwrap();
    mem.map(0x14000, PAGE_SIZE, rw()).unwrap();
    assert!(mem.is_range_mapped(0x10000, 2 * PAGE_SIZE));
    assert!(mem.is_range_mapped(0x10ffc, 8));
    assert!(!mem.is_range_mapped(0x11ffc, 8));
    assert!(mem.is_range_mapped(0x99999, 0));
    assert!(!mem.is_range_mapped(u64::MAX, 2));
    assert_eq!(mem.find_free(PAGE_SIZE, 0x10000, 0x20000), Some(0x12000));
    assert_eq!(
        mem.find_free(2 * PAGE_SIZE, 0x10000, 0x20000),
        Some(0x12000)
    );
    assert_eq!(
        mem.find_free(3 * PAGE_SIZE, 0x10000, 0x20000),
        Some(0x15000)
    );
    assert_eq!(
        mem.find_free(1, 0x10001, 0x20000),
        Some(0x12000),
        "lo is rounded up"
    );
    assert_eq!(mem.find_free(PAGE_SIZE, 0x10000, 0x12000), None);
    assert_eq!(mem.find_free(0x10000, 0x10000, 0x20000), None);
    assert_eq!(mem.find_free(0, 0, 0x20000), None);
    assert_eq!(mem.find_free(PAGE_SIZE, 0, 0x1000), Some(0));
    assert_eq!(mem.find_free(u64::MAX, 0, u64::MAX), None);
}

#[test]
fn c_strings() {
    let mut mem = GuestMemory::new();
    mem.map(0x1000, 2 * PAGE_SIZE, rw()).unwrap();
    mem.write(0x1ffc, b"hello\0world").unwrap();
    assert_eq!(mem.read_cstr(0x1ffc, 100).unwrap(), b"hello");
    assert_eq!(mem.read_cstr(0x1ffc, 3).unwrap(), b"hel");
    assert_eq!(mem.read_cstr(0x2002, 100).unwrap(), b"world");
    // No NUL before the end of the mapping: the scan faults.
    mem.write(0x2ff0, &[b'x'; 16]).unwrap();
    assert_eq!(
        mem.read_cstr(0x2ff0, 100),
        Err(fault(0x3000, AccessKind::Read, MemFaultKind::Unmapped))
    );
    assert_eq!(
        mem.read_cstr(0x9000, 1),
        Err(fault(0x9000, AccessKind::Read, MemFaultKind::Unmapped))
    );
}

// ---- property test against a byte-level model ----

const BASE: u64 = 0x40_0000;
const PAGES: u64 = 12;

#[derive(Clone, Debug)]
enum MemOp {
    Map { page: u64, count: u64, perms: u8 },
    Unmap { page: u64, count: u64 },
    Protect { page: u64, count: u64, perms: u8 },
    Write { offset: u64, data: Vec<u8> },
    WriteInitial { offset: u64, data: Vec<u8> },
    Read { offset: u64, len: usize },
    Fetch { offset: u64, len: usize },
    Load { offset: u64, size: u8 },
    Store { offset: u64, size: u8, value: u64 },
}

fn perms_of(bits: u8) -> Perms {
    let mut p = Perms::NONE;
    for (bit, flag) in [(1, Perms::READ), (2, Perms::WRITE), (4, Perms::EXEC)] {
        if bits & bit != 0 {
            p = p | flag;
        }
    }
    p
}

fn op_strategy() -> impl Strategy<Value = MemOp> {
    let page = 0..PAGES;
    let count = 1..4u64;
    let offset = 0..(PAGES * PAGE_SIZE);
    let size = prop::sample::select(vec![1u8, 2, 4, 8]);
    prop_oneof![
        (page.clone(), count.clone(), 0..8u8).prop_map(|(page, count, perms)| MemOp::Map {
            page,
            count,
            perms
        }),
        (page.clone(), count.clone()).prop_map(|(page, count)| MemOp::Unmap { page, count }),
        (page, count, 0..8u8).prop_map(|(page, count, perms)| MemOp::Protect {
            page,
            count,
            perms
        }),
        (offset.clone(), prop::collection::vec(any::<u8>(), 0..40))
            .prop_map(|(offset, data)| MemOp::Write { offset, data }),
        (offset.clone(), prop::collection::vec(any::<u8>(), 0..10))
            .prop_map(|(offset, data)| MemOp::WriteInitial { offset, data }),
        (offset.clone(), 0..5000usize).prop_map(|(offset, len)| MemOp::Read { offset, len }),
        (offset.clone(), 0..8usize).prop_map(|(offset, len)| MemOp::Fetch { offset, len }),
        (offset.clone(), size.clone()).prop_map(|(offset, size)| MemOp::Load { offset, size }),
        (offset, size, any::<u64>()).prop_map(|(offset, size, value)| MemOp::Store {
            offset,
            size,
            value
        }),
    ]
}

/// Page number -> (perms, bytes): the obvious implementation.
#[derive(Default)]
struct Model {
    pages: HashMap<u64, (Perms, Vec<u8>)>,
}

impl Model {
    fn check(
        &self,
        addr: u64,
        len: usize,
        access: AccessKind,
        need: Option<Perms>,
    ) -> Result<(), MemFault> {
        for i in 0..len as u64 {
            let a = addr + i;
            match self.pages.get(&(a / PAGE_SIZE)) {
                None => return Err(fault(a, access, MemFaultKind::Unmapped)),
                Some((p, _)) if need.is_some_and(|n| !p.contains(n)) => {
                    return Err(fault(a, access, MemFaultKind::Protection));
                }
                _ => {}
            }
        }
        Ok(())
    }
    fn read(
        &self,
        addr: u64,
        len: usize,
        access: AccessKind,
        need: Perms,
    ) -> Result<Vec<u8>, MemFault> {
        self.check(addr, len, access, Some(need))?;
        Ok((0..len as u64)
            .map(|i| {
                let a = addr + i;
                self.pages[&(a / PAGE_SIZE)].1[(a % PAGE_SIZE) as usize]
            })
            .collect())
    }
    fn write(&mut self, addr: u64, data: &[u8], checked: bool) -> Result<(), MemFault> {
        self.check(
            addr,
            data.len(),
            AccessKind::Write,
            checked.then_some(Perms::WRITE),
        )?;
        for (i, &b) in data.iter().enumerate() {
            let a = addr + i as u64;
            self.pages.get_mut(&(a / PAGE_SIZE)).unwrap().1[(a % PAGE_SIZE) as usize] = b;
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    #[test]
    fn guest_memory_matches_a_simple_model(ops in prop::collection::vec(op_strategy(), 1..60)) {
        let mut mem = GuestMemory::new();
        let mut model = Model::default();
        for op in ops {
            match op {
                MemOp::Map { page, count, perms } => {
                    mem.map(BASE + page * PAGE_SIZE, count * PAGE_SIZE, perms_of(perms)).unwrap();
                    for p in page..page + count {
                        model.pages.insert(BASE / PAGE_SIZE + p, (perms_of(perms), vec![0; PAGE_SIZE as usize]));
                    }
                }
                MemOp::Unmap { page, count } => {
                    mem.unmap(BASE + page * PAGE_SIZE, count * PAGE_SIZE).unwrap();
                    for p in page..page + count {
                        model.pages.remove(&(BASE / PAGE_SIZE + p));
                    }
                }
                MemOp::Protect { page, count, perms } => {
                    let got = mem.protect(BASE + page * PAGE_SIZE, count * PAGE_SIZE, perms_of(perms));
                    let first = BASE / PAGE_SIZE + page;
                    let hole = (first..first + count).find(|p| !model.pages.contains_key(p));
                    match hole {
                        Some(p) => prop_assert_eq!(got, Err(MemError::NotMapped { addr: p * PAGE_SIZE })),
                        None => {
                            prop_assert_eq!(got, Ok(()));
                            for p in first..first + count {
                                model.pages.get_mut(&p).unwrap().0 = perms_of(perms);
                            }
                        }
                    }
                }
                MemOp::Write { offset, data } => {
                    prop_assert_eq!(mem.write(BASE + offset, &data), model.write(BASE + offset, &data, true));
                }
                MemOp::WriteInitial { offset, data } => {
                    prop_assert_eq!(mem.write_initial(BASE + offset, &data), model.write(BASE + offset, &data, false));
                }
                MemOp::Read { offset, len } => {
                    let mut buf = vec![0; len];
                    let got = mem.read(BASE + offset, &mut buf).map(|()| buf);
                    prop_assert_eq!(got, model.read(BASE + offset, len, AccessKind::Read, Perms::READ));
                }
                MemOp::Fetch { offset, len } => {
                    let mut buf = vec![0; len];
                    let got = mem.fetch(BASE + offset, &mut buf).map(|()| buf);
                    prop_assert_eq!(got, model.read(BASE + offset, len, AccessKind::Execute, Perms::EXEC));
                }
                MemOp::Load { offset, size } => {
                    let want = model.read(BASE + offset, usize::from(size), AccessKind::Read, Perms::READ).map(|bytes| {
                        bytes.iter().rev().fold(0u64, |acc, &b| (acc << 8) | u64::from(b))
                    });
                    prop_assert_eq!(mem.load(BASE + offset, size), want);
                }
                MemOp::Store { offset, size, value } => {
                    let bytes = value.to_le_bytes();
                    let want = model.write(BASE + offset, &bytes[..usize::from(size)], true);
                    prop_assert_eq!(mem.store(BASE + offset, size, value), want);
                }
            }
            let mapped = (0..PAGES + 4).filter(|p| model.pages.contains_key(&(BASE / PAGE_SIZE + p))).count();
            prop_assert_eq!(mem.mapped_pages(), mapped);
        }
    }
}

#[test]
fn views_share_bytes_and_see_each_others_mappings_after_a_sync() {
    let mut a = GuestMemory::new();
    let mut b = a.share();
    assert!(a.same_space(&b));
    assert!(!a.same_space(&GuestMemory::new()));
    a.map(0x1000, PAGE_SIZE, rw()).unwrap();
    a.store(0x1008, 8, 0x1122_3344_5566_7788).unwrap();
    assert_eq!(b.load(0x1008, 8), Ok(0x1122_3344_5566_7788));
    b.store(0x100c, 2, 0xabcd).unwrap();
    assert_eq!(a.load(0x1008, 8), Ok(0x1122_abcd_5566_7788));
    assert_eq!(b.mapped_pages(), 1);

    // b's TLB still holds the page a unmaps: its bytes stay alive and b
    // reaches them until it syncs, then faults like a.
    a.unmap(0x1000, PAGE_SIZE).unwrap();
    assert_eq!(
        a.load(0x1008, 1).map_err(|f| f.kind),
        Err(MemFaultKind::Unmapped)
    );
    assert_eq!(b.load(0x1008, 1), Ok(0x88));
    b.sync();
    assert_eq!(
        b.load(0x1008, 1).map_err(|f| f.kind),
        Err(MemFaultKind::Unmapped)
    );

    // A protection change, and a mapping replaced with fresh zeroes.
    a.map(0x1000, PAGE_SIZE, rw()).unwrap();
    b.sync();
    b.store(0x1000, 4, 7).unwrap();
    a.protect(0x1000, PAGE_SIZE, Perms::READ).unwrap();
    b.sync();
    assert_eq!(
        b.store(0x1000, 4, 8).map_err(|f| f.kind),
        Err(MemFaultKind::Protection)
    );
    assert_eq!(b.load(0x1000, 4), Ok(7));
    a.map(0x1000, PAGE_SIZE, rw()).unwrap();
    b.sync();
    assert_eq!(b.load(0x1000, 4), Ok(0));
}

#[test]
fn atomic_updates_through_views_on_threads_lose_nothing() {
    let mut mem = GuestMemory::new();
    mem.map(0x1000, PAGE_SIZE, rw()).unwrap();
    let views: Vec<GuestMemory> = (0..4).map(|_| mem.share()).collect();
    std::thread::scope(|s| {
        for mut view in views {
            s.spawn(move || {
                for _ in 0..5_000 {
                    view.atomic_update(0x1000, 4, |v| v + 1).unwrap();
                    view.atomic_update(0x1004, 4, |v| v + 2).unwrap();
                    view.atomic_update(0x1008, 8, |v| v.wrapping_sub(1))
                        .unwrap();
                    // A compare-and-swap that succeeds only from 0.
                    view.atomic_update(0x1010, 8, |v| if v == 0 { 1 } else { v })
                        .unwrap();
                }
            });
        }
    });
    assert_eq!(mem.load(0x1000, 4), Ok(20_000));
    assert_eq!(mem.load(0x1004, 4), Ok(40_000));
    assert_eq!(mem.load(0x1008, 8), Ok(20_000u64.wrapping_neg()));
    assert_eq!(mem.load(0x1010, 8), Ok(1));
    let misaligned = mem.atomic_update(0x1002, 4, |v| v).map_err(|f| f.kind);
    assert_eq!(misaligned, Err(MemFaultKind::Misaligned));
    mem.protect(0x1000, PAGE_SIZE, Perms::READ).unwrap();
    let read_only = mem
        .atomic_update(0x1000, 4, |v| v)
        .map_err(|f| (f.kind, f.access));
    assert_eq!(
        read_only,
        Err((MemFaultKind::Protection, AccessKind::Write))
    );
}

#[test]
fn mapping_from_one_thread_while_others_access() {
    let mut mem = GuestMemory::new();
    mem.map(0x1000, PAGE_SIZE, rw()).unwrap();
    let mut mapper = mem.share();
    let views: Vec<GuestMemory> = (0..2).map(|_| mem.share()).collect();
    std::thread::scope(|s| {
        s.spawn(move || {
            for round in 0..300u64 {
                let at = 0x10_0000 + (round % 8) * PAGE_SIZE;
                mapper.map(at, PAGE_SIZE, rw()).unwrap();
                mapper.store(at, 8, round).unwrap();
                mapper.unmap(at, PAGE_SIZE).unwrap();
            }
        });
        for mut view in views {
            s.spawn(move || {
                for round in 0..3_000u64 {
                    view.sync();
                    view.atomic_update(0x1000, 8, |v| v + 1).unwrap();
                    // Pages come and go under this thread: either outcome
                    // is fine, a crash or a wrong fault kind is not.
                    let at = 0x10_0000 + (round % 8) * PAGE_SIZE;
                    if let Err(f) = view.load(at, 8) {
                        assert_eq!(f.kind, MemFaultKind::Unmapped);
                    }
                }
            });
        }
    });
    assert_eq!(mem.load(0x1000, 8), Ok(6_000));
    assert_eq!(mem.mapped_pages(), 1);
}
