//! The ELF modules of a guest process: every file it has mapped executable
//! (the main program, the interpreter, each shared object ld.so maps), with
//! its address span and the executable ranges still mapped from it.
//!
//! The kernel side ([`ModuleMap`]) only keeps address bookkeeping: a file
//! mapped with `PROT_EXEC` starts a module (or adds to the one of the same
//! file whose span it touches), and a module ends when `munmap`, a
//! `MAP_FIXED` mapping over it or `mremap` removes its last executable range
//! (as dlclose does). `mprotect` never ends one: a text relocation makes
//! text writable and executable again in between.
//!
//! The process side ([`ModuleSet`]) turns those changes into image-core
//! registry loads and closes: observers of the registry see `loading` and
//! `loaded` when a module is mapped, and `unloading`/`unloaded` when it is
//! unmapped; in between, the engine drops the blocks translated from the
//! module's span (`ImageRegistry::close_retiring`), so nothing of it runs
//! again, even if other code is mapped at the same address later.

use std::path::{Path, PathBuf};

use tcgkit_image_core::{ImageHandle, ImageId, ImageRegistry};
use tcgkit_riscv::Rv64;
use tcgkit_tcg_core::Engine;

/// One ELF module mapped into the guest, as observers see it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Module {
    /// The module's image in the process's registry.
    pub id: ImageId,
    /// The host file it was mapped from.
    pub path: PathBuf,
    /// The GNU build-id (`NT_GNU_BUILD_ID`), if the file has one.
    pub build_id: Option<Vec<u8>>,
    /// The lowest guest address of its mappings (page-aligned).
    pub start: u64,
    /// One past the highest guest address of its mappings.
    pub end: u64,
    /// What was added to the file's addresses (0 for an `ET_EXEC`).
    pub bias: u64,
    /// The entry point (`e_entry` plus the bias).
    pub entry: u64,
}

impl Module {
    /// Whether `addr` lies in the module's span.
    pub fn contains(&self, addr: u64) -> bool {
        (self.start..self.end).contains(&addr)
    }
}

/// Hears of modules as the guest maps and unmaps them (plugins implement it,
/// through the CLI). Calls happen between guest instructions, on the
/// guest's thread.
pub trait ModuleObserver: Send {
    /// `module` was mapped (and its image loaded). Modules mapped before the
    /// observer was installed are reported when it is.
    fn module_loaded(&mut self, module: &Module);
    /// `module` is being unloaded: its translated blocks are already
    /// retired, its image not yet released (registry observers see
    /// `unloaded` after this returns).
    fn module_unloaded(&mut self, module: &Module);
}

/// Identity of a mapped file: host device and inode.
pub(crate) type FileKey = (u64, u64);

/// The identity of the file `stat` describes.
#[allow(clippy::unnecessary_cast)] // field types differ between host architectures
pub(crate) fn file_key(stat: &rustix::fs::Stat) -> FileKey {
    (stat.st_dev as u64, stat.st_ino as u64)
}

/// What a memory syscall did to the modules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ModuleChange {
    /// A new module: a file first mapped executable.
    Mapped {
        serial: u64,
        path: PathBuf,
        start: u64,
        end: u64,
    },
    /// The span of a known module grew.
    Grown { serial: u64, start: u64, end: u64 },
    /// The module's last executable range is gone.
    Unmapped { serial: u64 },
}

#[derive(Debug)]
struct Tracked {
    serial: u64,
    key: Option<FileKey>,
    span: (u64, u64),
    /// Executable ranges still mapped from the file, disjoint.
    exec: Vec<(u64, u64)>,
}

/// The kernel's module bookkeeping.
#[derive(Debug, Default)]
pub(crate) struct ModuleMap {
    live: Vec<Tracked>,
    next_serial: u64,
    /// Changes since the process last looked.
    pub(crate) changes: Vec<ModuleChange>,
}

impl ModuleMap {
    /// A module the loader mapped itself (main program, interpreter):
    /// `span` and its executable `exec` ranges.
    pub(crate) fn add_loaded(
        &mut self,
        path: &Path,
        key: Option<FileKey>,
        span: (u64, u64),
        exec: Vec<(u64, u64)>,
    ) -> u64 {
        let serial = self.next_serial;
        self.next_serial += 1;
        self.live.push(Tracked {
            serial,
            key,
            span,
            exec,
        });
        self.changes.push(ModuleChange::Mapped {
            serial,
            path: path.to_path_buf(),
            start: span.0,
            end: span.1,
        });
        serial
    }

    /// `[start, end)` was mapped from file `key` (at `path`) with
    /// `PROT_EXEC`: it joins the live module of that file whose span it
    /// touches, or starts one.
    pub(crate) fn map_exec(&mut self, key: FileKey, path: &Path, start: u64, end: u64) {
        let joined = self.live.iter_mut().find(|m| {
            m.key == Some(key) && start <= m.span.1 && m.span.0 <= end && !m.exec.is_empty()
        });
        match joined {
            Some(module) => {
                module.exec.push((start, end));
                let span = (module.span.0.min(start), module.span.1.max(end));
                if span != module.span {
                    module.span = span;
                    self.changes.push(ModuleChange::Grown {
                        serial: module.serial,
                        start: span.0,
                        end: span.1,
                    });
                }
            }
            None => {
                self.add_loaded(path, Some(key), (start, end), vec![(start, end)]);
            }
        }
    }

    /// `[start, end)` no longer maps what it mapped (munmap, a MAP_FIXED
    /// mapping over it, mremap's source): executable ranges there are gone,
    /// and modules left with none are unmapped.
    pub(crate) fn unmap(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let changes = &mut self.changes;
        self.live.retain_mut(|module| {
            if module.exec.is_empty() || end <= module.span.0 || module.span.1 <= start {
                return true;
            }
            module.exec = module
                .exec
                .iter()
                .flat_map(|&(a, b)| {
                    let left = (a, b.min(start));
                    let right = (a.max(end), b);
                    [left, right].into_iter().filter(|(x, y)| x < y)
                })
                .collect();
            if module.exec.is_empty() {
                changes.push(ModuleChange::Unmapped {
                    serial: module.serial,
                });
                return false;
            }
            true
        });
    }

    /// Every live module's serial, in the order they were mapped.
    #[cfg(test)]
    pub(crate) fn live_serials(&self) -> impl Iterator<Item = u64> + '_ {
        self.live.iter().map(|m| m.serial)
    }
}

/// A module the registry holds for the guest.
struct Held {
    serial: u64,
    handle: ImageHandle,
    module: Module,
}

/// The process's modules as images in a registry, and who hears of them.
pub(crate) struct ModuleSet {
    registry: ImageRegistry,
    held: Vec<Held>,
    observer: Option<Box<dyn ModuleObserver>>,
}

impl Default for ModuleSet {
    fn default() -> Self {
        ModuleSet {
            registry: ImageRegistry::new(),
            held: Vec::new(),
            observer: None,
        }
    }
}

impl ModuleSet {
    pub(crate) fn registry(&self) -> &ImageRegistry {
        &self.registry
    }

    /// Every held module, in load order.
    pub(crate) fn modules(&self) -> impl Iterator<Item = &Module> + '_ {
        self.held.iter().map(|h| &h.module)
    }

    /// Switches to `registry`: the modules held so far are unloaded from
    /// the old one (observers of the old registry hear it) and returned as
    /// changes to map them again into the new one.
    pub(crate) fn replace_registry(
        &mut self,
        registry: ImageRegistry,
        engine: &mut Engine<Rv64>,
    ) -> Vec<ModuleChange> {
        let again = self
            .held
            .iter()
            .map(|h| ModuleChange::Mapped {
                serial: h.serial,
                path: h.module.path.clone(),
                start: h.module.start,
                end: h.module.end,
            })
            .collect();
        self.unload_all(engine);
        self.registry = registry;
        again
    }

    /// Installs `observer` and reports the modules already held to it.
    pub(crate) fn set_observer(&mut self, mut observer: Box<dyn ModuleObserver>) {
        for held in &self.held {
            observer.module_loaded(&held.module);
        }
        self.observer = Some(observer);
    }

    /// Carries out what the kernel's module map recorded.
    pub(crate) fn apply(
        &mut self,
        changes: impl Iterator<Item = ModuleChange>,
        engine: &mut Engine<Rv64>,
    ) {
        for change in changes {
            match change {
                ModuleChange::Mapped {
                    serial,
                    path,
                    start,
                    end,
                } => self.load(serial, &path, start, end),
                ModuleChange::Grown { serial, start, end } => {
                    if let Some(held) = self.held.iter_mut().find(|h| h.serial == serial) {
                        held.module.start = start;
                        held.module.end = end;
                    }
                }
                ModuleChange::Unmapped { serial } => {
                    if let Some(at) = self.held.iter().position(|h| h.serial == serial) {
                        let held = self.held.remove(at);
                        self.unload(held, engine);
                    }
                }
            }
        }
    }

    /// Unloads every module, the last loaded first (process exit).
    pub(crate) fn unload_all(&mut self, engine: &mut Engine<Rv64>) {
        while let Some(held) = self.held.pop() {
            self.unload(held, engine);
        }
    }

    fn load(&mut self, serial: u64, path: &Path, start: u64, end: u64) {
        // A file mapped executable that is no image (or is gone already)
        // is not a module: it runs, but nobody hears of it.
        let Ok(handle) = self.registry.load(path) else {
            return;
        };
        let is_elf = self
            .registry
            .image(handle.id())
            .is_some_and(|image| image.image().elf().is_some());
        if !is_elf {
            let _ = self.registry.close(handle);
            return;
        }
        let Some(image) = self.registry.image(handle.id()) else {
            return;
        };
        let elf = image.image().elf();
        // The first page of the lowest segment is where the span starts.
        let lowest = elf
            .and_then(|e| e.segments.iter().map(|s| s.vaddr & !0xfff).min())
            .unwrap_or(0);
        let bias = start.wrapping_sub(lowest);
        let module = Module {
            id: handle.id(),
            path: path.to_path_buf(),
            build_id: image.image().build_id().map(<[u8]>::to_vec),
            start,
            end,
            bias,
            entry: elf.map_or(start, |e| e.entry.wrapping_add(bias)),
        };
        if let Some(observer) = &mut self.observer {
            observer.module_loaded(&module);
        }
        self.held.push(Held {
            serial,
            handle,
            module,
        });
    }

    fn unload(&mut self, held: Held, engine: &mut Engine<Rv64>) {
        let Held { handle, module, .. } = held;
        let observer = &mut self.observer;
        let mut retire = |module: &Module| {
            engine.invalidate_range(module.start, module.end - module.start);
            if let Some(observer) = observer.as_mut() {
                observer.module_unloaded(module);
            }
        };
        let mut retired = false;
        let _ = self.registry.close_retiring(handle, |image| {
            if image.id() == module.id {
                retire(&module);
                retired = true;
            }
        });
        if !retired {
            // The same file is mapped elsewhere too, so its image stays
            // loaded; this mapping of it is gone all the same.
            retire(&module);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIB: FileKey = (1, 42);

    fn lib() -> &'static Path {
        Path::new("/lib/libdemo.so")
    }

    #[test]
    fn ld_so_style_mapping_is_one_module_until_its_text_is_unmapped() {
        let mut map = ModuleMap::default();
        // The whole span with the first segment's (executable) protection,
        // then the data segment MAP_FIXED over its tail.
        map.map_exec(LIB, lib(), 0x1000, 0x5000);
        map.unmap(0x4000, 0x5000);
        assert_eq!(
            map.changes.drain(..).collect::<Vec<_>>(),
            [ModuleChange::Mapped {
                serial: 0,
                path: lib().to_path_buf(),
                start: 0x1000,
                end: 0x5000
            }]
        );
        // dlclose unmaps everything: one unload.
        map.unmap(0x1000, 0x5000);
        assert_eq!(map.changes, [ModuleChange::Unmapped { serial: 0 }]);
        assert_eq!(map.live_serials().count(), 0);
    }

    #[test]
    fn a_module_ends_only_with_its_last_executable_range() {
        let mut map = ModuleMap::default();
        map.map_exec(LIB, lib(), 0x1000, 0x3000);
        map.map_exec(LIB, lib(), 0x3000, 0x4000);
        assert!(matches!(
            map.changes.last(),
            Some(ModuleChange::Grown {
                serial: 0,
                start: 0x1000,
                end: 0x4000
            })
        ));
        map.changes.clear();
        map.unmap(0x1000, 0x2000);
        map.unmap(0x3000, 0x4000);
        assert!(map.changes.is_empty(), "0x2000..0x3000 is still mapped");
        // Unmapping outside its span changes nothing.
        map.unmap(0x8000, 0x9000);
        assert!(map.changes.is_empty());
        map.unmap(0x2000, 0x2800);
        map.unmap(0x2800, 0x3000);
        assert_eq!(map.changes, [ModuleChange::Unmapped { serial: 0 }]);
    }

    #[test]
    fn the_same_file_mapped_again_after_an_unload_is_a_new_module() {
        let mut map = ModuleMap::default();
        map.map_exec(LIB, lib(), 0x1000, 0x2000);
        map.unmap(0x1000, 0x2000);
        map.map_exec(LIB, lib(), 0x1000, 0x2000);
        let serials: Vec<u64> = map.live_serials().collect();
        assert_eq!(serials, [1]);
        // Another file at a distance is another module; both live.
        map.map_exec((1, 43), Path::new("/lib/other.so"), 0x9000, 0xa000);
        assert_eq!(map.live_serials().collect::<Vec<_>>(), [1, 2]);
    }
}
