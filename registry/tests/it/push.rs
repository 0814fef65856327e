//! Push paths against the real registry: cross-repository mount, chunked uploads, OCI manifests.

use registry::manifest::media;
use registry::{
    create, Client, CreateOptions, CreateRequest, Digest, Layer, Manifest, Name, PullOptions, PushOptions,
};

use crate::common::{self, Proxy, RegistryServer};
use crate::resume::addr;

fn push_opts(chunk: u64) -> PushOptions {
    PushOptions {
        insecure: true,
        chunk_size: chunk,
        ..PushOptions::default()
    }
}

fn pull_opts() -> PullOptions {
    PullOptions {
        insecure: true,
        ..PullOptions::default()
    }
}

/// A model in `store` with one random `size`-byte model layer, written with `manifest_media_type`.
fn random_model(
    store: &registry::Store,
    name: &Name,
    size: usize,
    seed: u64,
    manifest_media_type: &str,
) -> Digest {
    let layer = store
        .write_blob_bytes(&common::random_bytes(size, seed), None)
        .unwrap();
    let config = store
        .write_blob_bytes(b"{\"model_format\":\"gguf\"}", None)
        .unwrap();
    let mut m = Manifest::new(
        Layer::new(media::DOCKER_CONFIG, config.digest, config.size),
        vec![Layer::new(media::MODEL, layer.digest, layer.size)],
    );
    m.media_type = manifest_media_type.to_string();
    store.write_manifest(name, &m.to_bytes()).unwrap();
    layer.digest
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn layers_from_another_repository_are_mounted_not_uploaded() {
    const SIZE: usize = 8 << 20;
    let reg = RegistryServer::start();
    let proxy = Proxy::start(addr(&reg), None).await;
    let host = format!("127.0.0.1:{}", proxy.port);
    let (dir, store) = common::store();
    let base = Name::parse(&format!("{host}/test/base:1")).unwrap();
    common::float_gguf(&dir.path().join("base.gguf"), SIZE as u64 / (3 * 64 * 4));
    let mf = registry::Modelfile::parse("FROM ./base.gguf\n").unwrap();
    registry::create_from_modelfile(
        &store,
        &base,
        &mf,
        dir.path(),
        None,
        CreateOptions::default(),
        &|_| {},
    )
    .await
    .unwrap();
    let weights = store.read_manifest(&base).unwrap().manifest.layers[0].digest;
    let size = store.blob_size(&weights).unwrap();
    let client = Client::new().unwrap();
    client
        .push(&store, &base, &push_opts(64 << 20), &|_| {})
        .await
        .unwrap();
    let first = proxy.bytes_up();
    assert!(first >= SIZE as u64, "{first}");

    // A model built FROM the pushed one, pushed to another repository: its weights layer
    // records where it came from, and the registry mounts it from there.
    let derived = Name::parse(&format!("{host}/other/derived:1")).unwrap();
    let req = CreateRequest {
        from: Some(base.to_string()),
        system: Some("be brief".into()),
        ..CreateRequest::default()
    };
    create(&store, &derived, req, CreateOptions::default(), &|_| {})
        .await
        .unwrap();
    let m = store.read_manifest(&derived).unwrap();
    assert_eq!(m.manifest.layers[0].digest, weights);
    assert_eq!(
        m.manifest.layers[0].from.as_deref(),
        Some(base.display_shortest().as_str())
    );
    client
        .push(&store, &derived, &push_opts(64 << 20), &|_| {})
        .await
        .unwrap();
    let second = proxy.bytes_up() - first;
    assert!(
        second < 1 << 20,
        "{second} bytes sent for a model whose weights were mounted"
    );

    // The registry serves the derived model whole.
    let (_d2, fresh) = common::store();
    let direct = Name::parse(&format!("{}/other/derived:1", reg.host())).unwrap();
    client.pull(&fresh, &direct, &pull_opts(), &|_| {}).await.unwrap();
    let (got, n) = Digest::of_reader(std::fs::File::open(fresh.blob_path(&weights)).unwrap()).unwrap();
    assert_eq!((got, n), (weights, size));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_uploads_and_oci_manifests_round_trip() {
    let reg = RegistryServer::start();
    let client = Client::new().unwrap();
    for (i, (manifest_type, size, chunk)) in [
        // 3.5 chunks of 1 MiB: PATCH, PATCH, PATCH, PATCH, PUT.
        (media::OCI_MANIFEST, (7 << 20) / 2, 1u64 << 20),
        // Monolithic.
        (media::DOCKER_MANIFEST_V2, 3 << 20, 64 << 20),
    ]
    .into_iter()
    .enumerate()
    {
        let (_dir, store) = common::store();
        let name = Name::parse(&format!("{}/test/m{i}:1", reg.host())).unwrap();
        let weights = random_model(&store, &name, size, 9 + i as u64, manifest_type);
        let before = store.read_manifest(&name).unwrap();
        client
            .push(&store, &name, &push_opts(chunk), &|_| {})
            .await
            .unwrap();

        // The registry keeps the manifest's bytes and media type.
        let url = format!("http://{}/v2/test/m{i}/manifests/1", reg.host());
        let resp = reqwest::Client::new()
            .get(&url)
            .header(
                "accept",
                format!("{}, {}", media::OCI_MANIFEST, media::DOCKER_MANIFEST_V2),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(resp.headers()["content-type"], manifest_type);
        assert_eq!(resp.bytes().await.unwrap().as_ref(), before.bytes.as_slice());

        store.delete(&name).unwrap();
        assert!(!store.has_blob(&weights));
        client.pull(&store, &name, &pull_opts(), &|_| {}).await.unwrap();
        let after = store.read_manifest(&name).unwrap();
        assert_eq!(after.bytes, before.bytes);
        assert_eq!(after.manifest.media_type, manifest_type);
        let (got, n) = Digest::of_reader(std::fs::File::open(store.blob_path(&weights)).unwrap()).unwrap();
        assert_eq!((got, n), (weights, size as u64));
    }
}
