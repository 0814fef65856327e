//! create -> push -> delete locally -> pull, against a real registry, with and without token auth.

use std::path::Path;

use registry::{
    create_from_modelfile, Capability, Client, CreateOptions, Digest, Modelfile, Name, Progress, PullOptions,
    PushOptions,
};

use crate::common::{self, Events, RegistryServer};

async fn round_trip(token_auth: bool) {
    let reg = RegistryServer::start_with(token_auth);
    let (dir, store) = common::store();
    let gguf = common::gemma();
    let modelfile = format!(
        "FROM {}\nPARAMETER temperature 0.6\nPARAMETER stop <end_of_turn>\nSYSTEM You are terse.\nMESSAGE user hi\nMESSAGE assistant hello\nLICENSE Gemma terms\n",
        gguf.display()
    );
    let mf = Modelfile::parse(&modelfile).unwrap();
    let name = Name::parse(&format!("{}/test/gemma:v1", reg.host())).unwrap();
    let created = Events::default();
    create_from_modelfile(
        &store,
        &name,
        &mf,
        dir.path(),
        None,
        CreateOptions::default(),
        &|p| created.push(p),
    )
    .await
    .unwrap();
    let statuses = created.statuses();
    assert_eq!(
        statuses.last().map(String::as_str),
        Some("success"),
        "{statuses:?}"
    );
    assert!(statuses.contains(&"writing manifest".to_string()));
    let before = store.read_manifest(&name).unwrap();

    let client = Client::new().unwrap();
    let pushed = Events::default();
    let push = PushOptions {
        insecure: true,
        chunk_size: 64 << 20, // the 253 MB model goes up in PATCH chunks
        ..PushOptions::default()
    };
    client
        .push(&store, &name, &push, &|p| pushed.push(p))
        .await
        .unwrap();
    let statuses = pushed.statuses();
    assert_eq!(statuses.first().map(String::as_str), Some("retrieving manifest"));
    assert_eq!(
        &statuses[statuses.len() - 2..],
        ["pushing manifest", "success"],
        "{statuses:?}"
    );
    for d in before.manifest.digests() {
        assert!(
            statuses.contains(&format!("pushing {}", d.short())),
            "{statuses:?}"
        );
    }

    // Delete locally: every blob goes (nothing else uses them).
    store.delete(&name).unwrap();
    let blobs = store.root().join("blobs");
    assert_eq!(std::fs::read_dir(&blobs).unwrap().count(), 0);

    let pulled = Events::default();
    let pull = PullOptions {
        insecure: true,
        ..PullOptions::default()
    };
    client
        .pull(&store, &name, &pull, &|p| pulled.push(p))
        .await
        .unwrap();
    let after = store.read_manifest(&name).unwrap();
    assert_eq!(after.bytes, before.bytes);
    assert_eq!(after.digest, before.digest);
    for d in after.manifest.digests() {
        let path = store.blob_path(&d);
        let (got, _) = Digest::of_reader(std::fs::File::open(&path).unwrap()).unwrap();
        assert_eq!(got, d);
    }
    let statuses = pulled.statuses();
    assert_eq!(statuses.first().map(String::as_str), Some("pulling manifest"));
    assert_eq!(
        &statuses[statuses.len() - 3..],
        ["verifying sha256 digest", "writing manifest", "success"],
        "{statuses:?}"
    );
    // Transfer events carry the digest and byte counts; the last one for a blob is complete.
    let model_layer = &after.manifest.layers[0];
    let last = pulled
        .all()
        .into_iter()
        .rfind(|p| p.digest() == Some(&model_layer.digest))
        .unwrap();
    assert_eq!(last.total(), Some(model_layer.size));
    assert_eq!(last.completed(), Some(model_layer.size));

    // The model works: the weights are the original GGUF, and show reads it.
    let info = registry::show(&store, &name, false).unwrap();
    let (orig, _) = Digest::of_reader(std::fs::File::open(&gguf).unwrap()).unwrap();
    assert_eq!(
        info.model.model_path.as_deref(),
        Some(store.blob_path(&orig).as_path())
    );
    assert_eq!(info.details.family, "gemma3");
    assert!(info.capabilities.contains(&Capability::Completion));
    assert_eq!(info.model.system.as_deref(), Some("You are terse."));
    assert_eq!(info.model.messages.len(), 2);

    // Pushing again finds every blob there; pulling again downloads nothing.
    let again = Events::default();
    client
        .push(&store, &name, &push, &|p| again.push(p))
        .await
        .unwrap();
    let again = Events::default();
    client
        .pull(&store, &name, &pull, &|p| again.push(p))
        .await
        .unwrap();
    for p in again.all() {
        if let Progress::Pulling { total, completed, .. } = p {
            assert_eq!(total, completed);
        }
    }
    assert_no_temporaries(store.root());
    if token_auth {
        assert!(reg.tokens_issued() > 0);
    }
}

fn assert_no_temporaries(root: &Path) {
    for f in common::tree(root) {
        assert!(
            !f.contains(".tmp-") && !f.contains("-partial"),
            "left behind: {f}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trip_without_auth() {
    round_trip(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trip_with_token_auth() {
    round_trip(true).await;
}
