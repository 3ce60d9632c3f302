//! Running guest signal handlers: the RV64 signal frame (`struct
//! rt_sigframe`: siginfo, then a ucontext with the register file) pushed on
//! the guest stack, and `rt_sigreturn` restoring from it.
//!
//! Handlers return to a two-instruction trampoline (`li a7, 139; ecall`) in
//! a page above the stack, where qemu-riscv64 keeps its own.

use tcgkit_riscv::Cpu;
use tcgkit_tcg_core::{GuestMemory, MemError, PAGE_SIZE, Perms};

use crate::mm::STACK_TOP;
use crate::signal::Signal;
use crate::strace::SignalCause;
use crate::syscall::Kernel;

/// Address of the `rt_sigreturn` trampoline.
pub(crate) const TRAMPOLINE: u64 = STACK_TOP;

/// `li a7, 139` (addi x17, x0, 139) and `ecall`.
const TRAMPOLINE_CODE: [u32; 2] = [(139 << 20) | (17 << 7) | 0x13, 0x73];

const SIGINFO_SIZE: u64 = 128;
/// Offset of `uc_mcontext` in `struct ucontext` (flags, link, stack, mask,
/// padding to 1024 bits of mask, then 16-byte alignment).
const MCONTEXT: u64 = 176;
/// `struct sigcontext`: 32 general registers (pc first), then the D
/// extension's FP state (f[32], fcsr), padded to 16 bytes. This is the size
/// qemu-riscv64 uses (Linux reserves room for the Q state too), so guest
/// stack addresses match qemu's.
const SIGCONTEXT_SIZE: u64 = 256 + 272;
const FRAME_SIZE: u64 = SIGINFO_SIZE + MCONTEXT + SIGCONTEXT_SIZE;
/// Offsets inside the ucontext.
const UC_STACK: u64 = 16;
const UC_SIGMASK: u64 = 40;

const SA_ONSTACK: u64 = 0x0800_0000;
const SA_NODEFER: u64 = 0x4000_0000;
const SA_RESETHAND: u64 = 0x8000_0000;
const SS_ONSTACK: u64 = 1;
const SS_DISABLE: u64 = 2;
/// SIGKILL and SIGSTOP can never be blocked.
pub(crate) const UNBLOCKABLE: u64 = (1 << 8) | (1 << 18);

/// Maps the trampoline page.
pub(crate) fn map_trampoline(mem: &mut GuestMemory) -> Result<(), MemError> {
    mem.map(TRAMPOLINE, PAGE_SIZE, Perms::READ | Perms::EXEC)?;
    let code: Vec<u8> = TRAMPOLINE_CODE
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect();
    // The page was just mapped, so this write cannot fail.
    let _ = mem.write_initial(TRAMPOLINE, &code);
    Ok(())
}

/// Enters the guest's handler for `sig`: pushes the frame, updates the
/// mask, points pc at the handler. `Err` if the frame cannot be written (the
/// guest then dies by SIGSEGV, as under Linux).
pub(crate) fn enter_handler(
    cpu: &mut Cpu,
    mem: &mut GuestMemory,
    kernel: &mut Kernel,
    sig: Signal,
    cause: SignalCause,
) -> Result<(), ()> {
    let (handler, flags, mask) = kernel.sigaction(sig);
    let [ss_sp, ss_flags, ss_size] = kernel.altstack;
    let mut sp = cpu.x(2);
    let on_altstack = sp.wrapping_sub(ss_sp) < ss_size;
    if flags & SA_ONSTACK != 0 && ss_flags & SS_DISABLE == 0 && !on_altstack {
        sp = ss_sp.wrapping_add(ss_size);
    }
    let frame = sp.wrapping_sub(FRAME_SIZE) & !15;

    let mut bytes = vec![0u8; FRAME_SIZE as usize];
    let mut put = |offset: u64, data: &[u8]| {
        let start = offset as usize;
        if let Some(dst) = bytes.get_mut(start..start + data.len()) {
            dst.copy_from_slice(data);
        }
    };
    // siginfo: signo, errno, code, then the union.
    put(0, &i32::from(sig.number()).to_le_bytes());
    match cause {
        SignalCause::Fault { code, addr } => {
            put(8, &code.to_le_bytes());
            put(16, &addr.to_le_bytes());
        }
        SignalCause::Sent {
            by_thread,
            pid,
            uid,
        } => {
            // SI_TKILL is -6, SI_USER 0.
            let code: i32 = if by_thread { -6 } else { 0 };
            put(8, &code.to_le_bytes());
            put(16, &pid.to_le_bytes());
            put(20, &uid.to_le_bytes());
        }
    }
    let uc = SIGINFO_SIZE;
    let stack_flags = if on_altstack { SS_ONSTACK } else { ss_flags };
    put(uc + UC_STACK, &ss_sp.to_le_bytes());
    put(uc + UC_STACK + 8, &stack_flags.to_le_bytes());
    put(uc + UC_STACK + 16, &ss_size.to_le_bytes());
    put(uc + UC_SIGMASK, &kernel.sigmask.to_le_bytes());
    let regs = uc + MCONTEXT;
    put(regs, &cpu.pc().to_le_bytes());
    for i in 1..32u8 {
        put(regs + 8 * u64::from(i), &cpu.x(i).to_le_bytes());
    }
    for i in 0..32u8 {
        put(regs + 256 + 8 * u64::from(i), &cpu.f(i).to_le_bytes());
    }
    put(regs + 512, &(cpu.fcsr() as u32).to_le_bytes());
    mem.write(frame, &bytes).map_err(|_| ())?;

    let mut blocked = kernel.sigmask | mask;
    if flags & SA_NODEFER == 0 {
        blocked |= 1 << (sig.number() - 1);
    }
    kernel.sigmask = blocked & !UNBLOCKABLE;
    if flags & SA_RESETHAND != 0 {
        kernel.reset_handler(sig);
    }
    cpu.clear_reservation();
    cpu.set_x(10, u64::from(sig.number()));
    cpu.set_x(11, frame);
    cpu.set_x(12, frame + uc);
    cpu.set_x(2, frame);
    cpu.set_x(1, TRAMPOLINE);
    cpu.set_pc(handler);
    Ok(())
}

/// `rt_sigreturn`: restores the registers and mask saved in the frame at
/// sp. `Err` if the frame is unreadable.
pub(crate) fn restore(cpu: &mut Cpu, mem: &mut GuestMemory, kernel: &mut Kernel) -> Result<(), ()> {
    let frame = cpu.x(2);
    let mut bytes = vec![0u8; FRAME_SIZE as usize];
    mem.read(frame, &mut bytes).map_err(|_| ())?;
    let word = |offset: u64| -> u64 {
        let start = offset as usize;
        bytes
            .get(start..start + 8)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_le_bytes)
    };
    let uc = SIGINFO_SIZE;
    kernel.sigmask = word(uc + UC_SIGMASK) & !UNBLOCKABLE;
    let regs = uc + MCONTEXT;
    let pc = word(regs);
    for i in 1..32u8 {
        cpu.set_x(i, word(regs + 8 * u64::from(i)));
    }
    for i in 0..32u8 {
        cpu.set_f(i, word(regs + 256 + 8 * u64::from(i)));
    }
    cpu.set_fcsr(word(regs + 512) & 0xffff_ffff);
    cpu.clear_reservation();
    cpu.set_pc(pc);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trampoline_is_li_a7_139_ecall() {
        assert_eq!(TRAMPOLINE_CODE, [0x08b0_0893, 0x0000_0073]);
        assert_eq!(FRAME_SIZE % 16, 0);
        let mut mem = GuestMemory::new();
        map_trampoline(&mut mem).expect("map");
        assert_eq!(mem.perms(TRAMPOLINE), Some(Perms::READ | Perms::EXEC));
        let mut code = [0u8; 8];
        mem.fetch(TRAMPOLINE, &mut code).expect("fetch");
        assert_eq!(code, [0x93, 0x08, 0xb0, 0x08, 0x73, 0, 0, 0]);
    }
}
