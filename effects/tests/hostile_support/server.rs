//! Raw TCP servers on 127.0.0.1 for hostile-provider tests: byte-for-byte control over what
//! the client receives (broken framing, endless bodies, stalls).

#![allow(dead_code)]

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What a connection handler gets: the socket (request already read) and the request bytes.
pub type Handler =
    Arc<dyn Fn(TcpStream, Vec<u8>) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// A running server.
pub struct Server {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Connections accepted so far.
    pub connections: Arc<AtomicUsize>,
    /// The raw requests received, in order.
    pub requests: Arc<std::sync::Mutex<Vec<Vec<u8>>>>,
}

impl Server {
    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// Serves every connection with `handler` after reading one request (head and body).
pub async fn serve<F, Fut>(handler: F) -> Server
where
    F: Fn(TcpStream, Vec<u8>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    let connections = Arc::new(AtomicUsize::new(0));
    let requests = Arc::new(std::sync::Mutex::new(Vec::new()));
    let handler: Handler = Arc::new(move |s, r| Box::pin(handler(s, r)));
    let (c, r) = (connections.clone(), requests.clone());
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            c.fetch_add(1, Ordering::SeqCst);
            let handler = handler.clone();
            let r = r.clone();
            tokio::spawn(async move {
                let request = read_request(&mut socket).await;
                r.lock().expect("requests").push(request.clone());
                handler(socket, request).await;
            });
        }
    });
    Server {
        addr,
        connections,
        requests,
    }
}

/// Reads a request head and its content-length body (what reqwest sends).
pub async fn read_request(socket: &mut TcpStream) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(end) = find(&buf, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                return buf;
            }
        }
        match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => return buf,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Writes `bytes`, ignoring a client that went away.
pub async fn write(socket: &mut TcpStream, bytes: &[u8]) -> bool {
    socket.write_all(bytes).await.is_ok() && socket.flush().await.is_ok()
}

/// Writes `chunk` again and again until the client stops reading or `max` bytes were
/// written; counts what was written into `written`.
pub async fn flood(socket: &mut TcpStream, chunk: &[u8], max: u64, written: &AtomicU64) {
    let mut total = 0u64;
    while total < max {
        if socket.write_all(chunk).await.is_err() {
            return;
        }
        total += chunk.len() as u64;
        written.fetch_add(chunk.len() as u64, Ordering::Relaxed);
    }
}

/// A complete Anthropic SSE stream answering with `text`.
pub fn anthropic_stream(text: &str) -> Vec<u8> {
    let text = serde_json::to_string(text).expect("json string");
    format!(
        "event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"m\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{{\"input_tokens\":1,\"output_tokens\":1}}}}}}\n\n\
         event: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{{\"type\":\"text\",\"text\":\"\"}}}}\n\n\
         event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":{text}}}}}\n\n\
         event: content_block_stop\ndata: {{\"type\":\"content_block_stop\",\"index\":0}}\n\n\
         event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"end_turn\",\"stop_sequence\":null}},\"usage\":{{\"output_tokens\":2}}}}\n\n\
         event: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n"
    )
    .into_bytes()
}

/// The head of a 200 SSE response with a content-length-free, close-delimited body.
pub const SSE_HEAD: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
