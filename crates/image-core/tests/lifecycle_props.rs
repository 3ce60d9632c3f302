//! Property test of the registry lifecycle: random sequences of loads,
//! closes, clones and drops over the lifecycle fixtures (including a cycle,
//! a diamond, missing and corrupt references) keep the event stream well
//! nested and the refcounts exact, and leave nothing loaded at the end.

mod lifecycle_support;

use lifecycle_support::{
    Kind, Recorder, ScratchDir, check_cascade, check_nesting, fixture, fixtures,
};
use proptest::prelude::*;
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::OnceLock;
use tcgkit_image_core::{
    AssemblyName, ImageHandle, ImageId, ImageRegistry, RegistryError, Resolution, ResolvedVia,
    Version,
};

const FILES: &[&str] = &[
    "Root.dll",
    "Left.dll",
    "Right.dll",
    "Shared.dll",
    "Versioned.dll",
    "NeedsNewer.dll",
    "Alpha.dll",
    "Beta.dll",
    "ClrLoader.dll",
    "Tri1.dll",
    "Tri2.dll",
    "Tri3.dll",
];
const NAMES: &[(&str, u16)] = &[
    ("Shared", 1),
    ("Left", 1),
    ("Beta", 1),
    ("Versioned", 2),
    ("Versioned", 3),
    ("Ghost", 1),
];

#[derive(Debug, Clone)]
enum Op {
    Load(usize),
    LoadCorrupt,
    LoadByName(usize),
    Close(usize),
    Clone(usize),
    Drop(usize),
    ReleaseDropped,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..FILES.len()).prop_map(Op::Load),
        1 => Just(Op::LoadCorrupt),
        2 => (0..NAMES.len()).prop_map(Op::LoadByName),
        4 => any::<usize>().prop_map(Op::Close),
        1 => any::<usize>().prop_map(Op::Clone),
        2 => any::<usize>().prop_map(Op::Drop),
        1 => Just(Op::ReleaseDropped),
    ]
}

/// A scratch search directory holding a corrupt `Ghost.dll`, shared by all
/// cases (created once, read-only afterwards).
fn corrupt_dir() -> &'static PathBuf {
    static DIR: OnceLock<ScratchDir> = OnceLock::new();
    &DIR.get_or_init(|| {
        let dir = ScratchDir::new("props");
        let bytes = std::fs::read(fixture("Shared.dll")).expect("fixture");
        std::fs::write(dir.path().join("Ghost.dll"), &bytes[..300]).expect("write");
        dir
    })
    .0
}

/// Counted references to each image, from the registry's public view.
fn counted_holders(registry: &ImageRegistry) -> HashMap<ImageId, usize> {
    let mut holders = HashMap::new();
    for image in registry.loaded() {
        let targets: BTreeSet<ImageId> = image
            .references()
            .iter()
            .filter_map(|r| match r.resolution() {
                Resolution::Resolved { target, via, .. } if *via != ResolvedVia::Cycle => {
                    Some(*target)
                }
                _ => None,
            })
            .collect();
        for target in targets {
            *holders.entry(target).or_insert(0) += 1;
        }
    }
    holders
}

fn check_state(
    registry: &ImageRegistry,
    recorder: &Recorder,
    handles: &[ImageHandle],
    drained: bool,
) -> Result<(), TestCaseError> {
    let events = recorder.events();
    let loaded = check_nesting(&events, Vec::new()).map_err(TestCaseError::fail)?;
    let from_events: BTreeSet<ImageId> = loaded.into_iter().collect();
    let in_registry: BTreeSet<ImageId> = registry.loaded().map(|l| l.id()).collect();
    prop_assert_eq!(
        &from_events,
        &in_registry,
        "events and registry disagree on what is loaded"
    );

    let holders = counted_holders(registry);
    for id in &in_registry {
        let handles_held = handles.iter().filter(|h| h.id() == *id).count();
        let expected = handles_held + holders.get(id).copied().unwrap_or(0);
        prop_assert_eq!(
            registry.ref_count(*id),
            Some(expected),
            "refcount of {}",
            id
        );
        if drained {
            prop_assert!(expected > 0, "{} stays loaded with no reference", id);
        }
    }
    for handle in handles {
        prop_assert!(
            registry.get(handle).is_ok(),
            "a live handle's image was unloaded"
        );
    }
    Ok(())
}

fn run(ops: &[Op]) -> Result<(), TestCaseError> {
    let mut registry = ImageRegistry::new();
    registry.add_search_path(corrupt_dir());
    registry.add_search_path(fixtures());
    let recorder = Recorder::default();
    registry.add_observer(recorder.clone());
    let mut handles: Vec<ImageHandle> = Vec::new();

    for op in ops {
        let drained = match op {
            Op::Load(i) => {
                let handle = registry.load(&fixture(FILES[*i]));
                handles
                    .push(handle.map_err(|e| TestCaseError::fail(format!("{}: {e}", FILES[*i])))?);
                true
            }
            Op::LoadCorrupt => {
                let result = registry.load(&corrupt_dir().join("Ghost.dll"));
                prop_assert!(
                    matches!(result, Err(RegistryError::Load { .. })),
                    "corrupt root must fail"
                );
                let events = recorder.events();
                let last: Vec<_> = events.iter().rev().take(2).map(|e| e.kind).collect();
                prop_assert_eq!(last, [Kind::Failed, Kind::Loading]);
                true
            }
            Op::LoadByName(i) => {
                let (name, major) = NAMES[*i];
                let wanted = AssemblyName {
                    name: name.to_owned(),
                    version: Version {
                        major,
                        ..Version::default()
                    },
                    culture: None,
                    public_key_token: None,
                };
                match registry.load_by_name(&wanted) {
                    Ok(handle) => {
                        let found = registry.get(&handle).expect("own handle");
                        let found = found.image().assembly_name().expect("an assembly");
                        prop_assert!(
                            found.name.eq_ignore_ascii_case(name) && found.version.major >= major
                        );
                        handles.push(handle);
                    }
                    Err(RegistryError::NotFound { .. }) => {
                        prop_assert!(
                            name == "Ghost" || major == 3,
                            "{} {} not found",
                            name,
                            major
                        );
                    }
                    Err(e) => return Err(TestCaseError::fail(format!("{name}: {e}"))),
                }
                true
            }
            Op::Close(k) if !handles.is_empty() => {
                let handle = handles.remove(k % handles.len());
                registry
                    .close(handle)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                true
            }
            Op::Clone(k) if !handles.is_empty() => {
                let handle = handles[k % handles.len()].clone();
                handles.push(handle);
                false
            }
            Op::Drop(k) if !handles.is_empty() => {
                drop(handles.remove(k % handles.len()));
                false
            }
            Op::ReleaseDropped => {
                registry.release_dropped();
                true
            }
            Op::Close(_) | Op::Clone(_) | Op::Drop(_) => false,
        };
        check_state(&registry, &recorder, &handles, drained)?;
    }

    handles.clear();
    registry.release_dropped();
    prop_assert!(
        registry.is_empty(),
        "still loaded after the last close: {}",
        registry.len()
    );
    let events = recorder.events();
    let left = check_nesting(&events, Vec::new()).map_err(TestCaseError::fail)?;
    prop_assert!(left.is_empty());
    check_cascade(&events).map_err(TestCaseError::fail)?;
    let count = |kind| events.iter().filter(|e| e.kind == kind).count();
    prop_assert_eq!(
        count(Kind::Loading),
        count(Kind::Loaded) + count(Kind::Failed)
    );
    prop_assert_eq!(count(Kind::Unloading), count(Kind::Loaded));
    prop_assert_eq!(count(Kind::Unloaded), count(Kind::Loaded));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn random_load_close_sequences_keep_the_lifecycle_sound(ops in prop::collection::vec(op(), 1..40)) {
        run(&ops)?;
    }
}
