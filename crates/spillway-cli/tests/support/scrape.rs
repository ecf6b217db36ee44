//! Shared by the tests that scrape `--metrics-addr` (`metrics_cli` and the Kafka
//! workers' `metrics`): a plain-TCP GET, the OpenMetrics text parsed into samples, and a
//! child process that dies with its test.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A child process killed (and reaped) when the test lets go of it, also when an
/// assertion fails first, so no job outlives its test.
pub struct KillOnDrop(pub std::process::Child);

impl std::ops::Deref for KillOnDrop {
    type Target = std::process::Child;
    fn deref(&self) -> &std::process::Child {
        &self.0
    }
}

impl std::ops::DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut std::process::Child {
        &mut self.0
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The samples of an exposition: `name{labels}` to value.
pub type Samples = BTreeMap<String, f64>;

/// Parses the text exposition format (OpenMetrics): comment lines start with `#`, the
/// last line is `# EOF`; every other line is a sample.
pub fn parse(text: &str) -> Samples {
    assert!(text.ends_with("# EOF\n"), "no # EOF at the end:\n{text}");
    let mut out = Samples::new();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("bad line {line:?}"));
        let v: f64 = value.parse().unwrap_or_else(|_| panic!("bad value in {line:?}"));
        out.insert(series.to_string(), v);
    }
    out
}

/// GET http://addr/path over a plain TCP connection; the status line and the body.
pub fn get(addr: &str, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).expect("connect to the metrics endpoint");
    s.set_read_timeout(Some(Duration::from_secs(30))).expect("read timeout");
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").expect("GET");
    let mut resp = String::new();
    s.read_to_string(&mut resp).expect("read the response");
    let (head, body) = resp.split_once("\r\n\r\n").expect("a response");
    (head.lines().next().unwrap_or_default().to_string(), body.to_string())
}

/// GET /metrics, which must answer 200, parsed.
pub fn scrape(addr: &str) -> Samples {
    let (status, body) = get(addr, "/metrics");
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    parse(&body)
}
