use std::time::Duration;

use super::*;
use crate::manifest::{media, Layer, Manifest};

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("models")).unwrap();
    (dir, store)
}

/// Stores `layers` as blobs plus a config and writes a manifest for `name`.
fn add_model(store: &Store, name: &str, layers: &[&[u8]]) -> Manifest {
    let config = store.write_blob_bytes(b"{}", None).unwrap();
    let layers = layers
        .iter()
        .map(|b| {
            let w = store.write_blob_bytes(b, None).unwrap();
            Layer::new(media::MODEL, w.digest, w.size)
        })
        .collect();
    let m = Manifest::new(Layer::new(media::DOCKER_CONFIG, config.digest, 2), layers);
    store
        .write_manifest(&Name::parse(name).unwrap(), &m.to_bytes())
        .unwrap();
    m
}

fn n(s: &str) -> Name {
    Name::parse(s).unwrap()
}

fn no_grace() -> CleanupOptions {
    CleanupOptions {
        blob_grace: Duration::ZERO,
        temp_grace: Duration::ZERO,
        resumable_max_age: None,
    }
}

#[test]
fn blobs_are_content_addressed_and_verified() {
    let (_d, store) = store();
    let w = store.write_blob_bytes(b"hello", None).unwrap();
    assert_eq!(w.digest, Digest::of_bytes(b"hello"));
    assert!(w.created);
    assert_eq!(fs::read(store.blob_path(&w.digest)).unwrap(), b"hello".to_vec());
    assert!(!store.write_blob_bytes(b"hello", None).unwrap().created);

    let want = Digest::of_bytes(b"expected");
    let err = store.write_blob(&b"other"[..], Some(&want), None).unwrap_err();
    assert!(matches!(err, Error::DigestMismatch { .. }), "{err}");
    assert!(!store.has_blob(&want));
    assert!(!store.has_blob(&Digest::of_bytes(b"other")));
    // Nothing left behind: only the one good blob.
    let names: Vec<_> = fs::read_dir(store.blobs_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from(w.digest.file_name())]);
}

#[tokio::test]
async fn blob_stream_is_verified() {
    let (_d, store) = store();
    let chunks = || {
        futures_util::stream::iter(vec![
            Ok::<_, std::io::Error>(Bytes::from_static(b"hel")),
            Ok(Bytes::from_static(b"lo")),
        ])
    };
    let good = Digest::of_bytes(b"hello");
    let w = store.write_blob_stream(good, chunks()).await.unwrap();
    assert!(w.created && store.has_blob(&good));
    let bad = Digest::of_bytes(b"nope");
    let e = store.write_blob_stream(bad, chunks()).await.unwrap_err();
    assert!(matches!(e, Error::DigestMismatch { .. }));
    assert!(!store.has_blob(&bad));
    let broken = futures_util::stream::iter(vec![
        Ok(Bytes::from_static(b"hel")),
        Err(std::io::Error::other("connection reset")),
    ]);
    let e = store
        .write_blob_stream(Digest::of_bytes(b"hel"), broken)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("connection reset"), "{e}");
    assert!(!store.has_blob(&Digest::of_bytes(b"hel")));
    assert_eq!(fs::read_dir(store.blobs_dir()).unwrap().count(), 1);
}

#[test]
fn manifests_resolve_ignoring_case_and_list() {
    let (_d, store) = store();
    let m = add_model(&store, "Llama3:Latest", &[b"weights"]);
    let got = store.read_manifest(&n("llama3")).unwrap();
    assert_eq!(got.name.model(), "Llama3");
    assert_eq!(got.name.tag(), "Latest");
    assert_eq!(got.manifest, m);
    assert_eq!(got.digest, Digest::of_bytes(&m.to_bytes()));
    // A new tag of the same model goes into the existing directory.
    let c = store.canonical(&n("LLAMA3:v2")).unwrap();
    assert_eq!(c.model(), "Llama3");
    assert_eq!(c.tag(), "v2");
    assert!(matches!(
        store.read_manifest(&n("other")),
        Err(Error::ModelNotFound(_))
    ));
    add_model(&store, "me/second:1", &[b"w2"]);
    // Junk in manifests/ is ignored.
    fs::write(
        store
            .root()
            .join("manifests/registry.ollama.ai/library/Llama3/.tmp-x"),
        b"junk",
    )
    .unwrap();
    fs::create_dir_all(store.root().join("manifests/a/b")).unwrap();
    fs::write(store.root().join("manifests/a/b/c"), b"junk").unwrap();
    let list = store.list().unwrap();
    let names: Vec<_> = list.iter().map(|e| e.name.display_shortest()).collect();
    assert_eq!(list.len(), 2, "{names:?}");
    assert!(names.contains(&"Llama3:Latest".to_string()));
    assert!(names.contains(&"me/second:1".to_string()));
    let e = list.iter().find(|e| e.name.model() == "Llama3").unwrap();
    assert_eq!(e.size, 7 + 2);
}

#[test]
fn write_manifest_requires_its_blobs() {
    let (_d, store) = store();
    let missing = Digest::of_bytes(b"missing");
    let m = Manifest::new(Layer::new(media::DOCKER_CONFIG, missing, 1), vec![]);
    let e = store.write_manifest(&n("x"), &m.to_bytes()).unwrap_err();
    assert!(matches!(e, Error::BlobNotFound(_)));
    assert!(store.manifest_names().unwrap().is_empty());
}

#[test]
fn copy_shares_blobs_and_delete_keeps_shared_ones() {
    let (_d, store) = store();
    let m = add_model(&store, "a", &[b"shared", b"only-a"]);
    store.copy(&n("a"), &n("b:copy")).unwrap();
    assert_eq!(store.read_manifest(&n("b:copy")).unwrap().bytes, m.to_bytes());
    let m2 = add_model(&store, "c", &[b"shared"]);
    // Deleting the copy removes nothing: `a` still uses everything.
    assert!(store.delete(&n("b:copy")).unwrap().is_empty());
    // Deleting `a` removes only what `c` does not use.
    let removed = store.delete(&n("A")).unwrap();
    assert_eq!(removed, vec![Digest::of_bytes(b"only-a")]);
    for d in m2.digests() {
        assert!(store.has_blob(&d));
    }
    assert!(matches!(store.delete(&n("a")), Err(Error::ModelNotFound(_))));
    // The empty directories of deleted models are gone.
    let lib = store.root().join("manifests/registry.ollama.ai/library");
    assert!(!lib.join("a").exists() && !lib.join("b").exists());
    store.delete(&n("c")).unwrap();
    assert!(!store.root().join("manifests/registry.ollama.ai").exists());
    assert_eq!(fs::read_dir(store.blobs_dir()).unwrap().count(), 0);
}

#[test]
fn pins_protect_blobs_from_delete_and_cleanup() {
    let (_d, store) = store();
    add_model(&store, "a", &[b"x"]);
    let pin = store.pin().unwrap();
    pin.add(&Digest::of_bytes(b"x")).unwrap();
    store.delete(&n("a")).unwrap();
    assert!(store.has_blob(&Digest::of_bytes(b"x")));
    let r = store.cleanup(&no_grace()).unwrap();
    assert!(store.has_blob(&Digest::of_bytes(b"x")), "{r:?}");
    drop(pin);
    let r = store.cleanup(&no_grace()).unwrap();
    assert!(!store.has_blob(&Digest::of_bytes(b"x")));
    assert!(r.blobs_removed.contains(&Digest::of_bytes(b"x")));
}

#[test]
fn cleanup_removes_only_debris() {
    let (_d, store) = store();
    add_model(&store, "kept", &[b"used"]);
    let orphan = store.write_blob_bytes(b"orphan", None).unwrap().digest;
    let blobs = store.blobs_dir().to_path_buf();

    // A crashed writer's temporary file (unlocked) and a live one (locked).
    fs::write(blobs.join(".tmp-dead"), b"x").unwrap();
    let live = crate::fsutil::AtomicFile::new_in(&blobs).unwrap();

    // A resumable partial download, an in-progress one (locked), and a broken one.
    let resumable = Digest::of_bytes(b"resumable");
    fs::write(store.partial_path(&resumable), vec![0u8; 10]).unwrap();
    partial::PartialState::new(resumable, 10, 4)
        .save(&store.partial_state_path(&resumable))
        .unwrap();
    let active = Digest::of_bytes(b"active");
    fs::write(store.partial_path(&active), vec![0u8; 3]).unwrap();
    let active_file = File::open(store.partial_path(&active)).unwrap();
    crate::fsutil::try_lock_exclusive(&active_file).unwrap();
    let broken = Digest::of_bytes(b"broken");
    fs::write(store.partial_path(&broken), vec![0u8; 3]).unwrap();
    fs::write(store.partial_state_path(&broken), b"{not json").unwrap();
    // Someone else's file.
    fs::write(blobs.join("README"), b"mine").unwrap();

    // With the default grace period, fresh files all stay.
    let r = store.cleanup(&CleanupOptions::default()).unwrap();
    assert!(r.blobs_removed.is_empty() && r.temp_files_removed == 0 && r.partials_removed == 0);

    let r = store.cleanup(&no_grace()).unwrap();
    assert_eq!(r.blobs_removed, vec![orphan]);
    assert_eq!(r.temp_files_removed, 1);
    assert_eq!(r.partials_removed, 1);
    assert_eq!(r.partials_kept, 2);
    assert!(!blobs.join(".tmp-dead").exists());
    assert!(live.temp_path().exists());
    assert!(store.partial_path(&resumable).exists());
    assert!(store.partial_state_path(&resumable).exists());
    assert!(store.partial_path(&active).exists());
    assert!(!store.partial_path(&broken).exists());
    assert!(!store.partial_state_path(&broken).exists());
    assert!(blobs.join("README").exists());
    assert!(store.has_blob(&Digest::of_bytes(b"used")));

    // Resumable downloads go only when the caller asks for an age limit.
    let r = store
        .cleanup(&CleanupOptions {
            resumable_max_age: Some(Duration::ZERO),
            ..no_grace()
        })
        .unwrap();
    assert_eq!(r.partials_removed, 1);
    assert!(!store.partial_path(&resumable).exists());
    assert!(store.partial_path(&active).exists());
}

#[test]
fn unreadable_manifest_blocks_blob_removal() {
    let (_d, store) = store();
    add_model(&store, "a", &[b"x"]);
    let orphan = store.write_blob_bytes(b"orphan", None).unwrap().digest;
    let bad = store.root().join("manifests/registry.ollama.ai/library/bad");
    fs::create_dir_all(&bad).unwrap();
    fs::write(bad.join("latest"), b"{truncated").unwrap();
    let r = store.cleanup(&no_grace()).unwrap();
    assert!(r.blobs_skipped_unreadable_manifest);
    assert!(store.has_blob(&orphan));
    // The corrupt model itself can still be deleted.
    store.delete(&n("bad")).unwrap();
    let r = store.cleanup(&no_grace()).unwrap();
    assert_eq!(r.blobs_removed, vec![orphan]);
}

#[test]
fn configured_root_trims_like_ollama() {
    // Only this test touches the variable.
    std::env::set_var(MODELS_ENV, " \"/srv/models\" ");
    assert_eq!(Store::configured_root().unwrap(), PathBuf::from("/srv/models"));
    std::env::remove_var(MODELS_ENV);
    assert!(Store::configured_root().unwrap().ends_with("ollamars/models"));
}

#[test]
fn check_finds_problems_and_repairs_only_what_is_safe() {
    let (_d, store) = store();
    let m = add_model(&store, "good", &[b"weights"]);
    let check = |repair: bool| {
        store
            .check(&CheckOptions {
                repair,
                cleanup: no_grace(),
                ..CheckOptions::default()
            })
            .unwrap()
    };
    let r = check(false);
    assert!(r.is_consistent(), "{:?}", r.problems);
    assert!(r.debris.is_empty(), "{:?}", r.debris);
    assert_eq!((r.models, r.blobs), (1, 2));
    assert_eq!(r.bytes_verified, 9);

    // Debris: an unlocked temporary file in blobs/ and in a manifest directory, a dead partial,
    // an unreferenced blob. A locked temporary file and a resumable download are not debris.
    let blobs = store.blobs_dir().to_path_buf();
    fs::write(blobs.join(".tmp-dead"), b"x").unwrap();
    let live = crate::fsutil::AtomicFile::new_in(&blobs).unwrap();
    let mdir = store.root().join("manifests/registry.ollama.ai/library/good");
    fs::write(mdir.join(".tmp-dead"), b"{").unwrap();
    let dead = Digest::of_bytes(b"dead");
    fs::write(store.partial_path(&dead), b"abc").unwrap();
    let resumable = Digest::of_bytes(b"resumable");
    fs::write(store.partial_path(&resumable), vec![0u8; 10]).unwrap();
    partial::PartialState::new(resumable, 10, 4)
        .save(&store.partial_state_path(&resumable))
        .unwrap();
    let orphan = store.write_blob_bytes(b"orphan", None).unwrap().digest;
    let r = check(false);
    assert!(r.is_consistent(), "{:?}", r.problems);
    assert_eq!(
        r.debris,
        Debris {
            temp_files: 2,
            dead_partials: 1,
            stale_pins: 0,
            unreferenced_blobs: 1,
            bytes: 1 + 1 + 3 + 6,
        }
    );
    assert_eq!(r.partial_downloads, 1);
    assert_eq!(store.list().unwrap().len(), 1);

    // Problems: a blob whose bytes are not its name (a half-written file under a final name), a
    // missing blob, an unreadable manifest.
    let weights = m.layers[0].digest;
    fs::write(store.blob_path(&weights), b"weigh").unwrap();
    let other = add_model(&store, "other", &[b"gone"]);
    fs::remove_file(store.blob_path(&other.layers[0].digest)).unwrap();
    let bad = store.root().join("manifests/registry.ollama.ai/library/bad");
    fs::create_dir_all(&bad).unwrap();
    fs::write(bad.join("latest"), b"{truncated").unwrap();
    let r = check(false);
    assert!(!r.is_consistent());
    let kinds: Vec<String> = r.problems.iter().map(|p| p.to_string()).collect();
    assert_eq!(r.problems.len(), 4, "{kinds:?}");
    assert!(r
        .problems
        .iter()
        .any(|p| matches!(p, Problem::UnreadableManifest { model, .. } if model == "bad:latest")));
    assert!(r
        .problems
        .iter()
        .any(|p| matches!(p, Problem::MissingBlob { model, digest } if model == "other:latest" && *digest == other.layers[0].digest)));
    assert!(r
        .problems
        .iter()
        .any(|p| matches!(p, Problem::SizeMismatch { digest, .. } if *digest == weights)));
    assert!(r.problems.iter().any(
        |p| matches!(p, Problem::CorruptBlob { digest, models, removed: false, .. } if *digest == weights && models == &["good:latest".to_string()])
    ));

    // Repair removes the corrupt blob and the debris, never a manifest, a locked temporary
    // file or a resumable download. (The unreadable manifest keeps unreferenced blobs.)
    let r = check(true);
    assert!(r
        .problems
        .iter()
        .any(|p| matches!(p, Problem::CorruptBlob { removed: true, .. })));
    assert!(!store.has_blob(&weights));
    assert!(bad.join("latest").exists());
    assert!(live.temp_path().exists());
    assert!(store.partial_path(&resumable).exists());
    assert!(!store.partial_path(&dead).exists());
    assert!(!blobs.join(".tmp-dead").exists() && !mdir.join(".tmp-dead").exists());
    assert!(store.has_blob(&orphan));
    fs::remove_dir_all(&bad).unwrap();
    check(true);
    assert!(!store.has_blob(&orphan));
    let r = check(false);
    assert!(r.debris.is_empty(), "{:?}", r.debris);
    // Still inconsistent until the models are pulled or created again.
    assert_eq!(r.problems.len(), 2, "{:?}", r.problems);
}
