//! `cache`: a set-associative L1 instruction and data cache simulator with
//! LRU replacement and a miss report, in the spirit of QEMU's contrib
//! `cache` plugin (same argument names).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tcgkit_tcg_core::MemFilter;

use crate::{Access, GuestInfo, Plugin, PluginArgs, PluginError, PluginHandle};

/// One set-associative cache with LRU replacement.
#[derive(Clone, Debug)]
pub struct Cache {
    line_shift: u32,
    set_mask: u64,
    ways: usize,
    /// `sets * ways` tags, each set's ways ordered most recently used first.
    tags: Vec<Option<u64>>,
    accesses: u64,
    misses: u64,
}

impl Cache {
    /// A cache of `size` bytes, `ways`-associative, with `line`-byte lines.
    /// All three must be powers of two with `size >= ways * line`.
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
        Ok(Cache {
            line_shift: line.trailing_zeros(),
            set_mask: sets - 1,
            ways: ways as usize,
            tags: vec![None; (sets * ways) as usize],
            accesses: 0,
            misses: 0,
        })
    }

    /// Accesses the line holding `addr`; true on a hit.
    pub fn access(&mut self, addr: u64) -> bool {
        self.accesses += 1;
        let block = addr >> self.line_shift;
        let set = (block & self.set_mask) as usize;
        let start = set * self.ways;
        let Some(ways) = self.tags.get_mut(start..start + self.ways) else {
            return false;
        };
        // Move the line to the front (most recently used); a miss evicts the last.
        let hit = match ways.iter().position(|t| *t == Some(block)) {
            Some(i) => {
                ways[..=i].rotate_right(1);
                true
            }
            None => {
                ways.rotate_right(1);
                self.misses += 1;
                false
            }
        };
        if let Some(front) = ways.first_mut() {
            *front = Some(block);
        }
        hit
    }

    /// Accesses so far.
    pub fn accesses(&self) -> u64 {
        self.accesses
    }

    /// Misses so far.
    pub fn misses(&self) -> u64 {
        self.misses
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

struct Caches {
    icache: Vec<Cache>,
    dcache: Vec<Cache>,
}

/// The `cache` plugin.
pub struct CacheSim {
    limit: usize,
    caches: Mutex<Caches>,
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
        let vcpus = guest.vcpus.max(1) as usize;
        Ok(CacheSim {
            limit: args.u64_in("limit", 32, 1..=1 << 20)? as usize,
            caches: Mutex::new(Caches {
                icache: vec![i; vcpus],
                dcache: vec![d; vcpus],
            }),
            insns: Mutex::new(HashMap::new()),
        })
    }

    /// Accesses and misses over all vCPUs.
    pub fn totals(&self) -> CacheTotals {
        let c = self.caches.lock().unwrap_or_else(PoisonError::into_inner);
        CacheTotals {
            data_accesses: c.dcache.iter().map(Cache::accesses).sum(),
            data_misses: c.dcache.iter().map(Cache::misses).sum(),
            insn_accesses: c.icache.iter().map(Cache::accesses).sum(),
            insn_misses: c.icache.iter().map(Cache::misses).sum(),
        }
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
                    let mut c = sim.caches.lock().unwrap_or_else(PoisonError::into_inner);
                    if let Some(cache) = c.icache.get_mut(ctx.vcpu() as usize) {
                        if !cache.access(ctx.pc()) {
                            rec.insn_misses.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
                let sim = Arc::clone(&me);
                insn.on_mem(MemFilter::All, Access::NONE, move |ctx, access| {
                    let mut c = sim.caches.lock().unwrap_or_else(PoisonError::into_inner);
                    if let Some(cache) = c.dcache.get_mut(ctx.vcpu() as usize) {
                        if !cache.access(access.addr) {
                            record.data_misses.fetch_add(1, Ordering::Relaxed);
                        }
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
    use super::Cache;

    #[test]
    fn lru_hits_and_misses() -> Result<(), String> {
        // 2 sets x 2 ways x 16-byte lines.
        let mut c = Cache::new(64, 2, 16)?;
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
        let mut c = Cache::new(1024, 4, 64)?;
        for _ in 0..3 {
            for line in 0..32u64 {
                c.access(line * 64);
            }
        }
        assert_eq!(c.misses(), 96);
        Ok(())
    }

    #[test]
    fn rejects_bad_geometry() {
        assert!(Cache::new(1000, 2, 16).is_err());
        assert!(Cache::new(64, 8, 16).is_err());
        assert!(Cache::new(64, 3, 16).is_err());
    }
}
