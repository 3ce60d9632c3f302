//! Image events from a real registry: both unload styles, the measured
//! unload time, and the EventPipe module records checked against facts
//! reported by other tools.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tcgkit_image_core::{Guid, Image, ImageRegistry};
use tcgkit_profiler::{
    Event, EventKind, ImageEvent, ImageEventBridge, ImageId, ImageUnloaded, Listener, ModuleFlags,
    ModuleRecord, Profiler, ProfilerHandle, UnloadState,
};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

/// What a v2 listener keeps from `unloading` to `unloaded`.
#[derive(Debug, Clone, PartialEq)]
struct Kept {
    id: ImageId,
    name: String,
    mvid: Option<Guid>,
    record: ModuleRecord,
}

#[derive(Default)]
struct Collector {
    /// ModuleLoad records, from `loaded`.
    loads: Mutex<Vec<ModuleRecord>>,
    /// ModuleUnload records built in the snapshot-style `unloaded`.
    unloads: Mutex<Vec<ModuleRecord>>,
    /// (kept at unloading, seen live at unloaded) pairs of the v2 style.
    v2: Mutex<Vec<(Kept, Kept)>>,
    /// Unload times by name, from the snapshot-style event.
    times: Mutex<Vec<(String, Option<Duration>)>>,
    order: Mutex<Vec<String>>,
}

fn kept(id: ImageId, image: &Image) -> Kept {
    Kept {
        id,
        name: image.name().to_owned(),
        mvid: image.mvid(),
        record: ModuleRecord::from_image(id, image),
    }
}

impl Listener for Collector {
    fn event(&self, _me: &ProfilerHandle, event: &Event<'_>) {
        match event {
            Event::ImageLoaded(e) => self
                .loads
                .lock()
                .unwrap()
                .push(ModuleRecord::from_image(e.id, e.image)),
            Event::ImageUnloading(e) => self
                .order
                .lock()
                .unwrap()
                .push(format!("unloading {}", e.image.name())),
            Event::ImageUnloaded(e) => {
                self.order
                    .lock()
                    .unwrap()
                    .push(format!("unloaded {}", e.image.name()));
                self.unloads
                    .lock()
                    .unwrap()
                    .push(ModuleRecord::from_image(e.id, e.image));
                self.times
                    .lock()
                    .unwrap()
                    .push((e.image.name().to_owned(), e.unload_time));
            }
            _ => {}
        }
    }

    fn image_unloading_v2(&self, _me: &ProfilerHandle, image: &ImageEvent<'_>) -> UnloadState {
        Box::new(kept(image.id, image.image))
    }

    fn image_unloaded_v2(
        &self,
        _me: &ProfilerHandle,
        image: &ImageUnloaded<'_>,
        state: UnloadState,
    ) {
        let before = state
            .downcast::<Kept>()
            .map(|b| *b)
            .expect("our own state comes back");
        self.v2
            .lock()
            .unwrap()
            .push((before, kept(image.id, image.image)));
    }
}

fn subscribe_all(h: &ProfilerHandle) {
    for kind in EventKind::ALL {
        h.subscribe(kind);
    }
}

/// Loads `path` (and its closure) with a collector listening, then closes it.
fn load_and_close(search: &Path, path: &Path) -> Arc<Collector> {
    let profiler = Profiler::new();
    let collector = Arc::new(Collector::default());
    subscribe_all(&profiler.register("collector", collector.clone()));
    let mut registry = ImageRegistry::new();
    registry.add_search_path(search);
    registry.add_observer(ImageEventBridge::new(profiler.clone()));
    let handle = registry.load(path).unwrap();
    registry.close(handle).unwrap();
    assert!(profiler.faults().is_empty(), "{:?}", profiler.faults());
    collector
}

fn by_id(records: &[ModuleRecord], id: u64) -> &ModuleRecord {
    records
        .iter()
        .find(|r| r.module_id == id)
        .unwrap_or_else(|| panic!("no record for {id}"))
}

/// ClrLoader.dll's CodeView RSDS entry, as `dnfile` 0.18 (pefile) and GNU
/// `objdump -p` 2.40 report it: signature 95F8F6B2-AFBC-45E4-884C-B4A5BF5ADDD2,
/// age 1, and this build path.
const CLR_LOADER_PDB_GUID: &str = "95f8f6b2-afbc-45e4-884c-b4a5bf5addd2";
const CLR_LOADER_PDB_PATH: &str = "/home/benedikt/.cache/uv/sdists-v9/.tmpWRsggN/clr_loader-0.3.1/netfx_loader/obj/release/net461/win-x64/ClrLoader.pdb";

#[test]
fn module_unload_pdb_fields_equal_module_load_and_the_reader_and_dnfile() {
    let mut with_codeview = 0;
    let mut clr_loader_checked = 0;
    for dir in [
        fixtures().join("assemblies"),
        fixtures().join("assemblies/lifecycle"),
    ] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "dll" || e == "exe"))
            .collect();
        files.sort();
        for path in files {
            let image = Image::open(&path).unwrap();
            let Some(cv) = image.codeview().unwrap() else {
                continue;
            };
            with_codeview += 1;
            let collector = load_and_close(&dir, &path);
            let loads = collector.loads.lock().unwrap();
            let unloads = collector.unloads.lock().unwrap();
            assert_eq!(loads.len(), unloads.len());
            let root = loads.iter().find(|r| {
                r.module_il_path
                    .ends_with(path.file_name().unwrap().to_str().unwrap())
            });
            let load = root.unwrap_or_else(|| panic!("{} has no ModuleLoad", path.display()));
            let unload = by_id(&unloads, load.module_id);
            assert_eq!(unload, load, "{}", path.display());
            // Equal to what the reader says...
            assert_eq!(load.managed_pdb_signature, cv.guid);
            assert_eq!(load.managed_pdb_age, cv.age);
            assert_eq!(load.managed_pdb_build_path, cv.path);
            // ...and to what dnfile/objdump say, for the fixtures we
            // checked by hand (Debian's Mono DLLs carry no debug directory).
            if path.file_name().is_some_and(|n| n == "ClrLoader.dll") {
                clr_loader_checked += 1;
                assert_eq!(load.managed_pdb_signature.to_string(), CLR_LOADER_PDB_GUID);
                assert_eq!(load.managed_pdb_age, 1);
                assert_eq!(load.managed_pdb_build_path, CLR_LOADER_PDB_PATH);
            }
            let flags = if image.assembly_name().is_some() {
                ModuleFlags::MANIFEST
            } else {
                ModuleFlags::default()
            };
            assert_eq!(load.module_flags, flags);
            assert_eq!(load.clr_instance_id, 9);
            assert_eq!(load.native_pdb_signature, Guid::default());
            // The v2 state carried from unloading matches the live image at unloaded.
            let v2 = collector.v2.lock().unwrap();
            assert_eq!(v2.len(), unloads.len());
            for (before, after) in v2.iter() {
                assert_eq!(before, after);
            }
        }
    }
    assert!(
        with_codeview >= 2,
        "fixtures with a CodeView entry: {with_codeview}"
    );
    assert_eq!(
        clr_loader_checked, 2,
        "both copies of ClrLoader.dll were checked"
    );
}

#[test]
fn both_unload_styles_see_live_data_in_stack_order_with_measured_times() {
    let dir = fixtures().join("assemblies/lifecycle");
    let collector = load_and_close(&dir, &dir.join("Root.dll"));
    let order = collector.order.lock().unwrap().clone();
    assert_eq!(order.first().map(String::as_str), Some("unloading Root"));
    assert_eq!(order.last().map(String::as_str), Some("unloaded Root"));
    let pos = |s: &str| order.iter().position(|x| x == s).unwrap();
    assert!(pos("unloading Left") < pos("unloading Shared"));
    assert!(pos("unloaded Shared") < pos("unloaded Left"));

    let v2 = collector.v2.lock().unwrap();
    let names: Vec<&str> = v2.iter().map(|(k, _)| k.name.as_str()).collect();
    assert_eq!(
        names.last(),
        Some(&"Root"),
        "v2 unloaded order is the stack order too: {names:?}"
    );
    for (before, after) in v2.iter() {
        assert_eq!(
            before, after,
            "state from unloading matches the live image at unloaded"
        );
        assert!(
            after.mvid.is_some(),
            "{}: MVID readable at unloaded",
            after.name
        );
        assert!(after.record.module_il_path.ends_with(".dll"));
    }

    let times = collector.times.lock().unwrap();
    let time = |name: &str| {
        times
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, t)| *t)
            .unwrap()
    };
    // A parent's unload includes its children's (>=: a coarse clock may
    // not tell them apart).
    assert!(time("Root") >= time("Left"));
    assert!(time("Left") >= time("Shared"));
    // ModuleUnload equals ModuleLoad for every image of the closure.
    let loads = collector.loads.lock().unwrap();
    let unloads = collector.unloads.lock().unwrap();
    assert_eq!(loads.len(), unloads.len());
    for load in loads.iter() {
        assert_eq!(by_id(&unloads, load.module_id), load);
    }
}

/// Counts drops of its v2 state, and panics at unloading of one image.
struct DropCounting {
    drops: Arc<AtomicUsize>,
    handed_back: AtomicUsize,
}

struct Token(Arc<AtomicUsize>);
impl Drop for Token {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl Listener for DropCounting {
    fn event(&self, _me: &ProfilerHandle, _event: &Event<'_>) {}
    fn image_unloading_v2(&self, me: &ProfilerHandle, image: &ImageEvent<'_>) -> UnloadState {
        if image.image.name() == "Left" {
            // Remove ourselves while states of Root are pending.
            me.remove();
        }
        Box::new(Token(self.drops.clone()))
    }
    fn image_unloaded_v2(
        &self,
        _me: &ProfilerHandle,
        _image: &ImageUnloaded<'_>,
        _state: UnloadState,
    ) {
        self.handed_back.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn v2_states_of_a_removed_listener_are_dropped_not_leaked_or_delivered() {
    let dir = fixtures().join("assemblies/lifecycle");
    let profiler = Profiler::new();
    let drops = Arc::new(AtomicUsize::new(0));
    let listener = Arc::new(DropCounting {
        drops: drops.clone(),
        handed_back: AtomicUsize::new(0),
    });
    let h = profiler.register("drop-counting", listener.clone());
    h.subscribe(EventKind::ImageUnloadV2);
    let mut registry = ImageRegistry::new();
    registry.add_search_path(&dir);
    registry.add_observer(ImageEventBridge::new(profiler.clone()));
    let root = registry.load(&dir.join("Root.dll")).unwrap();
    registry.close(root).unwrap();
    // Unloading order: Root, Versioned, Right, Left (removed here). The
    // states of Versioned and Right came back before the removal; Root's
    // and Left's were dropped unheard.
    assert_eq!(listener.handed_back.load(Ordering::SeqCst), 2);
    assert_eq!(
        drops.load(Ordering::SeqCst),
        4,
        "every state dropped exactly once"
    );
    assert!(!h.is_active());
}

#[test]
fn elf_images_map_build_id_to_the_native_pdb_fields() {
    let path = fixtures().join("elf/tiny");
    let image = Image::open(&path).unwrap();
    let record = ModuleRecord::from_image(ImageId(3), &image);
    // `riscv64-linux-gnu-readelf -n fixtures/elf/tiny`:
    // Build ID: bdd06f957c736776b0bfcfbcfd19cdeb6f4f5f41 (20 bytes, SHA-1).
    let expected: [u8; 16] = [
        0xbd, 0xd0, 0x6f, 0x95, 0x7c, 0x73, 0x67, 0x76, 0xb0, 0xbf, 0xcf, 0xbc, 0xfd, 0x19, 0xcd,
        0xeb,
    ];
    assert_eq!(image.build_id().map(<[u8]>::len), Some(20));
    assert_eq!(record.native_pdb_signature, Guid(expected));
    assert_eq!(record.native_pdb_age, 0);
    assert_eq!(record.module_flags, ModuleFlags::NATIVE);
    assert_eq!(record.assembly_id, 0);
    assert_eq!(record.module_id, 3);
    assert!(record.module_il_path.is_empty());
    assert!(record.module_native_path.ends_with("elf/tiny"));
    assert_eq!(record.native_pdb_build_path, record.module_native_path);
    assert_eq!(record.managed_pdb_signature, Guid::default());
}

#[test]
fn a_netmodule_is_not_a_manifest_module() {
    let image = Image::open(&fixtures().join("assemblies/Hello.netmodule")).unwrap();
    let record = ModuleRecord::from_image(ImageId(1), &image);
    assert_eq!(record.module_flags, ModuleFlags::default());
    assert_eq!(record.assembly_id, 0);
    assert!(record.module_il_path.ends_with("Hello.netmodule"));
    assert_eq!(record.managed_pdb_build_path, "");
}

#[test]
fn a_v2_state_comes_back_even_if_its_listener_unsubscribed_in_between() {
    let image = Image::open(&fixtures().join("assemblies/lifecycle/Shared.dll")).unwrap();
    let profiler = Profiler::new();
    let v2 = Arc::new(Collector::default());
    let h = profiler.register("v2", v2.clone());
    h.subscribe(EventKind::ImageUnloadV2);
    // A second listener only wants the snapshot-style `unloaded`.
    let snapshot = Arc::new(Collector::default());
    profiler
        .register("snapshot", snapshot.clone())
        .subscribe(EventKind::ImageUnloaded);

    let event = ImageEvent {
        id: ImageId(1),
        image: &image,
    };
    let token = profiler.raise_image_unloading(&event);
    h.unsubscribe(EventKind::ImageUnloadV2);
    assert!(!profiler.is_interested(EventKind::ImageUnloadV2));
    profiler.raise_image_unloaded(token, &event);

    let pairs = v2.v2.lock().unwrap();
    assert_eq!(
        pairs.len(),
        1,
        "the state was handed back so it can be released"
    );
    assert_eq!(pairs[0].0, pairs[0].1);
    assert_eq!(pairs[0].1.name, "Shared");
    let times = snapshot.times.lock().unwrap();
    assert_eq!(times.len(), 1);
    assert!(
        times[0].1.is_some(),
        "unload time measured although nobody listened to `unloading`"
    );
}
