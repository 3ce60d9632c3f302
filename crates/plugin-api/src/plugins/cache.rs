//! `cache`: a set-associative L1 instruction and data cache simulator with
//! LRU replacement and a miss report, in the spirit of QEMU's contrib
//! `cache` plugin (same argument names).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use tcgkit_tcg_core::MemFilter;

use crate::{Access, GuestInfo, Plugin, PluginArgs, PluginError, PluginHandle};

/// One set-associative cache with LRU replacement.
///
/// Its state is atomics, read and written with relaxed loads and stores
/// (plain moves on x86-64), so that a vCPU's thread updates its caches
/// without a lock while the report may read them: each vCPU's caches have
/// one writer, the thread running that vCPU. (A mutex took two locked
/// instructions per access, for a lock nobody else wanted.) Accesses made
/// to one cache from several threads at once are memory-safe but may lose
/// updates.
#[derive(Debug)]
pub struct Cache {
    line_shift: u32,
    set_mask: u64,
    ways: usize,
    /// `sets * ways` line numbers, each set's ordered most recently used
    /// first; only the first `filled[set]` of a set hold lines (a set
    /// fills from the front, so its valid lines are always a prefix, and
    /// no line number needs to be kept free as an "empty" marker).
    lines: Box<[AtomicU64]>,
    filled: Box<[AtomicU32]>,
    accesses: AtomicU64,
    misses: AtomicU64,
}

/// Adds one to a counter only its own thread writes.
#[inline(always)]
fn bump(counter: &AtomicU64) {
    let next = counter.load(Ordering::Relaxed).wrapping_add(1);
    counter.store(next, Ordering::Relaxed);
}

/// The most lines one simulated cache holds: 1 GiB of 64-byte lines, the
/// largest real caches. Each line costs 8 bytes per vCPU, so without a
/// bound a 1 GiB cache of 1-byte lines would ask for 8 GiB.
const MAX_LINES: u64 = 1 << 24;

impl Cache {
    /// A cache of `size` bytes, `ways`-associative, with `line`-byte lines.
    /// All three must be powers of two with `size >= ways * line`, and
    /// the cache may hold at most 2^24 lines (`size / line`).
    pub fn new(size: u64, ways: u64, line: u64) -> Result<Cache, String> {
        if !(size.is_power_of_two() && ways.is_power_of_two() && line.is_power_of_two()) {
            return Err(format!(
                "size {size}, ways {ways} and line {line} must be powers of two"
            ));
        }
        let sets = size / ways.saturating_mul(line).max(1);
        if sets == 0 {
            return Err(format!(
                "size {size} is smaller than ways {ways} x line {line}"
            ));
        }
        if size / line > MAX_LINES {
            return Err(format!(
                "size {size} / line {line} is {} lines, more than the {MAX_LINES} \
                 simulated: use longer lines or a smaller cache",
                size / line
            ));
        }
        let too_big = || format!("size {size} is too large for this host");
        let ways = usize::try_from(ways).map_err(|_| too_big())?;
        let sets = usize::try_from(sets).map_err(|_| too_big())?;
        sets.checked_mul(ways).ok_or_else(too_big)?;
        Ok(Cache::empty(line.trailing_zeros(), sets, ways))
    }

    /// An empty cache of `sets` sets (a power of two) of `ways` lines of
    /// 2^`line_shift` bytes, a geometry [`Cache::new`] accepted.
    fn empty(line_shift: u32, sets: usize, ways: usize) -> Cache {
        Cache {
            line_shift,
            set_mask: sets as u64 - 1,
            ways,
            lines: (0..sets * ways).map(|_| AtomicU64::new(0)).collect(),
            filled: (0..sets).map(|_| AtomicU32::new(0)).collect(),
            accesses: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// An empty cache of the same geometry.
    fn empty_copy(&self) -> Cache {
        Cache::empty(self.line_shift, self.filled.len(), self.ways)
    }

    /// Accesses the line holding `addr`; true on a hit.
    #[inline]
    pub fn access(&self, addr: u64) -> bool {
        bump(&self.accesses);
        let line = addr >> self.line_shift;
        let set = (line & self.set_mask) as usize;
        let start = set * self.ways;
        let (Some(ways), Some(filled)) = (
            self.lines.get(start..start + self.ways),
            self.filled.get(set),
        ) else {
            return false;
        };
        let valid = ways
            .get(..filled.load(Ordering::Relaxed) as usize)
            .unwrap_or_default();
        // Most accesses touch the set's most recent line again (the next
        // instruction in the same line, the next field of a struct):
        // nothing moves then.
        if valid.first().map(|l| l.load(Ordering::Relaxed)) == Some(line) {
            return true;
        }
        let (hit, moved) = match valid.iter().position(|l| l.load(Ordering::Relaxed) == line) {
            Some(i) => (true, i),
            None => {
                bump(&self.misses);
                // A free way, or the least recently used line, goes.
                if valid.len() < ways.len() {
                    // At most `ways`: far below 2^32 for any cache that
                    // could be allocated.
                    let now = u32::try_from(valid.len() + 1).unwrap_or(u32::MAX);
                    filled.store(now, Ordering::Relaxed);
                    (false, valid.len())
                } else {
                    (false, ways.len() - 1)
                }
            }
        };
        // The lines before it move down one way and it becomes the most
        // recent. (A loop: the ways are few, and `rotate_right` was a
        // tenth of this plugin's run.)
        let mut carried = line;
        for way in ways.get(..=moved).unwrap_or_default() {
            let older = way.load(Ordering::Relaxed);
            way.store(carried, Ordering::Relaxed);
            carried = older;
        }
        hit
    }

    /// Accesses so far.
    pub fn accesses(&self) -> u64 {
        self.accesses.load(Ordering::Relaxed)
    }

    /// Misses so far.
    pub fn misses(&self) -> u64 {
        self.misses.load(Ordering::Relaxed)
    }
}

/// Totals over all vCPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheTotals {
    /// Data accesses.
    pub data_accesses: u64,
    /// Data misses.
    pub data_misses: u64,
    /// Instruction fetches.
    pub insn_accesses: u64,
    /// Instruction misses.
    pub insn_misses: u64,
}

#[derive(Default)]
struct InsnRecord {
    disas: String,
    symbol: Option<String>,
    data_misses: AtomicU64,
    insn_misses: AtomicU64,
}

/// One vCPU's caches, written by its thread only (see [`Cache`]).
struct VcpuCaches {
    icache: Cache,
    dcache: Cache,
}

/// The most vCPUs whose caches are simulated: a guest thread's vCPU past
/// them is not (its accesses count as hits). Caches are made at a vCPU's
/// first access, so only the vCPUs that run cost memory.
const MAX_SIMULATED_VCPUS: usize = 1024;

/// The `cache` plugin.
pub struct CacheSim {
    limit: usize,
    /// Empty caches of the configured geometry, copied for each vCPU.
    template: VcpuCaches,
    /// By vCPU index, each made at its vCPU's first access.
    caches: Box<[OnceLock<VcpuCaches>]>,
    insns: Mutex<HashMap<u64, Arc<InsnRecord>>>,
}

impl std::fmt::Debug for CacheSim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheSim")
            .field("totals", &self.totals())
            .finish_non_exhaustive()
    }
}

pub(crate) fn factory(
    args: &PluginArgs,
    guest: &GuestInfo,
) -> Result<Arc<dyn Plugin>, PluginError> {
    Ok(Arc::new(CacheSim::from_args(args, guest)?))
}

impl CacheSim {
    /// Builds it from `dcachesize`, `dassoc`, `dblksize`, `icachesize`,
    /// `iassoc`, `iblksize` (defaults 16 KiB, 8 ways, 64-byte lines) and
    /// `limit` (instructions listed in the miss report, default 32).
    pub fn from_args(args: &PluginArgs, guest: &GuestInfo) -> Result<Self, PluginError> {
        args.check_known(&[
            "dcachesize",
            "dassoc",
            "dblksize",
            "icachesize",
            "iassoc",
            "iblksize",
            "limit",
        ])?;
        let geometry = |prefix: &str| -> Result<Cache, PluginError> {
            let size = args.u64_in(&format!("{prefix}cachesize"), 16384, 1..=1 << 30)?;
            let ways = args.u64_in(&format!("{prefix}assoc"), 8, 1..=1 << 16)?;
            let line = args.u64_in(&format!("{prefix}blksize"), 64, 1..=1 << 16)?;
            Cache::new(size, ways, line).map_err(|reason| PluginError::BadArgument {
                plugin: "cache".into(),
                key: format!("{prefix}cachesize"),
                reason,
            })
        };
        let (i, d) = (geometry("i")?, geometry("d")?);
        let vcpus = (guest.vcpus as usize).max(MAX_SIMULATED_VCPUS);
        Ok(CacheSim {
            limit: args.u64_in("limit", 32, 1..=1 << 20)? as usize,
            template: VcpuCaches {
                icache: i,
                dcache: d,
            },
            caches: (0..vcpus).map(|_| OnceLock::new()).collect(),
            insns: Mutex::new(HashMap::new()),
        })
    }

    /// Accesses and misses over all vCPUs.
    pub fn totals(&self) -> CacheTotals {
        let mut t = CacheTotals::default();
        for c in self.caches.iter().filter_map(OnceLock::get) {
            t.data_accesses += c.dcache.accesses();
            t.data_misses += c.dcache.misses();
            t.insn_accesses += c.icache.accesses();
            t.insn_misses += c.icache.misses();
        }
        t
    }

    /// Runs `access` on `vcpu`'s caches, made at its first access; true
    /// on a hit, and for a vCPU past [`MAX_SIMULATED_VCPUS`] (nothing
    /// simulated, no miss).
    #[inline]
    fn access(&self, vcpu: u32, access: impl FnOnce(&VcpuCaches) -> bool) -> bool {
        self.caches.get(vcpu as usize).is_none_or(|caches| {
            access(caches.get_or_init(|| VcpuCaches {
                icache: self.template.icache.empty_copy(),
                dcache: self.template.dcache.empty_copy(),
            }))
        })
    }

    fn top(&self, pick: impl Fn(&InsnRecord) -> u64) -> Vec<(u64, Arc<InsnRecord>)> {
        let insns = self.insns.lock().unwrap_or_else(PoisonError::into_inner);
        let mut v: Vec<(u64, Arc<InsnRecord>)> = insns
            .iter()
            .filter(|(_, r)| pick(r) > 0)
            .map(|(&pc, r)| (pc, Arc::clone(r)))
            .collect();
        v.sort_by(|a, b| pick(&b.1).cmp(&pick(&a.1)).then(a.0.cmp(&b.0)));
        v.truncate(self.limit);
        v
    }

    /// The text printed at exit.
    pub fn report(&self) -> String {
        let t = self.totals();
        let rate = |m: u64, a: u64| {
            if a == 0 {
                0.0
            } else {
                m as f64 * 100.0 / a as f64
            }
        };
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{:>14} {:>14} {:>9} {:>14} {:>14} {:>9}",
            "dmem accesses", "dmisses", "dmiss%", "imem accesses", "imisses", "imiss%"
        );
        let _ = writeln!(
            s,
            "{:>14} {:>14} {:>8.4}% {:>14} {:>14} {:>8.4}%",
            t.data_accesses,
            t.data_misses,
            rate(t.data_misses, t.data_accesses),
            t.insn_accesses,
            t.insn_misses,
            rate(t.insn_misses, t.insn_accesses)
        );
        for (title, data) in [("data", true), ("instruction", false)] {
            let _ = writeln!(s, "\naddress, {title} misses, instruction");
            let pick = |r: &InsnRecord| {
                if data {
                    r.data_misses.load(Ordering::Relaxed)
                } else {
                    r.insn_misses.load(Ordering::Relaxed)
                }
            };
            for (pc, r) in self.top(pick) {
                let at = r
                    .symbol
                    .as_deref()
                    .map(|n| format!(" ({n})"))
                    .unwrap_or_default();
                let _ = writeln!(s, "{pc:#018x}{at}, {}, {}", pick(&r), r.disas);
            }
        }
        s
    }
}

impl Plugin for CacheSim {
    fn install(self: Arc<Self>, handle: &PluginHandle) -> Result<(), PluginError> {
        let me = Arc::clone(&self);
        handle.on_tb_trans(move |tb| {
            for mut insn in tb.insns() {
                let record = {
                    let mut insns = me.insns.lock().unwrap_or_else(PoisonError::into_inner);
                    Arc::clone(insns.entry(insn.pc()).or_insert_with(|| {
                        Arc::new(InsnRecord {
                            disas: insn.disassembly(),
                            symbol: insn.symbol().map(str::to_owned),
                            ..InsnRecord::default()
                        })
                    }))
                };
                let (sim, rec) = (Arc::clone(&me), Arc::clone(&record));
                insn.on_exec(Access::NONE, move |ctx| {
                    if !sim.access(ctx.vcpu(), |c| c.icache.access(ctx.pc())) {
                        rec.insn_misses.fetch_add(1, Ordering::Relaxed);
                    }
                });
                let sim = Arc::clone(&me);
                insn.on_mem(MemFilter::All, Access::NONE, move |ctx, access| {
                    if !sim.access(ctx.vcpu(), |c| c.dcache.access(access.addr)) {
                        record.data_misses.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
        });
        let out = handle.clone();
        handle.on_atexit(move || out.outs(&self.report()));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::Cache;

    #[test]
    fn lru_hits_and_misses() -> Result<(), String> {
        // 2 sets x 2 ways x 16-byte lines.
        let c = Cache::new(64, 2, 16)?;
        assert!(!c.access(0x00)); // set 0: [0]
        assert!(c.access(0x0f));
        assert!(!c.access(0x20)); // set 0: [2, 0]
        assert!(!c.access(0x10)); // set 1
        assert!(c.access(0x00)); // set 0: [0, 2]
        assert!(!c.access(0x40)); // evicts block 2 (LRU): [4, 0]
        assert!(c.access(0x00));
        assert!(!c.access(0x20));
        assert_eq!((c.accesses(), c.misses()), (8, 5));
        Ok(())
    }

    #[test]
    fn streaming_over_twice_the_capacity_always_misses() -> Result<(), String> {
        let c = Cache::new(1024, 4, 64)?;
        for _ in 0..3 {
            for line in 0..32u64 {
                c.access(line * 64);
            }
        }
        assert_eq!(c.misses(), 96);
        Ok(())
    }

    #[test]
    fn line_zero_is_not_in_a_fresh_cache() -> Result<(), String> {
        // One-byte lines: every line number is a possible line, so a
        // fresh set must not read as holding any of them (0 included).
        let c = Cache::new(2, 1, 1)?;
        assert!(!c.access(0));
        assert!(c.access(0));
        assert!(!c.access(u64::MAX));
        assert!(!c.access(2)); // set 0 again: evicts line 0
        assert!(!c.access(0));
        assert_eq!((c.accesses(), c.misses()), (5, 4));
        Ok(())
    }

    /// The textbook model: each set a list of lines, most recent first.
    struct ModelLru {
        line_shift: u32,
        sets: Vec<Vec<u64>>,
        ways: usize,
    }

    impl ModelLru {
        fn access(&mut self, addr: u64) -> bool {
            let line = addr >> self.line_shift;
            let n = self.sets.len() as u64;
            let Some(set) = self.sets.get_mut((line % n) as usize) else {
                return false;
            };
            let hit = match set.iter().position(|&l| l == line) {
                Some(i) => {
                    set.remove(i);
                    true
                }
                None => {
                    set.truncate(self.ways - 1);
                    false
                }
            };
            set.insert(0, line);
            hit
        }
    }

    proptest! {
        #[test]
        fn agrees_with_a_textbook_lru(
            size_log in 0u32..10,
            ways_log in 0u32..4,
            line_log in 0u32..4,
            // Few distinct lines, so that sets fill, hit and evict.
            addrs in proptest::collection::vec((0u64..64, any::<bool>()), 1..400),
        ) {
            let (ways, line) = (1u64 << ways_log, 1u64 << line_log);
            let size = (ways * line) << size_log;
            let c = Cache::new(size, ways, line).map_err(TestCaseError::fail)?;
            let mut model = ModelLru {
                line_shift: line_log,
                sets: vec![Vec::new(); (size / (ways * line)) as usize],
                ways: ways as usize,
            };
            let mut misses = 0;
            for &(a, high) in &addrs {
                // Lines near the top of the address space too.
                let addr = if high { u64::MAX - a } else { a };
                let hit = c.access(addr);
                prop_assert_eq!(hit, model.access(addr), "at {:#x}", addr);
                misses += u64::from(!hit);
            }
            prop_assert_eq!((c.accesses(), c.misses()), (addrs.len() as u64, misses));
        }
    }

    #[test]
    fn rejects_bad_geometry() {
        assert!(Cache::new(1000, 2, 16).is_err());
        assert!(Cache::new(64, 8, 16).is_err());
        assert!(Cache::new(64, 3, 16).is_err());
        // 1 GiB of 64-byte lines is the most lines; of 32-byte lines, too
        // many (8 bytes of state each).
        let err = Cache::new(1 << 30, 1 << 16, 32).err();
        assert!(
            err.as_deref()
                .is_some_and(|e| e.contains("33554432 lines, more than the 16777216")),
            "{err:?}"
        );
        assert!(Cache::new(1 << 24, 16, 1).is_ok());
    }
}
