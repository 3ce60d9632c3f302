//! Guest loads and stores in compiled code: the data TLB probed inline,
//! the host bytes read or written on a hit, the slow-path helper (through
//! its `preserve_all` stub) on a miss or fault, and the instruction's
//! memory hooks after the access.

use cranelift_codegen::ir::{
    self, InstBuilder, MemFlagsData, condcodes::IntCC, types::I8, types::I32, types::I64,
};

use super::super::runtime::{
    MEM_SIGNED, MEM_STORE, OFF_RESULT, OFF_TLB_READ, OFF_TLB_WRITE, size_index,
};
use super::{Lowering, trusted};
use crate::memory::JitTlb;

/// Guest data accesses: no trap (the TLB said the bytes are there), any
/// alignment, may alias anything guest memory holds.
fn guest() -> MemFlagsData {
    MemFlagsData::new().with_notrap()
}

/// Loads and stores that hit the TLB run inline, reading the host's
/// little-endian memory as the guest's.
const INLINE_ACCESS: bool = cfg!(target_endian = "little");

/// The Cranelift type of a 1-, 2- or 4-byte guest access.
fn narrow_type(size: u8) -> ir::Type {
    match size {
        1 => I8,
        2 => ir::types::I16,
        _ => I32,
    }
}

/// In-page offset mask.
const PAGE_MASK: u64 = (1 << JitTlb::PAGE_SHIFT) - 1;

impl Lowering<'_, '_> {
    /// The TLB entry for `addr` in the table at context offset `table`,
    /// and whether it holds `addr`'s page with the whole access inside it.
    ///
    /// The entry is found from `addr`'s page and compared with the page
    /// of the access's last byte (QEMU's check): equal only if the entry
    /// holds `addr`'s page and the access does not cross into the next
    /// (which maps to another entry).
    fn tlb_probe(&mut self, table: i32, addr: ir::Value, size: u8) -> (ir::Value, ir::Value) {
        let which = usize::from(table == OFF_TLB_WRITE);
        let tlb = match self.tlb_tables[which] {
            Some(tlb) => tlb,
            None => {
                // Loaded at the block's first access, on the straight
                // line every later access is on.
                let tlb = self.b.ins().load(I64, trusted(), self.ctx, table);
                self.tlb_tables[which] = Some(tlb);
                tlb
            }
        };
        let vpn = self.b.ins().ushr_imm_u(addr, JitTlb::PAGE_SHIFT);
        let index = self.b.ins().band_imm_u(vpn, (JitTlb::ENTRIES - 1) as i64);
        let offset = self.b.ins().imul_imm_s(index, JitTlb::ENTRY_SIZE);
        let entry = self.b.ins().iadd(tlb, offset);
        let tag = self.b.ins().load(I64, trusted(), entry, JitTlb::TAG);
        let last_vpn = if size > 1 {
            let last = self.b.ins().iadd_imm_s(addr, i64::from(size) - 1);
            self.b.ins().ushr_imm_u(last, JitTlb::PAGE_SHIFT)
        } else {
            vpn
        };
        let hit = self.b.ins().icmp(IntCC::Equal, tag, last_vpn);
        (entry, hit)
    }

    /// The host address of a TLB hit's bytes.
    fn host_address(&mut self, entry: ir::Value, addr: ir::Value) -> ir::Value {
        let host = self.b.ins().load(I64, trusted(), entry, JitTlb::HOST);
        let in_page = self.b.ins().band_imm_u(addr, PAGE_MASK as i64);
        self.b.ins().iadd(host, in_page)
    }

    pub(super) fn load(&mut self, addr: ir::Value, size: u8, signed: bool) -> ir::Value {
        let f = self.src.helpers.load[size_index(size)][usize::from(signed)];
        let kind = u64::from(size) | if signed { MEM_SIGNED } else { 0 };
        if !INLINE_ACCESS {
            let v = self.helper(f, self.sig_load, &[self.ctx, addr]);
            self.exit_if_status();
            let v = v.unwrap_or_else(|| self.b.ins().iconst(I64, 0));
            self.call_mem_hook(addr, v, kind);
            return v;
        }
        let (entry, hit) = self.tlb_probe(OFF_TLB_READ, addr, size);
        let fast = self.b.create_block();
        let slow = self.b.create_block();
        let join = self.b.create_block();
        let value = self.b.append_block_param(join, I64);
        self.b.ins().brif(hit, fast, &[], slow, &[]);
        self.b.seal_block(fast);
        self.b.seal_block(slow);

        self.b.switch_to_block(fast);
        let host = self.host_address(entry, addr);
        let v = match size {
            8 => self.b.ins().load(I64, guest(), host, 0),
            _ => {
                let ty = narrow_type(size);
                let narrow = self.b.ins().load(ty, guest(), host, 0);
                if signed {
                    self.b.ins().sextend(I64, narrow)
                } else {
                    self.b.ins().uextend(I64, narrow)
                }
            }
        };
        self.b.ins().jump(join, &[v.into()]);

        self.b.switch_to_block(slow);
        self.b.set_cold_block(slow);
        let stub = self.src.helpers.load_stub[size_index(size)][usize::from(signed)];
        let v = if stub != 0 {
            self.helper(stub, self.sig_load_stub, &[self.ctx, addr]);
            self.b.ins().load(I64, trusted(), self.ctx, OFF_RESULT)
        } else {
            self.helper(f, self.sig_load, &[self.ctx, addr])
                .unwrap_or_else(|| self.b.ins().iconst(I64, 0))
        };
        self.exit_if_status();
        self.b.ins().jump(join, &[v.into()]);

        self.b.seal_block(join);
        self.b.switch_to_block(join);
        self.call_mem_hook(addr, value, kind);
        value
    }

    pub(super) fn store(&mut self, addr: ir::Value, size: u8, value: ir::Value) {
        let f = self.src.helpers.store[size_index(size)];
        let kind = u64::from(size) | MEM_STORE;
        if !INLINE_ACCESS {
            self.helper(f, self.sig_store, &[self.ctx, addr, value]);
            self.exit_if_status();
            self.call_mem_hook(addr, value, kind);
            return;
        }
        let (entry, hit) = self.tlb_probe(OFF_TLB_WRITE, addr, size);
        let fast = self.b.create_block();
        let slow = self.b.create_block();
        let join = self.b.create_block();
        self.b.ins().brif(hit, fast, &[], slow, &[]);
        self.b.seal_block(fast);
        self.b.seal_block(slow);

        self.b.switch_to_block(fast);
        let host = self.host_address(entry, addr);
        match size {
            8 => {
                self.b.ins().store(guest(), value, host, 0);
            }
            _ => {
                let ty = narrow_type(size);
                let narrow = self.b.ins().ireduce(ty, value);
                self.b.ins().store(guest(), narrow, host, 0);
            }
        }
        self.b.ins().jump(join, &[]);

        self.b.switch_to_block(slow);
        self.b.set_cold_block(slow);
        match self.src.helpers.store_stub[size_index(size)] {
            0 => self.helper(f, self.sig_store, &[self.ctx, addr, value]),
            stub => self.helper(stub, self.sig_store_stub, &[self.ctx, addr, value]),
        };
        self.exit_if_status();
        self.b.ins().jump(join, &[]);

        self.b.seal_block(join);
        self.b.switch_to_block(join);
        self.call_mem_hook(addr, value, kind);
    }
}
