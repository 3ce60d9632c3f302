//! Values a block's code takes from the engine that places it: where its
//! copy of the ops is, its chain cells, the jump table, its hooks' index.
//!
//! The code refers to each through a Cranelift symbol, so that it comes
//! out with a relocation (an 8-byte absolute field) where a constant would
//! be; [`crate::jit::code::CodeStore::place`] writes the placing engine's
//! values there. Everything else the code holds comes from its
//! [`super::BlockSource`], so that code compiled by one engine is right
//! for any engine that would compile the same source (the shared cache,
//! `jit/shared.rs`).

use cranelift_codegen::binemit::Reloc;
use cranelift_codegen::ir::{
    self, ExternalName, GlobalValueData, InstBuilder, UserExternalName, immediates::Imm64,
    types::I64,
};
use cranelift_codegen::{FinalizedMachReloc, FinalizedRelocTarget};

use super::super::JitError;
use super::Lowering;

/// The user-name namespace of link symbols.
const NAMESPACE: u32 = 0x7463_676b;

/// A value that differs between the engines placing the same code; its
/// discriminant is its symbol's index (in [`LINKS`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum Link {
    /// The address of the block's copy of its ops.
    Ops,
    /// The address of the block's two chain cells.
    Cells,
    /// The marker an exit through the block's empty chain cell 0 leaves
    /// (cell 1's is one more).
    Marker,
    /// The address of the generation's indirect-jump table.
    Jumps,
    /// The index of the block's entry hook in its generation.
    Hooks,
}

/// Every link, in discriminant order.
const LINKS: [Link; 5] = [
    Link::Ops,
    Link::Cells,
    Link::Marker,
    Link::Jumps,
    Link::Hooks,
];

/// One place in the code to fill in: 8 bytes at `offset`, the value of
/// `link` plus `addend`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LinkSite {
    pub offset: u32,
    pub link: Link,
    pub addend: i64,
}

/// One engine's values for one block.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Links {
    pub ops: u64,
    pub cells: u64,
    pub marker: u64,
    pub jumps: u64,
    pub hooks: u64,
}

impl Links {
    /// The value of `site`.
    pub(crate) fn value(&self, site: &LinkSite) -> u64 {
        let base = match site.link {
            Link::Ops => self.ops,
            Link::Cells => self.cells,
            Link::Marker => self.marker,
            Link::Jumps => self.jumps,
            Link::Hooks => self.hooks,
        };
        base.wrapping_add(site.addend as u64)
    }
}

/// The link sites of compiled code, from its relocations; an error for a
/// relocation that is not one of ours (the code would be unplaceable).
pub(crate) fn sites(
    func: &ir::Function,
    relocs: &[FinalizedMachReloc],
) -> Result<Vec<LinkSite>, JitError> {
    relocs
        .iter()
        .map(|r| {
            let link = match (&r.kind, &r.target) {
                (Reloc::Abs8, FinalizedRelocTarget::ExternalName(ExternalName::User(name))) => {
                    let name = &func.params.user_named_funcs()[*name];
                    LINKS
                        .get(name.index as usize)
                        .filter(|_| name.namespace == NAMESPACE)
                }
                _ => None,
            };
            match link {
                Some(&link) => Ok(LinkSite {
                    offset: r.offset,
                    link,
                    addend: r.addend,
                }),
                None => Err(JitError::Module(format!(
                    "generated code needs a relocation tcgkit does not make: {:?} to {:?}",
                    r.kind, r.target
                ))),
            }
        })
        .collect()
}

impl Lowering<'_, '_> {
    /// The placing engine's `link` plus `addend`.
    pub(super) fn linked(&mut self, link: Link, addend: i64) -> ir::Value {
        let name = self
            .b
            .func
            .declare_imported_user_function(UserExternalName::new(NAMESPACE, link as u32));
        let symbol = self.b.create_global_value(GlobalValueData::Symbol {
            name: ExternalName::User(name),
            offset: Imm64::new(addend),
            colocated: false,
            tls: false,
        });
        self.b.ins().symbol_value(I64, symbol)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_links_symbol_index_names_it() {
        for (index, link) in LINKS.iter().enumerate() {
            assert_eq!(*link as usize, index);
        }
    }
}
