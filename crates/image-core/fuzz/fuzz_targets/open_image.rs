//! Feed arbitrary bytes to `Image::from_bytes` and call every accessor:
//! errors are fine, panics, out-of-range reads and runaway allocations are not.
//!
//! Run from this directory (stable toolchain):
//! `RUSTC_BOOTSTRAP=1 cargo fuzz run open_image corpus seeds -- -max_total_time=600`
#![no_main]

use libfuzzer_sys::fuzz_target;
use tcgkit_image_core::{Image, Table};

fuzz_target!(|data: &[u8]| {
    let Ok(img) = Image::from_bytes(data.to_vec()) else {
        return;
    };
    let _ = (
        img.name(),
        img.format(),
        img.assembly_name(),
        img.module_name(),
        img.mvid(),
    );
    let _ = (img.runtime_version(), img.cli_header(), img.build_id());
    let _ = img.assembly_refs();
    let _ = img.debug_entries();
    let _ = img.codeview();
    if let Some(md) = img.metadata() {
        for t in Table::ALL {
            let _ = (md.row_count(*t), md.row_size(*t));
        }
        let _ = (md.module(), md.assembly());
        md.assembly_refs().for_each(drop);
        md.module_refs().for_each(drop);
        for i in [0u32, 1, 2, 3, 17, 0x100, 0xffff] {
            let _ = (md.string(i), md.blob(i), md.guid(i), md.user_string(i));
        }
    }
    if let Some(elf) = img.elf() {
        for s in &elf.segments {
            let _ = img.segment_data(s);
        }
    }
});
