//! The RV64GC register file of one vCPU.

use std::fmt;
use std::sync::OnceLock;

use std::time::Instant;

/// ABI names of x0..x31, in register order.
pub(crate) const X_NAMES: [&str; 32] = [
    "zero", "ra", "sp", "gp", "tp", "t0", "t1", "t2", "s0", "s1", "a0", "a1", "a2", "a3", "a4",
    "a5", "a6", "a7", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11", "t3", "t4",
    "t5", "t6",
];

/// ABI names of f0..f31, in register order.
pub(crate) const F_NAMES: [&str; 32] = [
    "ft0", "ft1", "ft2", "ft3", "ft4", "ft5", "ft6", "ft7", "fs0", "fs1", "fa0", "fa1", "fa2",
    "fa3", "fa4", "fa5", "fa6", "fa7", "fs2", "fs3", "fs4", "fs5", "fs6", "fs7", "fs8", "fs9",
    "fs10", "fs11", "ft8", "ft9", "ft10", "ft11",
];

/// Every name [`Cpu::register`] accepts besides the numeric `xN`/`fN` forms
/// and `fp`, in the order `register_names` reports them.
pub(crate) const REGISTER_NAMES: [&str; 68] = [
    "zero", "ra", "sp", "gp", "tp", "t0", "t1", "t2", "s0", "s1", "a0", "a1", "a2", "a3", "a4",
    "a5", "a6", "a7", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11", "t3", "t4",
    "t5", "t6", "pc", "ft0", "ft1", "ft2", "ft3", "ft4", "ft5", "ft6", "ft7", "fs0", "fs1", "fa0",
    "fa1", "fa2", "fa3", "fa4", "fa5", "fa6", "fa7", "fs2", "fs3", "fs4", "fs5", "fs6", "fs7",
    "fs8", "fs9", "fs10", "fs11", "ft8", "ft9", "ft10", "ft11", "fflags", "frm", "fcsr",
];

/// A load reservation made by `lr.w`/`lr.d`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reservation {
    pub(crate) addr: u64,
    pub(crate) size: u8,
    /// The value the LR loaded (zero-extended to the access size); SC
    /// succeeds only if memory still holds it, as qemu-user does.
    pub(crate) value: u64,
}

/// The architectural state of one RV64GC hart in user mode.
///
/// Single-precision values live NaN-boxed in the 64-bit `f` registers (upper
/// 32 bits all ones). The `cycle`, `time` and `instret` CSRs all read a
/// monotonic nanosecond count since the first vCPU of the process was
/// created, like qemu-user which returns host time for them; an exact
/// retired-instruction count would cost a memory increment per instruction.
#[derive(Clone)]
pub struct Cpu {
    /// x0..x31, then slot 32 that absorbs writes to x0 ([`crate::op`]'s
    /// `SINK`); the array is 256 long so indexing by any `u8` needs neither
    /// a mask nor a bounds check on the hot path.
    pub(crate) x: [u64; 256],
    pub(crate) f: [u64; 32],
    pub(crate) pc: u64,
    /// frm in bits 7:5, fflags in bits 4:0.
    pub(crate) fcsr: u8,
    pub(crate) reservation: Option<Reservation>,
    epoch: Instant,
}

impl fmt::Debug for Cpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cpu")
            .field("pc", &format_args!("{:#x}", self.pc))
            .field("x", &&self.x[..32])
            .field("f", &self.f)
            .field("fcsr", &self.fcsr)
            .field("reservation", &self.reservation)
            .finish_non_exhaustive()
    }
}

impl Default for Cpu {
    fn default() -> Self {
        Self::new()
    }
}

fn process_epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

impl Cpu {
    /// A hart with every register zero, pc 0, round-to-nearest and no flags.
    pub fn new() -> Self {
        Cpu {
            x: [0; 256],
            f: [0; 32],
            pc: 0,
            fcsr: 0,
            reservation: None,
            epoch: process_epoch(),
        }
    }

    /// Integer register `x[index % 32]` (x0 reads as 0).
    #[inline(always)]
    pub fn x(&self, index: u8) -> u64 {
        self.x[usize::from(index & 31)]
    }

    /// Sets integer register `x[index % 32]`; writes to x0 are ignored.
    #[inline]
    pub fn set_x(&mut self, index: u8, value: u64) {
        let index = usize::from(index & 31);
        if index != 0 {
            self.x[index] = value;
        }
    }

    /// Raw 64-bit contents of floating-point register `f[index % 32]`.
    pub fn f(&self, index: u8) -> u64 {
        self.f[usize::from(index & 31)]
    }

    /// Sets the raw 64-bit contents of `f[index % 32]` (a single must be
    /// NaN-boxed by the caller: `0xffff_ffff_0000_0000 | bits`).
    pub fn set_f(&mut self, index: u8, bits: u64) {
        self.f[usize::from(index & 31)] = bits;
    }

    /// The program counter.
    pub fn pc(&self) -> u64 {
        self.pc
    }

    /// Sets the program counter.
    pub fn set_pc(&mut self, pc: u64) {
        self.pc = pc;
    }

    /// The `fcsr` CSR: `frm << 5 | fflags`.
    pub fn fcsr(&self) -> u64 {
        u64::from(self.fcsr)
    }

    /// Sets `fcsr`; bits above 7 are ignored as on hardware.
    pub fn set_fcsr(&mut self, value: u64) {
        self.fcsr = value as u8;
    }

    /// Drops any LR reservation, so the next SC fails (the kernel does this
    /// on signal delivery and context switches).
    pub fn clear_reservation(&mut self) {
        self.reservation = None;
    }

    #[inline(always)]
    pub(crate) fn r(&self, index: u8) -> u64 {
        self.x[usize::from(index)]
    }

    #[inline(always)]
    pub(crate) fn w(&mut self, index: u8, value: u64) {
        self.x[usize::from(index)] = value;
    }

    pub(crate) fn frm(&self) -> u8 {
        self.fcsr >> 5
    }

    /// Nanoseconds since the process epoch, for cycle/time/instret.
    pub(crate) fn counter(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Reads a register by name: ABI (`a0`, `fa0`, `fp`) or numeric (`x10`,
    /// `f10`) names, `pc`, `fflags`, `frm` and `fcsr`.
    pub fn register(&self, name: &str) -> Option<u64> {
        match name {
            "pc" => return Some(self.pc),
            "fp" => return Some(self.x[8]),
            "fflags" => return Some(u64::from(self.fcsr & 0x1f)),
            "frm" => return Some(u64::from(self.frm())),
            "fcsr" => return Some(self.fcsr()),
            _ => {}
        }
        if let Some(i) = X_NAMES.iter().position(|n| *n == name) {
            return Some(self.x[i]);
        }
        if let Some(i) = F_NAMES.iter().position(|n| *n == name) {
            return Some(self.f[i]);
        }
        let numeric = |prefix: &str| -> Option<u8> {
            let digits = name.strip_prefix(prefix)?;
            let n: u8 = digits.parse().ok()?;
            // Only canonical spellings: "x5", not "x05" or "x+5".
            (n < 32 && n.to_string() == digits).then_some(n)
        };
        if let Some(n) = numeric("x") {
            return Some(self.x(n));
        }
        numeric("f").map(|n| self.f(n))
    }
}
