use super::*;

/// A note: its header, its name and descriptor each padded to `align`.
fn note(kind: u32, name: &[u8], desc: &[u8], align: usize) -> Vec<u8> {
    let mut v = Vec::new();
    for w in [name.len() as u32, desc.len() as u32, kind] {
        v.extend_from_slice(&w.to_ne_bytes());
    }
    v.extend_from_slice(name);
    v.resize((v.len()).div_ceil(align) * align, 0);
    v.extend_from_slice(desc);
    v.resize((v.len()).div_ceil(align) * align, 0);
    v
}

#[test]
fn the_build_id_is_found_after_other_notes_at_either_alignment() {
    let id: Vec<u8> = (1..=20).collect();
    for align in [4, 8] {
        let mut notes = note(1, b"GNU\0", &[0; 16], align); // NT_GNU_ABI_TAG
        notes.extend(note(3, b"Xen\0", &[9; 3], align));
        notes.extend(note(3, b"GNU\0", &id, align));
        assert_eq!(gnu_build_id(&notes, align), Some(&id[..]), "align {align}");
    }
}

#[test]
fn no_build_id_in_other_or_cut_notes() {
    let id = [7u8; 20];
    assert_eq!(gnu_build_id(&note(1, b"GNU\0", &id, 4), 4), None);
    let whole = note(3, b"GNU\0", &id, 4);
    assert_eq!(gnu_build_id(&whole[..whole.len() - 1], 4), None);
    assert_eq!(gnu_build_id(&[], 4), None);
    // A size running past the end stops the walk.
    let mut bad = note(1, b"GNU\0", &id, 4);
    bad[4..8].copy_from_slice(&u32::MAX.to_ne_bytes());
    bad.extend(whole);
    assert_eq!(gnu_build_id(&bad, 4), None);
}

#[test]
fn this_test_binary_reads_its_own_image() {
    // Debian's gcc links with --build-id; the plugins' check depends on it.
    let image = image().expect("the image holding this code");
    assert!(
        image.build_id.as_ref().is_some_and(|id| id.len() >= 16),
        "{image:?}"
    );
    assert!(!image.nodelete, "a test binary is not linked -z nodelete");
    assert_eq!(build(), None, "only a nodelete image publishes");
}

#[test]
fn a_copy_alone_passes_each_notice_once_and_its_first_load_has_no_pre_reload() {
    let mut l = Lifecycle::default();
    l.made();
    assert_eq!(
        l.post_reload(ReloadStatus::Loaded { used: true }),
        Some(ReloadStatus::Loaded { used: true })
    );
    for status in [ReloadStatus::Loaded { used: true }, ReloadStatus::Failed] {
        assert!(l.pre_reload());
        l.made();
        assert_eq!(l.post_reload(status), Some(status));
    }
    l.deleted();
    l.deleted();
    assert!(!l.done());
    l.deleted();
    assert!(l.done());
}

/// ATS tells the first copy and the later one of the same load; the
/// later one forwards. The plugin hears of it once, as used.
#[test]
fn a_load_told_to_two_copies_of_one_build_reaches_the_plugin_once() {
    let mut l = Lifecycle::default();
    l.made();
    assert!(l.post_reload(ReloadStatus::Loaded { used: true }).is_some());
    // The file is replaced: a second copy is loaded during this load, so
    // only the first copy hears its pre-reload; the second forwards its
    // post-reload, after ATS told the first one "unused".
    assert!(l.pre_reload());
    l.made();
    assert_eq!(
        l.post_reload(ReloadStatus::Loaded { used: false }),
        Some(ReloadStatus::Loaded { used: true })
    );
    assert_eq!(l.post_reload(ReloadStatus::Loaded { used: true }), None);
    // Next load: both copies hear both notices.
    assert!(l.pre_reload());
    assert!(!l.pre_reload());
    assert_eq!(
        l.post_reload(ReloadStatus::Failed),
        Some(ReloadStatus::Failed)
    );
    assert_eq!(l.post_reload(ReloadStatus::Failed), None);
    // The first copy's own rules go: ATS says it is done, but the rules it
    // made for the second copy remain.
    l.deleted();
    assert!(!l.done());
    // Once the first copy has left ATS's list, only forwarded notices come.
    assert!(l.pre_reload());
    assert_eq!(
        l.post_reload(ReloadStatus::Loaded { used: true }),
        Some(ReloadStatus::Loaded { used: true })
    );
    l.deleted();
    assert!(l.done());
}
