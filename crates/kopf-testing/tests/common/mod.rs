//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod webhook;

use kopf_testing::FakeApiServer;
use serde_json::{Value, json};

/// The KopfExample CRD of the examples, with a status subresource.
pub fn kopfexample_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "kopfexamples.kopf.dev"},
        "spec": {
            "group": "kopf.dev",
            "scope": "Namespaced",
            "names": {"kind": "KopfExample", "plural": "kopfexamples", "singular": "kopfexample", "shortNames": ["kex"]},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                }}},
            }],
        },
    })
}

/// A server with the KopfExample CRD established.
pub async fn server_with_crd() -> FakeApiServer {
    let server = FakeApiServer::start().await.expect("server starts");
    server
        .apply_object(kopfexample_crd())
        .expect("the CRD is stored");
    server
}

/// A KopfExample body.
pub fn kex(name: &str) -> Value {
    json!({"apiVersion": "kopf.dev/v1", "kind": "KopfExample",
        "metadata": {"name": name, "namespace": "default"}, "spec": {"field": "value"}})
}

/// A raw HTTP client for requests kube's typed API cannot send (wrong bodies, headers).
pub struct Raw {
    pub base: String,
}

/// One raw response.
pub struct RawResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl RawResponse {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

impl Raw {
    pub fn new(server: &FakeApiServer) -> Self {
        Raw { base: server.url() }
    }

    /// Sends a request with an optional content type and body; reads the whole response.
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: &[u8],
    ) -> RawResponse {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let addr = self.base.trim_start_matches("http://");
        let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
            body.len()
        );
        if let Some(ct) = content_type {
            req.push_str(&format!("Content-Type: {ct}\r\n"));
        }
        req.push_str("\r\n");
        stream.write_all(req.as_bytes()).await.expect("write head");
        stream.write_all(body).await.expect("write body");
        let mut buf = Vec::new();
        stream.read_to_end(&mut buf).await.expect("read");
        let text = String::from_utf8_lossy(&buf).into_owned();
        let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let mut lines = head.lines();
        let status: u16 = lines
            .next()
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|s| s.parse().ok())
            .expect("status line");
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| {
                l.split_once(": ")
                    .map(|(k, v)| (k.to_string(), v.to_string()))
            })
            .collect();
        let chunked = headers
            .iter()
            .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
        let body = if chunked {
            dechunk(rest)
        } else {
            rest.to_string()
        };
        RawResponse {
            status,
            headers,
            body,
        }
    }

    pub async fn get(&self, path: &str) -> RawResponse {
        self.send("GET", path, None, b"").await
    }

    pub async fn post_json(&self, path: &str, body: &Value) -> RawResponse {
        self.send(
            "POST",
            path,
            Some("application/json"),
            body.to_string().as_bytes(),
        )
        .await
    }
}

fn dechunk(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    out
}
