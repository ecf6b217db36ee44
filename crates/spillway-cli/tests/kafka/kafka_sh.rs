//! `scripts/kafka.sh start` itself: a broker that cannot bind its port is a failed
//! start, however quickly the port accepts a connection.

use std::net::TcpListener;
use std::process::Command;

use crate::common::script;

/// A port held by another listener: before the fix, kafka.sh's readiness check connected
/// to that listener and reported the broker started while the broker had died on
/// "Address already in use". A port given with `--port` is not replaced by another.
#[test]
fn start_on_a_port_another_process_listens_on_fails_and_leaves_no_broker() {
    let held = TcpListener::bind("127.0.0.1:0").expect("bind a port");
    let port = held.local_addr().expect("local address").port();
    let dir = tempfile::tempdir().expect("tempdir");
    let broker_dir = dir.path().join("b");
    let out = Command::new(script())
        .args(["start", broker_dir.to_str().expect("utf-8"), "--port", &port.to_string()])
        .output()
        .expect("run scripts/kafka.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "kafka.sh start succeeded on a taken port: {stdout}");
    assert!(stderr.contains("Address already in use"), "{stderr}");
    assert!(stderr.contains(&format!("127.0.0.1:{port}")), "{stderr}");
    assert!(!broker_dir.join("broker.pid").exists(), "a broker.pid is left");
    assert!(!broker_dir.join("bootstrap").exists(), "a bootstrap address is left");
    let status = Command::new(script())
        .args(["status", broker_dir.to_str().expect("utf-8")])
        .output()
        .expect("run scripts/kafka.sh");
    assert!(!status.status.success(), "a broker runs in {}", broker_dir.display());
    drop(held);
}
