//! How a server start ends: a port held by another process is waited for,
//! an option the server refuses fails at once with what it logged.

use std::time::{Duration, Instant};

use lock_testkit::{Server, ServerOptions};

#[test]
fn a_taken_port_is_tried_again_until_it_is_free() {
    let first = Server::tcp(&[]);
    let port = first.port();
    let freed = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        drop(first);
    });
    let second = ServerOptions::tcp()
        .port(port)
        .start()
        .expect("started once the port was free");
    freed.join().expect("the first server stopped");
    assert_eq!(second.port(), port);
    assert!(second.info("server").is_some_and(|info| {
        info.contains(&format!("process_id:{}\r", second.pid().expect("running")))
    }));
}

#[test]
fn an_option_the_server_refuses_fails_at_once_with_its_log() {
    let start = Instant::now();
    let error = ServerOptions::tcp()
        .args(["--no-such-option", "1"])
        .start()
        .expect_err("the server refuses the option");
    let shown = error.to_string();
    assert!(shown.contains("no-such-option"), "{shown}");
    assert!(start.elapsed() < Duration::from_secs(10), "{shown}");
}
