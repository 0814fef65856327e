//! HTTP_PROXY and NO_PROXY from the environment are honoured (reqwest reads them when the client
//! is built; this checks that nothing in our client setup turns that off).

use crate::child::spawn_pull;
use crate::common::{self, Proxy, RegistryServer};
use crate::resume::{addr, push_random_model};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pulls_go_through_the_environment_proxy() {
    let reg = RegistryServer::start();
    let d = push_random_model(&reg, "viaproxy", 1 << 20, 5).await;
    // The proxy forwards every connection to the registry, so it can serve any host name;
    // `registry.invalid` cannot resolve, so only a pull through the proxy can succeed.
    let proxy = Proxy::start(addr(&reg), None).await;
    let proxy_url = format!("http://127.0.0.1:{}", proxy.port);
    let name = "registry.invalid:5000/test/viaproxy:1";

    let (_d1, store) = common::store();
    let out = spawn_pull(store.root(), name, &[("HTTP_PROXY", &proxy_url)])
        .wait_with_output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(store.has_blob(&d));
    let through_proxy = proxy.bytes();
    assert!(through_proxy > 1 << 20, "{through_proxy}");

    // NO_PROXY exempts the host: the pull goes direct, and the name does not resolve.
    let (_d2, store) = common::store();
    let out = spawn_pull(
        store.root(),
        name,
        &[("HTTP_PROXY", &proxy_url), ("NO_PROXY", "registry.invalid")],
    )
    .wait_with_output()
    .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("CHILD Pull FAILED"));
    assert_eq!(proxy.bytes(), through_proxy);
    assert!(!store.has_blob(&d));
}
