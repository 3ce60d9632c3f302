//! The registry's lifecycle on real (tiny) assemblies: closure loading,
//! resolution outcomes, refcounts, nested cascading unload, cycles, and the
//! data observers can read in every callback.

mod lifecycle_support;

use lifecycle_support::{Kind, Recorder, ScratchDir, Snapshot, check_nesting, fixture, fixtures};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tcgkit_image_core::{
    AssemblyName, ImageHandle, ImageId, ImageRegistry, LifecycleObserver, LoadedImage,
    RegistryError, Rejection, Resolution, ResolvedVia, UnloadStateProvider, Version,
};

fn registry() -> (ImageRegistry, Recorder) {
    let mut registry = ImageRegistry::new();
    registry.add_search_path(fixtures());
    let recorder = Recorder::default();
    registry.add_observer(recorder.clone());
    (registry, recorder)
}

fn id_of(registry: &ImageRegistry, name: &str) -> ImageId {
    registry
        .loaded()
        .find(|l| l.image().name() == name)
        .map(|l| l.id())
        .unwrap_or_else(|| panic!("{name} is not loaded"))
}

fn version(major: u16, minor: u16) -> Version {
    Version {
        major,
        minor,
        build: 0,
        revision: 0,
    }
}

#[test]
fn closure_loads_depth_first_in_reference_order() {
    let (mut registry, recorder) = registry();
    let root = registry.load(&fixture("Root.dll")).expect("Root loads");
    assert_eq!(
        recorder.take_texts(),
        [
            "loading Root.dll",
            "loading Left.dll",
            "loading Shared.dll",
            "loaded Shared",
            "loaded Left",
            "loading Right.dll",
            "loaded Right",
            "loading Versioned.dll",
            "loaded Versioned",
            "loaded Root",
        ]
    );
    let names: Vec<_> = registry
        .loaded()
        .map(|l| l.image().name().to_owned())
        .collect();
    assert_eq!(names, ["Root", "Left", "Shared", "Right", "Versioned"]);
    assert_eq!(
        registry.get(&root).expect("own handle").image().name(),
        "Root"
    );
    registry.close(root).expect("own handle");
}

#[test]
fn each_reference_records_how_it_resolved() {
    let (mut registry, _recorder) = registry();
    let root = registry.load(&fixture("Root.dll")).expect("Root loads");
    let view = registry.get(&root).expect("own handle");
    let refs: HashMap<_, _> = view
        .references()
        .iter()
        .map(|r| (r.requested().name.as_str(), r))
        .collect();
    assert_eq!(view.references().len(), 5);

    let left = refs["Left"];
    assert!(matches!(
        left.resolution(),
        Resolution::Resolved { via: ResolvedVia::SearchPath(p), .. } if p.ends_with("Left.dll")
    ));
    assert!(!left.version_mismatch_accepted());

    // Root was compiled against Versioned 1.0; 2.0 is shipped and accepted.
    let versioned = refs["Versioned"];
    assert_eq!(versioned.requested().version, version(1, 0));
    assert!(
        matches!(versioned.resolution(), Resolution::Resolved { version: v, .. } if *v == version(2, 0))
    );
    assert!(versioned.version_mismatch_accepted());

    // Ghost.dll is not shipped and mscorlib is not on the search path.
    for missing in ["Ghost", "mscorlib"] {
        assert!(
            matches!(refs[missing].resolution(), Resolution::Missing { rejected } if rejected.is_empty()),
            "{missing}: {:?}",
            refs[missing].resolution()
        );
        assert_eq!(refs[missing].target(), None);
    }

    // Right found Shared already loaded by Left.
    let right = registry
        .image(id_of(&registry, "Right"))
        .expect("Right loaded");
    let shared_ref = &right.references()[0];
    assert_eq!(shared_ref.requested().name, "Shared");
    assert!(matches!(
        shared_ref.resolution(),
        Resolution::Resolved {
            via: ResolvedVia::AlreadyLoaded,
            ..
        }
    ));
    assert_eq!(shared_ref.target(), Some(id_of(&registry, "Shared")));

    // Refcounts: the handle on Root, Left+Right on Shared, one holder each otherwise.
    let counts: Vec<_> = ["Root", "Left", "Shared", "Right", "Versioned"]
        .iter()
        .map(|n| registry.ref_count(id_of(&registry, n)))
        .collect();
    assert_eq!(counts, [Some(1), Some(1), Some(2), Some(1), Some(1)]);
    registry.close(root).expect("own handle");
}

#[test]
fn version_lower_than_requested_is_rejected() {
    let (mut registry, _recorder) = registry();
    let handle = registry
        .load(&fixture("NeedsNewer.dll"))
        .expect("NeedsNewer loads");
    let view = registry.get(&handle).expect("own handle");
    let reference = &view.references()[0];
    assert_eq!(reference.requested().version, version(3, 0));
    match reference.resolution() {
        Resolution::Missing { rejected } => {
            assert_eq!(rejected.len(), 1);
            assert!(rejected[0].path.ends_with("Versioned.dll"));
            assert!(
                matches!(rejected[0].reason, Rejection::VersionTooLow { found } if found == version(2, 0))
            );
        }
        other => panic!("expected a missing reference, got {other:?}"),
    }
    assert_eq!(
        registry.len(),
        1,
        "the rejected candidate must not stay loaded"
    );
    registry.close(handle).expect("own handle");
    assert!(registry.is_empty());
}

#[test]
fn last_close_unloads_nested_in_reverse_reference_order() {
    let (mut registry, recorder) = registry();
    let root = registry.load(&fixture("Root.dll")).expect("Root loads");
    recorder.take_texts();
    registry.close(root).expect("own handle");
    assert_eq!(
        recorder.take_texts(),
        [
            "unloading Root",
            // Root's references are released last-first: Versioned, Right, Left.
            "unloading Versioned",
            "unloaded Versioned",
            // Right releases Shared, but Left still holds it.
            "unloading Right",
            "unloaded Right",
            "unloading Left",
            "unloading Shared",
            "unloaded Shared",
            "unloaded Left",
            "unloaded Root",
        ]
    );
    assert!(registry.is_empty());
}

#[test]
fn retire_runs_for_each_unloaded_image_between_its_unloading_and_unloaded() {
    let (mut registry, recorder) = registry();
    let root = registry.load(&fixture("Root.dll")).expect("Root loads");
    recorder.take_texts();
    // Each retire sees the image alive and notes how many events came before.
    let mut retired: Vec<(String, usize)> = Vec::new();
    registry
        .close_retiring(root, |view| {
            retired.push((view.image().name().to_string(), recorder.events().len()));
        })
        .expect("own handle");
    let mut texts = recorder.take_texts();
    for (name, at) in retired.iter().rev() {
        texts.insert(*at, format!("retire {name}"));
    }
    assert_eq!(
        texts,
        [
            "unloading Root",
            "unloading Versioned",
            "retire Versioned",
            "unloaded Versioned",
            "unloading Right",
            "retire Right",
            "unloaded Right",
            "unloading Left",
            "unloading Shared",
            "retire Shared",
            "unloaded Shared",
            "retire Left",
            "unloaded Left",
            "retire Root",
            "unloaded Root",
        ]
    );
    // A plain close of an image still held elsewhere retires nothing.
    let a = registry.load(&fixture("Root.dll")).expect("Root loads");
    let b = registry.load(&fixture("Root.dll")).expect("Root again");
    let mut calls = 0;
    registry
        .close_retiring(a, |_| calls += 1)
        .expect("own handle");
    assert_eq!(calls, 0, "b still holds Root");
    registry
        .close_retiring(b, |_| calls += 1)
        .expect("own handle");
    assert_eq!(calls, 5, "Root and its four references");
}

#[test]
fn observers_read_the_same_live_data_in_every_callback() {
    let (mut registry, recorder) = registry();
    let handles: Vec<ImageHandle> = ["ClrLoader.dll", "Root.dll", "Alpha.dll"]
        .iter()
        .map(|f| registry.load(&fixture(f)).expect("fixture loads"))
        .collect();
    for handle in handles {
        registry.close(handle).expect("own handle");
    }
    assert!(registry.is_empty());

    let events = recorder.events();
    let mut seen: HashMap<ImageId, Vec<(Kind, Snapshot)>> = HashMap::new();
    for e in events.iter() {
        if let Some(s) = &e.snapshot {
            seen.entry(e.id).or_default().push((e.kind, s.clone()));
        }
    }
    assert_eq!(seen.len(), 8, "eight distinct images were loaded");
    for (id, snapshots) in &seen {
        let kinds: Vec<_> = snapshots.iter().map(|(k, _)| *k).collect();
        assert_eq!(
            kinds,
            [Kind::Loaded, Kind::Unloading, Kind::Unloaded],
            "{id}"
        );
        let at_load = &snapshots[0].1;
        assert!(at_load.mvid.is_some(), "{id}: every fixture has an MVID");
        assert!(at_load.byte_len > 0);
        for (kind, snapshot) in &snapshots[1..] {
            assert_eq!(
                snapshot, at_load,
                "{id}: data read at {kind:?} differs from load"
            );
        }
    }

    // The image with a debug directory: its CodeView data is readable in
    // `unloaded`, which is what the Mono bug got wrong.
    let clr = events
        .iter()
        .find(|e| e.kind == Kind::Unloaded && e.label == "ClrLoader")
        .and_then(|e| e.snapshot.clone())
        .expect("ClrLoader unloaded");
    let (_, age, pdb) = clr.codeview.expect("ClrLoader has a CodeView entry");
    assert!(pdb.ends_with("ClrLoader.pdb"), "{pdb}");
    assert!(age >= 1);
    assert!(clr.debug_entries >= 2);
    assert_eq!(clr.assembly.map(|a| a.name), Some("ClrLoader".to_owned()));
    check_nesting(&events, Vec::new()).expect("well nested");
}

/// A "v2" provider: what `unloading` computes comes back in `unloaded`,
/// next to the still-live image.
struct PairingProvider {
    pairs: Arc<Mutex<Vec<(String, String)>>>,
}

struct Carried {
    id: ImageId,
    name: String,
    mvid: String,
}

impl UnloadStateProvider for PairingProvider {
    type State = Carried;

    fn unloading(&mut self, image: &LoadedImage<'_>) -> Carried {
        Carried {
            id: image.id(),
            name: image.image().name().to_owned(),
            mvid: image
                .image()
                .mvid()
                .map(|g| g.to_string())
                .unwrap_or_default(),
        }
    }

    fn unloaded(&mut self, image: &LoadedImage<'_>, state: Carried) {
        assert_eq!(state.id, image.id(), "state handed back to the wrong image");
        let live_mvid = image
            .image()
            .mvid()
            .map(|g| g.to_string())
            .unwrap_or_default();
        assert_eq!(state.mvid, live_mvid);
        self.pairs
            .lock()
            .expect("pairs")
            .push((state.name, image.image().name().to_owned()));
    }
}

#[test]
fn v2_provider_gets_its_state_back_with_the_live_image() {
    let (mut registry, _recorder) = registry();
    let pairs = Arc::new(Mutex::new(Vec::new()));
    registry.add_unload_provider(PairingProvider {
        pairs: pairs.clone(),
    });
    let root = registry.load(&fixture("Root.dll")).expect("Root loads");
    registry.close(root).expect("own handle");
    let pairs = pairs.lock().expect("pairs");
    let order: Vec<_> = pairs.iter().map(|(carried, _)| carried.as_str()).collect();
    // `unloaded` order: innermost first, Root last.
    assert_eq!(order, ["Versioned", "Right", "Shared", "Left", "Root"]);
    assert!(pairs.iter().all(|(carried, live)| carried == live));
}

#[test]
fn cycle_resolves_without_a_counted_reference_and_unloads() {
    let (mut registry, recorder) = registry();
    let alpha = registry.load(&fixture("Alpha.dll")).expect("Alpha loads");
    assert_eq!(
        recorder.take_texts(),
        [
            "loading Alpha.dll",
            "loading Beta.dll",
            "loaded Beta",
            "loaded Alpha"
        ]
    );
    let alpha_id = alpha.id();
    let beta_id = id_of(&registry, "Beta");
    let beta_view = registry.image(beta_id).expect("Beta loaded");
    let back = beta_view
        .references()
        .iter()
        .find(|r| r.requested().name == "Alpha")
        .expect("Beta references Alpha");
    assert!(matches!(
        back.resolution(),
        Resolution::Resolved {
            via: ResolvedVia::Cycle,
            ..
        }
    ));
    assert_eq!(back.target(), Some(alpha_id));
    assert_eq!(
        registry.ref_count(alpha_id),
        Some(1),
        "only the handle counts"
    );
    assert_eq!(registry.ref_count(beta_id), Some(1), "held by Alpha");

    registry.close(alpha).expect("own handle");
    assert_eq!(
        recorder.take_texts(),
        [
            "unloading Alpha",
            "unloading Beta",
            "unloaded Beta",
            "unloaded Alpha"
        ]
    );
    assert!(registry.is_empty());
}

#[test]
fn three_step_cycle_unloads_as_a_chain() {
    let (mut registry, recorder) = registry();
    let tri2 = registry.load(&fixture("Tri2.dll")).expect("Tri2 loads");
    assert_eq!(
        recorder.take_texts(),
        [
            "loading Tri2.dll",
            "loading Tri3.dll",
            "loading Tri1.dll",
            "loaded Tri1",
            "loaded Tri3",
            "loaded Tri2",
        ]
    );
    // Only Tri1 -> Tri2 closes the cycle, so only it is not counted.
    let tri1 = registry.image(id_of(&registry, "Tri1")).expect("loaded");
    assert!(matches!(
        tri1.references()[0].resolution(),
        Resolution::Resolved { via: ResolvedVia::Cycle, target, .. } if *target == tri2.id()
    ));
    for name in ["Tri1", "Tri2", "Tri3"] {
        assert_eq!(
            registry.ref_count(id_of(&registry, name)),
            Some(1),
            "{name}"
        );
    }
    registry.close(tri2).expect("own handle");
    assert_eq!(
        recorder.take_texts(),
        [
            "unloading Tri2",
            "unloading Tri3",
            "unloading Tri1",
            "unloaded Tri1",
            "unloaded Tri3",
            "unloaded Tri2",
        ]
    );
    assert!(registry.is_empty());
}

#[test]
fn handles_dropped_on_other_threads_are_released_by_the_registry() {
    let (mut registry, recorder) = registry();
    let root = registry.load(&fixture("Root.dll")).expect("Root loads");
    let clones: Vec<ImageHandle> = (0..8).map(|_| root.clone()).collect();
    registry.close(root).expect("own handle");
    std::thread::scope(|scope| {
        for handle in clones {
            scope.spawn(move || drop(handle));
        }
    });
    assert_eq!(registry.len(), 5, "released only when the registry runs");
    recorder.take_texts();
    registry.release_dropped();
    let texts = recorder.take_texts();
    assert_eq!(texts.first().map(String::as_str), Some("unloading Root"));
    assert_eq!(texts.last().map(String::as_str), Some("unloaded Root"));
    assert!(registry.is_empty());
}

#[test]
fn cycle_member_kept_by_a_handle_outlives_its_partner() {
    let (mut registry, recorder) = registry();
    let alpha = registry.load(&fixture("Alpha.dll")).expect("Alpha loads");
    let beta = registry
        .load(&fixture("Beta.dll"))
        .expect("Beta already loaded");
    let alpha_id = alpha.id();
    assert_eq!(registry.ref_count(beta.id()), Some(2));
    recorder.take_texts();

    registry.close(alpha).expect("own handle");
    assert_eq!(recorder.take_texts(), ["unloading Alpha", "unloaded Alpha"]);
    // Beta's uncounted back reference now names an image that is gone.
    let beta_view = registry.get(&beta).expect("own handle");
    assert_eq!(beta_view.references()[0].target(), Some(alpha_id));
    assert!(registry.image(alpha_id).is_none());

    // Loading Alpha again resolves its reference to the loaded Beta, counted.
    let again = registry.load(&fixture("Alpha.dll")).expect("Alpha reloads");
    assert_ne!(again.id(), alpha_id, "ids are never reused");
    assert_eq!(recorder.take_texts(), ["loading Alpha.dll", "loaded Alpha"]);
    assert_eq!(registry.ref_count(beta.id()), Some(2));
    registry.close(beta).expect("own handle");
    assert_eq!(registry.len(), 2, "Alpha still holds Beta");
    registry.close(again).expect("own handle");
    assert_eq!(
        recorder.take_texts(),
        [
            "unloading Alpha",
            "unloading Beta",
            "unloaded Beta",
            "unloaded Alpha"
        ]
    );
    assert!(registry.is_empty());
}

#[test]
fn handles_count_clones_and_drops_and_loads_of_the_same_file() {
    let (mut registry, recorder) = registry();
    let first = registry.load(&fixture("Shared.dll")).expect("loads");
    let second = registry
        .load(&fixtures().join(".").join("Shared.dll"))
        .expect("same file");
    let third = second.clone();
    assert_eq!(first.id(), second.id());
    assert_eq!(registry.ref_count(first.id()), Some(3));
    assert_eq!(
        recorder.take_texts(),
        ["loading Shared.dll", "loaded Shared"]
    );

    registry.close(first).expect("own handle");
    drop(second);
    registry.release_dropped();
    assert_eq!(registry.len(), 1);
    assert_eq!(registry.ref_count(third.id()), Some(1));
    assert!(recorder.take_texts().is_empty());

    // A plain drop is released at the next registry operation.
    drop(third);
    registry.release_dropped();
    assert_eq!(
        recorder.take_texts(),
        ["unloading Shared", "unloaded Shared"]
    );
    assert!(registry.is_empty());
}

#[test]
fn handles_of_another_registry_are_refused() {
    let (mut registry, _recorder) = registry();
    let (mut other, _other_recorder) = self::registry();
    let handle = other.load(&fixture("Shared.dll")).expect("loads");
    assert!(matches!(
        registry.get(&handle),
        Err(RegistryError::ForeignHandle)
    ));
    assert!(matches!(
        registry.close(handle.clone()),
        Err(RegistryError::ForeignHandle)
    ));
    other.close(handle).expect("own handle");
    assert!(other.is_empty());
}

#[test]
fn load_by_name_uses_loaded_images_then_search_paths() {
    let (mut registry, recorder) = registry();
    let name = |n: &str, major| AssemblyName {
        name: n.to_owned(),
        version: version(major, 0),
        culture: None,
        public_key_token: None,
    };
    // File lookup uses the name as written; matching loaded images ignores case.
    let left = registry
        .load_by_name(&name("Left", 1))
        .expect("found on the search path");
    assert_eq!(registry.get(&left).expect("own").image().name(), "Left");
    let shared = registry
        .load_by_name(&name("SHARED", 1))
        .expect("already loaded");
    assert_eq!(registry.ref_count(shared.id()), Some(2));
    assert_eq!(
        recorder.take_texts(),
        [
            "loading Left.dll",
            "loading Shared.dll",
            "loaded Shared",
            "loaded Left"
        ]
    );

    match registry.load_by_name(&name("Versioned", 3)) {
        Err(RegistryError::NotFound { rejected, .. }) => {
            assert!(
                matches!(rejected[..], [ref r] if matches!(r.reason, Rejection::VersionTooLow { .. }))
            );
        }
        other => panic!("expected NotFound, got {other:?}"),
    }
    assert!(matches!(
        registry.load_by_name(&name("Ghost", 1)),
        Err(RegistryError::NotFound { rejected, .. }) if rejected.is_empty()
    ));
    // Names that would leave the search directory are never looked up.
    assert!(matches!(
        registry.load_by_name(&name("../lifecycle/Shared", 1)),
        Err(RegistryError::NotFound { rejected, .. }) if rejected.is_empty()
    ));
    assert!(recorder.take_texts().is_empty());
    registry.close(left).expect("own");
    registry.close(shared).expect("own");
    assert!(registry.is_empty());
}

#[test]
fn unreadable_or_impostor_candidates_are_reported_not_fatal() {
    let scratch = ScratchDir::new("candidates");
    // A corrupt Ghost.dll: loading it fails, Root still loads.
    let shared = std::fs::read(fixture("Shared.dll")).expect("fixture");
    std::fs::write(scratch.path().join("Ghost.dll"), &shared[..200]).expect("write");
    // A Versioned.dll that is really Shared: an identity mismatch.
    std::fs::write(scratch.path().join("Versioned.dll"), &shared).expect("write");

    let mut registry = ImageRegistry::new();
    registry.add_search_path(scratch.path());
    registry.add_search_path(fixtures());
    let recorder = Recorder::default();
    registry.add_observer(recorder.clone());
    let root = registry.load(&fixture("Root.dll")).expect("Root loads");
    let texts = recorder.take_texts();
    assert!(texts.ends_with(&[
        "loading Versioned.dll".to_owned(),
        "loaded Versioned".to_owned(),
        "loading Ghost.dll".to_owned(),
        "failed Ghost.dll".to_owned(),
        "loaded Root".to_owned(),
    ]));
    let view = registry.get(&root).expect("own");
    let versioned = &view.references()[2];
    assert!(matches!(
        versioned.resolution(),
        Resolution::Resolved { via: ResolvedVia::SearchPath(p), .. } if p.starts_with(fixtures().canonicalize().expect("dir"))
    ));
    match view.references()[3].resolution() {
        Resolution::Missing { rejected } => {
            assert_eq!(rejected.len(), 1);
            assert!(matches!(rejected[0].reason, Rejection::Unreadable(_)));
        }
        other => panic!("Ghost: {other:?}"),
    }
    registry.close(root).expect("own");
    assert!(registry.is_empty());
}

#[test]
fn a_corrupt_root_fails_with_events_and_a_typed_error() {
    let scratch = ScratchDir::new("root");
    let bytes = std::fs::read(fixture("Shared.dll")).expect("fixture");
    let path = scratch.path().join("Broken.dll");
    std::fs::write(&path, &bytes[..bytes.len() / 3]).expect("write");
    let (mut registry, recorder) = registry();
    match registry.load(&path) {
        Err(RegistryError::Load { path: p, .. }) => assert_eq!(p, path),
        other => panic!("expected a load error, got {other:?}"),
    }
    assert_eq!(
        recorder.take_texts(),
        ["loading Broken.dll", "failed Broken.dll"]
    );
    assert!(matches!(
        registry.load(&scratch.path().join("absent.dll")),
        Err(RegistryError::Load { .. })
    ));
    assert!(
        recorder.take_texts().is_empty(),
        "no events for a file that does not exist"
    );
    assert!(registry.is_empty());
}

/// Drops a handle it was given while observing an unload.
struct DropsHandleOnUnload {
    handle: Arc<Mutex<Option<ImageHandle>>>,
}

impl LifecycleObserver for DropsHandleOnUnload {
    fn unloaded(&mut self, image: &LoadedImage<'_>) {
        if image.image().name() == "Root" {
            self.handle.lock().expect("slot").take();
        }
    }
}

#[test]
fn a_handle_dropped_inside_a_callback_is_released_after_it() {
    let (mut registry, recorder) = registry();
    let root = registry.load(&fixture("Root.dll")).expect("Root loads");
    let shared = registry
        .load(&fixture("Shared.dll"))
        .expect("already loaded");
    let slot = Arc::new(Mutex::new(Some(shared)));
    registry.add_observer(DropsHandleOnUnload {
        handle: slot.clone(),
    });
    recorder.take_texts();
    registry.close(root).expect("own");
    let texts = recorder.take_texts();
    // Shared survives Root's cascade (the handle held it) and unloads in a
    // separate, complete bracket once the deferred release runs.
    assert_eq!(texts.first().map(String::as_str), Some("unloading Root"));
    assert_eq!(
        &texts[texts.len() - 3..],
        ["unloaded Root", "unloading Shared", "unloaded Shared"]
    );
    assert!(registry.is_empty());
}

#[test]
fn dropping_the_registry_unloads_everything_with_events() {
    let (mut registry, recorder) = registry();
    let root = registry.load(&fixture("Root.dll")).expect("Root loads");
    let _alpha = registry.load(&fixture("Alpha.dll")).expect("Alpha loads");
    let _extra = root.clone();
    drop(registry);
    let events = recorder.events();
    let left = check_nesting(&events, Vec::new()).expect("well nested");
    assert!(left.is_empty(), "still loaded: {left:?}");
    assert_eq!(
        events.iter().filter(|e| e.kind == Kind::Unloaded).count(),
        7
    );
}
