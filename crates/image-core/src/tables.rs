//! The ECMA-335 table schema (II.22) and the row layout it implies (II.24.2.6).

use std::fmt;

macro_rules! tables {
    ($($name:ident = $id:literal, $doc:literal;)*) => {
        /// An ECMA-335 metadata table, numbered as in the `#~` stream (II.22).
        ///
        /// Only the tables ECMA-335 defines (0x00-0x2C) are read; metadata
        /// that marks any other table present (e.g. the portable PDB tables
        /// 0x30-0x37, which belong in `.pdb` files) is rejected at open.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum Table {
            $(#[doc = $doc] $name = $id,)*
        }

        impl Table {
            /// Every table ECMA-335 defines, in id order.
            pub const ALL: &'static [Table] = &[$(Table::$name,)*];

            /// The table with this id, or `None` for ids ECMA-335 does not define.
            pub fn from_id(id: u8) -> Option<Table> {
                match id {
                    $($id => Some(Table::$name),)*
                    _ => None,
                }
            }

            /// The name used by the standard, e.g. `AssemblyRef`.
            pub fn name(self) -> &'static str {
                match self {
                    $(Table::$name => stringify!($name),)*
                }
            }
        }
    };
}

tables! {
    Module = 0x00, "The module itself (one row).";
    TypeRef = 0x01, "References to types defined elsewhere.";
    TypeDef = 0x02, "Types defined in this module.";
    FieldPtr = 0x03, "Field indirection (uncompressed `#-` streams only).";
    Field = 0x04, "Fields.";
    MethodPtr = 0x05, "Method indirection (uncompressed `#-` streams only).";
    MethodDef = 0x06, "Methods defined in this module.";
    ParamPtr = 0x07, "Parameter indirection (uncompressed `#-` streams only).";
    Param = 0x08, "Method parameters.";
    InterfaceImpl = 0x09, "Interfaces implemented by types.";
    MemberRef = 0x0A, "References to fields and methods.";
    Constant = 0x0B, "Compile-time constant values.";
    CustomAttribute = 0x0C, "Custom attributes.";
    FieldMarshal = 0x0D, "Marshalling descriptors.";
    DeclSecurity = 0x0E, "Declarative security.";
    ClassLayout = 0x0F, "Explicit class layouts.";
    FieldLayout = 0x10, "Explicit field offsets.";
    StandAloneSig = 0x11, "Stand-alone signatures.";
    EventMap = 0x12, "Type to event list map.";
    EventPtr = 0x13, "Event indirection (uncompressed `#-` streams only).";
    Event = 0x14, "Events.";
    PropertyMap = 0x15, "Type to property list map.";
    PropertyPtr = 0x16, "Property indirection (uncompressed `#-` streams only).";
    Property = 0x17, "Properties.";
    MethodSemantics = 0x18, "Getter/setter/adder/remover associations.";
    MethodImpl = 0x19, "Explicit method overrides.";
    ModuleRef = 0x1A, "References to other modules (native libraries too).";
    TypeSpec = 0x1B, "Type specifications.";
    ImplMap = 0x1C, "P/Invoke mappings.";
    FieldRva = 0x1D, "Fields with initial data.";
    EncLog = 0x1E, "Edit-and-continue log.";
    EncMap = 0x1F, "Edit-and-continue map.";
    Assembly = 0x20, "The assembly manifest (zero or one row).";
    AssemblyProcessor = 0x21, "Unused processor records.";
    AssemblyOs = 0x22, "Unused OS records.";
    AssemblyRef = 0x23, "References to other assemblies.";
    AssemblyRefProcessor = 0x24, "Unused reference processor records.";
    AssemblyRefOs = 0x25, "Unused reference OS records.";
    File = 0x26, "Files of a multi-module assembly.";
    ExportedType = 0x27, "Types exported or forwarded.";
    ManifestResource = 0x28, "Manifest resources.";
    NestedClass = 0x29, "Nesting of types.";
    GenericParam = 0x2A, "Generic parameters.";
    MethodSpec = 0x2B, "Generic method instantiations.";
    GenericParamConstraint = 0x2C, "Constraints on generic parameters.";
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (0x{:02x})", self.name(), *self as u8)
    }
}

/// A coded index kind (II.24.2.6): a tag in the low bits selects the table.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Coded {
    TypeDefOrRef,
    HasConstant,
    HasCustomAttribute,
    HasFieldMarshal,
    HasDeclSecurity,
    MemberRefParent,
    HasSemantics,
    MethodDefOrRef,
    MemberForwarded,
    Implementation,
    CustomAttributeType,
    ResolutionScope,
    TypeOrMethodDef,
}

impl Coded {
    /// Tag width in bits and the tables the tags select (`None`: unused tag).
    fn spec(self) -> (u32, &'static [Option<Table>]) {
        use Table as T;
        match self {
            Coded::TypeDefOrRef => (2, &[Some(T::TypeDef), Some(T::TypeRef), Some(T::TypeSpec)]),
            Coded::HasConstant => (2, &[Some(T::Field), Some(T::Param), Some(T::Property)]),
            Coded::HasCustomAttribute => (
                5,
                &[
                    Some(T::MethodDef),
                    Some(T::Field),
                    Some(T::TypeRef),
                    Some(T::TypeDef),
                    Some(T::Param),
                    Some(T::InterfaceImpl),
                    Some(T::MemberRef),
                    Some(T::Module),
                    Some(T::DeclSecurity),
                    Some(T::Property),
                    Some(T::Event),
                    Some(T::StandAloneSig),
                    Some(T::ModuleRef),
                    Some(T::TypeSpec),
                    Some(T::Assembly),
                    Some(T::AssemblyRef),
                    Some(T::File),
                    Some(T::ExportedType),
                    Some(T::ManifestResource),
                    Some(T::GenericParam),
                    Some(T::GenericParamConstraint),
                    Some(T::MethodSpec),
                ],
            ),
            Coded::HasFieldMarshal => (1, &[Some(T::Field), Some(T::Param)]),
            Coded::HasDeclSecurity => (
                2,
                &[Some(T::TypeDef), Some(T::MethodDef), Some(T::Assembly)],
            ),
            Coded::MemberRefParent => (
                3,
                &[
                    Some(T::TypeDef),
                    Some(T::TypeRef),
                    Some(T::ModuleRef),
                    Some(T::MethodDef),
                    Some(T::TypeSpec),
                ],
            ),
            Coded::HasSemantics => (1, &[Some(T::Event), Some(T::Property)]),
            Coded::MethodDefOrRef => (1, &[Some(T::MethodDef), Some(T::MemberRef)]),
            Coded::MemberForwarded => (1, &[Some(T::Field), Some(T::MethodDef)]),
            Coded::Implementation => (
                2,
                &[Some(T::File), Some(T::AssemblyRef), Some(T::ExportedType)],
            ),
            Coded::CustomAttributeType => (
                3,
                &[None, None, Some(T::MethodDef), Some(T::MemberRef), None],
            ),
            Coded::ResolutionScope => (
                2,
                &[
                    Some(T::Module),
                    Some(T::ModuleRef),
                    Some(T::AssemblyRef),
                    Some(T::TypeRef),
                ],
            ),
            Coded::TypeOrMethodDef => (1, &[Some(T::TypeDef), Some(T::MethodDef)]),
        }
    }

    /// 2 if every target table's row count fits beside the tag in 16 bits, else 4.
    fn width(self, rows: &[u32; 64]) -> u8 {
        let (bits, targets) = self.spec();
        let limit = 1u32 << (16 - bits);
        let fits = targets.iter().flatten().all(|t| rows[*t as usize] < limit);
        if fits { 2 } else { 4 }
    }
}

/// The kind of one column.
#[derive(Clone, Copy, Debug)]
enum Col {
    U16,
    U32,
    Str,
    Guid,
    Blob,
    Idx(Table),
    Coded(Coded),
}

/// The columns of a table, in order (II.22).
fn columns(t: Table) -> &'static [Col] {
    use Col::*;
    use Table as T;
    match t {
        T::Module => &[U16, Str, Guid, Guid, Guid],
        T::TypeRef => &[Coded(self::Coded::ResolutionScope), Str, Str],
        T::TypeDef => &[
            U32,
            Str,
            Str,
            Coded(self::Coded::TypeDefOrRef),
            Idx(T::Field),
            Idx(T::MethodDef),
        ],
        T::FieldPtr => &[Idx(T::Field)],
        T::Field => &[U16, Str, Blob],
        T::MethodPtr => &[Idx(T::MethodDef)],
        T::MethodDef => &[U32, U16, U16, Str, Blob, Idx(T::Param)],
        T::ParamPtr => &[Idx(T::Param)],
        T::Param => &[U16, U16, Str],
        T::InterfaceImpl => &[Idx(T::TypeDef), Coded(self::Coded::TypeDefOrRef)],
        T::MemberRef => &[Coded(self::Coded::MemberRefParent), Str, Blob],
        // Type is one byte plus one byte of padding.
        T::Constant => &[U16, Coded(self::Coded::HasConstant), Blob],
        T::CustomAttribute => &[
            Coded(self::Coded::HasCustomAttribute),
            Coded(self::Coded::CustomAttributeType),
            Blob,
        ],
        T::FieldMarshal => &[Coded(self::Coded::HasFieldMarshal), Blob],
        T::DeclSecurity => &[U16, Coded(self::Coded::HasDeclSecurity), Blob],
        T::ClassLayout => &[U16, U32, Idx(T::TypeDef)],
        T::FieldLayout => &[U32, Idx(T::Field)],
        T::StandAloneSig => &[Blob],
        T::EventMap => &[Idx(T::TypeDef), Idx(T::Event)],
        T::EventPtr => &[Idx(T::Event)],
        T::Event => &[U16, Str, Coded(self::Coded::TypeDefOrRef)],
        T::PropertyMap => &[Idx(T::TypeDef), Idx(T::Property)],
        T::PropertyPtr => &[Idx(T::Property)],
        T::Property => &[U16, Str, Blob],
        T::MethodSemantics => &[U16, Idx(T::MethodDef), Coded(self::Coded::HasSemantics)],
        T::MethodImpl => &[
            Idx(T::TypeDef),
            Coded(self::Coded::MethodDefOrRef),
            Coded(self::Coded::MethodDefOrRef),
        ],
        T::ModuleRef => &[Str],
        T::TypeSpec => &[Blob],
        T::ImplMap => &[
            U16,
            Coded(self::Coded::MemberForwarded),
            Str,
            Idx(T::ModuleRef),
        ],
        T::FieldRva => &[U32, Idx(T::Field)],
        T::EncLog => &[U32, U32],
        T::EncMap => &[U32],
        T::Assembly => &[U32, U16, U16, U16, U16, U32, Blob, Str, Str],
        T::AssemblyProcessor => &[U32],
        T::AssemblyOs => &[U32, U32, U32],
        T::AssemblyRef => &[U16, U16, U16, U16, U32, Blob, Str, Str, Blob],
        T::AssemblyRefProcessor => &[U32, Idx(T::AssemblyRef)],
        T::AssemblyRefOs => &[U32, U32, U32, Idx(T::AssemblyRef)],
        T::File => &[U32, Str, Blob],
        T::ExportedType => &[U32, U32, Str, Str, Coded(self::Coded::Implementation)],
        T::ManifestResource => &[U32, U32, Str, Coded(self::Coded::Implementation)],
        T::NestedClass => &[Idx(T::TypeDef), Idx(T::TypeDef)],
        T::GenericParam => &[U16, U16, Coded(self::Coded::TypeOrMethodDef), Str],
        T::MethodSpec => &[Coded(self::Coded::MethodDefOrRef), Blob],
        T::GenericParamConstraint => &[Idx(T::GenericParam), Coded(self::Coded::TypeDefOrRef)],
    }
}

/// The most columns any table has (Assembly and AssemblyRef).
pub(crate) const MAX_COLUMNS: usize = 9;

/// Where one table lives and how its rows are laid out.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TableLayout {
    /// Offset of row 1 within the tables stream.
    pub(crate) offset: usize,
    pub(crate) rows: u32,
    pub(crate) row_size: usize,
    /// (offset within the row, width in bytes) of each column.
    pub(crate) cols: [(u8, u8); MAX_COLUMNS],
}

/// Heap index widths from the `HeapSizes` byte (II.24.2.6).
#[derive(Clone, Copy, Debug)]
pub(crate) struct HeapWidths {
    pub(crate) string: u8,
    pub(crate) guid: u8,
    pub(crate) blob: u8,
}

impl HeapWidths {
    pub(crate) fn from_flags(flags: u8) -> Self {
        let w = |bit: u8| if flags & bit != 0 { 4 } else { 2 };
        HeapWidths {
            string: w(0x01),
            guid: w(0x02),
            blob: w(0x04),
        }
    }
}

/// Row size and column positions of `t`, given every table's row count.
pub(crate) fn layout(t: Table, rows: &[u32; 64], heaps: HeapWidths) -> TableLayout {
    let mut out = TableLayout {
        rows: rows[t as usize],
        ..TableLayout::default()
    };
    let mut at = 0usize;
    for (slot, col) in out.cols.iter_mut().zip(columns(t)) {
        let width = match *col {
            Col::U16 => 2,
            Col::U32 => 4,
            Col::Str => heaps.string,
            Col::Guid => heaps.guid,
            Col::Blob => heaps.blob,
            Col::Idx(target) => {
                if rows[target as usize] < 0x1_0000 {
                    2
                } else {
                    4
                }
            }
            Col::Coded(c) => c.width(rows),
        };
        // At most 9 columns of at most 4 bytes each: always fits in u8.
        *slot = (at as u8, width);
        at += usize::from(width);
    }
    out.row_size = at;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_id_round_trips_and_undefined_ids_are_rejected() {
        for (i, t) in Table::ALL.iter().enumerate() {
            assert_eq!(*t as usize, i);
            assert_eq!(Table::from_id(i as u8), Some(*t));
            assert!(columns(*t).len() <= MAX_COLUMNS);
        }
        assert_eq!(Table::ALL.len(), 0x2D);
        assert_eq!(Table::from_id(0x2D), None);
        assert_eq!(Table::from_id(0x3F), None);
        assert_eq!(Table::AssemblyRef.to_string(), "AssemblyRef (0x23)");
    }

    #[test]
    fn small_tables_use_narrow_indexes() {
        let rows = [1u32; 64];
        let heaps = HeapWidths::from_flags(0);
        assert_eq!(layout(Table::Module, &rows, heaps).row_size, 10);
        assert_eq!(layout(Table::TypeDef, &rows, heaps).row_size, 14);
        assert_eq!(layout(Table::Assembly, &rows, heaps).row_size, 22);
        assert_eq!(layout(Table::AssemblyRef, &rows, heaps).row_size, 20);
        assert_eq!(layout(Table::CustomAttribute, &rows, heaps).row_size, 6);
    }

    #[test]
    fn wide_heaps_and_coded_indexes_widen_columns() {
        let mut rows = [1u32; 64];
        let heaps = HeapWidths::from_flags(0x07);
        // Module: u16 + string(4) + 3 guid(4).
        assert_eq!(layout(Table::Module, &rows, heaps).row_size, 18);
        // HasCustomAttribute has a 5-bit tag: 2^11 MethodDefs force 4-byte parents.
        rows[Table::MethodDef as usize] = 1 << 11;
        let ca = layout(Table::CustomAttribute, &rows, HeapWidths::from_flags(0));
        assert_eq!(ca.cols[0], (0, 4));
        assert_eq!(ca.row_size, 8);
        rows[Table::MethodDef as usize] = (1 << 11) - 1;
        assert_eq!(
            layout(Table::CustomAttribute, &rows, HeapWidths::from_flags(0)).row_size,
            6
        );
        // Simple indexes widen at 2^16 rows of the target.
        rows[Table::Field as usize] = 1 << 16;
        assert_eq!(
            layout(Table::FieldLayout, &rows, HeapWidths::from_flags(0)).row_size,
            8
        );
    }
}
