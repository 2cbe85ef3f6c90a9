//! `rediss://` with the feature `tls-rustls`: a CA bundle, mutual TLS, a
//! wrong CA, a client certificate rustls refuses, `redis://` on a TLS port,
//! and Redlock over TLS nodes, against redis-servers started with
//! `--tls-port` and certificates made by `openssl` for the test.
mod support;

use std::time::Duration;

use lock_runtime::{LockClient, LockClientBuilder, LockError, LockOptions};
use lock_testkit::{Certs, Server};
use support::contention_with_wakeup;

fn builder() -> LockClientBuilder {
    LockClient::builder().connect_timeout(Duration::from_secs(5))
}

/// One node, its CA given as a file: lock, contention with wake-up across
/// two clients, release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_with_a_ca_bundle() {
    let certs = Certs::generate();
    // Clients need no certificate of their own here.
    let server = Server::tls(&certs, &["--tls-auth-clients", "no"]);
    let url = server.url_as("rediss", "");
    let a = builder()
        .tls_ca_file(&certs.ca_cert)
        .connect(&url)
        .await
        .expect("connect");
    let pem = std::fs::read(&certs.ca_cert).expect("read CA");
    let b = builder()
        .tls_ca_pem(pem)
        .connect(&url)
        .await
        .expect("connect");
    let n = a
        .run_locked("tls:one", LockOptions::new(), async {
            Ok::<_, LockError>(7)
        })
        .await
        .expect("locked call over TLS");
    assert_eq!(n, 7);
    contention_with_wakeup(&a, &b, "tls:contended").await;
}

/// `--tls-auth-clients yes`: with the client certificate the client works;
/// without it, connect fails with a clear error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls() {
    let certs = Certs::generate();
    let server = Server::tls(&certs, &["--tls-auth-clients", "yes"]);
    let url = server.url_as("rediss", "");
    let with_files = builder()
        .tls_ca_file(&certs.ca_cert)
        .tls_client_cert_files(&certs.client_cert, &certs.client_key);
    let a = with_files
        .connect(&url)
        .await
        .expect("connect with a client cert");
    let read = |p: &std::path::Path| std::fs::read(p).expect("read PEM");
    let b = builder()
        .tls_ca_pem(read(&certs.ca_cert))
        .tls_client_cert_pem(read(&certs.client_cert), read(&certs.client_key))
        .connect(&url)
        .await
        .expect("connect with a client cert in PEM");
    contention_with_wakeup(&a, &b, "mtls:contended").await;

    let without = builder()
        .tls_ca_file(&certs.ca_cert)
        .connect_timeout(Duration::from_secs(2))
        .connect(&url)
        .await
        .expect_err("the server asks for a client certificate");
    let shown = without.to_string();
    assert!(matches!(without, LockError::Connect(_)), "{without:?}");
    assert!(
        shown.contains(&format!("127.0.0.1:{}", server.port())),
        "{shown}"
    );
    assert!(
        shown.contains("tls_client_cert_files"),
        "says how to give one: {shown}"
    );
}

/// A CA that did not sign the server's certificate: a connect error that
/// names the cause and the node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_ca_is_a_clear_connect_error() {
    let certs = Certs::generate();
    let server = Server::tls(&certs, &["--tls-auth-clients", "no"]);
    let error = builder()
        .tls_ca_file(&certs.other_ca_cert)
        .connect_timeout(Duration::from_secs(2))
        .connect(&server.url_as("rediss", ""))
        .await
        .expect_err("the server's certificate is not trusted");
    assert!(matches!(error, LockError::Connect(_)), "{error:?}");
    let shown = error.to_string();
    assert!(
        shown.contains(&format!("127.0.0.1:{}", server.port())),
        "{shown}"
    );
    assert!(
        shown.contains("UnknownIssuer"),
        "the cause is named: {shown}"
    );
    assert!(
        shown.contains("tls_ca_file") && shown.contains("tls_ca_pem"),
        "says how to give the CA: {shown}"
    );
}

/// A client certificate that rustls refuses (an X.509 v1 certificate) is
/// named as the client's own certificate, not as the server's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_client_certificate_is_named_as_the_clients() {
    let certs = Certs::generate();
    let server = Server::tls(&certs, &["--tls-auth-clients", "yes"]);
    let error = builder()
        .tls_ca_file(&certs.ca_cert)
        .tls_client_cert_files(certs.client_v1_cert(), &certs.client_key)
        .connect_timeout(Duration::from_secs(2))
        .connect(&server.url_as("rediss", ""))
        .await
        .expect_err("rustls takes no v1 certificate");
    assert!(matches!(error, LockError::Connect(_)), "{error:?}");
    let shown = error.to_string();
    assert!(shown.contains("client certificate"), "{shown}");
    assert!(shown.contains("tls_client_cert_files"), "{shown}");
    assert!(shown.contains("v3"), "says which version it needs: {shown}");
    assert!(!shown.contains("peer certificate"), "{shown}");
    assert!(
        shown.contains(&format!("127.0.0.1:{}", server.port())),
        "{shown}"
    );
}

/// `redis://` to a port that speaks only TLS: the connect error says that
/// the server may expect `rediss://`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_url_on_a_tls_port_suggests_rediss() {
    let certs = Certs::generate();
    let server = Server::tls(&certs, &["--tls-auth-clients", "no"]);
    let error = builder()
        .connect_timeout(Duration::from_secs(2))
        .connect(&server.url_as("redis", ""))
        .await
        .expect_err("the server speaks TLS only");
    assert!(matches!(error, LockError::Connect(_)), "{error:?}");
    let shown = error.to_string();
    assert!(shown.contains("rediss://"), "{shown}");
    assert!(
        shown.contains(&format!("127.0.0.1:{}", server.port())),
        "{shown}"
    );
}

/// A CA file that does not exist fails the connect, naming the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_ca_file_is_named() {
    let error = builder()
        .tls_ca_file("/nonexistent/ca.pem")
        .connect("rediss://127.0.0.1:1")
        .await
        .expect_err("no such file");
    assert!(matches!(error, LockError::Connect(_)), "{error:?}");
    assert!(error.to_string().contains("/nonexistent/ca.pem"), "{error}");
}

/// TLS options with a plain `redis://` URL are refused, not ignored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_options_need_a_rediss_url() {
    let certs = Certs::generate();
    let server = Server::tcp(&[]);
    let error = builder()
        .tls_ca_file(&certs.ca_cert)
        .connect(&server.url_as("redis", ""))
        .await
        .expect_err("TLS options with a plain URL");
    assert!(error.to_string().contains("rediss://"), "{error}");
}

/// Redlock over 3 TLS nodes, each with the client's CA and certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_over_tls_nodes() {
    let certs = Certs::generate();
    let nodes: Vec<Server> = (0..3)
        .map(|_| Server::tls(&certs, &["--tls-auth-clients", "yes"]))
        .collect();
    let urls: Vec<String> = nodes.iter().map(|n| n.url_as("rediss", "")).collect();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let tls = || {
        builder()
            .node_timeout(Duration::from_millis(500))
            .tls_ca_file(&certs.ca_cert)
            .tls_client_cert_files(&certs.client_cert, &certs.client_key)
    };
    let a = tls().redlock(&urls).await.expect("redlock over TLS");
    let b = tls().redlock(&urls).await.expect("redlock over TLS");
    contention_with_wakeup(&a, &b, "redlock-tls:contended").await;
}
